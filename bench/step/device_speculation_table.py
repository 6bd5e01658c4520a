#!/usr/bin/env python3
"""device_speculation.sh's runs as one table: for each server entry
(NAME_ROUND) and wire, the synchronous and the speculative step (ms) and
their difference on that server (speculative minus synchronous: the same
server and minute, so the host's drift between entries cancels), then per
variant (NAME) the medians over its rounds. Run in the output directory:
    (cd OUT && python3 bench/step/device_speculation_table.py)
"""
import glob
import json
import os
import statistics


def step_ms(summary, mode, wire):
    for line in open(summary):
        o = json.loads(line)
        if o['figure'] == f'zerostate_{mode}_{wire}_step_ms':
            return o['value']
    return None


rows = []
for summary in sorted(glob.glob('*/summary.json')):
    entry = os.path.basename(os.path.dirname(summary))
    variant = entry.rsplit('_', 1)[0] if entry[-1].isdigit() else entry
    for wire in ('bf16', 'fp32'):
        sync, spec = step_ms(summary, 'sync', wire), step_ms(summary, 'speculative', wire)
        if spec is not None:
            rows.append((variant, entry, wire, sync, spec))


def cell(x):
    return '-' if x is None else '%.1f' % x


print('| server | wire | synchronous ms | speculative ms | speculative - synchronous |')
print('| --- | --- | --- | --- | --- |')
for variant, entry, wire, sync, spec in sorted(rows, key=lambda r: (r[2], r[0], r[1])):
    print(f'| {entry} | {wire} | {cell(sync)} | {cell(spec)} | '
          f'{cell(spec - sync if sync is not None else None)} |')
print()
print('| variant | wire | rounds | median speculative ms | median speculative - synchronous |')
print('| --- | --- | --- | --- | --- |')
for variant, wire in sorted({(r[0], r[2]) for r in rows}, key=lambda k: (k[1], k[0])):
    mine = [r for r in rows if r[0] == variant and r[2] == wire]
    diffs = [r[4] - r[3] for r in mine if r[3] is not None]
    print(f'| {variant} | {wire} | {len(mine)} | {cell(statistics.median(r[4] for r in mine))} | '
          f'{cell(statistics.median(diffs) if diffs else None)} |')
