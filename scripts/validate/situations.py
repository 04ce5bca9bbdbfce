#!/usr/bin/env python3
"""Run the gpudiag daemon live beside one workload at a time, record a trace of
each, and measure the verdict /diagnose gives and how long it takes to settle.

Usage: situations.py BINARY OUTDIR [--span SECONDS] [--only NAME,...]
Needs: a CUDA GPU, PyTorch, root (to drop the page cache for the disk case).
Writes OUTDIR/<situation>.gdrec, OUTDIR/situations.json and daemon logs.
"""
import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request

DATA = '/tmp/gpudiag-dataset.bin'

WORKLOADS = {
    # name: (python code or None, expected class, expected sub-kind)
    'idle': (None, 'idle', 'no_process'),
    'bf16_gemm': (r'''
import torch, time, sys
a = torch.randn(8192, 8192, dtype=torch.bfloat16, device='cuda'); b = torch.randn_like(a)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20): c = a @ b
    torch.cuda.synchronize()
''', 'compute', 'tensor'),
    'd2d_copy': (r'''
import torch, time, sys
a = torch.empty(2 << 30, dtype=torch.uint8, device='cuda'); b = torch.empty_like(a)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(10): b.copy_(a)
    torch.cuda.synchronize()
''', 'compute', 'memory_bandwidth'),
    'pinned_h2d_copy': (r'''
import torch, time, sys
h = torch.empty(512 << 20, dtype=torch.uint8).pin_memory(); d = torch.empty(512 << 20, dtype=torch.uint8, device='cuda')
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(10): d.copy_(h, non_blocking=True)
    torch.cuda.synchronize()
''', 'io', 'h2d_copy'),
    # A training step starved by a pure-Python input pipeline (GIL-bound).
    'python_input_pipeline': (r'''
import torch, time, sys
w = torch.randn(1024, 1024, device='cuda')
end = time.time() + float(sys.argv[1])
while time.time() < end:
    batch = [float(i % 7) * 0.5 for i in range(300000)]   # decode/augment in Python
    x = torch.tensor(batch[:1024], device='cuda')
    y = (w @ x).sum().item()
''', 'host', 'cpu'),
    # A data loader reading files from disk with the page cache dropped.
    'disk_reader': (r'''
import torch, time, sys, os
end = time.time() + float(sys.argv[1])
buf = torch.empty(1 << 20, dtype=torch.uint8, device='cuda')
while time.time() < end:
    with open('/proc/sys/vm/drop_caches', 'w') as f: f.write('3')
    fd = os.open('%s', os.O_RDONLY)
    while time.time() < end:
        chunk = os.read(fd, 1 << 20)
        if not chunk: break
        buf[:len(chunk)].copy_(torch.frombuffer(bytearray(chunk), dtype=torch.uint8))
    os.close(fd)
''' % DATA, 'io', 'storage_read'),
}


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def wait_up(url):
    for _ in range(200):
        try:
            get(url)
            return
        except Exception:
            time.sleep(0.1)
    raise RuntimeError('daemon did not come up')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('binary')
    ap.add_argument('outdir')
    ap.add_argument('--span', type=float, default=25)
    ap.add_argument('--only', default='')
    ap.add_argument('--port', default='10910')
    args = ap.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    base = f'http://127.0.0.1:{args.port}'
    names = [n for n in WORKLOADS if not args.only or n in args.only.split(',')]
    if 'disk_reader' in names and not os.path.exists(DATA):
        subprocess.run(['dd', 'if=/dev/urandom', f'of={DATA}', 'bs=16M', 'count=640', 'status=none'], check=True)

    results = []
    for name in names:
        code, want_class, want_sub = WORKLOADS[name]
        trace = os.path.join(args.outdir, f'{name}.gdrec')
        if os.path.exists(trace):
            os.remove(trace)
        log = open(os.path.join(args.outdir, f'{name}.log'), 'w')
        daemon = subprocess.Popen([args.binary, f'--web.listen-address=127.0.0.1:{args.port}',
                                   '--sample.interval=1s', f'--record={trace}'], stdout=log, stderr=log)
        wait_up(base + '/metrics')
        time.sleep(3)  # a few idle samples first: the trace shows the switch
        start = time.time()
        work = subprocess.Popen([sys.executable, '-c', code, str(args.span)]) if code else None
        timeline, first_right = [], None
        while time.time() - start < args.span - 1:
            time.sleep(0.5)
            try:
                d = json.loads(get(base + '/diagnose?format=json'))
            except Exception as e:  # rate limit or transient: note and go on
                timeline.append({'t': round(time.time() - start, 1), 'error': str(e)})
                continue
            g = d['gpus'][0] if d['gpus'] else {'class': 'none', 'sub_kind': ''}
            entry = {'t': round(time.time() - start, 1), 'node': d['node']['class'], 'node_sub': d['node'].get('sub_kind', ''),
                     'confidence': d['node']['confidence'], 'gpu0': f"{g['class']}/{g.get('sub_kind', '')}"}
            timeline.append(entry)
            right = entry['node'] == want_class and entry['node_sub'] == want_sub
            if right and first_right is None:
                first_right = entry['t']
            elif not right:
                first_right = None
        final = json.loads(get(base + '/diagnose?format=json'))
        with open(os.path.join(args.outdir, f'{name}.diagnose.txt'), 'w') as f:
            f.write(get(base + '/diagnose?format=text'))
        if work:
            work.wait()
        daemon.terminate()
        daemon.wait(timeout=15)
        log.close()
        r = {'situation': name, 'expected': f'{want_class}/{want_sub}',
             'final': f"{final['node']['class']}/{final['node'].get('sub_kind', '')}",
             'confidence': final['node']['confidence'], 'settled_after_s': first_right,
             'findings': [f['check'] for f in final['findings']], 'trace_bytes': os.path.getsize(trace),
             'timeline': timeline}
        results.append(r)
        print(json.dumps({k: v for k, v in r.items() if k != 'timeline'}), flush=True)

    # Resident memory with and without the NVML backend on this host.
    rss = {}
    for backend in ('nvml', 'none'):
        p = subprocess.Popen([args.binary, f'--web.listen-address=127.0.0.1:{args.port}', f'--collector.gpu.backend={backend}'],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_up(base + '/metrics')
        time.sleep(8)
        with open(f'/proc/{p.pid}/status') as f:
            rss[backend] = {l.split(':')[0]: int(l.split()[1]) * 1024 for l in f if l.split(':')[0] in ('VmRSS', 'RssAnon', 'RssFile')}
        p.terminate()
        p.wait(timeout=15)
    print(json.dumps({'rss': rss}), flush=True)
    with open(os.path.join(args.outdir, 'situations.json'), 'w') as f:
        json.dump({'situations': results, 'rss': rss}, f, indent=1)


if __name__ == '__main__':
    main()
