#!/usr/bin/env python3
"""The daemon's cost and verdict latency on a real GPU, for docs/performance.md.

Usage: [NVML_SHARE=0] cost_latency.py BINARY OUTDIR
Runs the daemon with its defaults (1 s sampling, every default collector) and
measures, from /proc: its CPU over 60 s with the GPU idle, its CPU over 60 s
under a bf16 GEMM loop, its resident memory; then starts a GIL-bound input
pipeline (the python_input_pipeline situation) and polls /metrics every
0.25 s for how long after the job's first GPU activity the GPU is named
host-bound; then the same for a job that reads its input from disk past the
page cache (named io-bound). Last, NVML's share of the resident memory: the
daemon started again with --collector.gpu.backend=none (NVML_SHARE=0 skips
it). Writes
OUTDIR/cost_latency.json and the daemons' logs.
"""
import json, os, subprocess, sys, time, urllib.request
from procstat import cpu_seconds, rss_mb

GEMM = r'''
import torch, time, sys
a = torch.randn(8192, 8192, dtype=torch.bfloat16, device='cuda'); b = torch.randn_like(a)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20): c = a @ b
    torch.cuda.synchronize()
'''
STARVED = r'''
import torch, time, sys
w = torch.randn(1024, 1024, device='cuda')
print('first-kernel', time.time(), flush=True)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    batch = [float(i % 7) * 0.5 for i in range(300000)]
    x = torch.tensor(batch[:1024], device='cuda')
    y = (w @ x).sum().item()
'''

# Reads a file much larger than one read, dropping it from the page cache
# before each pass, so every read goes to the disk; a small kernel per 4 MiB.
IO_STARVED = r'''
import os, torch, time, sys
path, size = sys.argv[2], 2 << 30
if not os.path.exists(path) or os.path.getsize(path) != size:
    with open(path, 'wb') as f:
        chunk = os.urandom(64 << 20)
        for _ in range(size // len(chunk)): f.write(chunk)
        f.flush(); os.fsync(f.fileno())
w = torch.randn(1024, 1024, device='cuda')
fd = os.open(path, os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
print('first-kernel', time.time(), flush=True)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    b = os.read(fd, 4 << 20)
    if not b:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.lseek(fd, 0, 0); continue
    y = (w @ torch.ones(1024, device='cuda')).sum().item()
'''

def memory_mb(pid):
    """VmRSS and its anonymous and file-backed parts, MB."""
    out = {}
    for line in open(f'/proc/{pid}/status'):
        k = line.split(':')[0]
        if k in ('VmRSS', 'RssAnon', 'RssFile'):
            out[k] = int(line.split()[1]) / 1024
    return out

def named_within(addr, job, cls_wanted, limit):
    """Seconds from the job's first kernel until GPU 0's class is cls_wanted."""
    first = float(job.stdout.readline().split()[1])
    while time.time() < first + limit:
        cls, sub = gpu0_class(addr)
        if cls == cls_wanted:
            return time.time() - first, sub
        time.sleep(0.25)
    return None, None


def diagnose(addr):
    with urllib.request.urlopen(f'http://{addr}/diagnose?format=json', timeout=5) as r:
        return json.load(r)

def gpu0_class(addr):
    """GPU 0's class from /metrics (polled often: /diagnose is rate-limited per client)."""
    with urllib.request.urlopen(f'http://{addr}/metrics', timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith('gpudiag_gpu_bottleneck_info{') and 'gpu="0"' in line:
                return line.split('class="')[1].split('"')[0], line.split('sub_kind="')[1].split('"')[0]
    return None, None

def main():
    binary, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    addr = '127.0.0.1:19910'
    log = open(os.path.join(out, 'daemon.log'), 'w')
    d = subprocess.Popen([binary, f'--web.listen-address={addr}'], stdout=log, stderr=log)
    res = {}
    try:
        time.sleep(15)  # start-up, first readings
        c0, t0 = cpu_seconds(d.pid), time.time(); time.sleep(60)
        res['idle_cpu_core_fraction'] = (cpu_seconds(d.pid) - c0) / (time.time() - t0)
        res['idle_rss_mb'] = rss_mb(d.pid)
        res['idle_memory_mb'] = memory_mb(d.pid)
        res['idle_descriptors'] = len(os.listdir(f'/proc/{d.pid}/fd'))
        job = subprocess.Popen([sys.executable, '-c', GEMM, '75'])
        time.sleep(10)
        c0, t0 = cpu_seconds(d.pid), time.time(); time.sleep(60)
        res['gemm_cpu_core_fraction'] = (cpu_seconds(d.pid) - c0) / (time.time() - t0)
        res['gemm_rss_mb'] = rss_mb(d.pid)
        res['gemm_descriptors'] = len(os.listdir(f'/proc/{d.pid}/fd'))
        res['gemm_verdict'] = diagnose(addr)['node']
        job.wait()
        time.sleep(20)  # the GEMM's verdict goes back to idle
        starved = subprocess.Popen([sys.executable, '-c', STARVED, '60'], stdout=subprocess.PIPE, text=True)
        first = float(starved.stdout.readline().split()[1])
        named = None
        while time.time() < first + 60:
            cls, sub = gpu0_class(addr)
            if cls == 'host':
                named = time.time() - first
                res['starved_verdict'] = diagnose(addr)['gpus'][0]
                break
            time.sleep(0.25)
        res['host_bound_named_after_s'] = named
        starved.kill(); starved.wait()
        time.sleep(20)
        io_file = '/var/tmp/gpudiag_io_starved.bin'
        iojob = subprocess.Popen([sys.executable, '-c', IO_STARVED, '60', io_file], stdout=subprocess.PIPE, text=True)
        named, sub = named_within(addr, iojob, 'io', 60)
        res['io_bound_named_after_s'], res['io_bound_sub_kind'] = named, sub
        if named is None:
            res['io_job_verdict'] = diagnose(addr)['gpus'][0]
        iojob.kill(); iojob.wait()
        try:
            os.remove(io_file)
        except OSError:
            pass
        res['end_rss_mb'] = rss_mb(d.pid)
        res['end_memory_mb'] = memory_mb(d.pid)
    finally:
        d.terminate(); d.wait()
        if os.environ.get('NVML_SHARE') == '0':  # measured apart, 75 s spared
            json.dump(res, open(os.path.join(out, 'cost_latency.json'), 'w'), indent=2, default=str)
            print(json.dumps({k: v for k, v in res.items() if not isinstance(v, dict)}, indent=2))
            return
        # NVML's share: the same daemon without a GPU backend.
        log2 = open(os.path.join(out, 'daemon_none.log'), 'w')
        d2 = subprocess.Popen([binary, '--web.listen-address=127.0.0.1:19912', '--collector.gpu.backend=none'],
                              stdout=log2, stderr=log2)
        time.sleep(75)
        res['backend_none_memory_mb'] = memory_mb(d2.pid)
        d2.terminate(); d2.wait()
        json.dump(res, open(os.path.join(out, 'cost_latency.json'), 'w'), indent=2, default=str)
        print(json.dumps({k: v for k, v in res.items() if not isinstance(v, dict)}, indent=2))

if __name__ == '__main__':
    main()
