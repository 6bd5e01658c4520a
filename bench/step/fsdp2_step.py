#!/usr/bin/env python3
"""The PyTorch peer of the offloaded step: the same MLP as zerostate-worker's
built-in model (bench/step/mlp_model.py), one process, FSDP2 `fully_shard`
per Linear and at the root with `CPUOffloadPolicy(pin_memory=True)`: the
parameters, gradients and optimizer state live in pinned host memory and
`torch.optim.AdamW(fused=True)` steps them on the CPU. fp32 without TF32;
`--bf16` adds `MixedPrecisionPolicy(param_dtype=torch.bfloat16)` (bf16
weights and gradients to and from the GPU, fp32 state). One micro-batch per
step; the median step counts. Prints one JSON object per figure, like
step_bench.
  python3 bench/step/fsdp2_step.py [--input 2048] [--hidden 8192,8192] [--output 2048] [--batch 64] [--bf16]
Needs PyTorch >= 2.6 (fully_shard and CPUOffloadPolicy in
torch.distributed.fsdp, fused CPU AdamW) and a GPU; --device cpu runs it on
the CPU over gloo, a check of the script rather than a figure.
"""
import argparse, os, time
import torch
import torch.distributed as dist
from mlp_model import add_model_args, batch, build_mlp, print_figures

p = argparse.ArgumentParser()
add_model_args(p)
p.add_argument("--warmup", type=int, default=3)
p.add_argument("--bf16", action="store_true")
p.add_argument("--device", default="cuda")
a = p.parse_args()

from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29517")
cuda = a.device == "cuda"
dist.init_process_group("nccl" if cuda else "gloo", rank=0, world_size=1)
if cuda:
    torch.cuda.set_device(0)
    torch.backends.cuda.matmul.allow_tf32 = False
model = build_mlp(a)
params = sum(t.numel() for t in model.parameters())
kw = {"offload_policy": CPUOffloadPolicy(pin_memory=cuda)}
if a.bf16:
    kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer, **kw)
fully_shard(model, **kw)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
x, y = batch(a, a.device)


def step():
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x).float(), y)
    loss.backward()
    opt.step()
    if cuda:
        torch.cuda.synchronize()


for _ in range(a.warmup):
    step()
times = []
for _ in range(a.steps):
    t0 = time.perf_counter()
    step()
    times.append(time.perf_counter() - t0)
sec = sorted(times)[len(times) // 2]
name = "fsdp2_offload_bf16" if a.bf16 else "fsdp2_offload"
print_figures([("params", params, "count"), (name + "_step", sec, "s"),
               (name + "_samples_per_s", a.batch / sec, "samples/s")])
dist.destroy_process_group()
