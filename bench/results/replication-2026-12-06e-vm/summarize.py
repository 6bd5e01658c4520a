"""The A/B table of this folder: each run's replication_bench figures
(path-<server>-<N>.json), its CPU and page faults (stat-*.txt), then each
server's medians and the pairs in which this branch's ratio was lower.
Usage: python3 summarize.py [FOLDER]"""
import glob, os, re, statistics, sys

folder = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
cols = ["path.step_k0_ms", "path.step_k1_ms", "path.step_k2_ms", "path.k1_ratio",
        "path.k1_ratio_p25", "path.k1_ratio_p75", "path.k2_ratio", "path.k1_backups_ms",
        "path.k2_backups_ms", "path.k1_optimizer_ms"]


def figures(path):
    out = {}
    for line in open(path):
        if line.startswith("{"):
            import json
            f = json.loads(line)
            out[f["figure"].removeprefix("replication.")] = f["value"]
    return out


def stat(path):
    cpu = faults = None
    for line in open(path):
        parts = line.strip().split(",")
        if len(parts) > 2 and parts[2].startswith("task-clock"):
            cpu = float(parts[0]) / 1e3
        if len(parts) > 2 and parts[2].startswith("page-faults"):
            faults = int(parts[0])
    return cpu, faults


runs = {}
for path in glob.glob(f"{folder}/path-*.json"):
    m = re.match(r"path-(\w+)-(\d+)\.json", os.path.basename(path))
    runs[(m.group(1), int(m.group(2)))] = path
print("| run | " + " | ".join(c.removeprefix("path.") for c in cols) + " | CPU s | page faults |")
print("|" + " --- |" * (len(cols) + 3))
for (server, n), path in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    f = figures(path)
    st = f"{folder}/stat-path-{server}-{n}.txt"
    cpu, faults = stat(st) if os.path.exists(st) else (None, None)
    print(f"| {server}-{n} | " + " | ".join(f"{f.get(c, float('nan')):.3g}" for c in cols)
          + f" | {cpu if cpu is None else round(cpu, 1)} | {faults} |")
print()
for server in ("main", "new"):
    rs = [figures(p) for (s, _), p in runs.items() if s == server]
    for c in ("path.k1_ratio", "path.k2_ratio", "path.step_k0_ms", "path.k1_backups_ms"):
        v = [r[c] for r in rs if c in r]
        if v:
            print(f"- {server}, {len(v)} runs: {c} median {statistics.median(v):.3g} "
                  f"({min(v):.3g}-{max(v):.3g})")
    stats = [stat(f"{folder}/stat-path-{s}-{n}.txt") for (s, n) in runs if s == server
             and os.path.exists(f"{folder}/stat-path-{s}-{n}.txt")]
    if stats:
        print(f"- {server}: run's CPU median {statistics.median(s[0] for s in stats):.1f} s, "
              f"page faults median {statistics.median(s[1] for s in stats):.0f}")
for c in ("path.k1_ratio", "path.k2_ratio"):
    pairs = [(figures(runs[("main", n)])[c], figures(runs[("new", n)])[c])
             for (s, n) in runs if s == "main" and ("new", n) in runs]
    lower = sum(1 for m, n in pairs if n < m)
    print(f"- {c}: this branch's lower in {lower} of {len(pairs)} pairs")
