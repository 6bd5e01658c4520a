#!/usr/bin/env python3
"""The figures of bench/step/device_ab.sh, one JSON object per line as
step_bench prints them:
  ab.<mode>_<wire>_step_ms          median over the rounds of each round's
                                    median ms per step (--skip steps left
                                    out of each)
  ab.fsdp2_offload_<wire>_step_ms   the same of FSDP2's step
  ab.ratio.<mode>_<wire>.vs.fsdp2_offload_<wire>
                                    FSDP2's median / ours (above 1: ours is
                                    faster)
  ab.paired.<mode>_<wire>.vs.default
                                    median over the rounds of default's ms
                                    / this mode's ms in the same round
                                    (above 1: this mode is faster; only
                                    when default is among the modes)
  ab.paired.<mode>_<wire>.vs.<mode>_prev
                                    when <mode>_prev (the same flags, an
                                    earlier worker) ran too: median over the
                                    rounds of its ms / <mode>'s ms (above 1:
                                    the worker under test is faster)
  device_ab_summary.py --out DIR --batch 64 --rounds 4 --modes "..." --wires "..."
"""
import argparse
import os
import statistics

from step_logs import emit, figure_value, worker_steps

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--batch", type=int, required=True)
p.add_argument("--skip", type=int, default=2)
p.add_argument("--rounds", type=int, required=True)
p.add_argument("--modes", required=True)
p.add_argument("--wires", required=True)
a = p.parse_args()


def round_ms(mode, wire, r):
    """Median ms per step of one run, or None."""
    steps = worker_steps(os.path.join(a.out, f"{mode}_{wire}_r{r}.log"), a.skip)
    return statistics.median(a.batch / s * 1e3 for s, _ in steps) if steps else None


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


rounds = range(1, a.rounds + 1)
for wire in a.wires.split():
    peer = median((figure_value(os.path.join(a.out, f"fsdp2_{wire}_r{r}.json"), "_step") or 0) * 1e3
                  or None for r in rounds)
    emit(f"ab.fsdp2_offload_{wire}_step_ms", peer, "ms", rounds=a.rounds)
    modes = a.modes.split()
    base = {r: round_ms("default", wire, r) for r in rounds}
    for mode in modes:
        runs = {r: round_ms(mode, wire, r) for r in rounds}
        ours = median(runs.values())
        emit(f"ab.{mode}_{wire}_step_ms", ours, "ms",
             runs=[None if v is None else round(v, 2) for v in runs.values()])
        if ours and peer:
            emit(f"ab.ratio.{mode}_{wire}.vs.fsdp2_offload_{wire}", peer / ours, "x", peer, peer / ours)
        if mode != "default" and "default" in modes:
            paired = median(base[r] / runs[r] if base[r] and runs[r] else None for r in rounds)
            emit(f"ab.paired.{mode}_{wire}.vs.default", paired, "x", 1.0, paired)
        if f"{mode}_prev" in modes:
            prev = {r: round_ms(f"{mode}_prev", wire, r) for r in rounds}
            paired = median(prev[r] / runs[r] if prev[r] and runs[r] else None for r in rounds)
            emit(f"ab.paired.{mode}_{wire}.vs.{mode}_prev", paired, "x", 1.0, paired)
