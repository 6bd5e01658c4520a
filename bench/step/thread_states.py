#!/usr/bin/env python3
"""Samples the state of every thread of a process (/proc/PID/task/*/stat)
every --period seconds until the process ends, --seconds pass or a
SIGTERM comes, then
prints --json figures: per thread (by TID, in creation order, with its
name) the share of samples it was running (R) and its CPU seconds, and,
over the samples where at least one of the
threads named --pool was running, how many of them were (the server's
pass pool, zs-pass: are its threads busy, or waiting?).
    python3 bench/step/thread_states.py --pid PID [--pool zs-pass] > states.json
"""
import argparse
import collections
import json
import os
import signal
import time

ap = argparse.ArgumentParser()
ap.add_argument('--pid', type=int, required=True)
ap.add_argument('--period', type=float, default=0.002)
ap.add_argument('--seconds', type=float, default=600)
ap.add_argument('--pool', default='zs-pass', help='the name of the pool threads')
args = ap.parse_args()

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


def emit(figure, value, unit, **extra):
    print(json.dumps(dict(figure=figure, value=value, unit=unit, **extra)))


emit('samples', samples, 'count')
for tid in sorted(names):
    emit(f'thread.{tid}.running', running[tid] / max(samples, 1), 'share', name=names[tid],
         cpu_seconds=cpu.get(tid, 0))
busy = sum(concurrent.values())
emit('pool_samples_busy', busy, 'count')
for n in sorted(concurrent):
    emit(f'pool_running.{n}', concurrent[n] / max(busy, 1), 'share')
