#!/usr/bin/env python3
"""The pure-GPU reference for the worker's step (no offload): the same MLP
as zerostate-worker's built-in model, fp32 (no TF32), fused AdamW on the GPU,
one micro-batch per step. Prints one JSON object per figure, like step_bench.
  python3 bench/step/pure_gpu_step.py [--input 2048] [--hidden 8192,8192] [--output 2048] [--batch 64]
"""
import argparse, time
import torch
from mlp_model import add_model_args, batch, build_mlp, print_figures

p = argparse.ArgumentParser()
add_model_args(p)
a = p.parse_args()
torch.backends.cuda.matmul.allow_tf32 = False
model = build_mlp(a).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
x, y = batch(a, "cuda")
params = sum(t.numel() for t in model.parameters())


def step():
    opt.zero_grad(set_to_none=False)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()


for _ in range(3):
    step()
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(a.steps):
    step()
torch.cuda.synchronize()
sec = (time.perf_counter() - t0) / a.steps
print_figures([("params", params, "count"), ("pure_gpu_step", sec, "s"),
               ("pure_gpu_samples_per_s", a.batch / sec, "samples/s")])
