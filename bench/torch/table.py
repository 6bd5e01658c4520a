"""The markdown tables of bench_gpt.py's --json output files (each one
model's runs): tokens/s as a fraction of DDP (on the CPU: torch AdamW) per system and accumulation,
delayed against FSDP2's offload, and per zerostate mode the step, the
exposed waits, the compute, the floor and the bytes moved in place.

  python3 bench/torch/table.py RESULTS_DIR/*.json"""

import json
import sys


def main(paths):
    rows, modes = [], []
    for path in paths:
        with open(path) as f:
            result = json.load(f)
        for r in result["runs"]:
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
                    f"{z.get('in_place_fraction', float('nan')):.3f} |")
    print("| model, accumulation | DDP tokens/s | FSDP2 offload | sync | speculative | delayed "
          "| delayed / FSDP2 |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    print()
    print("| model, accumulation, mode | step ms | exposed push / step / gather ms | exposed "
          "| compute ms | floor ms | step / max(compute, floor) | bytes in place |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(modes))


if __name__ == "__main__":
    main(sys.argv[1:])
