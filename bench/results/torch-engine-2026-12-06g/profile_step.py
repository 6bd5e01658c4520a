"""Profiles zerostate's delayed step on Llama 1.1B (int8 moments): bench_gpt's
Run.loop patched to trace 3 steps after warmup with torch.profiler."""
import os, sys, time
sys.path.insert(0, os.path.join(os.getcwd(), "bench/torch"))
import torch
import bench_gpt as B
orig = B.Run.loop
def loop(self, step_fn, name):
    if not name.startswith("zerostate"):
        return orig(self, step_fn, name)
    for s in range(self.warmup + 2):
        step_fn(s)
    B.sync(self.device)
    from torch.profiler import profile, ProfilerActivity
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])) as prof:
        for s in range(self.warmup + 2, self.warmup + 5):
            step_fn(s)
        B.sync(self.device)
    dt = (time.perf_counter() - t0) / 3
    out = os.environ["PROF_OUT"]
    tag = f"{name}-accum{self.accum}"
    ka = prof.key_averages()
    with open(f"{out}/{tag}.txt", "w") as f:
        f.write(f"step {dt*1e3:.1f} ms (profiled)\n")
        f.write(ka.table(sort_by="self_cuda_time_total", row_limit=40) + "\n")
        f.write(ka.table(sort_by="self_cpu_time_total", row_limit=40) + "\n")
        f.write(ka.table(sort_by="cpu_time_total", row_limit=40) + "\n")
    pass
    t0 = time.perf_counter()
    for s in range(self.warmup + 5, self.warmup + 7):
        step_fn(s)
    B.sync(self.device)
    return self.tokens(2) / (time.perf_counter() - t0), (time.perf_counter() - t0) / 2
B.Run.loop = loop
B.main()
