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
steps and int8's ratio to the plain wire's. For gpt, each of --seeds (the
initial weights' seed) is a pair of runs, and what is compared is the loss
on examples/gpt's fixed held-out batches (model.held_out_batches, the same
for every run; --eval_every steps and at the end), not one training
minibatch's: each seed's ratio at the last step, their mean, and the curves
of the held-out loss averaged over the seeds:

  /usr/bin/python3 bench/step/wire_curves.py [--model mlp|gpt] [--build build]
      [--out docs/img] [--logs bench/results/wire-2026-12-06] [--steps 200]
      [--parallel] [--timeout 900] [--seeds 0,1,2] [--eval_every 50]

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
                  {"wire": {"gradients": "int8", "weights": "int8"}})]}
# --wires (gpt), each a ds_config "zerostate" section and a factor on the
# peak lr: each direction alone, to tell which one moves the loss; the bf16
# wire at 1.0001x the lr, a perturbation with no bias to speak of, to tell
# how far any perturbation moves one seed's loss at the end.
GPT_ABLATIONS = {"int8_gradients": ("int8 gradients only", "#2b8a3e",
                                    {"wire": {"gradients": "int8"}}),
                 "int8_weights": ("int8 weights only", "#862e9c", {"wire": {"weights": "int8"}}),
                 "bf16_lr_nudged": ("bf16 wire, lr x 1.0001", "#495057", {"lr_scale": 1.0001})}
TITLES = {"mlp": "MLP (configs/mlp.textproto), {steps} steps, rank 0's loss",
          "gpt": "GPT of examples/gpt (2 layers, d=64), CPU, bf16: held-out loss, "
                 "mean of {seeds} seeds"}


def gpt_config(name, zerostate, directory, steps):
    """examples/gpt's ds_config.json in bf16 with the "zerostate" section
    `zerostate`, as wire `name`'s; its path."""
    zerostate = dict(zerostate)
    lr_scale = zerostate.pop("lr_scale", 1.0)
    sections = {"bf16": {"enabled": True}, **({"zerostate": zerostate} if zerostate else {})}
    path = gpt_ds_config(directory, name, steps, sections)
    if lr_scale != 1.0:
        with open(path) as f:
            config = json.load(f)
        config["optimizer"]["params"]["lr"] *= lr_scale
        config["scheduler"]["params"]["warmup_max_lr"] *= lr_scale
        with open(path, "w") as f:
            json.dump(config, f)
    return path


def run(args, server, name, wire, tmp, seed=0):
    """One wire's curve (gpt: of initial-weight seed `seed`)."""
    if args.model == "mlp":
        return run_mlp(args.build, server, args.steps, -1, f"wire-mlp-{name}",
                       ["--data_shm=false", *wire])
    curve = run_gpt(args.build, server, args.steps, -1, f"wire-gpt-{name}",
                    os.path.join(tmp, f"log-{name}.json"),
                    [f"--config={gpt_config(name, wire, tmp, args.steps)}", "--no_data_plane",
                     f"--seed={seed}", f"--eval_every={args.eval_every}"],
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
    ap.add_argument("--seeds", default="0",
                    help="gpt: the initial weights' seeds, comma-separated: a pair of runs each")
    ap.add_argument("--wires", default="",
                    help="gpt: the wires to run, bf16 first (default bf16,int8; also "
                         "int8_gradients, int8_weights, bf16_lr_nudged)")
    ap.add_argument("--eval_every", type=int, default=50,
                    help="gpt: steps between held-out evaluations")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.logs, exist_ok=True)
    os.environ.setdefault("ZEROSTATE_SERVER",
                          os.path.join(args.build, "server", "zerostate-server"))
    wires = WIRES[args.model]
    if args.model == "gpt" and args.wires:
        known = {w[0]: w for w in wires} | {n: (n, *v) for n, v in GPT_ABLATIONS.items()}
        unknown = [w for w in args.wires.split(",") if w not in known]
        if unknown or args.wires.split(",")[0] != "bf16":
            ap.error(f"--wires: bf16 first, then any of {sorted(known)}; not {unknown}")
        wires = [known[w] for w in args.wires.split(",")]
    servers = zs_servers.start(len(wires) if args.parallel else 1,
                               args=["--threads=2", f"--ram_budget_bytes={1 << 30}"])
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if args.model == "gpt":
                return gpt_seeds(args, servers, wires, tmp)
            curves = run_pair(args, servers, wires, tmp)
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


def run_pair(args, servers, wires, tmp, seed=0):
    """{wire name: curve} of one run per wire (at once with --parallel)."""
    with concurrent.futures.ThreadPoolExecutor(len(servers)) as pool:
        return dict(pool.map(
            lambda k: (wires[k][0], run(args, servers[k % len(servers)], f"{wires[k][0]}-s{seed}",
                                         wires[k][3], tmp, seed)), range(len(wires))))


def gpt_seeds(args, servers, wires, tmp):
    """Each seed's pair of runs; the held-out loss at the last step per seed
    and wire, int8's ratio per seed and their mean; the mean curves' plot."""
    seeds = [int(s) for s in args.seeds.split(",")]
    runs = {}
    for seed in seeds:
        runs[seed] = run_pair(args, servers, wires, tmp, seed)
        print(json.dumps({"seed": seed, "held_out_loss": {w: c["eval_loss"][-1]
                                                          for w, c in runs[seed].items()}}),
              flush=True)
    with open(os.path.join(args.logs, "wire_gpt.json"), "w") as f:
        json.dump({str(s): r for s, r in runs.items()}, f, indent=1)
    base = wires[0][0]
    series = []
    for name, label, colour, _ in wires:
        steps = runs[seeds[0]][name]["eval_steps"]
        mean = [sum(runs[s][name]["eval_loss"][i] for s in seeds) / len(seeds)
                for i in range(len(steps))]
        series.append((label, steps, mean, colour))
    svg_plot(os.path.join(args.out, "wire_gpt.svg"), TITLES["gpt"].format(seeds=len(seeds)),
             "step", "held-out loss", series, log_y=True)
    ratios = {name: {s: runs[s][name]["eval_loss"][-1] / runs[s][base]["eval_loss"][-1]
                     for s in seeds} for name, _, _, _ in wires[1:]}
    print(json.dumps({
        "figure": "wire_gpt", "steps": args.steps, "seeds": seeds,
        "held_out_loss_at_end": {s: {w: round(c["eval_loss"][-1], 6)
                                     for w, c in runs[s].items()} for s in seeds},
        "ratio_to_bf16": {n: {s: round(r, 5) for s, r in rs.items()} for n, rs in ratios.items()},
        "mean_ratio_to_bf16": {n: round(sum(rs.values()) / len(rs), 5)
                               for n, rs in ratios.items()},
        "max_ratio_to_bf16": {n: round(max(rs.values()), 5) for n, rs in ratios.items()},
        "seconds": {s: {w: round(c["seconds"], 1) for w, c in runs[s].items()} for s in seeds}}))


if __name__ == "__main__":
    main()
