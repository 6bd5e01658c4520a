#!/usr/bin/env python3
"""Tables from transport_bench --json logs (as the device_*.sh scripts write
them: "== NAME: command" lines, then one JSON object per figure).

    bench/transport/summarize.py LOG [RUN...]
    bench/transport/summarize.py --range LOG RUN...

prints, per run (all when none is named), a markdown table: one row per
operation and dtype, one column per server count, each cell "GB/s (ratio
to raw TCP / to raw TCP with tensor-sized buffers)", then the raw TCP
figures. With --range, one table over the named runs together, each cell
the lowest-highest ratio to raw TCP (and to tensor buffers) among them.
Text-output runs (no JSON) are skipped.
"""
import json
import re
import sys


def runs(path):
    name, figures = None, []
    for line in open(path):
        line = line.strip()
        if line.startswith("== "):
            if name and figures:
                yield name, figures
            name, figures = line[3:].split(":")[0], []
        elif line.startswith("{"):
            figures.append(json.loads(line))
    if name and figures:
        yield name, figures


def table(figures):
    cells, servers = {}, set()
    raw = []
    for f in figures:
        m = re.match(r"(push|gather)\.(\w+)\.servers=(\d+)\.(\w+)", f["figure"])
        if not m:
            raw.append(f)
            continue
        op, dtype, n, plane = m.groups()
        servers.add(int(n))
        cell = "%.1f (%.2f / %.2f)" % (f["value"], f["ratio"], f.get("tensor_ratio", 0))
        cells[(op, dtype, plane), int(n)] = cell
    cols = sorted(servers)
    out = ["| figure | " + " | ".join("%d server%s" % (n, "s" if n > 1 else "") for n in cols) + " |",
           "| --- |" + " --- |" * len(cols)]
    for key in sorted({k for k, _ in cells}, key=lambda k: (k[2], k[0] != "push", k[1])):
        out.append("| %s %s %s | " % (key[0], key[1], key[2]) +
                   " | ".join(cells.get((key, n), "") for n in cols) + " |")
    out.append("")
    by_conns = {}
    for f in raw:
        kind, conns = f["figure"].split(".connections=")
        by_conns.setdefault(int(conns), {})[kind] = f["value"]
    out.append("raw TCP, GB/s cached / tensor buffers: " + ", ".join(
        "%d conn %.1f / %.1f" % (n, v.get("raw_tcp", 0), v.get("raw_tcp_tensor", 0))
        for n, v in sorted(by_conns.items())))
    return "\n".join(out)


def key_of(figure):
    m = re.match(r"(push|gather)\.(\w+)\.servers=(\d+)\.(\w+)", figure)
    return (m.group(1), m.group(2), m.group(4)), int(m.group(3)) if m else None


def range_table(path, wanted):
    ratios = {}
    for name, figures in runs(path):
        if name not in wanted:
            continue
        for f in figures:
            if f["figure"].startswith("raw"):
                continue
            key, n = key_of(f["figure"])
            ratios.setdefault((key, n), []).append((f["ratio"], f["tensor_ratio"]))
    cols = sorted({n for _, n in ratios})
    out = ["| figure | " + " | ".join("%d server%s" % (n, "s" if n > 1 else "") for n in cols) + " |",
           "| --- |" + " --- |" * len(cols)]
    for key in sorted({k for k, _ in ratios}, key=lambda k: (k[2], k[0] != "push", k[1])):
        row = []
        for n in cols:
            r = ratios.get((key, n))
            row.append("%.2f-%.2f (%.2f-%.2f)" % (min(a for a, _ in r), max(a for a, _ in r),
                                                 min(b for _, b in r), max(b for _, b in r))
                       if r else "")
        out.append("| %s %s %s | " % key + " | ".join(row) + " |")
    return "\n".join(out)


def main():
    if sys.argv[1] == "--range":
        print(range_table(sys.argv[2], sys.argv[3:]))
        return
    path, wanted = sys.argv[1], sys.argv[2:]
    for name, figures in runs(path):
        if wanted and name not in wanted:
            continue
        print("### " + name + "\n")
        print(table(figures) + "\n")


if __name__ == "__main__":
    main()
