"""Medians of replication.path.k{1,2}_ratio per configuration of this
folder's runs (n0: the servers' defaults; n10: --replica_nice=10; l2:
--replica_lanes=2), of all 30, and of the defaults' 10 with the 11 runs
of replication-2026-12-07. Run from this folder."""
import glob, json, re, statistics

def ratios(pattern):
    out = {"k1": [], "k2": []}
    for f in sorted(glob.glob(pattern)):
        for line in open(f):
            d = json.loads(line)
            m = re.match(r"replication\.path\.(k[12])_ratio$", d["figure"])
            if m:
                out[m.group(1)].append(d["value"])
    return out

runs = {c: ratios(f"{c}-r*.json") for c in ("n0", "n10", "l2")}
before = ratios("../replication-2026-12-07/path*.json")
for k, limit in (("k1", 1.15), ("k2", 1.3)):
    print(f"path {k} (limit {limit}):")
    for c, r in runs.items():
        v = r[k]
        print(f"  {c:4} {len(v)} runs, median {statistics.median(v):.3f} "
              f"(min {min(v):.3f}, max {max(v):.3f})")
    every = [x for r in runs.values() for x in r[k]]
    print(f"  all  {len(every)} runs, median {statistics.median(every):.3f}")
    both = runs["n0"][k] + before[k]
    print(f"  n0 with replication-2026-12-07's {len(before[k])}: {len(both)} runs, "
          f"median {statistics.median(both):.3f}")
