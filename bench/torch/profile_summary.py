"""A short summary of a few training steps under torch.profiler, for
bench_gpt.py --profile_steps: per step, the operations that took the most
device time (on the CPU: CPU time), the host-device copies by direction,
and the compute stream's waits for other streams (cudaStreamWaitEvent
calls; their stalls are timeline.py's stall_* figures)."""

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
            "stream_waits": waits, "kernels_ms": round(kernels, 3)}
