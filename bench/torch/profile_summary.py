"""A short summary of a few training steps under torch.profiler, for
bench_gpt.py --profile_steps: per step, the operations that took the most
device time (on the CPU: CPU time), the host-device copies by direction,
the compute stream's waits for other streams (cudaStreamWaitEvent
calls; their stalls are timeline.py's stall_* figures), and on a GPU
where the compute stream sat idle (idle_gaps()) and why."""

import bisect
import json
import os
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile


def _self_time_us(row, gpu):
    """An averaged row's own time in microseconds: on the device (its
    attribute's name changed in torch 2.4), or on the CPU."""
    if not gpu:
        return row.self_cpu_time_total
    for name in ("self_device_time_total", "self_cuda_time_total"):
        if hasattr(row, name):
            return getattr(row, name)
    return 0.0


def profile_steps(step_fn, first, steps, gpu, top=12):
    """Runs step_fn(first), ..., step_fn(first + steps - 1) under the
    profiler and returns {"top_ms": [[name, ms per step, calls per step]],
    "memcpy_ms": {kind: ms per step}, "stream_waits": calls per step,
    "kernels_ms": own time of every op but the copies, per step (on a GPU
    the compute stream's busy time, besides the side streams' few
    kernels)}."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    with profile(activities=activities) as prof:
        for s in range(first, first + steps):
            step_fn(s)
        if gpu:
            torch.cuda.synchronize()
    idle = None
    if gpu:
        with tempfile.TemporaryDirectory() as tmp:
            trace = os.path.join(tmp, "trace.json")
            prof.export_chrome_trace(trace)
            with open(trace) as f:
                idle = idle_gaps(json.load(f)["traceEvents"], steps)
    rows = prof.key_averages()
    timed = [(r.key, _self_time_us(r, gpu) / 1e3 / steps, r.count / steps) for r in rows]
    timed = [t for t in timed if t[1] > 0]
    timed.sort(key=lambda t: -t[1])
    memcpy = {}
    for name, ms, _ in timed:
        if name.startswith(("Memcpy", "Memset")):
            memcpy[name] = memcpy.get(name, 0.0) + ms
    waits = sum(r.count for r in rows if r.key == "cudaStreamWaitEvent") / steps
    kernels = sum(ms for n, ms, _ in timed if not n.startswith(("Memcpy", "Memset")))
    return {"top_ms": [[n, round(ms, 3), round(c, 1)] for n, ms, c in timed[:top]],
            "memcpy_ms": {k: round(v, 3) for k, v in memcpy.items()},
            "stream_waits": waits, "kernels_ms": round(kernels, 3),
            **({"idle": idle} if idle is not None else {})}


DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
HOST_CATS = ("cpu_op", "user_annotation", "python_function")
SCAN_BACK = 4000  # host ops looked at before a launch for those around it


def idle_gaps(events, steps, least_us=100, top=12):
    """Where the busiest stream (the compute stream) of a chrome trace's
    device work sat idle, per step: its busy and idle milliseconds over
    the profiled window, and the idle gaps of at least `least_us` grouped
    by cause. A gap whose next kernel was launched after the gap began is
    the host's: named by the innermost host op around that launch on the
    launching thread, with the outermost one (e.g. an autograd node, the
    optimizer's step). One launched earlier waited on the device (an
    event of another stream): "device wait". Returns {"busy_ms",
    "idle_ms", "gaps_ms": [[cause, ms per step, gaps per step]]}."""
    by_stream = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS:
            by_stream.setdefault(e.get("args", {}).get("stream", e.get("tid")), []).append(e)
    if not by_stream:
        return {"busy_ms": 0.0, "idle_ms": 0.0, "gaps_ms": []}
    work = max(by_stream.values(), key=lambda es: sum(e["dur"] for e in es))
    work.sort(key=lambda e: e["ts"])
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {})}
    host = {}  # thread -> its host ops, by start
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in HOST_CATS:
            host.setdefault(e["tid"], []).append(e)
    starts = {}
    for tid, es in host.items():
        es.sort(key=lambda e: e["ts"])
        starts[tid] = [e["ts"] for e in es]
    causes, busy, idle = {}, 0.0, 0.0
    end = work[0]["ts"]
    for e in work:
        gap = e["ts"] - end
        if gap > 0:
            idle += gap
            if gap >= least_us:
                cause = _cause(e, end, launches, host, starts)
                ms, n = causes.get(cause, (0.0, 0))
                causes[cause] = (ms + gap / 1e3, n + 1)
        busy += max(0.0, e["ts"] + e["dur"] - max(e["ts"], end))
        end = max(end, e["ts"] + e["dur"])
    ranked = sorted(causes.items(), key=lambda kv: -kv[1][0])[:top]
    return {"busy_ms": round(busy / 1e3 / steps, 3), "idle_ms": round(idle / 1e3 / steps, 3),
            "gaps_ms": [[c, round(ms / steps, 3), round(n / steps, 1)] for c, (ms, n) in ranked]}


def _cause(kernel, gap_start, launches, host, starts):
    """Why the compute stream was idle until `kernel`: see idle_gaps()."""
    launch = launches.get(kernel.get("args", {}).get("correlation"))
    if launch is None:
        return "unknown launch"
    if launch["ts"] + launch.get("dur", 0) <= gap_start:
        return "device wait"
    tid, at = launch["tid"], launch["ts"]
    es, ts = host.get(tid, []), starts.get(tid, [])
    i = bisect.bisect_right(ts, at)
    around = [e for e in es[max(0, i - SCAN_BACK):i] if e["ts"] + e["dur"] >= at]
    if not around:
        return f"host: {launch['name']}"
    outer = min(around, key=lambda e: e["ts"])["name"]
    inner = max(around, key=lambda e: e["ts"])["name"]
    return f"host: {outer[:60]} > {inner[:60]}" if outer != inner else f"host: {inner[:60]}"
