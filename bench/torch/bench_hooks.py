"""The gradient hooks' work at gradient accumulation 4 under the delayed
update, on the CPU: the Llama 1.1B shape (22 layers, d 2048, GQA 32/4,
ffn 5632, vocab 32000, untied head: 201 tensors) with every width divided
by --scale (32: d 64, k/v 8 wide, ffn 176, vocab 1000; 1024x fewer
elements), block_elems and bucket_elems (bench_gpt.py's 2^25) divided by
its square, so the bucket plan cuts it about as it cuts the full model.
One token per micro-batch: what is left is the hooks' work per call,
which does not shrink with the model. Prints the buckets, the adds
of a gradient into a bucket (Bucket.take) per micro-batch, the pushes
(Bucket.push) per step, and per micro-batch the milliseconds in the hooks
(engine._grad_ready: the adds, and at the boundary the pushes) and in
forward + backward, medians over --rounds runs of --steps timed steps;
per step the milliseconds of the whole step and of the engine's push wait
(engine.timers: the waits for pushes on the training thread).

  python3 bench/torch/bench_hooks.py --json   (from a build tree's root)"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_gpt import ROOT, start_servers  # noqa: E402

import zerostate.torch as zs  # noqa: E402
from zerostate.torch import buckets as bk  # noqa: E402

LAYERS = 22
D = KV = FFN = VOCAB = ACCUM = 0  # set by --scale and --accum


def rms(x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k = nn.Linear(D, D, bias=False), nn.Linear(D, KV, bias=False)
        self.v, self.o = nn.Linear(D, KV, bias=False), nn.Linear(D, D, bias=False)
        self.gate, self.up = nn.Linear(D, FFN, bias=False), nn.Linear(D, FFN, bias=False)
        self.down = nn.Linear(FFN, D, bias=False)
        self.n1, self.n2 = nn.Parameter(torch.ones(D)), nn.Parameter(torch.ones(D))

    def forward(self, x):
        h = rms(x) * self.n1
        x = x + self.q(h) + self.o(h) + (self.k(h) * self.v(h)).sum(-1, keepdim=True)
        h = rms(x) * self.n2
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = nn.Parameter(torch.ones(D))
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, x):
        h = self.emb(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(rms(h) * self.norm)


class Counted:
    """Counts and times calls of Bucket.take and Bucket.push."""

    def __init__(self):
        self.calls, self.seconds = {}, {}
        for name in ("take", "push"):
            self._wrap(name, getattr(bk.Bucket, name))

    def _wrap(self, name, method):
        def wrapped(bucket, *args, **kw):
            t0 = time.perf_counter()
            try:
                return method(bucket, *args, **kw)
            finally:
                self.calls[name] = self.calls.get(name, 0) + 1
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
        setattr(bk.Bucket, name, wrapped)

    def reset(self):
        self.calls, self.seconds = {}, {}


def run(args, addresses, job, counted):
    torch.manual_seed(0)
    model = Model()
    config = {"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
              "gradient_accumulation_steps": ACCUM,
              "zero_optimization": {"delayed_update": {"enabled": True, "warmup_steps": 1}},
              "zerostate": {"train": {"block_elems": 262144 // args.scale ** 2}}}
    engine, _, _, _ = zs.initialize(model=model, config=config, servers=addresses, job=job,
                                    plaintext=True, lazy_weights=True,
                                    bucket_elems=(1 << 25) // args.scale ** 2)
    hooks = [0.0]
    ready = engine._grad_ready

    def timed_ready(*a):
        t0 = time.perf_counter()
        ready(*a)
        hooks[0] += time.perf_counter() - t0
    engine._grad_ready = timed_ready
    x = torch.randint(0, VOCAB, (1, 1))
    by_micro = [0.0] * ACCUM
    fwd_bwd = 0.0
    for s in range(args.warmup + args.steps):
        if s == args.warmup:
            counted.reset()
            by_micro, fwd_bwd = [0.0] * ACCUM, 0.0
            pushed, start = engine.timers["push_wait"], time.perf_counter()
        for m in range(ACCUM):
            h0, t0 = hooks[0], time.perf_counter()
            engine.backward(engine(x).float().logsumexp(-1).mean())
            fwd_bwd += time.perf_counter() - t0
            by_micro[m] += hooks[0] - h0
            engine.step()
    n = args.steps
    out = {"buckets": len(engine._buckets), "tensors": len(list(model.parameters())),
           "takes_per_micro_batch": counted.calls.get("take", 0) / (n * ACCUM),
           "pushes_per_step": counted.calls.get("push", 0) / n,
           "hooks_ms_by_micro_batch": [1e3 * v / n for v in by_micro],
           "fwd_bwd_ms_per_micro_batch": 1e3 * fwd_bwd / (n * ACCUM),
           "step_ms": 1e3 * (time.perf_counter() - start) / n,
           "push_wait_ms_per_step": 1e3 * (engine.timers["push_wait"] - pushed) / n}
    engine.sync_weights()
    engine.close()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=int, default=32, help="divides the widths (16 or 32)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--server_threads", type=int, default=2)
    ap.add_argument("--server_bin",
                    default=os.path.join(ROOT, "build", "server", "zerostate-server"))
    ap.add_argument("--accum", type=int, default=4, help="gradient accumulation steps")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    args.servers = 1
    global D, KV, FFN, VOCAB, ACCUM
    ACCUM = args.accum
    D, KV, FFN, VOCAB = 2048 // args.scale, 256 // args.scale, 5632 // args.scale, \
        32000 // args.scale
    torch.set_num_threads(1)
    counted = Counted()
    with tempfile.TemporaryDirectory() as tmp:
        torch.distributed.init_process_group("gloo", init_method=f"file://{tmp}/pg", rank=0,
                                             world_size=1)
        procs, addresses = start_servers(args, tmp)
        try:
            runs = [run(args, addresses, f"hooks-{r}", counted) for r in range(args.rounds)]
        finally:
            for p in procs:
                p.terminate()
                p.wait()
    result = {k: runs[0][k] for k in ("tensors", "buckets", "takes_per_micro_batch",
                                      "pushes_per_step")}
    result["hooks_ms_by_micro_batch"] = [
        statistics.median(r["hooks_ms_by_micro_batch"][m] for r in runs) for m in range(ACCUM)]
    result["hooks_ms_per_step"] = sum(result["hooks_ms_by_micro_batch"])
    for k in ("fwd_bwd_ms_per_micro_batch", "step_ms", "push_wait_ms_per_step"):
        result[k] = statistics.median(r[k] for r in runs)
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k}: {v}")


if __name__ == "__main__":
    main()
