"""Loss curves on the plain wire and on the int8 wire (docs/wire.md), same
data and seed, through a real zerostate-server on loopback:

- --model mlp: zerostate-worker's built-in MLP (configs/mlp.textproto, one
  node of 2 threads), plain (fp32) against --gradient_wire=int8
  --weight_wire=int8, over its TCP data plane (--data_shm=false: the
  same-host plane would bypass the int8 wire);
- --model gpt: examples/gpt's small GPT on the CPU in bf16 (ds_config
  bf16.enabled), the bf16 wire against zerostate.wire int8 both ways, over
  gRPC (train.py --no_data_plane, for the same reason).

Writes every step's loss as JSON (LOGS/wire_MODEL.json) and an SVG plot
(OUT/wire_MODEL.svg), and prints each wire's mean loss over the last 20
steps and int8's ratio to the plain wire's:

  /usr/bin/python3 bench/step/wire_curves.py [--model mlp|gpt] [--build build]
      [--out docs/img] [--logs bench/results/wire-2026-12-06] [--steps 200]
      [--parallel] [--timeout 900]

Needs build/server/zerostate-server and build/worker/zerostate-worker
(mlp) or build/client/libzerostate_client.so and torch (gpt)."""

import argparse
import concurrent.futures
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from dpu_curves import (ROOT, gpt_ds_config, run_gpt, run_mlp, svg_plot, tail_mean,  # noqa: E402
                        zs_servers)

WIRES = {"mlp": [("plain", "plain wire (fp32)", "#1f5fbf", []),
                 ("int8", "int8 wire, error feedback", "#d9480f",
                  ["--gradient_wire=int8", "--weight_wire=int8"])],
         "gpt": [("bf16", "bf16 wire", "#1f5fbf", {}),
                 ("int8", "int8 wire, error feedback", "#d9480f",
                  {"gradients": "int8", "weights": "int8"})]}
TITLES = {"mlp": "MLP (configs/mlp.textproto), {steps} steps, rank 0's loss",
          "gpt": "GPT of examples/gpt (2 layers, d=64) on the CPU in bf16, {steps} steps, loss"}


def gpt_config(name, wire, directory, steps):
    """examples/gpt's ds_config.json in bf16 with zerostate.wire `wire`, as
    wire `name`'s; its path."""
    sections = {"bf16": {"enabled": True}, **({"zerostate": {"wire": wire}} if wire else {})}
    return gpt_ds_config(directory, name, steps, sections)


def run(args, server, name, wire, tmp):
    """One wire's curve."""
    if args.model == "mlp":
        return run_mlp(args.build, server, args.steps, -1, f"wire-mlp-{name}",
                       ["--data_shm=false", *wire])
    curve = run_gpt(args.build, server, args.steps, -1, f"wire-gpt-{name}",
                    os.path.join(tmp, f"log-{name}.json"),
                    [f"--config={gpt_config(name, wire, tmp, args.steps)}", "--no_data_plane",
                     f"--seed={args.seed}"],
                    timeout_s=args.timeout)
    curve["command"] = curve["command"].replace(tmp + os.sep, "")
    return curve


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(WIRES), default="mlp")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "img"))
    ap.add_argument("--logs", default=os.path.join(ROOT, "bench", "results", "wire-2026-12-06"))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--parallel", action="store_true",
                    help="both wires at once, each with a server of its own (one machine "
                         "load for both)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds a run may take")
    ap.add_argument("--seed", type=int, default=0, help="gpt: the initial weights' seed")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.logs, exist_ok=True)
    os.environ.setdefault("ZEROSTATE_SERVER",
                          os.path.join(args.build, "server", "zerostate-server"))
    wires = WIRES[args.model]
    servers = zs_servers.start(len(wires) if args.parallel else 1,
                               args=["--threads=2", f"--ram_budget_bytes={1 << 30}"])
    try:
        with tempfile.TemporaryDirectory() as tmp:
            with concurrent.futures.ThreadPoolExecutor(len(servers)) as pool:
                curves = dict(pool.map(
                    lambda k: (wires[k][0], run(args, servers[k % len(servers)], wires[k][0],
                                                 wires[k][3], tmp)), range(len(wires))))
    finally:
        for server in servers:
            server.stop()
    with open(os.path.join(args.logs, f"wire_{args.model}.json"), "w") as f:
        json.dump(curves, f, indent=1)
    svg_plot(os.path.join(args.out, f"wire_{args.model}.svg"),
             TITLES[args.model].format(steps=args.steps), "step", "loss",
             [(label, curves[n]["steps"], curves[n]["loss"], colour)
              for n, label, colour, _ in wires], log_y=True)
    base = tail_mean(curves[wires[0][0]])
    print(json.dumps({"figure": f"wire_{args.model}", "steps": args.steps,
                      "mean_loss_last_20": {n: round(tail_mean(c), 6) for n, c in curves.items()},
                      "ratio_to_plain": {n: round(tail_mean(c) / base, 5)
                                         for n, c in curves.items()},
                      "seconds": {n: round(c["seconds"], 1) for n, c in curves.items()}}))


if __name__ == "__main__":
    main()
