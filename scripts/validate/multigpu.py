#!/usr/bin/env python3
"""Record the gpudiag daemon beside known multi-GPU workloads (issue 37): one-GPU
jobs on a multi-GPU node, two jobs on one node, DDP over each NCCL path, ranks
claiming separate hosts, a stopped, a killed and a slow rank, and a healthy
checkpoint. For each scenario a fresh daemon runs with --record; the script
polls /diagnose?format=json each second and keeps the timeline of verdicts
(node, each GPU, findings) beside the events it caused (stop, kill, write) and
the truth expected of them.

Usage: multigpu.py BINARY OUTDIR [--only NAME,...] [--gpus N]
Needs: 2 or more CUDA GPUs of one host, PyTorch with NCCL, root (the daemon reads
every process). Writes, per scenario, OUTDIR/<name>.gdrec (the trace),
<name>.json (commands, events, truth, timeline, first-seen verdicts),
<name>.snapshots.jsonl (the whole /diagnose every 5 s), <name>.diagnose.txt and
<name>.metrics.txt (at the end), <name>.daemon.log and the workloads' logs;
OUTDIR/nccl/ holds the NCCL_DEBUG_FILE logs; OUTDIR/machine.txt the host.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
import urllib.request

# A value planted in every workload's environment: the traces must not hold it
# (the recorder keeps allow-listed variables only).
CANARY = 'MY_SECRET', 'gpudiag-canary-7f3a9c'

# Never let NCCL, PyTorch or NVSHMEM use NVLink multicast on a lent machine.
SAFE_ENV = {'NCCL_NVLS_ENABLE': '0', 'TORCH_SYMM_MEM_DISABLE_MULTICAST': '1', 'NVSHMEM_DISABLE_NVLS': '1'}

GEMM = r'''
import torch, time, sys
a = torch.randn(8192, 8192, dtype=torch.bfloat16, device='cuda'); b = torch.randn_like(a)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20): c = a @ b
    torch.cuda.synchronize()
'''

H2D = r'''
import torch, time, sys
h = torch.empty(512 << 20, dtype=torch.uint8).pin_memory(); d = torch.empty(512 << 20, dtype=torch.uint8, device='cuda')
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(10): d.copy_(h, non_blocking=True)
    torch.cuda.synchronize()
'''

# One rank of a job: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT from the
# launcher (torchrun or LAUNCH below). Ranks stay in lockstep: each batch ends
# with a one-element all-reduce of rank 0's "stop" flag, so every rank runs the
# same number of collectives and none is left hanging at the end.
RANK = r'''
import json, os, sys, time, torch, torch.distributed as dist
mode, seconds = sys.argv[1], float(sys.argv[2])
rank, world, local = int(os.environ['RANK']), int(os.environ['WORLD_SIZE']), int(os.environ['LOCAL_RANK'])
def event(name, **kw):
    with open(os.environ['MG_EVENTS'], 'a') as f:
        f.write(json.dumps(dict(rank=rank, pid=os.getpid(), event=name, unix=time.time(), **kw)) + '\n')
event('start', cuda_visible_devices=os.environ.get('CUDA_VISIBLE_DEVICES', ''), local_rank=local)
dev = torch.device('cuda', local)
torch.cuda.set_device(dev)
dist.init_process_group('nccl', device_id=dev)
x = torch.zeros(16 << 20, device=dev)   # 64 MiB of float32, a gradient bucket
flag = torch.zeros(1, device=dev)
def go_on(end):
    flag.fill_(1.0 if (rank == 0 and time.time() > end) else 0.0)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return flag.item() == 0
def allreduce_for(s):
    end = time.time() + s
    while go_on(end):
        for _ in range(5):
            dist.all_reduce(x)
        torch.cuda.synchronize()
dist.all_reduce(x); torch.cuda.synchronize()
event('loop_start')
if mode == 'allreduce':
    allreduce_for(seconds)
elif mode == 'slow':
    slow, n = int(os.environ['MG_SLOW_RANK']), int(os.environ['MG_CPU_LOOP'])
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
    end = time.time() + seconds
    steps = 0
    while go_on(end):
        for _ in range(4):
            c = a @ a
        if rank == slow:
            s = 0
            for i in range(n):   # the slow rank's host work: a Python loop in its step
                s += i * i
        dist.all_reduce(x)
        torch.cuda.synchronize()
        steps += 1
    event('steps', steps=steps)
elif mode == 'checkpoint':
    gib, min_s, max_gib = int(os.environ['MG_CKPT_GIB']), float(os.environ['MG_CKPT_MIN_S']), int(os.environ['MG_CKPT_MAX_GIB'])
    parts = [torch.randn(512 << 20, dtype=torch.bfloat16, device=dev) for _ in range(min(gib, 16))] if rank == 0 else []
    allreduce_for(seconds)
    if rank == 0:
        d = os.environ['MG_CKPT_DIR']
        os.makedirs(d, exist_ok=True)
        event('ckpt_start')
        t0, n = time.time(), 0
        # 1 GiB shards, each torch.save'd from the GPU and fsync'd, until at
        # least MG_CKPT_GIB are written and MG_CKPT_MIN_S have passed.
        while (n < gib or time.time() - t0 < min_s) and n < max_gib:
            with open(os.path.join(d, 'shard%03d.pt' % n), 'wb') as f:
                torch.save({'w': parts[n % len(parts)], 'shard': n}, f)
                f.flush()
                os.fsync(f.fileno())
            n += 1
        event('ckpt_end', shards=n, gib=n, seconds=time.time() - t0)
        dist.barrier()
    else:
        event('barrier_enter')
        dist.barrier()
        event('barrier_exit')
    allreduce_for(seconds)
event('done')
dist.destroy_process_group()
'''

# A launcher that starts one process per rank and waits for them all without
# tearing the job down when one dies (torchrun and mp.spawn would): the
# surviving ranks keep waiting, as they do under a scheduler that only notices
# much later. argv[1]: a JSON list of {"cmd": [...], "env": {...}, "log": path}.
LAUNCH = r'''
import json, os, subprocess, sys
procs = []
for r in json.loads(sys.argv[1]):
    procs.append(subprocess.Popen(r['cmd'], env=dict(os.environ, **r['env']), stdout=open(r['log'], 'w'), stderr=subprocess.STDOUT))
for p in procs:
    p.wait()
'''


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def wait_up(url):
    for _ in range(300):
        try:
            get(url)
            return
        except Exception:
            time.sleep(0.1)
    raise RuntimeError('daemon did not come up')


def proc_state(pid):
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0]
    except OSError:
        return 'gone'


class Run:
    """One scenario: its daemon, its jobs, its events and its timeline."""

    def __init__(self, name, args, port):
        self.name, self.args, self.port = name, args, port
        self.base = f'http://127.0.0.1:{port}'
        self.out = args.outdir
        self.work = os.path.join(self.out, 'work', name)
        os.makedirs(self.work, exist_ok=True)
        self.events_file = os.path.join(self.work, 'rank-events.jsonl')
        self.events, self.commands, self.jobs = [], [], []
        self.t0 = None  # the first workload's launch
        self.lock = threading.Lock()

    def rel(self, unix):
        return round(unix - self.t0, 2) if self.t0 else None

    def event(self, what, **kw):
        now = time.time()
        with self.lock:
            self.events.append(dict(what=what, unix=round(now, 3), t=self.rel(now), **kw))
        print(f'  [{self.name}] t={self.rel(now)} {what} {kw if kw else ""}', flush=True)

    def env(self, extra=None, nccl_log=False):
        e = dict(os.environ, **SAFE_ENV)
        e[CANARY[0]] = CANARY[1]
        e['MG_EVENTS'] = self.events_file
        e['PYTHONUNBUFFERED'] = '1'
        if nccl_log:
            e['NCCL_DEBUG'] = 'INFO'
            e['NCCL_DEBUG_FILE'] = os.path.join(self.out, 'nccl', f'{self.name}.%h.%p.log')
        e.update(extra or {})
        return e

    def spawn(self, label, cmd, env, shown_env):
        """Start a job in its own session (so it is killed whole) and note it."""
        if self.t0 is None:
            self.t0 = time.time()
        log = open(os.path.join(self.work, f'{label}.log'), 'w')
        p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.jobs.append((label, p))
        shown_cmd = ['python3', '-c', 'LAUNCH (multigpu.py)', '<the ranks below>'] if LAUNCH in cmd else [os.path.basename(c) if c == sys.executable else c for c in cmd]
        self.commands.append({'job': label, 'env': shown_env, 'cmd': ' '.join(shown_cmd)})
        self.event('launch', job=label, pid=p.pid)
        return p

    def single(self, label, code, gpu, seconds):
        script = os.path.join(self.work, f'{label}.py')
        with open(script, 'w') as f:
            f.write(code)
        extra = {'CUDA_VISIBLE_DEVICES': str(gpu)}
        return self.spawn(label, [sys.executable, script, str(seconds)], self.env(extra), extra)

    def rank_script(self):
        path = os.path.join(self.work, 'rank.py')
        with open(path, 'w') as f:
            f.write(RANK)
        return path

    def torchrun(self, label, gpus, mode, seconds, extra=None, nccl_log=True):
        extra = dict(extra or {}, CUDA_VISIBLE_DEVICES=','.join(map(str, gpus)))
        cmd = [sys.executable, '-m', 'torch.distributed.run', '--standalone', f'--nproc_per_node={len(gpus)}',
               self.rank_script(), mode, str(seconds)]
        shown = dict(extra, **({'NCCL_DEBUG': 'INFO', 'NCCL_DEBUG_FILE': 'nccl/%s.%%h.%%p.log' % self.name} if nccl_log else {}))
        return self.spawn(label, cmd, self.env(extra, nccl_log), shown)

    def ranks(self, label, gpus, mode, seconds, port, per_rank=None, prefix=None, extra=None, nccl_log=True):
        """One process per rank under LAUNCH; per_rank[r] adds to rank r's
        environment, prefix[r] goes before its command (taskset)."""
        script = self.rank_script()
        spec = []
        for r in range(len(gpus)):
            env = {'RANK': str(r), 'WORLD_SIZE': str(len(gpus)), 'LOCAL_RANK': str(r), 'MASTER_ADDR': '127.0.0.1',
                   'MASTER_PORT': str(port), 'CUDA_VISIBLE_DEVICES': ','.join(map(str, gpus))}
            env.update((per_rank or {}).get(r, {}))
            cmd = list((prefix or {}).get(r, [])) + [sys.executable, script, mode, str(seconds)]
            spec.append({'cmd': cmd, 'env': env, 'log': os.path.join(self.work, f'{label}.rank{r}.log')})
        shown = dict(extra or {}, **({'NCCL_DEBUG': 'INFO', 'NCCL_DEBUG_FILE': 'nccl/%s.%%h.%%p.log' % self.name} if nccl_log else {}))
        shown['ranks'] = [{'cmd': ' '.join(s['cmd'][:-4] + ['python3', 'rank.py', mode, str(seconds)]),
                           'env': {k: v for k, v in s['env'].items() if k not in ('MASTER_ADDR',)}} for s in spec]
        return self.spawn(label, [sys.executable, '-c', LAUNCH, json.dumps(spec)], self.env(extra, nccl_log), shown)

    def rank_events(self):
        try:
            with open(self.events_file) as f:
                return [json.loads(l) for l in f if l.strip()]
        except OSError:
            return []

    def rank_pids(self):
        return {e['rank']: e['pid'] for e in self.rank_events() if e['event'] == 'start'}

    def wait_rank_event(self, rank, name, timeout=90):
        end = time.time() + timeout
        while time.time() < end:
            for e in self.rank_events():
                if e['rank'] == rank and e['event'] == name:
                    return e
            time.sleep(0.2)
        raise RuntimeError(f'rank {rank} never logged {name}')

    def signal(self, rank, sig):
        pid = self.rank_pids()[rank]
        os.kill(pid, sig)
        self.event(signal.Signals(sig).name, rank=rank, pid=pid)

    def wait_jobs(self, timeout):
        end = time.time() + timeout
        for _, p in self.jobs:
            try:
                p.wait(timeout=max(0.1, end - time.time()))
            except subprocess.TimeoutExpired:
                pass

    def kill_all(self):
        for label, p in self.jobs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGCONT)
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.event('killed_at_end', job=label)
            p.wait()


def compact(d, pids):
    """The parts of one /diagnose answer the timeline keeps."""
    n = d['node']
    e = {'node': f"{n['class']}/{n.get('sub_kind', '')}", 'node_conf': n.get('confidence'),
         'node_summary': n.get('summary', '')[:300]}
    if n.get('pending'):
        e['node_pending'] = n['pending']
    e['gpus'] = {str(g['gpu']): f"{g['class']}/{g.get('sub_kind', '')}" for g in d['gpus']}
    e['gpu_summaries'] = {str(g['gpu']): g.get('summary', '')[:300] for g in d['gpus']}
    pend = {str(g['gpu']): g['pending'] for g in d['gpus'] if g.get('pending')}
    if pend:
        e['gpu_pending'] = pend
    e['findings'] = sorted({':'.join(str(x) for x in (f['check'], f['severity'], f.get('gpu', ''), f.get('kind', ''), f.get('device', '')))
                            for f in d.get('findings') or []})
    if d.get('stragglers'):
        e['stragglers'] = d['stragglers']
    if d.get('jobs'):
        e['jobs'] = [f"{j['gpu']}:{j['source']}:{j.get('job_id', '')}" for j in d['jobs']]
    if pids:
        e['rank_states'] = {str(r): proc_state(p) for r, p in sorted(pids.items())}
    return e


def first_seen(timeline):
    """For the node, each GPU and each finding: when each verdict began."""
    out = {'node': [], 'gpus': {}, 'findings': []}
    last = {}
    active = set()
    for e in timeline:
        if 'node' not in e:
            continue
        if last.get('node') != e['node']:
            out['node'].append([e['t'], e['node']])
            last['node'] = e['node']
        for g, v in e['gpus'].items():
            if last.get(g) != v:
                out['gpus'].setdefault(g, []).append([e['t'], v])
                last[g] = v
        now = set(e['findings'])
        for f in sorted(now - active):
            out['findings'].append([e['t'], '+' + f])
        for f in sorted(active - now):
            out['findings'].append([e['t'], '-' + f])
        active = now
    return out


def run_scenario(name, spec, args, port):
    r = Run(name, args, port)
    trace = os.path.join(args.outdir, f'{name}.gdrec')
    if os.path.exists(trace):
        os.remove(trace)
    dcmd = [args.binary, f'--web.listen-address=127.0.0.1:{port}', '--sample.interval=1s', f'--record={trace}']
    dlog = open(os.path.join(args.outdir, f'{name}.daemon.log'), 'w')
    daemon = subprocess.Popen(dcmd, stdout=dlog, stderr=dlog)
    result = {'scenario': name, 'title': spec['title'], 'truth': spec['truth'], 'daemon_cmd': ' '.join(dcmd[1:])}
    snaps = open(os.path.join(args.outdir, f'{name}.snapshots.jsonl'), 'w')
    timeline = []
    error = []
    try:
        wait_up(r.base + '/metrics')
        result['daemon_start_unix'] = round(time.time(), 3)
        time.sleep(3)  # a few samples before the workload: the trace shows the switch

        def drive():
            try:
                spec['drive'](r, args)
            except Exception:
                error.append(traceback.format_exc())
                r.event('driver_error')
        driver = threading.Thread(target=drive, daemon=True)
        driver.start()
        while r.t0 is None and driver.is_alive():
            time.sleep(0.05)
        n, tail_until = 0, None
        while True:
            if not driver.is_alive():  # two more polls after the driver's last event
                if tail_until is None:
                    tail_until = time.time() + 2
                elif time.time() >= tail_until:
                    break
            time.sleep(max(0.0, r.t0 + n + 1 - time.time()))
            n += 1
            now = time.time()
            try:
                raw = get(r.base + '/diagnose?format=json')
                d = json.loads(raw)
            except Exception as ex:
                timeline.append({'t': r.rel(now), 'error': str(ex)[:200]})
                continue
            e = {'t': r.rel(now), 'unix': round(now, 3)}
            e.update(compact(d, r.rank_pids()))
            timeline.append(e)
            if n % 5 == 0:
                snaps.write(json.dumps({'t': e['t'], 'diagnose': d}) + '\n')
            if n % 10 == 0:
                print(f"  [{name}] t={e['t']} node={e['node']} gpus={e['gpus']} findings={len(e['findings'])}", flush=True)
        final = get(r.base + '/diagnose?format=json')
        snaps.write(json.dumps({'t': r.rel(time.time()), 'final': True, 'diagnose': json.loads(final)}) + '\n')
        with open(os.path.join(args.outdir, f'{name}.diagnose.txt'), 'w') as f:
            f.write(get(r.base + '/diagnose?format=text'))
        metrics = get(r.base + '/metrics')
        with open(os.path.join(args.outdir, f'{name}.metrics.txt'), 'w') as f:
            f.write('\n'.join(l for l in metrics.splitlines() if l.startswith((
                'gpudiag_node_bottleneck', 'gpudiag_gpu_bottleneck', 'gpudiag_finding', 'gpudiag_nccl_', 'gpudiag_gpu_job_info',
                'gpudiag_gpu_peer_link_info', 'gpudiag_record_', 'gpudiag_gpu_process'))) + '\n')
    finally:
        r.kill_all()
        daemon.terminate()
        try:
            daemon.wait(timeout=15)
        except subprocess.TimeoutExpired:
            daemon.kill()
        dlog.close()
        snaps.close()
        result['daemon_stop_unix'] = round(time.time(), 3)
        result['workload_start_unix'] = round(r.t0, 3) if r.t0 else None
        result['commands'] = r.commands
        result['events'] = r.events
        result['rank_events'] = [dict(e, t=r.rel(e['unix'])) for e in r.rank_events()]
        result['trace_bytes'] = os.path.getsize(trace) if os.path.exists(trace) else None
        result['first_seen'] = first_seen(timeline)
        result['timeline'] = timeline
        if error:
            result['error'] = error
        with open(os.path.join(args.outdir, f'{name}.json'), 'w') as f:
            json.dump(result, f, indent=1)
        if name == 'checkpoint':
            shutil.rmtree(args.ckpt_dir, ignore_errors=True)
    return result


# ---- the scenarios -------------------------------------------------------

def d_gemm(r, a):
    r.single('gemm_gpu0', GEMM, 0, a.span)
    r.wait_jobs(a.span + 60)


def d_h2d(r, a):
    r.single('h2d_gpu1', H2D, 1, a.span)
    r.wait_jobs(a.span + 60)


def d_two_jobs(r, a):
    if a.gpus >= 3:
        r.torchrun('ddp_gpu0_1', [0, 1], 'allreduce', a.span + 5)
        r.single('gemm_gpu2', GEMM, 2, a.span + 5)
    else:  # two GPUs: two one-GPU jobs of different kinds
        r.single('gemm_gpu0', GEMM, 0, a.span + 5)
        r.single('h2d_gpu1', H2D, 1, a.span + 5)
    r.wait_jobs(a.span + 90)


def d_ddp(extra):
    def drive(r, a):
        r.torchrun('ddp_all', list(range(a.gpus)), 'allreduce', a.span, extra=extra)
        r.wait_jobs(a.span + 60)
    return drive


def d_hosts(r, a):
    n = a.gpus
    ids = {i: {'NCCL_HOSTID': 'a' if i < n // 2 else 'b'} for i in range(n)}
    r.ranks('ranks_as_hosts', list(range(n)), 'allreduce', a.span, 29610, per_rank=ids)
    r.wait_jobs(a.span + 60)


def d_stopped(r, a):
    r.ranks('ddp_2ranks', [0, 1], 'allreduce', 10 + a.stop_s + 12, 29620, nccl_log=False)
    r.wait_rank_event(1, 'loop_start')
    r.event('loop_start_seen')
    time.sleep(10)
    r.signal(1, signal.SIGSTOP)
    time.sleep(a.stop_s)
    r.signal(1, signal.SIGCONT)
    r.wait_jobs(60)


def d_killed(r, a):
    r.ranks('ddp_2ranks', [0, 1], 'allreduce', 600, 29630)
    r.wait_rank_event(1, 'loop_start')
    r.event('loop_start_seen')
    time.sleep(10)
    r.signal(1, signal.SIGKILL)
    time.sleep(a.kill_watch_s)
    r.event('end_of_watch')  # kill_all ends the waiting rank 0


def d_slow(r, a):
    r.ranks('ddp_2ranks', [0, 1], 'slow', a.span, 29640, prefix={1: ['taskset', '-c', '0']}, nccl_log=False,
            extra={'MG_SLOW_RANK': '1', 'MG_CPU_LOOP': str(a.cpu_loop)},
            per_rank={r_: {'MG_SLOW_RANK': '1', 'MG_CPU_LOOP': str(a.cpu_loop)} for r_ in (0, 1)})
    r.wait_jobs(a.span + 60)


def d_checkpoint(r, a):
    ck = a.ckpt_dir
    os.makedirs(ck, exist_ok=True)
    free_gib = shutil.disk_usage(ck).free // (1 << 30)
    cap = max(2, min(a.ckpt_max_gib, free_gib // 2))
    fs = subprocess.run(['df', '-T', ck], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    r.event('disk', path=ck, free_gib=free_gib, cap_gib=cap, df=fs)
    env = {'MG_CKPT_GIB': str(min(a.ckpt_gib, cap)), 'MG_CKPT_MIN_S': str(a.ckpt_min_s), 'MG_CKPT_MAX_GIB': str(cap), 'MG_CKPT_DIR': ck}
    r.ranks('ddp_2ranks', [0, 1], 'checkpoint', 8, 29650, per_rank={0: env, 1: env}, extra=env)
    r.wait_jobs(a.ckpt_min_s + 240)


def truth_free(gpus, busy):
    return {str(g): 'idle/no_process (free)' for g in range(gpus) if g not in busy}


def scenarios(a):
    n = a.gpus
    free2 = truth_free(n, {0, 1})
    return {
        'one_gemm': {'title': 'one bf16 GEMM on GPU 0, the other GPUs free', 'drive': d_gemm, 'truth': {
            'gpus': dict({'0': 'compute/tensor'}, **truth_free(n, {0})),
            'node': f'compute/tensor: the one working GPU leads; 1 of {n} GPUs works, {n - 1} free; never idle'}},
        'one_h2d': {'title': 'one pinned host-to-device copy loop on GPU 1, the other GPUs free', 'drive': d_h2d, 'truth': {
            'gpus': dict({'1': 'io/h2d_copy'}, **truth_free(n, {1})),
            'node': f'io/h2d_copy (GPU 1); {n - 1} of {n} free; never idle'}},
        'two_jobs': {'title': 'two jobs on one node: a 2-rank all-reduce loop (torchrun) on GPUs 0-1 and a GEMM on GPU 2' if n >= 3
                     else 'two jobs on one node: a GEMM on GPU 0 and a pinned H2D copy on GPU 1', 'drive': d_two_jobs, 'truth': {
            'gpus': dict({'0': 'communication/nvlink', '1': 'communication/nvlink', '2': 'compute/tensor'}, **truth_free(n, {0, 1, 2})) if n >= 3
            else {'0': 'compute/tensor', '1': 'io/h2d_copy'},
            'groups': ['GPUs 0,1: torchrun job (TORCHELASTIC_RUN_ID), communication/nvlink', 'GPU 2: its own process, compute/tensor'] if n >= 3
            else ['GPU 0: compute/tensor', 'GPU 1: io/h2d_copy'],
            'node': 'headline: the group whose bottleneck costs the most GPU time (the 2-GPU all-reduce, communication/nvlink), the GEMM group listed, '
                    f'{max(0, n - 3)} of {n} free; never idle'}},
        'ddp_nvlink': {'title': f'all-reduce loop over all {n} GPUs (torchrun), NCCL default (P2P over NVLink), NCCL_DEBUG=INFO to a file',
                       'drive': d_ddp({}), 'truth': {'gpus': {str(g): 'communication/nvlink' for g in range(n)},
                                                      'node': 'communication/nvlink; no fallback finding'}},
        'ddp_shm': {'title': f'all-reduce loop over all {n} GPUs, NCCL_P2P_DISABLE=1 (SHM), NCCL_DEBUG=INFO',
                    'drive': d_ddp({'NCCL_P2P_DISABLE': '1'}), 'truth': {'gpus': {str(g): 'communication/pcie_peer_shm' for g in range(n)},
                    'node': 'communication/pcie_peer_shm; nccl_fallback p2p_disabled and nccl_env_override NCCL_P2P_DISABLE=1, one finding per cause for the node'}},
        'ddp_socket': {'title': f'all-reduce loop over all {n} GPUs, NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 (sockets), NCCL_DEBUG=INFO',
                       'drive': d_ddp({'NCCL_P2P_DISABLE': '1', 'NCCL_SHM_DISABLE': '1'}), 'truth': {
                           'gpus': {str(g): 'communication/network' for g in range(n)},
                           'node': 'communication/network; fallbacks p2p_disabled, shm_disabled (set); no socket_instead_of_ib (no RDMA device on the node); '
                                   'no advice about variables that are not set; one finding and one alert per cause'}},
        'ranks_as_hosts': {'title': f'{n} ranks claiming two hosts (NCCL_HOSTID=a for ranks 0-{n // 2 - 1}, b for the rest) over TCP, NCCL_DEBUG=INFO',
                           'drive': d_hosts, 'truth': {
                               # Seen on 4xH200: the ranks that carry the inter-"host" TCP connections (0 and n/2) are
                               # network-bound, the others wait for them (peer_wait today), never host/cpu.
                               'gpus': {str(g): 'communication/network' if g % (n // 2) == 0 else
                                        'communication/waiting on the network-bound ranks (peer_wait today); never host/cpu' for g in range(n)},
                               'group': 'one job (process tree of the launcher): communication/network',
                           'node': 'communication/network: inter-"node" collectives over TCP, and the node is told it has no RDMA NIC; '
                                   'no advice about NCCL_NET, NCCL_IB_DISABLE, NCCL_SHM_DISABLE (none set), no "check the IB ports" (there are none), '
                                   'no socket_instead_of_ib'}},
        'stopped_rank': {'title': f'2-rank all-reduce loop on GPUs 0-1 (own launcher, no NCCL log); SIGSTOP rank 1 10 s into the loop, '
                                  f'SIGCONT {a.stop_s:.0f} s later', 'drive': d_stopped, 'truth': {
            'phases': [
                {'phase': 'before the stop', 'gpus': dict({'0': 'communication/nvlink', '1': 'communication/nvlink'}, **free2)},
                {'phase': 'stopped (from SIGSTOP to SIGCONT)', 'gpus': dict({
                    '0': 'communication/waiting, naming rank 1 (its pid, GPU 1, state T: stopped) within 10 s of the stop; never host/cpu',
                    '1': 'its process is stopped (state T): named as the stopped rank'}, **free2),
                 'node': 'led by the waiting job: waiting on a stopped rank (pid, GPU 1); never idle'},
                {'phase': 'after SIGCONT', 'gpus': dict({'0': 'communication/nvlink', '1': 'communication/nvlink'}, **free2)}]}},
        'killed_rank': {'title': f'2-rank all-reduce loop on GPUs 0-1 (own launcher: the job is not torn down), NCCL_DEBUG=INFO; '
                                 f'SIGKILL rank 1 10 s into the loop, watch rank 0 wait {a.kill_watch_s:.0f} s',
                        'drive': d_killed, 'truth': {'phases': [
                            {'phase': 'before the kill', 'gpus': dict({'0': 'communication/nvlink', '1': 'communication/nvlink'}, **free2)},
                            {'phase': 'after the kill', 'gpus': dict({
                                '0': 'communication/waiting, naming the gone rank 1 (its pid, GPU 1, exited) within 10 s; never host/cpu',
                                '1': 'idle/no_process (its process is gone)'}, **free2),
                             'node': 'led by the waiting job (a critical state: its peer is gone); never idle'}]}},
        'slow_rank': {'title': f'2-rank loop (4 GEMMs + a 64 MiB all-reduce a step) on GPUs 0-1, no NCCL log; rank 1 under taskset -c 0 '
                               f'with a {a.cpu_loop}-iteration Python loop in its step', 'drive': d_slow, 'truth': {
            'gpus': dict({'0': 'communication/waiting, naming rank 1 (pid, GPU 1) bound by the host CPU',
                          '1': 'host/cpu (its process at one full core, pinned to CPU 0)'}, **free2),
            'node': 'host/cpu: the job waits on rank 1\'s CPU; never idle'}},
        'checkpoint': {'title': f'2-rank all-reduce loop on GPUs 0-1, NCCL_DEBUG=INFO; then rank 0 torch.save()s 1 GiB shards from the GPU with '
                                f'fsync (>= {a.ckpt_gib} GiB and >= {a.ckpt_min_s:.0f} s) while rank 1 waits in dist.barrier(); then the loop again',
                       'drive': d_checkpoint, 'truth': {'phases': [
                           {'phase': 'loop before and after', 'gpus': dict({'0': 'communication/nvlink', '1': 'communication/nvlink'}, **free2)},
                           {'phase': 'checkpoint (ckpt_start to ckpt_end)', 'gpus': dict({
                               '0': 'its rank busy on the host writing the checkpoint (storage write / host), not waiting',
                               '1': 'communication/waiting, naming rank 0 (pid, GPU 0) busy writing; never collective_stalled, '
                                    'no nccl_collective_stalled at any time'}, **free2),
                            'node': 'a healthy pause: the job is writing a checkpoint; no critical finding; the free GPUs never io/storage_*'}]}},
    }


ORDER = ['one_gemm', 'one_h2d', 'two_jobs', 'ddp_nvlink', 'ddp_shm', 'ddp_socket', 'ranks_as_hosts',
         'stopped_rank', 'killed_rank', 'slow_rank', 'checkpoint']


def machine(out):
    cmds = ['nvidia-smi -L', 'nvidia-smi topo -m',
            'nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total --format=csv',
            'uname -r', 'nproc', 'df -T / /tmp /var/tmp', 'lscpu | grep -E "Model name|NUMA|^CPU\\(s\\)"', 'free -g',
            'ls /sys/class/infiniband 2>&1', 'ip -br link 2>&1 || ls /sys/class/net',
            sys.executable + ' -c "import torch; print(\'torch\', torch.__version__, \'nccl\', torch.cuda.nccl.version())"']
    with open(os.path.join(out, 'machine.txt'), 'a') as f:
        f.write(f'# {time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}\n')
        for c in cmds:
            p = subprocess.run(c, shell=True, capture_output=True, text=True)
            f.write(f'$ {c}\n{p.stdout}{p.stderr}\n')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('binary')
    ap.add_argument('outdir')
    ap.add_argument('--only', default='')
    ap.add_argument('--gpus', type=int, default=0, help='GPUs to use (default: all, at most 4)')
    ap.add_argument('--span', type=float, default=30, help='seconds each plain workload runs')
    ap.add_argument('--stop-s', type=float, default=30)
    ap.add_argument('--kill-watch-s', type=float, default=40)
    ap.add_argument('--cpu-loop', type=int, default=3000000)
    ap.add_argument('--ckpt-gib', type=int, default=16)
    ap.add_argument('--ckpt-min-s', type=float, default=70)
    ap.add_argument('--ckpt-max-gib', type=int, default=48)
    ap.add_argument('--ckpt-dir', default='/var/tmp/gpudiag-ckpt', help='on a local disk, not tmpfs')
    ap.add_argument('--port', type=int, default=10911)
    args = ap.parse_args()
    args.binary = os.path.abspath(args.binary)
    os.makedirs(os.path.join(args.outdir, 'nccl'), exist_ok=True)
    if not args.gpus:
        args.gpus = min(4, len(subprocess.run(['nvidia-smi', '-L'], capture_output=True, text=True).stdout.strip().splitlines()))
    machine(args.outdir)
    specs = scenarios(args)
    names = [n for n in ORDER if not args.only or n in args.only.split(',')]
    if args.only:
        names.sort(key=args.only.split(',').index)
    summary = []
    for name in names:
        print(f'== {name} ({time.strftime("%H:%M:%S")})', flush=True)
        t = time.time()
        try:
            res = run_scenario(name, specs[name], args, args.port)
        except Exception:
            traceback.print_exc()
            continue
        s = {'scenario': name, 'seconds': round(time.time() - t, 1), 'trace_bytes': res.get('trace_bytes'),
             'node': res['first_seen']['node'], 'gpus': res['first_seen']['gpus'], 'error': bool(res.get('error'))}
        summary.append(s)
        print(json.dumps(s), flush=True)
        with open(os.path.join(args.outdir, 'summary.json'), 'w') as f:
            json.dump(summary, f, indent=1)


if __name__ == '__main__':
    main()
