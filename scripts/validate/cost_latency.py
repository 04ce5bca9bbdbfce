#!/usr/bin/env python3
"""The daemon's cost and verdict latency on a real GPU, for docs/performance.md.

Usage: cost_latency.py BINARY OUTDIR
Runs the daemon with its defaults (1 s sampling, every default collector) and
measures, from /proc: its CPU over 60 s with the GPU idle, its CPU over 60 s
under a bf16 GEMM loop, its resident memory; then starts a GIL-bound input
pipeline (the python_input_pipeline situation) and polls /diagnose every
0.25 s for how long after the job's first GPU activity the GPU is named
host-bound. Writes OUTDIR/cost_latency.json and the daemon's log.
"""
import json, os, subprocess, sys, time, urllib.request

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

def cpu_seconds(pid):
    f = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf('SC_CLK_TCK')

def rss_mb(pid):
    for line in open(f'/proc/{pid}/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1]) / 1024

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
        job = subprocess.Popen([sys.executable, '-c', GEMM, '75'])
        time.sleep(10)
        c0, t0 = cpu_seconds(d.pid), time.time(); time.sleep(60)
        res['gemm_cpu_core_fraction'] = (cpu_seconds(d.pid) - c0) / (time.time() - t0)
        res['gemm_rss_mb'] = rss_mb(d.pid)
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
        starved.kill()
        res['end_rss_mb'] = rss_mb(d.pid)
    finally:
        d.terminate(); d.wait()
        json.dump(res, open(os.path.join(out, 'cost_latency.json'), 'w'), indent=2, default=str)
        print(json.dumps({k: v for k, v in res.items() if not isinstance(v, dict)}, indent=2))

if __name__ == '__main__':
    main()
