#!/usr/bin/env python3
"""The GPU path's own cost on a real GPU, for docs/performance.md.

Usage: [MEASURE_SECONDS=60] [REPEATS=2] gpupath.py BINARY OUTDIR
The daemon with only its GPU collector (--no-collector.<name> for every
other) and its defaults otherwise, started afresh for each run: with the GPU
idle, then under the bf16 GEMM loop of cost_latency.py (started 8 s before
the daemon), alternated REPEATS times. Its CPU over MEASURE_SECONDS, after
12 s of warm-up, is the sum of the scheduler's nanosecond counters of its
threads (/proc/<pid>/task/*/schedstat), not /proc's 10 ms ticks, which over
60 s move in steps of 0.017% of a core. Writes OUTDIR/gpupath.json:
{"idle": [%, ...], "gemm": [%, ...]}, percent of one core.
"""
import json, os, subprocess, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cost_latency import GEMM

others = ['cpu', 'dataset', 'diskstats', 'infiniband', 'kubelet', 'nccl', 'ncclproc', 'netdev', 'numa', 'podresources',
          'pressure', 'tcp', 'tuning', 'gpuprocess']


def cpu_ns(pid):
    """CPU time of the process's live threads, in nanoseconds."""
    total = 0
    for tid in os.listdir(f'/proc/{pid}/task'):
        try:
            with open(f'/proc/{pid}/task/{tid}/schedstat') as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:
            pass  # the thread exited
    return total


def main():
    binary, out = sys.argv[1], sys.argv[2]
    secs = float(os.environ.get('MEASURE_SECONDS', '60'))
    repeats = int(os.environ.get('REPEATS', '2'))
    os.makedirs(out, exist_ok=True)
    res = {}
    for r in range(repeats):
        for mode in ['idle', 'gemm']:
            job = subprocess.Popen([sys.executable, '-c', GEMM, str(secs + 30)]) if mode == 'gemm' else None
            if job:
                time.sleep(8)
            d = subprocess.Popen([binary, '--web.listen-address=127.0.0.1:19940'] + [f'--no-collector.{c}' for c in others],
                                 stdout=open(f'{out}/gpu_only_{mode}_{r}.log', 'w'), stderr=subprocess.STDOUT)
            time.sleep(12)
            a, t0 = cpu_ns(d.pid), time.time()
            time.sleep(secs)
            b, t1 = cpu_ns(d.pid), time.time()
            d.terminate(); d.wait()
            if job:
                job.kill(); job.wait()
            pct = 100 * (b - a) / 1e9 / (t1 - t0)
            res.setdefault(mode, []).append(pct)
            print(mode, round(pct, 4), flush=True)
    json.dump(res, open(f'{out}/gpupath.json', 'w'))


if __name__ == '__main__':
    main()
