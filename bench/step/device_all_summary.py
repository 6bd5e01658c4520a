#!/usr/bin/env python3
"""The figures of bench/step/device_all.sh, one JSON object per line as
step_bench prints them (a missing run: value null and "missing" saying
why):
  zerostate_<mode>_<wire>_step_ms   median ms per step (progress lines, the
                                    first --skip steps left out), modes sync,
                                    speculative, delayed, sync_layer_buckets
                                    (synchronous, one bucket per layer),
                                    sync_whole_landing (that, and every
                                    weight landed at the step's end),
                                    sync_streams4 (synchronous, 4 streams
                                    per server, as before the same-host
                                    default of 8:
                                    --same_host_streams_per_server=0),
                                    sync_copied (synchronous, staging
                                    not shared: the client copies into
                                    and out of the segments,
                                    --shared_staging=false);
                                    wire fp32, bf16
  <peer>_step_ms                    fsdp2_offload_fp32, fsdp2_offload_bf16,
                                    pure_gpu (fp32)
  ratio.<mode>_<wire>.vs.<peer>     peer ms / ours (above 1: ours is faster),
                                    against FSDP2 at the same precision and
                                    against pure GPU
  host_bandwidth                    optimizer_bench's memory limit (best over
                                    its thread counts) x 30 B per parameter
  floor_<wire>.<stage>              bytes of memory traffic per parameter of
                                    each stage of our same-host path
  floor_<wire>_step_ms              those bytes x parameters / bandwidth
  path_floor.<wire>.*, pass_with_gathers.<wire>.pass
                                    path_floor_bench's figures (path_floor.json):
                                    the path's stages with the server's kernels
                                    and the GPU's copies, at once and in
                                    sequence (best_ms: the faster), and the
                                    pass with the gathers beside it
  ratio.<mode>_<wire>.to.floor      ours / the floor (1: at the floor)
  ratio.<mode>_<wire>.to.path_floor ours / path_floor.<wire>.best_ms
  ratio.<mode>_<wire>.to.path_scheduled
                                    sync and speculative: ours / the stages
                                    run with that mode's dependencies
                                    (path_floor.<wire>.scheduled_{sync,speculative}_ms;
                                    scheduled_ms in runs before it)
  zerostate_<mode>_<wire>.<part>_ms median ms of each part of the step in
                                    the worker's progress lines (compute,
                                    exchange, push, step, gather; with
                                    layer-by-layer landing the next forward's
                                    waits for weights count as gather)
  overlap.<mode>_<wire>             the longest part's median / the step's
                                    median (1: perfect overlap, 1/5: none)
  server_<mode>_<wire>.<phase>_ms   the server's mean ms per observation of
                                    each phase of the job's steps
                                    (zerostate_step_phase_seconds of
                                    metrics_<mode>_<wire>.txt: grad_stats,
                                    optimizer, commit, wait_gradients, ...)
  server_step.sync_<wire>           the server's optimizer pass inside the
                                    synchronous job: parameters / the mean
                                    `optimizer` phase, against
                                    optimizer_bench's memory limit (ratio;
                                    the target is 0.9); `traffic_ratio`:
                                    the host's memory traffic while the
                                    pass runs (the pass's bytes, and the
                                    gathers' and h2d bytes streamed out
                                    beside it) / the bandwidth: near 1, the
                                    pass shares the memory with the gathers
  same_losses.sync_{layer_buckets,whole_landing,streams4,copied}_<wire>
                                    1 when every step's loss (as printed) of
                                    that run equals the default synchronous
                                    run's, else 0: neither the bucket cut nor
                                    the landing may change a bit
  same_losses.<mode>_<wire>.vs.reference
                                    the same against the run of that name in
                                    --reference (a folder of an earlier run),
                                    where it has one: a change that must not
                                    change a bit (e.g. the CUDA overlap)
  device_all_summary.py --out DIR --batch 64 [--reference DIR]
"""
import argparse
import os
import statistics

from step_logs import emit, figure_value, figures, phase_means, worker_steps

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--batch", type=int, required=True)
p.add_argument("--skip", type=int, default=2)
p.add_argument("--reference", default="")
a = p.parse_args()

WIRES = ("fp32", "bf16")
MODES = ("sync", "speculative", "delayed", "sync_layer_buckets", "sync_whole_landing",
         "sync_streams4", "sync_copied")
