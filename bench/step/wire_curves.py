"""Loss curves of zerostate-worker's built-in MLP (configs/mlp.textproto, one
node of 2 threads) on the plain wire and on the int8 wire
(--gradient_wire=int8 --weight_wire=int8, docs/wire.md), same data and seed,
through a real zerostate-server on loopback over its TCP data plane
(--data_shm=false: the same-host plane would bypass the int8 wire). Writes
every step's loss as JSON (LOGS/wire_mlp.json) and an SVG plot
(OUT/wire_mlp.svg), and prints each wire's mean loss over the last 20 steps
and int8's ratio to plain's:

  /usr/bin/python3 bench/step/wire_curves.py [--build build] [--out docs/img]
      [--logs bench/results/wire-2026-12-06] [--steps 200]

Needs build/server/zerostate-server and build/worker/zerostate-worker."""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from dpu_curves import ROOT, run_mlp, svg_plot, tail_mean, zs_servers  # noqa: E402

WIRES = [("plain", "plain wire (fp32)", "#1f5fbf", []),
         ("int8", "int8 wire, error feedback", "#d9480f",
          ["--gradient_wire=int8", "--weight_wire=int8"])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "img"))
    ap.add_argument("--logs", default=os.path.join(ROOT, "bench", "results", "wire-2026-12-06"))
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.logs, exist_ok=True)
    os.environ.setdefault("ZEROSTATE_SERVER",
                          os.path.join(args.build, "server", "zerostate-server"))
    server = zs_servers.start(1, args=["--threads=2", f"--ram_budget_bytes={1 << 30}"])[0]
    curves = {}
    try:
        for name, _, _, flags in WIRES:
            curves[name] = run_mlp(args.build, server, args.steps, -1, f"wire-mlp-{name}",
                                   ["--data_shm=false", *flags])
    finally:
        server.stop()
    with open(os.path.join(args.logs, "wire_mlp.json"), "w") as f:
        json.dump(curves, f, indent=1)
    svg_plot(os.path.join(args.out, "wire_mlp.svg"),
             f"MLP (configs/mlp.textproto), {args.steps} steps, rank 0's loss", "step", "loss",
             [(label, curves[n]["steps"], curves[n]["loss"], colour)
              for n, label, colour, _ in WIRES], log_y=True)
    base = tail_mean(curves["plain"])
    print(json.dumps({"figure": "wire_mlp", "steps": args.steps,
                      "mean_loss_last_20": {n: round(tail_mean(c), 6) for n, c in curves.items()},
                      "ratio_to_plain": {n: round(tail_mean(c) / base, 5)
                                         for n, c in curves.items()},
                      "seconds": {n: round(c["seconds"], 1) for n, c in curves.items()}}))


if __name__ == "__main__":
    main()
