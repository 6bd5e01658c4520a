"""Loss curves with and without the delayed parameter update,
through real zerostate-server processes on loopback:

  - the built-in MLP: zerostate-worker with configs/mlp.textproto (one node
    of --local_threads=2), synchronous, then with --delayed_update_warmup;
  - a small transformer: examples/gpt/train.py (2 layers, d=64, seq 64, on
    the CPU) through zerostate.torch, synchronous, then with
    --delayed_warmup.

Each pair writes its loss per step as JSON (LOGS/dpu_<model>.json) and an
SVG plot drawn here, without matplotlib (OUT/dpu_<model>.svg):

  /usr/bin/python3 bench/step/dpu_curves.py [--build build] [--out docs/img]
      [--logs bench/results/dpu-2026-12-01] [--mlp_steps 200] [--gpt_steps 300] [--warmup 10]

Needs build/server/zerostate-server, build/worker/zerostate-worker and, for
the transformer, torch and build/client/libzerostate_client.so (as the
Python tests do)."""

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

import zs_servers  # noqa: E402

PROGRESS = re.compile(r"^step (\d+) loss ([0-9.eE+-]+|nan|inf)")


def shown(argv):
    """The command as the docs show it: paths relative to the checkout."""
    return " ".join(a.replace(ROOT + os.sep, "") for a in argv)


def run_mlp(build, server, steps, warmup, job, extra=()):
    """Rank 0's loss per step of the built-in MLP (one node, 2 threads);
    `extra`: more zerostate-worker flags."""
    argv = [os.path.join(build, "worker", "zerostate-worker"),
            f"--config={os.path.join(ROOT, 'configs', 'mlp.textproto')}",
            f"--servers={server.address}", "--plaintext", f"--steps={steps}",
            f"--job_id={job}", "--local_threads=2", "--metrics_port=0", *extra]
    if warmup >= 0:
        argv.append(f"--delayed_update_warmup={warmup}")
    t0 = time.time()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {out.returncode}: {out.stderr[-2000:]}")
    losses = {}
    for line in out.stdout.splitlines():
        m = PROGRESS.match(line)
        if m:
            losses[int(m.group(1))] = float(m.group(2))
    steps_seen = sorted(losses)
    return {"command": shown(argv[1:]), "seconds": time.time() - t0, "steps": steps_seen,
            "loss": [losses[s] for s in steps_seen]}


def run_gpt(build, server, steps, warmup, job, log, extra=(), timeout_s=900):
    """Rank 0's loss per step of examples/gpt on the CPU; `extra`: more
    arguments for train.py; `timeout_s`: the run's limit."""
    argv = [sys.executable, os.path.join(ROOT, "examples", "gpt", "train.py"),
            f"--servers={server.address}", "--plaintext", f"--steps={steps}", f"--job={job}",
            f"--loss_log={log}", "--json", *extra]
    if warmup >= 0:
        argv.append(f"--delayed_warmup={warmup}")
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    env.setdefault("ZEROSTATE_CLIENT_LIB", os.path.join(build, "client", "libzerostate_client.so"))
    t0 = time.time()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {out.returncode}: {out.stderr[-2000:]}")
    with open(log) as f:
        curve = json.load(f)
    os.unlink(log)
    curve.update(command=shown(argv[1:]), seconds=time.time() - t0)
    lines = out.stdout.strip().splitlines()
    if lines:  # train.py's summary: the training loop's own tokens/s
        curve["summary"] = json.loads(lines[-1])
    return curve


def gpt_ds_config(directory, name, steps, sections):
    """examples/gpt's ds_config.json with `sections` (top-level keys) set
    and its schedule over max(steps, its own) steps, written to
    directory/ds_config_<name>.json; its path."""
    with open(os.path.join(ROOT, "examples", "gpt", "ds_config.json")) as f:
        config = json.load(f)
    config.update(sections)
    params = config["scheduler"]["params"]
    params["total_num_steps"] = max(steps, params["total_num_steps"])
    path = os.path.join(directory, f"ds_config_{name}.json")
    with open(path, "w") as f:
        json.dump(config, f)
    return path


# ----- SVG -----

