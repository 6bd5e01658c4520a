"""How closely each way of sending the weights as int8 lets examples/gpt's
trainer track the exact master, and what each does to the held-out loss
after training: a simulation in one process, without servers, to choose
how the int8 gather should change before building it.

It trains examples/gpt as train.py --reference=1 does (torch's AdamW on an
fp32 master, the ds_config's clipping and schedule), but runs each step's
forward and backward on a bf16 model rebuilt from a simulated gather of the
master's bf16 copy (what a weight_dtype bf16 job's servers quantize), laid
out as the job's layout lays it (each tensor 64-aligned, groups counted from
a tensor's start). The held-out loss (model.held_out_batches, every
--eval_every steps and at the end) is taken on that rebuilt model, as
train.py --eval_every takes it on the trainer's weights. The gathers:

- bf16: the bf16 copy itself (the bf16 wire);
- bf16_lr_nudged: the same at 1.0001x the lr (how far a perturbation with no
  bias moves one seed);
- int8: common/int8_wire.h's quantizer (64-element groups, the least power
  of two >= amax / 127, round half to even), afresh every version (the
  int8 wire as it is);
- int8_ef: error feedback kept with the master, per version:
  copy_t = Q(w_t + r_{t-1}), r_t = w_t + r_{t-1} - copy_t;
- int8_delta: the change against the trainer's copy, which the sender
  tracks: c_t = c_{t-1} + Q(w_t - c_{t-1}), c_{-1} = 0 (the trainer keeps c
  in fp32);
- int8_delta_bf16: the same with c kept in bf16, c_t = bf16(c_{t-1} +
  Q(w_t - c_{t-1})): the trainer's bf16 parameters are c itself;
- int8_g16: 16-element groups, power-of-two scales (1.0625 bytes per
  element);
- int8_bf16_scale: 64-element groups, a bf16 scale of amax / 127 rounded up
  (1.031 bytes per element; codes times a bf16 scale are exact in fp32).

Gradients are the bf16 model's, exact (the int8 gradients' error feedback
is not simulated: the measured runs put it inside the bias-free noise).

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/step/int8_gather_sim.py --seeds 0,4 --out RUNS.json

prints one JSON line per (seed, gather) and then the summary: the held-out
loss at the end, its ratio to the bf16 gather's, and the tracking error
(the root mean square of copy - bf16 copy over all steps and elements,
relative to the int8 gather's), and how far the ratio spreads over the
seeds. --summarize RUNS.json[,MORE.json] prints the summary of runs
written before."""

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
from model import GPT, held_out_batches, param_groups, synthetic_batch  # noqa: E402

ALIGN = 64  # common/job_spec.h kTensorAlignElems
MIN_ABSMAX = 2.0 ** -100  # common/int8_wire.h kInt8MinAbsmax


def quantize(x, group, scale_kind):
    """x (a whole number of `group`s, each inside one tensor) through int8
    groups: its dequantized values. scale_kind: "e8m0", the least power of
    two >= amax / 127 (common/int8_wire.h); "bf16", amax / 127 rounded up
    to a bf16."""
    g = x.view(-1, group)
    amax = g.abs().amax(1, keepdim=True)
    raw = amax / 127
    if scale_kind == "e8m0":
        scale = torch.where(raw > 0, 2.0 ** torch.ceil(torch.log2(raw)), raw)
    else:
        b = raw.bfloat16().float()
        # rounded up: the next bf16 above b is 2^16 fp32 ulps away
        scale = torch.where(b < raw, (b.view(torch.int32) + (1 << 16)).view(torch.float32), b)
    scale = torch.where(amax < MIN_ABSMAX, torch.zeros_like(scale), scale)
    inv = torch.where(scale > 0, 1 / scale, torch.zeros_like(scale))
    codes = torch.round(g * inv).clamp(-127, 127)
    return (codes * scale).view(-1)


class Gather:
    """One way of sending the master's bf16 copy: copy(w) per version, in
    version order (the int8_ef and int8_delta state moves with it)."""

    def __init__(self, kind):
        self.kind, self.state = kind, None

    def copy(self, w):
        k = self.kind
        if k in ("bf16", "bf16_lr_nudged"):
            return w
        if k == "int8":
            return quantize(w, 64, "e8m0")
        if k == "int8_g16":
            return quantize(w, 16, "e8m0")
        if k == "int8_bf16_scale":
            return quantize(w, 64, "bf16")
        if self.state is None:
            self.state = torch.zeros_like(w)
        if k == "int8_ef":
            v = w + self.state
            c = quantize(v, 64, "e8m0")
            self.state = v - c
            return c
        if k == "int8_delta":
            self.state = self.state + quantize(w - self.state, 64, "e8m0")
            return self.state
        if k == "int8_delta_bf16":
            self.state = (self.state + quantize(w - self.state, 64, "e8m0")).bfloat16().float()
            return self.state
        raise ValueError(f"gather: unknown kind {k!r}")


GATHERS = ["bf16", "bf16_lr_nudged", "int8", "int8_ef", "int8_delta", "int8_delta_bf16",
           "int8_g16", "int8_bf16_scale"]


def lr_factor(config):
    """The ds_config's WarmupDecayLR as a factor of the peak lr per step."""
    p = config["scheduler"]["params"]
    peak, warm, total = p["warmup_max_lr"], p["warmup_num_steps"], p["total_num_steps"]
    low = p.get("warmup_min_lr", 0.0)
    return lambda s: ((low + (peak - low) * (s + 1) / warm) / peak if s < warm
                      else 1.0 - min((s - warm) / (total - warm), 1.0))


