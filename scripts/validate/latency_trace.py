#!/usr/bin/env python3
"""Where a starting job's verdict latency goes, on a real GPU, for docs/performance.md.

Usage: latency_trace.py BINARY OUTDIR
First the idle daemon's CPU over 60 s under --debug.cpu-profile
(OUTDIR/idle.pprof). Then the daemon with --record=OUTDIR/trace.gdr and a
GIL-bound input pipeline started four times on the idle GPU, 30 s each, 20 s
apart; for each, the job's own marks (spawned, torch imported, first kernel),
/metrics every 0.25 s and /diagnose (class, pending, evidence) every second,
and how long after the first kernel GPU 0 was named host-bound. Writes
OUTDIR/latency_trace.json. The trace is the one under testdata/latency/.
"""
import json, os, subprocess, sys, time, urllib.request
binary, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cost_latency as cl
# cost_latency's GIL-bound pipeline, marking when it was spawned, when torch
# was imported and when its first kernel had run.
STARVED = ("import time, sys\nprint('spawned', time.time(), flush=True)\n" +
           cl.STARVED.replace("import torch, time, sys\n", "import torch\nprint('imported', time.time(), flush=True)\n", 1)
                     .replace("print('first-kernel'", "torch.cuda.synchronize()\nprint('first-kernel'", 1))
def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()
cpu_seconds = cl.cpu_seconds
# 1) idle profile of the daemon, 70 s
addr = '127.0.0.1:19911'
d = subprocess.Popen([binary, f'--web.listen-address={addr}', f'--debug.cpu-profile={out}/idle.pprof'], stdout=open(f'{out}/idle.log','w'), stderr=subprocess.STDOUT)
time.sleep(10); c0, t0 = cpu_seconds(d.pid), time.time(); time.sleep(60)
idle = (cpu_seconds(d.pid) - c0) / (time.time() - t0)
d.terminate(); d.wait()
print('idle cpu', idle, flush=True)
# 2) latency timeline with a trace
addr = '127.0.0.1:19910'
d = subprocess.Popen([binary, f'--web.listen-address={addr}', f'--record={out}/trace.gdr'], stdout=open(f'{out}/daemon.log','w'), stderr=subprocess.STDOUT)
time.sleep(20)
runs = []
for i in range(4):
    t_spawn = time.time()
    job = subprocess.Popen([sys.executable, '-c', STARVED, '30'], stdout=subprocess.PIPE, text=True)
    marks = {'popen': t_spawn}
    for _ in range(3):
        k, v = job.stdout.readline().split(); marks[k] = float(v)
    polls, diags, named = [], [], None
    last_diag = 0
    while time.time() < marks['first-kernel'] + 25:
        now = time.time()
        cls = sub = None
        for line in get(f'http://{addr}/metrics').splitlines():
            if line.startswith('gpudiag_gpu_bottleneck_info{') and 'gpu="0"' in line:
                cls = line.split('class="')[1].split('"')[0]; sub = line.split('sub_kind="')[1].split('"')[0]
        polls.append((round(now - marks['first-kernel'], 2), cls, sub))
        if named is None and cls == 'host':
            named = now - marks['first-kernel']
        if now - last_diag >= 1:
            last_diag = now
            try:
                g = json.loads(get(f'http://{addr}/diagnose?format=json'))['gpus'][0]
                diags.append({'t': round(now - marks['first-kernel'], 2), 'class': g.get('class'), 'sub': g.get('sub_kind'), 'pending': g.get('pending'),
                              'evidence': [(e.get('signal'), e.get('value')) for e in g.get('evidence', [])]})
            except Exception as e:
                diags.append({'t': round(now - marks['first-kernel'], 2), 'err': str(e)})
        time.sleep(0.25)
    job.kill(); job.wait()
    runs.append({'marks': marks, 'named_after': named, 'polls': polls, 'diags': diags})
    print('run', i, 'named', named, 'import', marks['imported'] - marks['spawned'], 'ctx+kernel', marks['first-kernel'] - marks['imported'], flush=True)
    time.sleep(20)
d.terminate(); d.wait()
json.dump({'idle_cpu': idle, 'runs': runs}, open(f'{out}/latency_trace.json', 'w'), indent=1)
