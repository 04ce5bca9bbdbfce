#!/usr/bin/env python3
"""Idle CPU of the daemon at several --runtime.gomaxprocs, for docs/performance.md.

Usage: gomaxprocs_ab.py BINARY OUTDIR
Starts the daemon with each count in the order 0 2 1 1 2 0 (0: Go's choice,
one per CPU), waits 10 s, reads its CPU time from /proc over 60 s and its
resident memory; writes OUTDIR/gomaxprocs_ab.json.
"""
import json, os, subprocess, sys, time
binary, out = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cost_latency import cpu_seconds
res = []
for n in ['0', '2', '1', '1', '2', '0']:
    d = subprocess.Popen([binary, '--web.listen-address=127.0.0.1:19913', f'--runtime.gomaxprocs={n}'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(10); c0, t0 = cpu_seconds(d.pid), time.time(); time.sleep(60)
    frac = (cpu_seconds(d.pid) - c0) / (time.time() - t0)
    rss = [l for l in open(f'/proc/{d.pid}/status') if l.startswith('VmRSS')][0].split()[1]
    d.terminate(); d.wait()
    res.append((n, round(frac * 100, 3), int(rss) / 1024)); print(res[-1], flush=True)
json.dump(res, open(f'{out}/gomaxprocs_ab.json', 'w'))
