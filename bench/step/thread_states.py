#!/usr/bin/env python3
"""Samples the state of every thread of a process (/proc/PID/task/*/stat)
every --period seconds until the process ends, --seconds pass or a
SIGTERM comes, then
prints --json figures: per thread (by TID, in creation order, with its
name) the share of samples it was running (R) and its CPU seconds, and,
over the samples where at least one of the
threads named --pool was running, how many of them were (the server's
pass pool, zs-pass: are its threads busy, or waiting?).
Then the same by thread name: `name.NAME.threads`, `.cpu_seconds` and
`.running` (the mean number of them running). --summarize FILE prints
those of an earlier output.
    python3 bench/step/thread_states.py --pid PID [--pool zs-pass] > states.json
    python3 bench/step/thread_states.py --summarize states.json
"""
import argparse
import collections
import json
import os
import signal
import time

ap = argparse.ArgumentParser()
ap.add_argument('--pid', type=int)
ap.add_argument('--summarize', help='an earlier output: print its figures by thread name')
ap.add_argument('--period', type=float, default=0.002)
ap.add_argument('--seconds', type=float, default=600)
ap.add_argument('--pool', default='zs-pass', help='the name of the pool threads')
args = ap.parse_args()


def emit(figure, value, unit, **extra):
    print(json.dumps(dict(figure=figure, value=value, unit=unit, **extra)))


def by_name(threads):
    """threads: (name, running share, cpu seconds) of each thread."""
    groups = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for name, share, seconds in threads:
        g = groups[name]
        g[0] += 1
        g[1] += seconds
        g[2] += share
    for name, (n, seconds, share) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        emit(f'name.{name}.threads', n, 'count')
        emit(f'name.{name}.cpu_seconds', round(seconds, 2), 's')
        emit(f'name.{name}.running', round(share, 3), 'threads')


if args.summarize:
    rows = [json.loads(line) for line in open(args.summarize)]
    by_name([(o['name'], o['value'], o['cpu_seconds']) for o in rows
             if o['figure'].startswith('thread.')])
    raise SystemExit(0)
if args.pid is None:
    ap.error('--pid or --summarize')

tick = os.sysconf('SC_CLK_TCK')
names, running, cpu = {}, collections.Counter(), {}
concurrent = collections.Counter()
samples = 0
end = time.time() + args.seconds
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
task_dir = f'/proc/{args.pid}/task'
while time.time() < end and not stop:
    try:
        tids = sorted(int(t) for t in os.listdir(task_dir))
    except FileNotFoundError:
        break
    states = {}
    for tid in tids:
        try:
            with open(f'{task_dir}/{tid}/stat') as f:
                stat = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue
        names.setdefault(tid, stat[stat.index('(') + 1:stat.rindex(')')])
        fields = stat[stat.rindex(')') + 2:].split()
        states[tid] = fields[0]
        cpu[tid] = (int(fields[11]) + int(fields[12])) / tick
        if fields[0] == 'R':
            running[tid] += 1
    samples += 1
    n = sum(states.get(t) == 'R' for t in tids if names.get(t) == args.pool)
    if n:
        concurrent[n] += 1
    time.sleep(args.period)

emit('samples', samples, 'count')
for tid in sorted(names):
    emit(f'thread.{tid}.running', running[tid] / max(samples, 1), 'share', name=names[tid],
         cpu_seconds=cpu.get(tid, 0))
busy = sum(concurrent.values())
emit('pool_samples_busy', busy, 'count')
for n in sorted(concurrent):
    emit(f'pool_running.{n}', concurrent[n] / max(busy, 1), 'share')
by_name([(names[t], running[t] / max(samples, 1), cpu.get(t, 0)) for t in names])