# Bytes of memory traffic per parameter of each stage of a step on one
# host, the trainer on the GPU, the server on loopback over the same-host
# (shared memory) plane; read + write of host memory:
#   d2h       the GPU writes the gradient into pinned staging (bf16: the
#             GPU rounds it first, Backend::grad_staging)
#   push      the client copies it into the segment: 0 since the staging
#             is a shared buffer the server reads in place
#             (--shared_staging, the default; sync_copied runs without)
#   fold      the server folds node 0's piece from the staging into the sum
#   optimizer AdamW's pass: reads p, g, m, v, writes p, m, v (+ bf16 copy)
#   gather    the server copies the weights into the staging
#   unpack    the client copies them out of the segment: 0, as push
#   h2d       the GPU reads the weights from pinned staging (bf16: and
#             widens them itself)
STAGES = {
    "fp32": {"d2h": 4, "push": 0, "fold": 4 + 4, "optimizer": 16 + 12, "gather": 4 + 4,
             "unpack": 0, "h2d": 4},
    "bf16": {"d2h": 2, "push": 0, "fold": 2 + 4, "optimizer": 16 + 14, "gather": 2 + 2,
             "unpack": 0, "h2d": 2},
}
LIMIT_BYTES_PER_PARAM = 30  # optimizer_bench's TrafficPass


def path(name):
    return os.path.join(a.out, name)


def mlp_params():
    """Parameters of the MLP the run registered (a textproto of its runs)."""
    import glob
    import re
    with open(sorted(glob.glob(path("*.textproto")))[0]) as f:
        text = f.read()
    dims = [int(re.search(r"input_dim: (\d+)", text).group(1))]
    dims += [int(h) for h in re.search(r"hidden: \[([^\]]*)\]", text).group(1).split(",")]
    dims.append(int(re.search(r"output_dim: (\d+)", text).group(1)))
    return sum(dims[i] * dims[i + 1] + dims[i + 1] for i in range(len(dims) - 1))


def zs_ms(mode, wire):
    """(median ms per step, {part: median ms}, why missing)."""
    steps = worker_steps(path(f"{mode}_{wire}.log"), a.skip)
    if steps:
        names = sorted({k for _, parts in steps for k in parts})
        parts = {k: statistics.median(p.get(k, 0.0) for _, p in steps) for k in names}
        return statistics.median(a.batch / s * 1e3 for s, _ in steps), parts, None
    return None, {}, f"no progress lines past step {a.skip} in {mode}_{wire}.log"


def losses(name, folder=None):
    """[(step, loss text)] of the worker's progress lines in NAME.log (of
    --out, or of `folder`)."""
    import re
    try:
        with open(os.path.join(folder or a.out, f"{name}.log"), encoding="utf-8",
                  errors="replace") as f:
            return re.findall(r"^step (\d+) loss (\S+)", f.read(), re.M)
    except OSError:
        return []


def peer_ms(name, file, suffix):
    v = figure_value(path(file), suffix)
    if v is None:
        err = path(file.replace(".json", ".err"))
        why = "no figure"
        if os.path.exists(err):
            lines = [x for x in open(err, errors="replace").read().splitlines() if x.strip()]
            why = lines[-1][:200] if lines else why
        return None, f"{file}: {why}"
    return v * 1e3, None


def bandwidth():
    """Bytes/s: the best memory_limit over optimizer_bench's thread counts."""
    best = None
    for fig in figures(path("optimizer.json")):
        if fig["figure"].startswith("memory_limit.") and fig["value"]:
            best = max(best or 0, fig["value"])
    return best * LIMIT_BYTES_PER_PARAM if best else None


params = mlp_params()
emit("params", params, "count")
peers = {"fsdp2_offload_fp32": peer_ms("fsdp2", "fsdp2_fp32.json", "_step"),
         "fsdp2_offload_bf16": peer_ms("fsdp2", "fsdp2_bf16.json", "_step"),
         "pure_gpu": peer_ms("pure_gpu", "pure_gpu.json", "pure_gpu_step")}
for name, (ms, why) in peers.items():
    emit(f"{name}_step_ms", ms, "ms", **({"missing": why} if why else {}))
bw = bandwidth()
emit("host_bandwidth", bw / 1e9 if bw else None, "GB/s",
     **({} if bw else {"missing": "optimizer.json: no memory_limit figure"}))
