"""Loss curves of examples/gpt's small GPT on the CPU with the optimizer
moments stored as fp32, bf16 and int8 (JobSpec.moment_format), same data
and seed, through a real zerostate-server on loopback. Writes every step's
loss as JSON (LOGS/moments_gpt.json) and an SVG plot (OUT/moments_gpt.svg),
and prints each format's mean loss over the last 20 steps and its ratio to
fp32's:

  /usr/bin/python3 bench/step/moment_curves.py [--build build] [--out docs/img]
      [--logs bench/results] [--steps 2000] [--parallel] [--formats fp32,int8]

--budget_s S: first 40 steps of each format (as a probe of the time a
step takes here, startup apart), then as many steps as fit in what is
left of S seconds, at most --steps (the figure says how many ran).

--formats: only these formats (fp32, bf16, int8; all three by default); the
ratios need fp32 among them.

--parallel: the formats at once, each with a server of its own
(--threads=4) and 4 OpenMP threads, for a host with 16 cores or more. The
schedule (WarmupDecayLR) decays over max(--steps, 1000) steps, so a longer
run does not train on at a learning rate of 0.

Needs build/server/zerostate-server, torch and build/client/
libzerostate_client.so (as the Python tests do)."""

import argparse
import concurrent.futures
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from dpu_curves import ROOT, gpt_ds_config, run_gpt, svg_plot, tail_mean, zs_servers  # noqa: E402

FORMATS = [("MOMENTS_FP32", "fp32 moments", "#1f5fbf"),
           ("MOMENTS_BF16", "bf16 moments", "#2b8a3e"),
           ("MOMENTS_INT8", "int8 moments", "#d9480f")]


def config_with(format_name, directory, steps):
    """examples/gpt's ds_config.json with the moment format set and the
    schedule over max(steps, its own) steps."""
    return gpt_ds_config(directory, format_name, steps,
                         {"zerostate": {"train": {"moment_format": format_name}}})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "img"))
    ap.add_argument("--logs", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--parallel", action="store_true")
    ap.add_argument("--budget_s", type=float, default=0)
    ap.add_argument("--formats", default="fp32,bf16,int8")
    ap.add_argument("--timeout_s", type=float, default=900,
                    help="each format's run is killed after this many seconds")
    args = ap.parse_args()
    wanted = args.formats.split(",")
    unknown = [f for f in wanted if "MOMENTS_" + f.upper() not in [n for n, _, _ in FORMATS]]
    if unknown:
        ap.error(f"--formats: {','.join(unknown)} is not one of fp32, bf16, int8")
    formats = [f for f in FORMATS if f[0] in ["MOMENTS_" + w.upper() for w in wanted]]
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.logs, exist_ok=True)
    os.environ.setdefault("ZEROSTATE_SERVER",
                          os.path.join(args.build, "server", "zerostate-server"))
    threads = 4 if args.parallel else 2
    os.environ["OMP_NUM_THREADS"] = str(threads)
    servers = zs_servers.start(len(formats) if args.parallel else 1,
                               args=[f"--threads={threads}", f"--ram_budget_bytes={1 << 30}"])
    curves = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            def run(k, steps, job):
                name = formats[k][0]
                server = servers[k % len(servers)]
                curve = run_gpt(args.build, server, steps, -1, f"{job}-{name.lower()}",
                                os.path.join(tmp, f"log-{name}.json"),
                                [f"--config={config_with(name, tmp, steps)}"],
                                timeout_s=args.timeout_s)
                curve["command"] = curve["command"].replace(tmp + os.sep, "")
                return name, curve

            def run_all(steps, job):
                workers = len(formats) if args.parallel else 1
                with concurrent.futures.ThreadPoolExecutor(workers) as pool:
                    return dict(pool.map(lambda k: run(k, steps, job), range(len(formats))))

            if args.budget_s > 0:
                probe = run_all(40, "probe")
                # The slowest format's seconds a step (its loop's own time,
                # from train.py's tokens/s) and around it (startup).
                loop = max(40 * 8 * 64 / c["summary"]["tokens_per_s"] for c in probe.values())
                probe_wall = max(c["seconds"] for c in probe.values())
                around = probe_wall - loop
                fit = int((args.budget_s - probe_wall - around) / (loop / 40)) // 100 * 100
                args.steps = max(100, min(args.steps, fit))
                print(json.dumps({"probe_seconds_per_step": round(loop / 40, 4),
                                  "startup_seconds": round(around, 1), "steps": args.steps}),
                      flush=True)
            curves = run_all(args.steps, "moments")
    finally:
        for server in servers:
            server.stop()
    with open(os.path.join(args.logs, "moments_gpt.json"), "w") as f:
        json.dump(curves, f, indent=1)
    svg_plot(os.path.join(args.out, "moments_gpt.svg"),
             f"GPT of examples/gpt (2 layers, d=64) on the CPU, {args.steps} steps, loss",
             "step", "loss",
             [(label, curves[n]["steps"], curves[n]["loss"], colour) for n, label, colour in formats])
    base = tail_mean(curves["MOMENTS_FP32"]) if "MOMENTS_FP32" in curves else float("nan")
    print(json.dumps({"figure": "moments_gpt", "steps": args.steps,
                      "mean_loss_last_20": {n: round(tail_mean(c), 6) for n, c in curves.items()},
                      "ratio_to_fp32": {n: round(tail_mean(c) / base, 5) for n, c in curves.items()},
                      "seconds": {n: round(c["seconds"], 1) for n, c in curves.items()}}))


if __name__ == "__main__":
    main()
