#!/usr/bin/env python3
"""The figures of one wire precision of bench/step/device_step.sh, one JSON
object per line as step_bench prints them: zerostate's median ms per step
(from the worker's progress lines, the first --skip steps left out) against
FSDP2's (ratio = fsdp2 / zerostate: above 1, zerostate is faster), the
worker's step parts (medians) and the server's step phases (means over the
job's calls, from zerostate_step_phase_seconds).
  device_step_summary.py --wire fp32 --batch 64 --worker_log LOG --metrics PAGE --job ID --fsdp2 JSON
                         [--mode speculative]
--mode names zerostate's mode (sync, the default, keeps the figure names
zerostate_<wire>_*; another mode's are zerostate_<wire>_<mode>_*, and the
FSDP2 figure is printed with sync only).
"""
import argparse, statistics

from step_logs import emit, figure_value, phase_means, worker_steps

p = argparse.ArgumentParser()
p.add_argument("--wire", required=True)
p.add_argument("--batch", type=int, required=True)
p.add_argument("--worker_log", required=True)
p.add_argument("--metrics", required=True)
p.add_argument("--job", required=True)
p.add_argument("--fsdp2", required=True)
p.add_argument("--skip", type=int, default=2)
p.add_argument("--mode", default="sync")
a = p.parse_args()

PARTS = ("compute", "exchange", "push", "step", "gather")
PHASES = ("wait_gradients", "grad_stats", "optimizer", "commit", "copy_on_write")


steps = worker_steps(a.worker_log, a.skip)
if not steps:
    raise SystemExit(f"{a.worker_log}: no progress lines past step {a.skip}")
zs_ms = statistics.median(a.batch / s * 1e3 for s, _ in steps)
peer = figure_value(a.fsdp2, "_step")
peer_ms = peer * 1e3 if peer else None
zs = f"zerostate_{a.wire}" if a.mode == "sync" else f"zerostate_{a.wire}_{a.mode}"
emit(f"{zs}_step_ms", zs_ms, "ms", peer_ms, peer_ms / zs_ms if peer_ms else None)
if a.mode == "sync":
    emit(f"fsdp2_offload_{a.wire}_step_ms", peer_ms, "ms")
for part in PARTS:
    values = [parts[part] for _, parts in steps if part in parts]
    if values:
        emit(f"{zs}_part_{part}_ms", statistics.median(values), "ms", zs_ms,
             statistics.median(values) / zs_ms)
for phase, sec in sorted(phase_means(a.metrics, a.job).items(), key=lambda kv: PHASES.index(kv[0])
                         if kv[0] in PHASES else len(PHASES)):
    emit(f"{zs}_server_{phase}_ms", sec * 1e3, "ms")
