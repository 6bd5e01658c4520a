#!/usr/bin/env python3
"""Merges the timelines of a zerostate-worker and its same-host servers
(each run with --timeline=FILE: JSON lines of CLOCK_MONOTONIC events,
common/timeline.h) and prints, per step of the worker, when each thing
happened in milliseconds from the worker's step start, one JSON object
per step, then the median of each over the steps (`"step": "median"`):

  compute_end        the backward done (the worker's micro-batches)
  gpu_forward_end / gpu_backward_end / gpu_d2h_last
                     with the CUDA backend: when the GPU finished the
                     forward's last layer, the backward's first layer, and
                     the last gradient copy out (host functions queued on
                     its streams, cuda_backend.cc MarkOnStream)
  push_first/last    the worker's first and last bucket push issued
  fold_first/last    the servers' first and last piece folded (or landed
                     in place) of that step's gradients
  speculate_first/last  the first speculation begun, the last ended
  pushes_acked       the worker saw every push acknowledged
  step_sent          the coordinator sent the Step (after GradStats)
  server_step_begin / server_gradients_in / server_step_end
                     the servers' Step: arrived, every block complete,
                     answered (the pass, or the speculations' commits)
  step_answered      the coordinator got the answer
  gather_first/last  the servers' first and last gather piece of the new
                     version
  land_first_begin / land_last_gathered
                     the next forward's first landing wait begun, its
                     last bucket's gather in hand
  gpu_h2d_last / gpu_next_forward_end
                     the next forward's last weights on the GPU, and its
                     last layer done (CUDA backend)
  worker_step_end    the step ends (the next starts right after)

The worker's step s runs from its worker_step_begin to the next step's;
a server's events of step s are those of its Step s and, for folds and
speculations, those between the worker's step s start (or Step s-1's
end, if later) and Step s's end; a server's events outside the worker's span are left out (other
jobs'). Missing events print as null.
    python3 bench/step/timeline.py worker.jsonl server.jsonl [...] > steps.json
"""
import json
import statistics
import sys


def load(paths):
    """Every file's events, the servers' (files without worker steps) only
    within the workers' span: a server that ran other jobs before or after
    (device_all.sh runs one job after another on one server) adds none of
    theirs, its events carrying no job."""
    files = []
    for path in paths:
        with open(path) as f:
            events = []
            for line in f:
                e = json.loads(line)
                if e.get('what') == 'dropped':
                    print(f'timeline.py: {path}: {e["a"]} events dropped', file=sys.stderr)
                    continue
                events.append(e)
        files.append(events)
    worker = [e['t_ns'] for events in files for e in events if e['what'] == 'worker_step_begin']
    if not worker:
        sys.exit('timeline.py: no worker_step_begin in any file (a zerostate-worker --timeline file?)')
    span = (min(worker), max(e['t_ns'] for events in files for e in events
                             if any(x['what'] == 'worker_step_begin' for x in events)))
    out = []
    for events in files:
        is_worker = any(e['what'] == 'worker_step_begin' for e in events)
        out += [e for e in events if is_worker or span[0] <= e['t_ns'] <= span[1]]
    out.sort(key=lambda e: e['t_ns'])
    return out


def steps_of(events):
    begins = {e['a']: e['t_ns'] for e in events if e['what'] == 'worker_step_begin'}
    out = []
    for s in sorted(begins):
        t0 = begins[s]
        t_next = begins.get(s + 1)
        server_end = max((e['t_ns'] for e in events if e['what'] == 'step_end' and e['a'] == s),
                         default=None)

        def ms(t):
            return None if t is None else round((t - t0) / 1e6, 3)

        def first(what, a=None, lo=t0, hi=None, last=False, key='a'):
            ts = [e['t_ns'] for e in events if e['what'] == what and (a is None or e[key] == a)
                  and e['t_ns'] >= lo and (hi is None or e['t_ns'] <= hi)]
            if not ts:
                return None
            return max(ts) if last else min(ts)

        within = server_end if server_end is not None else t_next
        # The Step before may end after this step began (layer by layer
        # landing): its folds and speculations are not this step's.
        after = max([t0] + [e['t_ns'] for e in events if e['what'] == 'step_end' and e['a'] == s - 1])
        row = {
            'step': s,
            'compute_end': ms(first('compute_end', s)),
            'push_first': ms(first('push_bucket', s, key='b')),
            'push_last': ms(first('push_bucket', s, key='b', last=True)),
            'fold_first': ms(first('fold_end', lo=after, hi=within)),
            'fold_last': ms(first('fold_end', lo=after, hi=within, last=True)),
            'speculate_first': ms(first('speculate_begin', lo=after, hi=within)),
            'speculate_last': ms(first('speculate_end', lo=after, hi=within, last=True)),
            'pushes_acked': ms(first('pushes_acked', s)),
            'step_sent': ms(first('step_sent', s)),
            'server_step_begin': ms(first('step_begin', s)),
            'server_gradients_in': ms(first('step_gradients_in', s, last=True)),
            'server_step_end': ms(server_end),
            'step_answered': ms(first('step_answered', s)),
            'gather_first': ms(first('gather_piece', s + 1, key='b')),
            'gather_last': ms(first('gather_piece', s + 1, key='b', last=True)),
            'worker_step_end': ms(first('worker_step_end', s)),
        }
        compute_end = first('compute_end', s)
        row['gpu_forward_end'] = ms(first('gpu_forward_layer', hi=compute_end, last=True))
        row['gpu_backward_end'] = ms(first('gpu_backward_layer', 0, hi=compute_end))
        row['gpu_d2h_last'] = ms(first('gpu_d2h', hi=first('pushes_acked', s), last=True))
        # The next forward's landings: in the worker's next step, before
        # its own compute ends.
        if t_next is not None:
            hi = first('compute_end', s + 1, lo=t_next)
            row['land_first_begin'] = ms(first('land_begin', lo=t_next, hi=hi))
            row['land_last_gathered'] = ms(first('land_gathered', lo=t_next, hi=hi, last=True))
            row['gpu_h2d_last'] = ms(first('gpu_h2d', lo=t_next, hi=hi, last=True))
            row['gpu_next_forward_end'] = ms(first('gpu_forward_layer', lo=t_next, hi=hi, last=True))
        out.append(row)
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = steps_of(load(sys.argv[1:]))
    for row in rows:
        print(json.dumps(row))
    if rows:
        median = {'step': 'median'}
        for k in rows[0]:
            if k == 'step':
                continue
            vals = [r[k] for r in rows if r.get(k) is not None]
            median[k] = round(statistics.median(vals), 3) if vals else None
        print(json.dumps(median))


if __name__ == '__main__':
    main()
