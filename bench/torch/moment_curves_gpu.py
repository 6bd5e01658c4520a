"""The GPU twin of bench/step/moment_curves.py: GPT-2 small (124M,
GPT2LMHeadModel from config, bf16 compute, seq 256, micro-batch 8) trained
through zerostate.torch (synchronous step) with the optimizer moments
stored as fp32, bf16 and int8 (JobSpec.moment_format), same seed and data
(examples/gpt's synthetic_batch), the three at once on one GPU, each with a
state server of its own. Writes every step's loss (OUT/moments_gpt2.json),
an SVG (OUT/moments_gpt2.svg) and prints each format's mean loss over the
last 20 steps and its ratio to fp32's:

  python3 bench/torch/moment_curves_gpu.py --server_bin=.../zerostate-server \
      --out OUT [--steps 1000] [--limit_s 200]

--limit_s: each format stops after that many seconds of training; the
figure then compares the steps all three reached (it says how many).
--device=cpu --model=tiny: the check on a machine without a GPU."""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "bench", "step"))

from bench_gpt import MODELS, build, loss_of, start_servers  # noqa: E402
from dpu_curves import svg_plot  # noqa: E402
from model import param_groups, synthetic_batch  # noqa: E402

FORMATS = [("MOMENTS_FP32", "fp32 moments", "#1f5fbf"),
           ("MOMENTS_BF16", "bf16 moments", "#2b8a3e"),
           ("MOMENTS_INT8", "int8 moments", "#d9480f")]
TOKEN = "moment-curves-gpu-token".ljust(40, "x")


def train_one(args):
    """One format: one JSON line per step on stdout."""
    import zerostate.torch as zs
    spec = MODELS[args.model]
    device = torch.device(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        args.servers = 1
        procs, address = start_servers(args, tmp)
        try:
            torch.manual_seed(0)
            model = build(spec, device)
            config = {"optimizer": {"type": "AdamW", "params": {"lr": args.lr,
                                                                "weight_decay": 0.1}},
                      "bf16": {"enabled": device.type == "cuda"},
                      "zerostate": {"train": {"moment_format": args.one}}}
            engine, _, _, _ = zs.initialize(model=model, config=config, servers=address,
                                            job=f"curves-{args.one.lower()}",
                                            model_parameters=param_groups(model, 0.1),
                                            plaintext=True, token=TOKEN)
            t0 = time.perf_counter()
            for step in range(args.steps):
                x, y = synthetic_batch(step, spec["micro_batch"], spec["seq"], spec["vocab"],
                                       device)
                loss = loss_of(engine, x, y, spec)
                engine.backward(loss)
                engine.step()
                print(json.dumps({"step": step + 1, "loss": loss.item(),
                                  "seconds": time.perf_counter() - t0}), flush=True)
                if time.perf_counter() - t0 > args.limit_s:
                    break
            engine.close()
        finally:
            for p in procs:
                p.terminate()
                p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model", default="gpt2-124m", choices=sorted(MODELS))
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--limit_s", type=float, default=1e9)
    ap.add_argument("--server_bin",
                    default=os.path.join(ROOT, "build", "server", "zerostate-server"))
    ap.add_argument("--server_threads", type=int, default=max(1, (os.cpu_count() or 3) // 3))
    ap.add_argument("--out", default=".")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # a child: this format alone
    args = ap.parse_args()
    if args.one:
        return train_one(args)
    os.makedirs(args.out, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="2")
    children = {}
    for name, _, _ in FORMATS:
        argv = [sys.executable, os.path.abspath(__file__), f"--one={name}", *sys.argv[1:]]
        children[name] = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    curves = {}
    for name, p in children.items():
        rows = [json.loads(line) for line in p.stdout if line.startswith("{")]
        rc = p.wait()
        curves[name] = {"steps": [r["step"] for r in rows], "loss": [r["loss"] for r in rows],
                        "seconds": rows[-1]["seconds"] if rows else 0, "rc": rc}
    common = min(len(c["loss"]) for c in curves.values())
    spec = MODELS[args.model]
    with open(os.path.join(args.out, "moments_gpt2.json"), "w") as f:
        json.dump({"model": args.model, "spec": spec, "lr": args.lr, "curves": curves}, f)
    svg_plot(os.path.join(args.out, "moments_gpt2.svg"),
             f"{args.model} on {torch.cuda.get_device_name() if args.device == 'cuda' else 'cpu'}"
             f", {common} steps, loss", "step", "loss",
             [(label, curves[n]["steps"][:common], curves[n]["loss"][:common], colour)
              for n, label, colour in FORMATS])
    tail = {n: sum(c["loss"][common - 20:common]) / 20 for n, c in curves.items()} \
        if common >= 20 else {}
    base = tail.get("MOMENTS_FP32")
    print(json.dumps({"figure": "moments_gpt2", "model": args.model, "steps": common,
                      "mean_loss_last_20": {n: round(v, 6) for n, v in tail.items()},
                      "ratio_to_fp32": {n: round(v / base, 5) for n, v in tail.items()}
                      if base else {},
                      "seconds": {n: round(c["seconds"], 1) for n, c in curves.items()},
                      "rc": {n: c["rc"] for n, c in curves.items()}}))


if __name__ == "__main__":
    main()
