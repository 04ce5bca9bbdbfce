#!/usr/bin/env python3
"""Run the gpudiag binary beside known GPU workloads and record what it reports.

For each workload it reads gpudiag's counters at the start and the end of a
measurement span (so the numbers are exact means, whatever the scrape times),
samples gpudiag's gauges every second, and reads NVML utilization.gpu through
pynvml for comparison. Then it measures the daemon's own CPU time and RSS.

Usage: gpu_signatures.py BINARY OUTDIR [--span SECONDS] [--cpu-span SECONDS]
Needs: a CUDA GPU, PyTorch, pynvml.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

WORKLOADS = {
    "idle": None,
    "bf16_gemm": r"""
import torch, time, sys
a = torch.randn(8192, 8192, dtype=torch.bfloat16, device='cuda')
b = torch.randn(8192, 8192, dtype=torch.bfloat16, device='cuda')
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
""",
    "pinned_h2d_copy": r"""
import torch, time, sys
h = torch.empty(512 << 20, dtype=torch.uint8).pin_memory()
d = torch.empty(512 << 20, dtype=torch.uint8, device='cuda')
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(10):
        d.copy_(h, non_blocking=True)
    torch.cuda.synchronize()
""",
    "d2d_copy": r"""
import torch, time, sys
a = torch.empty(2 << 30, dtype=torch.uint8, device='cuda')
b = torch.empty_like(a)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(10):
        b.copy_(a)
    torch.cuda.synchronize()
""",
}

METRIC_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$')


def scrape(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith('#'):
            continue
        m = METRIC_RE.match(line)
        if m:
            out[m.group(1) + (m.group(2) or '')] = float(m.group(3))
    return out


def gpu0(name):
    return name + '{gpu="0"}'


def proc_cpu_seconds(pid):
    with open(f'/proc/{pid}/stat') as f:
        fields = f.read().rsplit(')', 1)[1].split()
    tick = os.sysconf('SC_CLK_TCK')
    return (int(fields[11]) + int(fields[12])) / tick  # utime + stime


def proc_rss(pid):
    """VmRSS, and its anonymous (heap, stacks) and file-backed (binary, libraries) parts, in bytes."""
    out = {}
    with open(f'/proc/{pid}/status') as f:
        for line in f:
            key = line.split(':')[0]
            if key in ('VmRSS', 'RssAnon', 'RssFile'):
                out[key] = int(line.split()[1]) * 1024
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('binary')
    ap.add_argument('outdir')
    ap.add_argument('--span', type=float, default=15)
    ap.add_argument('--cpu-span', type=float, default=60)
    ap.add_argument('--port', default='10910')
    args = ap.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    url = f'http://127.0.0.1:{args.port}/metrics'

    import pynvml
    pynvml.nvmlInit()
    nv = pynvml.nvmlDeviceGetHandleByIndex(0)

    log = open(os.path.join(args.outdir, 'daemon.log'), 'w')
    daemon = subprocess.Popen([args.binary, f'--web.listen-address=127.0.0.1:{args.port}',
                               '--sample.interval=1s'], stdout=log, stderr=log)
    for _ in range(100):
        try:
            scrape(url)
            break
        except Exception:
            time.sleep(0.2)
    time.sleep(2)

    results = []
    for name, code in WORKLOADS.items():
        work = None
        if code:
            work = subprocess.Popen([sys.executable, '-c', code, str(args.span + 8)])
        time.sleep(5)  # warm-up: allocation, first kernels, one full sampling interval
        t0, m0 = time.time(), scrape(url)
        gauges, nvml_util = [], []
        while time.time() - t0 < args.span:
            time.sleep(1)
            m = scrape(url)
            gauges.append({k: m.get(gpu0('gpudiag_gpu_' + k)) for k in
                           ('sm_active_ratio', 'tensor_active_ratio', 'dram_active_ratio', 'utilization_ratio')})
            nvml_util.append(pynvml.nvmlDeviceGetUtilizationRates(nv).gpu)
        t1, m1 = time.time(), scrape(url)
        if work:
            work.wait()
        dt = t1 - t0

        def rate(metric):
            a, b = m0.get(gpu0(metric)), m1.get(gpu0(metric))
            return None if a is None or b is None else (b - a) / dt

        def mean(key):
            xs = [g[key] for g in gauges if g[key] is not None]
            return sum(xs) / len(xs) if xs else None

        r = {
            'workload': name, 'span_s': round(dt, 2),
            'sm_active_mean_from_counter': rate('gpudiag_gpu_sm_active_seconds_total'),
            'tensor_active_mean_from_counter': rate('gpudiag_gpu_tensor_active_seconds_total'),
            'dram_active_mean_from_counter': rate('gpudiag_gpu_dram_active_seconds_total'),
            'sm_active_ratio_gauge_mean': mean('sm_active_ratio'),
            'gpudiag_utilization_ratio_gauge_mean': mean('utilization_ratio'),
            'pcie_rx_bytes_per_s': rate('gpudiag_gpu_pcie_receive_bytes_total'),
            'pcie_tx_bytes_per_s': rate('gpudiag_gpu_pcie_transmit_bytes_total'),
            'nvlink_rx_bytes_per_s': rate('gpudiag_gpu_nvlink_receive_bytes_total'),
            'pynvml_utilization_gpu_mean': sum(nvml_util) / len(nvml_util),
        }
        results.append(r)
        print(json.dumps(r), flush=True)

    # The daemon's own cost at a 1 s interval, GPU idle.
    pid = daemon.pid
    c0, w0 = proc_cpu_seconds(pid), time.time()
    time.sleep(args.cpu_span)
    c1, w1 = proc_cpu_seconds(pid), time.time()
    # Scrape latency on the real node.
    lat = []
    for _ in range(200):
        s = time.perf_counter()
        with urllib.request.urlopen(url, timeout=5) as r:
            r.read()
        lat.append(time.perf_counter() - s)
    lat.sort()
    cost = {
        'cpu_span_s': round(w1 - w0, 2), 'cpu_seconds': round(c1 - c0, 3),
        'cpu_core_fraction': (c1 - c0) / (w1 - w0), 'rss': proc_rss(pid),
        'collector_duration_s': scrape(url).get('gpudiag_collector_duration_seconds{collector="gpu"}'),
        'scrape_latency_p50_s': lat[len(lat) // 2], 'scrape_latency_p99_s': lat[int(len(lat) * 0.99)],
        'metrics_body_bytes': len(urllib.request.urlopen(url).read()),
    }
    print(json.dumps(cost), flush=True)
    with open(os.path.join(args.outdir, 'metrics_final.txt'), 'w') as f:
        f.write(urllib.request.urlopen(url).read().decode())
    daemon.terminate()
    rc = daemon.wait(timeout=15)
    log.close()
    with open(os.path.join(args.outdir, 'results.json'), 'w') as f:
        json.dump({'workloads': results, 'daemon_cost': cost, 'daemon_exit_code': rc,
                   'gpu': pynvml.nvmlDeviceGetName(nv), 'driver': pynvml.nvmlSystemGetDriverVersion()}, f, indent=1)
    print('daemon exit code', rc)


if __name__ == '__main__':
    main()