def nice_ticks(lo, hi, n=5):
    """About n round tick values covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    first = math.ceil(lo / step) * step
    ticks, v = [], first
    while v <= hi + 1e-12 * abs(hi):
        ticks.append(round(v, 12))
        v += step
    return ticks


def fmt(v):
    return f"{v:g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.0e}"


def svg_plot(path, title, xlabel, ylabel, series, log_y=False):
    """A line chart of series [(label, xs, ys, colour)] as an SVG file."""
    w, h, left, right, top, bottom = 720, 420, 70, 20, 40, 60
    pw, ph = w - left - right, h - top - bottom
    xs = [x for _, sx, _, _ in series for x in sx]
    ys = [y for _, _, sy, _ in series for y in sy if math.isfinite(y) and (y > 0 or not log_y)]
    ty = (lambda y: math.log10(y)) if log_y else (lambda y: y)
    x0, x1 = min(xs), max(xs)
    y0, y1 = ty(min(ys)), ty(max(ys))
    pad = (y1 - y0) * 0.05 or 0.5
    y0, y1 = y0 - pad, y1 + pad

    def px(x):
        return left + (x - x0) / ((x1 - x0) or 1) * pw

    def py(y):
        return top + (1 - (ty(y) - y0) / ((y1 - y0) or 1)) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="22" text-anchor="middle" font-size="15">{title}</text>']
    for t in nice_ticks(x0, x1):
        out.append(f'<line x1="{px(t):.1f}" y1="{top}" x2="{px(t):.1f}" y2="{top + ph}" '
                   'stroke="#e4e4e4"/>')
        out.append(f'<text x="{px(t):.1f}" y="{top + ph + 16}" text-anchor="middle">{fmt(t)}</text>')
    if log_y:
        yticks = [10 ** e * m for e in range(math.floor(y0) - 1, math.ceil(y1) + 1)
                  for m in (1, 2, 5) if y0 <= math.log10(10 ** e * m) <= y1]
    else:
        yticks = nice_ticks(y0, y1)
    for t in yticks:
        out.append(f'<line x1="{left}" y1="{py(t):.1f}" x2="{left + pw}" y2="{py(t):.1f}" '
                   'stroke="#e4e4e4"/>')
        out.append(f'<text x="{left - 6}" y="{py(t) + 4:.1f}" text-anchor="end">{fmt(t)}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" '
               'stroke="#444"/>')
    out.append(f'<text x="{left + pw / 2}" y="{h - 18}" text-anchor="middle">{xlabel}</text>')
    out.append(f'<text x="16" y="{top + ph / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {top + ph / 2})">{ylabel}{" (log)" if log_y else ""}</text>')
    for i, (label, sx, sy, colour) in enumerate(series):
        pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(sx, sy)
                       if math.isfinite(y) and (y > 0 or not log_y))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.4" '
                   'stroke-opacity="0.85"/>')
        ly = top + 16 + 18 * i
        out.append(f'<line x1="{left + pw - 190}" y1="{ly - 4}" x2="{left + pw - 165}" '
                   f'y2="{ly - 4}" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{left + pw - 160}" y="{ly}">{label}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def tail_mean(curve, n=20):
    last = curve["loss"][-n:]
    return sum(last) / len(last)


def plot(path_svg, path_json, title, curves, warmup, log_y):
    with open(path_json, "w") as f:
        json.dump(curves, f, indent=1)
    svg_plot(path_svg, title, "step", "loss",
             [("synchronous", curves["synchronous"]["steps"], curves["synchronous"]["loss"],
               "#1f5fbf"),
              (f"delayed update (warm-up {warmup})", curves["delayed"]["steps"],
               curves["delayed"]["loss"], "#d9480f")], log_y=log_y)
    figures = {k: round(tail_mean(c), 6) for k, c in curves.items()}
    print(json.dumps({"figure": os.path.basename(path_svg), "mean_loss_last_20": figures,
                      "seconds": {k: round(c["seconds"], 1) for k, c in curves.items()}}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "img"))
    ap.add_argument("--logs", default=os.path.join(ROOT, "bench", "results", "dpu-2026-12-01"))
    ap.add_argument("--mlp_steps", type=int, default=200)
    ap.add_argument("--gpt_steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--skip_gpt", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.logs, exist_ok=True)
    os.environ.setdefault("ZEROSTATE_SERVER",
                          os.path.join(args.build, "server", "zerostate-server"))
    server = zs_servers.start(1, args=["--threads=2", f"--ram_budget_bytes={1 << 30}"])[0]
    try:
        mlp = {"synchronous": run_mlp(args.build, server, args.mlp_steps, -1, "dpu-mlp-sync"),
               "delayed": run_mlp(args.build, server, args.mlp_steps, args.warmup,
                                  "dpu-mlp-delayed")}
        plot(os.path.join(args.out, "dpu_mlp.svg"), os.path.join(args.logs, "dpu_mlp.json"),
             "MLP (configs/mlp.textproto), rank 0's loss", mlp, args.warmup, True)
        if args.skip_gpt:
            return
        log = os.path.join(args.logs, ".dpu_gpt_run.json")
        gpt = {"synchronous": run_gpt(args.build, server, args.gpt_steps, -1, "dpu-gpt-sync",
                                      log),
               "delayed": run_gpt(args.build, server, args.gpt_steps, args.warmup,
                                  "dpu-gpt-delayed", log)}
        plot(os.path.join(args.out, "dpu_gpt.svg"), os.path.join(args.logs, "dpu_gpt.json"),
             "GPT of examples/gpt (2 layers, d=64) on the CPU, loss", gpt, args.warmup, False)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
