"""The markdown tables of bench_gpt.py's --json output files (each one
model's runs): tokens/s as a fraction of DDP (on the CPU: torch AdamW) per system and accumulation,
delayed against FSDP2's offload, per zerostate mode the step, the
exposed waits, the compute, the floor and the bytes moved in place, and
where the step went (bench_gpt.py's breakdown; results without it print
"-" there), and the torch.profiler summaries it holds (--profile_steps).
A .log file (bench_gpt.py's stderr) gives the runs it logged, so a
process cut short still prints the runs it finished.

  python3 bench/torch/table.py RESULTS_DIR/*.json (or *.log)"""

import json
import sys


def ms(part, keys):
    """The ms of `part`'s `keys` (a dict of seconds) as a / b / c, or "-"."""
    if not part:
        return "-"
    return " / ".join(f"{1e3 * part[k]:.0f}" for k in keys)


def breakdown_row(label, z):
    e = z["exposed_s"]
    # Results from before the breakdown: the step less compute and waits.
    unaccounted = z.get("unaccounted_s", z["step_s"] - z["compute_s"] - sum(e.values()))
    return (f"| {label} | {1e3 * z['step_s']:.0f} | {1e3 * z['compute_s']:.0f} | "
            f"{ms(e, ('push', 'step', 'gather'))} | "
            f"{ms(z.get('stall_s'), ('stall_grads', 'stall_weights'))} | "
            f"{ms(z.get('host_s'), ('hooks', 'land', 'send_ahead', 'step_call'))} | "
            f"{ms(z.get('copy_s'), ('copy_d2h', 'copy_h2d'))} | {1e3 * unaccounted:.0f} |")


def runs_of(path):
    """The runs of a bench_gpt.py --json output, or those its log names."""
    with open(path) as f:
        if not path.endswith(".log"):
            return json.load(f)["runs"]
        return [json.loads(line.split("] run: ", 1)[1]) for line in f if "] run: " in line]


def profile_lines(label, p):
    top = "; ".join(f"{name} {ms:.1f} ({calls:g})" for name, ms, calls in p["top_ms"][:8])
    copies = ", ".join(f"{k} {v:.1f}" for k, v in p["memcpy_ms"].items()) or "none"
    return [f"{label}: ops {p['kernels_ms']:.1f} ms/step, copies {copies}, "
            f"{p['stream_waits']:g} stream waits/step", f"  top ms/step (calls): {top}"] + \
        idle_lines(p.get("idle"))


def idle_lines(idle):
    if not idle:
        return []
    gaps = "; ".join(f"{cause} {ms:.1f} ({n:g})" for cause, ms, n in idle["gaps_ms"])
    return [f"  compute stream busy {idle['busy_ms']:.1f} / idle {idle['idle_ms']:.1f} ms/step; "
            f"idle by cause, ms/step (gaps): {gaps}"]


def main(paths):
    rows, modes, parts, profiles = [], [], [], []
    for path in paths:
        for r in runs_of(path):
            t = r["tokens_per_s"]
            ddp = t.get("ddp", t.get("torch_adamw"))  # the CPU's peer: torch AdamW
            frac = {k: f"{v / ddp:.2f}" for k, v in t.items()}
            fsdp = t.get("fsdp2_offload_fused")
            rows.append(f"| {r['model']}, {r['accum']} | {ddp:,.0f} | "
                        f"{frac.get('fsdp2_offload_fused', '-')} | {frac.get('zerostate_sync', '-')} | "
                        f"{frac.get('zerostate_speculative', '-')} | "
                        f"{frac.get('zerostate_delayed', '-')} | "
                        + (f"{t['zerostate_delayed'] / fsdp:.2f} |"
                           if fsdp and "zerostate_delayed" in t else "- |"))
            for mode, z in r["zerostate"].items():
                e = z["exposed_s"]
                modes.append(
                    f"| {r['model']}, {r['accum']}, {mode} | {1e3 * z['step_s']:.0f} | "
                    f"{1e3 * e['push']:.0f} / {1e3 * e['step']:.0f} / {1e3 * e['gather']:.0f} | "
                    f"{100 * z['exposed_fraction']:.1f}% | {1e3 * z['compute_s']:.0f} | "
                    f"{1e3 * z['floor_s']:.0f} | {z['step_over_max_compute_floor']:.2f} | "
                    f"{z.get('in_place_fraction', float('nan')):.3f} | "
                    f"{z.get('direct_fraction') or float('nan'):.3f} |")
                parts.append(breakdown_row(f"{r['model']}, {r['accum']}, {mode}", z))
                if "profile" in z:
                    profiles += profile_lines(f"{r['model']}, {r['accum']}, {mode}", z["profile"])
    print("| model, accumulation | DDP tokens/s | FSDP2 offload | sync | speculative | delayed "
          "| delayed / FSDP2 |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    print()
    print("| model, accumulation, mode | step ms | exposed push / step / gather ms | exposed "
          "| compute ms | floor ms | step / max(compute, floor) | bytes in place "
          "| gathered by the pass |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(modes))
    print()
    print("| model, accumulation, mode | step ms | compute ms | waits push / step / gather ms | "
          "stalls grads / weights ms | host hooks / land / send-ahead / step call ms | "
          "copies d2h / h2d ms | unaccounted ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(parts))
    if profiles:
        print()
        print("\n".join(profiles))


if __name__ == "__main__":
    main(sys.argv[1:])
