"""Medians of the path ratios over every run of this folder (JSON lines of
replication_bench --json): python3 summary.py > summary.txt"""
import glob, json, os, statistics
here = os.path.dirname(os.path.abspath(__file__))
ratios = {}
for path in sorted(glob.glob(os.path.join(here, "path_*.json"))):
    for line in open(path):
        fig = json.loads(line)
        if fig["figure"] in ("replication.path.k1_ratio", "replication.path.k2_ratio"):
            ratios.setdefault(fig["figure"], []).append(fig["value"])
for figure, values in sorted(ratios.items()):
    print(f"{figure}: median {statistics.median(values):.3f} of {len(values)} runs: "
          + " ".join(f"{v:.3f}" for v in values))