floor = {}
for wire in WIRES:
    for stage, b in STAGES[wire].items():
        emit(f"floor_{wire}.{stage}", b, "B/param")
    total = sum(STAGES[wire].values())
    floor[wire] = total * params / bw * 1e3 if bw else None
    emit(f"floor_{wire}_step_ms", floor[wire], "ms", limit=None, ratio=None,
         bytes_per_param=total)
# The floor measured (path_floor_bench: the path's stages with the server's
# kernels and the GPU's copies, at once or in sequence, whichever is
# faster): what the host's memory gives these bytes.
measured, scheduled = {}, {}
for wire in WIRES:
    for fig in figures(path("path_floor.json")):
        if fig["figure"].startswith((f"path_floor.{wire}.", f"pass_with_gathers.{wire}.")):
            name = fig.pop("figure")
            emit(name, fig.pop("value"), fig.pop("unit"), fig.pop("limit"), fig.pop("ratio"), **fig)
    measured[wire] = figure_value(path("path_floor.json"), f"path_floor.{wire}.best_ms")
    # The speculative step's own schedule (no gather before every fold),
    # where path_floor_bench printed it (before: the chain's alone).
    speculative = (figure_value(path("path_floor.json"), f"path_floor.{wire}.scheduled_speculative_ms")
                   or figure_value(path("path_floor.json"), f"path_floor.{wire}.scheduled_ms"))
    scheduled[wire] = {"sync": figure_value(path("path_floor.json"), f"path_floor.{wire}.scheduled_sync_ms"),
                       "speculative": speculative}
for wire in WIRES:
    for mode in MODES:
        ours, parts, why = zs_ms(mode, wire)
        name = f"{mode}_{wire}"
        emit(f"zerostate_{name}_step_ms", ours, "ms", **({"missing": why} if why else {}))
        if ours is None:
            continue
        for part, ms in parts.items():
            emit(f"zerostate_{name}.{part}_ms", ms, "ms")
        if parts:
            longest = max(parts.values())
            emit(f"overlap.{name}", longest / ours, "x", ours, longest / ours,
                 longest_part=max(parts, key=parts.get))
        for peer in (f"fsdp2_offload_{wire}", "pure_gpu"):
            ms = peers[peer][0]
            emit(f"ratio.{name}.vs.{peer}", ms / ours if ms else None, "x", ms,
                 ms / ours if ms else None, **({} if ms else {"missing": peers[peer][1]}))
        if floor[wire]:
            emit(f"ratio.{name}.to.floor", ours / floor[wire], "x", floor[wire],
                 ours / floor[wire])
        if measured.get(wire):
            emit(f"ratio.{name}.to.path_floor", ours / measured[wire], "x", measured[wire],
                 ours / measured[wire])
        if scheduled.get(wire, {}).get(mode):
            ms = scheduled[wire][mode]
            emit(f"ratio.{name}.to.path_scheduled", ours / ms, "x", ms, ours / ms)
        for phase, seconds in sorted(phase_means(path(f"metrics_{name}.txt"), name).items()):
            emit(f"server_{name}.{phase}_ms", seconds * 1e3, "ms")
for wire in WIRES:
    pass_s = phase_means(path(f"metrics_sync_{wire}.txt"), f"sync_{wire}").get("optimizer")
    if pass_s and bw:
        rate, limit = params / pass_s, bw / LIMIT_BYTES_PER_PARAM
        beside = STAGES[wire]["gather"] + STAGES[wire]["h2d"]
        traffic = (STAGES[wire]["optimizer"] + beside) * params / pass_s
        emit(f"server_step.sync_{wire}", rate / 1e9, "G params/s", limit / 1e9, rate / limit,
             pass_ms=pass_s * 1e3, traffic_ratio=traffic / bw,
             bytes_per_param=STAGES[wire]["optimizer"], beside_bytes_per_param=beside)
for wire in WIRES:
    base = losses(f"sync_{wire}")
    for other in ("sync_layer_buckets", "sync_whole_landing", "sync_streams4", "sync_copied"):
        cut = losses(f"{other}_{wire}")
        if base and cut:
            emit(f"same_losses.{other}_{wire}", int(base == cut), "bool", steps=len(base))
    for mode in MODES:
        ours, ref = losses(f"{mode}_{wire}"), losses(f"{mode}_{wire}", a.reference) if a.reference else []
        if ours and ref:
            emit(f"same_losses.{mode}_{wire}.vs.reference", int(ours == ref), "bool", steps=len(ours),
                 reference=a.reference)
