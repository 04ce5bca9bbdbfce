#!/usr/bin/env python3
"""Two builds of the daemon side by side on one GPU host, for docs/performance.md.

Usage: [MEASURE_SECONDS=90] [GEMM=1] [GPU_ONLY=1] binary_ab.py BINARY_A BINARY_B OUTDIR
Runs the daemon with its defaults (GPU_ONLY=1: only its GPU collector, as
gpupath.py runs it) in the order A B B A, each for
MEASURE_SECONDS after 15 s of start-up (with GEMM=1 under the bf16 GEMM of
cost_latency.py, started 10 s before), and reads its CPU time from /proc:
a host's load and clock drift fall on both sides alike. Prints and writes
OUTDIR/binary_ab.json: per run the side, the share of a core and the RSS.
"""
import json, os, subprocess, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cost_latency import GEMM, cpu_seconds, rss_mb

a, b, out = sys.argv[1], sys.argv[2], sys.argv[3]
secs = float(os.environ.get('MEASURE_SECONDS', '90'))
gemm = os.environ.get('GEMM') == '1'
args = ['--web.listen-address=127.0.0.1:19914']
if os.environ.get('GPU_ONLY') == '1':
    from gpupath import others
    args += [f'--no-collector.{c}' for c in others]
os.makedirs(out, exist_ok=True)
res = []
for side, binary in [('A', a), ('B', b), ('B', b), ('A', a)]:
    d = subprocess.Popen([binary] + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(15)
    job = subprocess.Popen([sys.executable, '-c', GEMM, str(secs + 15)]) if gemm else None
    if job:
        time.sleep(10)
    c0, t0 = cpu_seconds(d.pid), time.time()
    time.sleep(secs)
    frac = (cpu_seconds(d.pid) - c0) / (time.time() - t0)
    rss = rss_mb(d.pid)
    if job:
        job.wait()
    d.terminate(); d.wait()
    res.append({'side': side, 'percent_of_core': round(frac * 100, 3), 'rss_mb': round(rss, 1)})
    print(res[-1], flush=True)
for side in 'AB':
    runs = [r['percent_of_core'] for r in res if r['side'] == side]
    print(side, 'mean', round(sum(runs) / len(runs), 3))
json.dump(res, open(f'{out}/binary_ab.json', 'w'), indent=1)