def train(seed, kind, steps, eval_every):
    torch.set_num_threads(1)
    with open(os.path.join(ROOT, "examples", "gpt", "ds_config.json")) as f:
        config = json.load(f)
    config["scheduler"]["params"]["total_num_steps"] = steps
    p = config["optimizer"]["params"]
    lr = p["lr"] * (1.0001 if kind == "bf16_lr_nudged" else 1.0)
    torch.manual_seed(seed)
    master = GPT()
    model = GPT()
    model.load_state_dict(master.state_dict())
    model.bfloat16()
    opt = torch.optim.AdamW(param_groups(master, p["weight_decay"]), lr=lr,
                            betas=tuple(p["betas"]), eps=p["eps"])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(config))
    masters = list(master.parameters())
    params = list(model.parameters())
    sizes = [m.numel() for m in masters]
    padded = [n + (-n) % ALIGN for n in sizes]
    gather = Gather(kind)
    batches = held_out_batches(16, 8, 64, 256, "cpu")
    evals, sq_err, count = [], 0.0, 0
    t0 = time.time()
    for step in range(steps + 1):
        with torch.no_grad():
            w = torch.cat([torch.cat([m.detach().reshape(-1), m.new_zeros(n - m.numel())])
                           for m, n in zip(masters, padded)]).bfloat16().float()
            c = gather.copy(w)
            sq_err += float(((c - w) ** 2).sum())
            count += w.numel()
            at = 0
            for q, n, size in zip(params, padded, sizes):
                q.copy_(c[at:at + size].view_as(q))  # the trainer's bf16 parameters
                at += n
        if step % eval_every == 0 or step == steps:
            model.eval()
            with torch.no_grad():
                evals.append((step, sum(float(model(x, y)) for x, y in batches) / len(batches)))
            model.train()
        if step == steps:
            break
        model.zero_grad(set_to_none=True)
        x, y = synthetic_batch(step, 8, 64, 256, "cpu")
        model(x, y).backward()
        for m, q in zip(masters, params):
            m.grad = q.grad.float()
        torch.nn.utils.clip_grad_norm_(masters, config["gradient_clipping"])
        opt.step()
        sched.step()
    return {"seed": seed, "gather": kind, "held_out_loss": evals[-1][1],
            "eval_steps": [s for s, _ in evals], "eval_loss": [v for _, v in evals],
            "rms_copy_error": math.sqrt(sq_err / count), "seconds": round(time.time() - t0, 1)}


def read_runs(paths):
    """Runs written by --out (a JSON list) or printed whole (JSON lines)."""
    runs = []
    for path in paths:
        with open(path) as f:
            text = f.read().strip()
        runs += json.loads(text) if text.startswith("[") else [
            json.loads(line) for line in text.splitlines() if line.strip()]
    return runs


def summary(runs, seeds, gathers):
    """The held-out loss at the end as a ratio to the bf16 gather's per seed,
    its mean, largest deviation and spread over the seeds, and each gather's
    tracking error relative to the int8 gather's."""
    by = {(r["seed"], r["gather"]): r for r in runs}
    ratio = {g: {s: round(by[(s, g)]["held_out_loss"] / by[(s, "bf16")]["held_out_loss"], 5)
                 for s in seeds} for g in gathers[1:]}

    def spread(r):
        m = sum(r.values()) / len(r)
        return round(math.sqrt(sum((v - m) ** 2 for v in r.values()) / max(1, len(r) - 1)), 5)
    return {
        "figure": "int8_gather_sim", "seeds": seeds, "ratio_to_bf16": ratio,
        "mean_ratio_to_bf16": {g: round(sum(r.values()) / len(r), 5) for g, r in ratio.items()},
        "max_abs_deviation": {g: round(max(abs(v - 1) for v in r.values()), 5)
                              for g, r in ratio.items()},
        "stdev_over_seeds": {g: spread(r) for g, r in ratio.items()},
        "rms_copy_error": {g: sum(by[(s, g)]["rms_copy_error"] for s in seeds) / len(seeds)
                           for g in gathers},
        "rms_copy_error_vs_int8": ({g: round(sum(by[(s, g)]["rms_copy_error"] for s in seeds) /
                                             sum(by[(s, "int8")]["rms_copy_error"] for s in seeds),
                                             4) for g in gathers} if "int8" in gathers else {})}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="0,4")
    ap.add_argument("--gathers", default=",".join(GATHERS))
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--eval_every", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default="", help="writes every run's curve here (JSON)")
    ap.add_argument("--summarize", default="", metavar="FILES",
                    help="no training: the summary of the runs in these files (comma-separated: "
                         "--out's JSON lists, or runs as JSON lines)")
    args = ap.parse_args()
    gathers = args.gathers.split(",")
    unknown = [g for g in gathers if g not in GATHERS]
    if unknown or gathers[0] != "bf16":
        ap.error(f"--gathers: bf16 first, then any of {GATHERS}; not {unknown}")
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.summarize:
        runs = read_runs(args.summarize.split(","))
        have = {(r["seed"], r["gather"]) for r in runs}
        missing = [f"{g} seed {s}" for s in seeds for g in gathers if (s, g) not in have]
        if missing:
            ap.error(f"--summarize: no run of {missing}")
        print(json.dumps(summary(runs, seeds, gathers)))
        return
    runs = []
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(train, s, g, args.steps, args.eval_every)
                   for s in seeds for g in gathers]
        for f in futures:
            r = f.result()
            runs.append(r)
            print(json.dumps({k: r[k] for k in ("seed", "gather", "held_out_loss",
                                                "rms_copy_error", "seconds")}), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(runs, f)
    print(json.dumps({"steps": args.steps, **summary(runs, seeds, gathers)}))


if __name__ == "__main__":
    main()
