#!/usr/bin/env python3
"""Run all-reduce loops over two GPUs in NCCL's three transport modes, with and
without NCCL logging, beside the gpudiag daemon, and record what it reports.

Usage: nccl_modes.py BINARY OUTDIR [--span SECONDS] [--glob]
Needs: two CUDA GPUs with NVLink, PyTorch with NCCL.
Writes OUTDIR/results.json, a trace per run (<mode>-<log|nolog>.gdrec), and
the topology the daemon saw next to `nvidia-smi topo -m`.
"""
import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request

ALLREDUCE = r'''
import os, sys, time, torch, torch.distributed as dist, torch.multiprocessing as mp
def work(rank, seconds):
    torch.cuda.set_device(rank)
    dist.init_process_group('nccl', init_method='tcp://127.0.0.1:29511', rank=rank, world_size=2)
    x = torch.ones(16 << 20, device='cuda')
    end = time.time() + seconds
    while time.time() < end:
        for _ in range(5):
            dist.all_reduce(x)
        torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()
if __name__ == '__main__':
    mp.spawn(work, args=(float(sys.argv[1]),), nprocs=2)
'''

MODES = {
    'default': ({}, 'communication', 'nvlink'),
    'p2p_disabled': ({'NCCL_P2P_DISABLE': '1'}, 'communication', 'pcie_peer_shm'),
    'socket': ({'NCCL_P2P_DISABLE': '1', 'NCCL_SHM_DISABLE': '1'}, 'communication', 'network'),
}


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def wait_up(url):
    for _ in range(200):
        try:
            return get(url)
        except Exception:
            time.sleep(0.1)
    raise RuntimeError('daemon did not come up')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('binary')
    ap.add_argument('outdir')
    ap.add_argument('--span', type=float, default=20)
    ap.add_argument('--glob', action='store_true', help='also point the daemon at the log directory (else it must find NCCL_DEBUG_FILE itself)')
    ap.add_argument('--port', default='10910')
    ap.add_argument('--only', default='', help='comma-separated modes to run')
    args = ap.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    base = f'http://127.0.0.1:{args.port}'
    script = os.path.join(args.outdir, 'allreduce.py')
    with open(script, 'w') as f:
        f.write(ALLREDUCE)
    logdir = '/tmp/gpudiag-nccl-logs'
    subprocess.run(['rm', '-rf', logdir])
    os.makedirs(logdir)
    with open(os.path.join(args.outdir, 'nvidia-smi-topo.txt'), 'w') as f:
        f.write(subprocess.run(['nvidia-smi', 'topo', '-m'], capture_output=True, text=True).stdout)

    results = []
    for mode, (env_extra, want_class, want_sub) in MODES.items():
        if args.only and mode not in args.only.split(','):
            continue
        for logging in (True, False):
            name = f"{mode}-{'log' if logging else 'nolog'}"
            trace = os.path.join(args.outdir, name + '.gdrec')
            cmd = [args.binary, f'--web.listen-address=127.0.0.1:{args.port}', f'--record={trace}']
            if args.glob:
                cmd.append(f'--collector.nccl.log-glob={logdir}/*.log')
            dlog = open(os.path.join(args.outdir, name + '.daemon.log'), 'w')
            daemon = subprocess.Popen(cmd, stdout=dlog, stderr=dlog)
            wait_up(base + '/metrics')
            time.sleep(3)
            env = dict(os.environ, **env_extra)
            if logging:
                env.update(NCCL_DEBUG='INFO', NCCL_DEBUG_FILE=f'{logdir}/{mode}.%h.%p.log')
            start = time.time()
            # Its own session, so the ranks can be killed together: with P2P
            # disabled an all-reduce can take minutes on this VM, and the loop
            # only checks the clock between batches.
            work = subprocess.Popen([sys.executable, script, str(args.span)], env=env, start_new_session=True,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            first_right, timeline = None, []
            while time.time() - start < args.span:
                time.sleep(0.5)
                try:
                    d = json.loads(get(base + '/diagnose?format=json'))
                except Exception as e:
                    timeline.append({'t': round(time.time() - start, 1), 'error': str(e)})
                    continue
                node = f"{d['node']['class']}/{d['node'].get('sub_kind', '')}"
                timeline.append({'t': round(time.time() - start, 1), 'node': node})
                right = node == f'{want_class}/{want_sub}'
                if right and first_right is None:
                    first_right = timeline[-1]['t']
                elif not right:
                    first_right = None
            final = json.loads(get(base + '/diagnose?format=json'))
            text = get(base + '/diagnose?format=text')
            metrics = get(base + '/metrics')
            with open(os.path.join(args.outdir, name + '.diagnose.txt'), 'w') as f:
                f.write(text)
            try:
                work.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(work.pid, 9)
                work.wait()
            daemon.terminate()
            daemon.wait(timeout=15)
            dlog.close()
            keep = [l for l in metrics.splitlines() if l.startswith(('gpudiag_nccl_', 'gpudiag_gpu_process_tcp_', 'gpudiag_gpu_peer_link_info', 'gpudiag_gpu_bottleneck_info'))]
            r = {'run': name, 'expected': f'{want_class}/{want_sub}',
                 'final': f"{final['node']['class']}/{final['node'].get('sub_kind', '')}",
                 'confidence': final['node']['confidence'], 'settled_after_s': first_right,
                 'gpu_summaries': [g['summary'] for g in final['gpus']],
                 'findings': [f"{f['check']}:{f.get('device', '')}" for f in final['findings']],
                 'metrics': keep, 'timeline': timeline}
            results.append(r)
            print(json.dumps({k: v for k, v in r.items() if k not in ('timeline', 'metrics', 'gpu_summaries')}), flush=True)

    # The daemon's own cost with 2 GPUs at a 1 s interval, GPUs idle.
    p = subprocess.Popen([args.binary, f'--web.listen-address=127.0.0.1:{args.port}'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_up(base + '/metrics')
    time.sleep(5)
    def cpu():
        with open(f'/proc/{p.pid}/stat') as f:
            x = f.read().rsplit(')', 1)[1].split()
        return (int(x[11]) + int(x[12])) / os.sysconf('SC_CLK_TCK')
    c0, w0 = cpu(), time.time()
    time.sleep(30)
    c1, w1 = cpu(), time.time()
    with open(f'/proc/{p.pid}/status') as f:
        rss = {l.split(':')[0]: int(l.split()[1]) * 1024 for l in f if l.split(':')[0] in ('VmRSS', 'RssAnon', 'RssFile')}
    p.terminate()
    p.wait(timeout=15)
    cost = {'gpus': 2, 'cpu_seconds': round(c1 - c0, 3), 'span_s': round(w1 - w0, 1), 'core_fraction': (c1 - c0) / (w1 - w0), 'rss': rss}
    print(json.dumps(cost), flush=True)
    with open(os.path.join(args.outdir, 'results.json'), 'w') as f:
        json.dump({'runs': results, 'cost_2gpu': cost}, f, indent=1)


if __name__ == '__main__':
    main()
