#!/usr/bin/python3
"""Prints the table of README.md from the runs' JSON files in this folder:
python3 summarize.py [FOLDER]."""
import glob
import json
import os
import sys

folder = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
cols = [("path.step_k0_ms", "path k0 ms"), ("path.step_k1_ms", "path k1 ms"),
        ("path.k1_ratio", "path k1/k0"), ("path.k1_ratio_p25", "p25"),
        ("path.k1_ratio_p75", "p75"), ("path.k2_ratio", "path k2/k0"),
        ("path.k1_backups_ms", "k1 backups ms"), ("inside.k1_ratio_vs_bound", "inside k1/bound"),
        ("failover_s", "failover s")]
print("| run | " + " | ".join(c[1] for c in cols) + " | run's CPU s | page faults |")
print("|" + " --- |" * (len(cols) + 3))
for path in sorted(glob.glob(os.path.join(folder, "*.json")),
                   key=lambda p: (p.rsplit("-", 1)[-1], p)):
    fig = {}
    with open(path) as f:
        for line in f:
            if line.startswith("{"):
                d = json.loads(line)
                fig[d["figure"].removeprefix("replication.")] = d["value"]
    cells = ["%.3g" % fig[k] if k in fig else "-" for k, _ in cols]
    # perf stat -x, of the run (bench and servers), where there is one
    stat = os.path.join(folder, "stat-" + os.path.basename(path)[:-5] + ".txt")
    counts = {}
    if os.path.exists(stat):
        for line in open(stat):
            f = line.strip().split(",")
            if len(f) > 2 and not line.startswith("#"):
                counts[f[2]] = float(f[0])
    cells.append("%.1f" % (counts["task-clock"] / 1e3) if "task-clock" in counts else "-")
    cells.append("%d" % counts["page-faults"] if "page-faults" in counts else "-")
    print("| %s | %s |" % (os.path.basename(path)[:-5], " | ".join(cells)))

# Per kind of run (the name less its number): the runs' median k1 and k2
# path ratios with their range.
groups = {}
for path in glob.glob(os.path.join(folder, "*.json")):
    fig = {}
    with open(path) as f:
        for line in f:
            if line.startswith("{"):
                d = json.loads(line)
                fig[d["figure"]] = d["value"]
    group = os.path.basename(path)[:-5].rsplit("-", 1)[0]
    groups.setdefault(group, []).append(fig)
print()
for group, figs in sorted(groups.items()):
    cells = []
    for k in (1, 2):
        v = sorted(f["replication.path.k%d_ratio" % k] for f in figs)
        cells.append("k%d path ratio median %.2f (%.2f-%.2f)" % (k, v[len(v) // 2], v[0], v[-1]))
    print("- %s, %d runs: %s" % (group, len(figs), "; ".join(cells)))

# The alternated pairs path-main-N, path-new-N: in how many the new
# server's path ratio is the lower, and the pairs' median page faults.
def Figures(name):
    fig = {}
    with open(os.path.join(folder, name + ".json")) as f:
        for line in f:
            if line.startswith("{"):
                d = json.loads(line)
                fig[d["figure"]] = d["value"]
    return fig

pairs = sorted(int(p.rsplit("-", 1)[1][:-5]) for p in glob.glob(os.path.join(folder, "path-new-*.json"))
               if os.path.exists(p.replace("path-new-", "path-main-")))
for k in (1, 2):
    fig = "replication.path.k%d_ratio" % k
    lower = [n for n in pairs if Figures("path-new-%d" % n)[fig] < Figures("path-main-%d" % n)[fig]]
    print("- k%d path ratio: the new server's lower in %d of %d pairs" % (k, len(lower), len(pairs)))
