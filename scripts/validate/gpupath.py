#!/usr/bin/env python3
"""The GPU path's own cost on a real GPU, for docs/performance.md.

Usage: [MEASURE_SECONDS=60] gpupath.py BINARY OUTDIR
The daemon with only its GPU collector (--no-collector.<name> for every
other) and its defaults otherwise: CPU over MEASURE_SECONDS with the GPU
idle, then under a bf16 GEMM loop. /proc counts CPU time in 10 ms ticks, so
over 60 s one tick is 0.017% of a core; a longer run reads finer. Writes
OUTDIR/gpupath.json.
"""
import os, subprocess, sys, time, json
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cost_latency import GEMM, cpu_seconds as cpu
others = ['cpu','dataset','diskstats','infiniband','kubelet','nccl','ncclproc','netdev','numa','podresources','pressure','tcp','tuning','gpuprocess']
def main():
    global binary, out, res, secs
    binary, out = sys.argv[1], sys.argv[2]; res = {}
    secs = float(os.environ.get('MEASURE_SECONDS', '60'))
    os.makedirs(out, exist_ok=True)
    def measure(name, args, gemm=False):
        d = subprocess.Popen([binary, '--web.listen-address=127.0.0.1:19940'] + args, stdout=open(f'{out}/{name}.log','w'), stderr=subprocess.STDOUT)
        time.sleep(15)
        job = subprocess.Popen([sys.executable, '-c', GEMM, str(secs + 15)]) if gemm else None
        if job: time.sleep(10)
        c0, t0 = cpu(d.pid), time.time(); time.sleep(secs)
        res[name] = (cpu(d.pid) - c0) / (time.time() - t0)
        if job: job.wait()
        d.terminate(); d.wait()
        print(name, res[name], flush=True)
    gpu_only = [f'--no-collector.{c}' for c in others]
    measure('gpu_only_idle', gpu_only)
    measure('gpu_only_gemm', gpu_only, gemm=True)
    json.dump(res, open(f'{out}/gpupath.json','w'))

if __name__ == '__main__':
    main()
