"""Each bench_gpt.py JSON's tokens/s of every system over its own
process's DDP (or torch_adamw), one line per file and round: for
device_ab.sh's runs, where table.py folds runs of one model together.
  python3 bench/torch/ab_ratios.py OUT/*/*/*.json"""
import json
import sys

for path in sys.argv[1:]:
    for run in json.load(open(path))["runs"]:
        for r, tps in enumerate(zip(*run["tokens_per_s_rounds"].values())):
            by = dict(zip(run["tokens_per_s_rounds"], tps))
            peers = [k for k in ("ddp", "torch_adamw") if k in by]
            ratios = {k: round(v / by[peers[0]], 3) for k, v in by.items() if k not in peers}
            print(f"{path} accum {run['accum']} round {r + 1}: {ratios}")
