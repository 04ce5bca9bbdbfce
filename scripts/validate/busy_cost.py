#!/usr/bin/env python3
"""The daemon's cost on a busy multi-GPU node, builds side by side (issue 41).

Usage: [IDLE_S=45] [BUSY_S=60] [ORDER=ABBA] [PROFILE=1] busy_cost.py OUTDIR BINARY_A [BINARY_B]

Each run starts a fresh daemon with its defaults (every default collector at
1 s), scraped every 15 s as Prometheus would, and measures from /proc its CPU
share and resident memory over IDLE_S with the GPUs idle, then over BUSY_S
under a DDP job on every GPU of the host (torchrun, one rank per GPU, a bf16
GEMM and a 64 MiB all-reduce per step: NCCL over NVLink, gradient-sized
traffic, as data-parallel training does). Sides run in ORDER (A B B A by
default) so that the host's drift falls on both alike. With PROFILE=1 each
run also writes a whole-run Go CPU profile (--debug.cpu-profile) to
OUTDIR/<n>-<side>.cpu.prof, and the daemon's per-collector durations are
kept from its last scrape. Writes OUTDIR/busy_cost.json.
Needs: CUDA GPUs of one host, PyTorch with NCCL, root (the daemon reads every
process).
"""
import json, os, signal, subprocess, sys, tempfile, threading, time, urllib.request
from procstat import cpu_seconds, rss_mb

SAFE_ENV = {'NCCL_NVLS_ENABLE': '0', 'TORCH_SYMM_MEM_DISABLE_MULTICAST': '1', 'NVSHMEM_DISABLE_NVLS': '1'}

DDP = r'''
import os, sys, time, torch, torch.distributed as dist
local = int(os.environ['LOCAL_RANK'])
dev = torch.device('cuda', local); torch.cuda.set_device(dev)
dist.init_process_group('nccl', device_id=dev)
a = torch.randn(4096, 4096, dtype=torch.bfloat16, device=dev); b = torch.randn_like(a)
g = torch.zeros(16 << 20, device=dev)
flag = torch.zeros(1, device=dev)
end = time.time() + float(sys.argv[1])
while True:
    for _ in range(4):
        for _ in range(8): c = a @ b
        dist.all_reduce(g)
    flag.fill_(1.0 if (dist.get_rank() == 0 and time.time() > end) else 0.0)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag.item() > 0: break
dist.destroy_process_group()
'''


def get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def gpus():
    out = subprocess.run(['nvidia-smi', '-L'], capture_output=True, text=True).stdout
    return len([l for l in out.splitlines() if l.startswith('GPU ')])


def intervals(metrics):
    """Each collector's current clock, where the build exports it."""
    out = {}
    for line in metrics.splitlines():
        if line.startswith('gpudiag_collector_interval_seconds{'):
            out[line.split('"')[1]] = float(line.rsplit(' ', 1)[1])
    return out


def collector_seconds(metrics):
    """gpudiag_collector_duration_seconds per collector, from one scrape."""
    out = {}
    for line in metrics.splitlines():
        if line.startswith('gpudiag_collector_duration_seconds{'):
            name = line.split('collector="', 1)[1].split('"', 1)[0]
            out[name] = float(line.rsplit(' ', 1)[1])
    return out


def measure(pid, seconds, url, stop):
    """CPU share and peak RSS of pid over seconds, scraping url every 15 s."""
    c0, t0, peak = cpu_seconds(pid), time.time(), 0.0
    next_scrape = t0
    while time.time() < t0 + seconds and not stop.is_set():
        if time.time() >= next_scrape:
            get(url)
            next_scrape += 15
        peak = max(peak, rss_mb(pid))
        time.sleep(1)
    dt = time.time() - t0
    return {'percent_of_core': round((cpu_seconds(pid) - c0) / dt * 100, 3),
            'rss_mb': round(rss_mb(pid), 1), 'peak_rss_mb': round(peak, 1), 'seconds': round(dt, 1)}


def one_run(n, side, binary, out, idle_s, busy_s, profile, port):
    args = [binary, f'--web.listen-address=127.0.0.1:{port}']
    if profile:
        args.append(f'--debug.cpu-profile={out}/{n}-{side}.cpu.prof')
    log = open(f'{out}/{n}-{side}.daemon.log', 'w')
    d = subprocess.Popen(args, stdout=log, stderr=log)
    base = f'http://127.0.0.1:{port}'
    for _ in range(100):
        try:
            get(base + '/metrics'); break
        except Exception:
            time.sleep(0.2)
    time.sleep(10)  # start-up: NVML init and the first samples are not the steady state
    stop = threading.Event()
    res = {'run': n, 'side': side, 'binary': binary}
    res['idle'] = measure(d.pid, idle_s, base + '/metrics', stop)
    res['intervals_idle'] = intervals(get(base + '/metrics'))
    env = dict(os.environ, **SAFE_ENV)
    with tempfile.NamedTemporaryFile('w', suffix='.py', delete=False) as f:
        f.write(DDP)
    job = subprocess.Popen([sys.executable, '-m', 'torch.distributed.run', f'--nproc_per_node={gpus()}',
                            '--master_port', str(port + 1000), f.name, str(busy_s + 25)], env=env,
                           stdout=open(f'{out}/{n}-{side}.job.log', 'w'), stderr=subprocess.STDOUT)
    time.sleep(20)  # NCCL init and warm-up
    res['busy'] = measure(d.pid, busy_s, base + '/metrics', stop)
    res['collector_seconds_busy'] = collector_seconds(get(base + '/metrics'))
    res['intervals_busy'] = intervals(get(base + '/metrics'))
    res['verdict_busy'] = [l for l in get(base + '/metrics').splitlines() if l.startswith('gpudiag_gpu_bottleneck{')]
    try:
        job.wait(timeout=120)
    except subprocess.TimeoutExpired:
        job.kill()
    res['job_rc'] = job.returncode
    d.send_signal(signal.SIGTERM)
    d.wait(timeout=30)
    print(json.dumps({k: res[k] for k in ('run', 'side', 'idle', 'busy', 'job_rc')}), flush=True)
    return res


def main():
    out, bins = sys.argv[1], {'A': os.path.abspath(sys.argv[2])}
    if len(sys.argv) > 3:
        bins['B'] = os.path.abspath(sys.argv[3])
    os.makedirs(out, exist_ok=True)
    order = os.environ.get('ORDER', 'ABBA' if 'B' in bins else 'A')
    idle_s, busy_s = float(os.environ.get('IDLE_S', '45')), float(os.environ.get('BUSY_S', '60'))
    profile = os.environ.get('PROFILE') == '1'
    runs = [one_run(n, s, bins[s], out, idle_s, busy_s, profile, 19930 + n) for n, s in enumerate(order)]
    summary = {}
    for s in bins:
        mine = [r for r in runs if r['side'] == s]
        summary[s] = {ph + '_' + k: round(sum(r[ph][k] for r in mine) / len(mine), 3)
                      for ph in ('idle', 'busy') for k in ('percent_of_core', 'rss_mb', 'peak_rss_mb')}
    doc = {'gpus': gpus(), 'idle_s': idle_s, 'busy_s': busy_s, 'order': order, 'summary': summary, 'runs': runs,
           'host': subprocess.run(['uname', '-a'], capture_output=True, text=True).stdout.strip()}
    with open(f'{out}/busy_cost.json', 'w') as f:
        json.dump(doc, f, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == '__main__':
    main()
