#!/usr/bin/env python3
"""The pure-GPU reference for the worker's step (no offload): the same MLP
as zerostate-worker's built-in model, fp32 (no TF32), fused AdamW on the GPU,
one micro-batch per step. Prints one JSON object per figure, like step_bench.
  python3 bench/step/pure_gpu_step.py [--input 2048] [--hidden 8192,8192] [--output 2048] [--batch 64]
"""
import argparse, json, time
import torch

p = argparse.ArgumentParser()
p.add_argument("--input", type=int, default=2048)
p.add_argument("--hidden", default="8192,8192")
p.add_argument("--output", type=int, default=2048)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--steps", type=int, default=10)
a = p.parse_args()
torch.backends.cuda.matmul.allow_tf32 = False
dims = [a.input] + [int(h) for h in a.hidden.split(",")] + [a.output]
layers = []
for i in range(len(dims) - 1):
    layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
    if i + 2 < len(dims):
        layers.append(torch.nn.GELU(approximate="tanh"))
model = torch.nn.Sequential(*layers).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
x = torch.rand(a.batch, a.input, device="cuda") * 2 - 1
y = torch.tanh(torch.randn(a.batch, a.output, device="cuda"))
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
for fig, val, unit in [("params", params, "count"), ("pure_gpu_step", sec, "s"),
                       ("pure_gpu_samples_per_s", a.batch / sec, "samples/s")]:
    print(json.dumps({"figure": fig, "value": val, "unit": unit, "limit": None, "ratio": None}))
