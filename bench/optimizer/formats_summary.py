#!/usr/bin/env python3
"""Summarizes interleaved runs of `optimizer_bench --formats_only --json`:
for each label (a file's name up to its last '_', e.g. optimizer_formats_main
of optimizer_formats_main_2.json) and each per-format figure, the best
value of the runs and its ratio to the limit measured in the same run, and
every run's ratio (so that the spread shows how busy the machine was).

    python3 bench/optimizer/formats_summary.py bench/results/<folder>/optimizer_formats_*.json
"""
import collections
import json
import sys


def main(paths):
    runs = collections.defaultdict(lambda: collections.defaultdict(list))
    for path in paths:
        label = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        label = label.rsplit("_", 1)[0] if label.rsplit("_", 1)[-1].isdigit() else label
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                fig = json.loads(line)
                if "ratio" in fig and "moments=" in fig["figure"]:
                    runs[fig["figure"]][label].append((fig["value"], fig["ratio"]))
    for figure, by_label in runs.items():
        cells = []
        for label, values in by_label.items():
            value, ratio = max(values)
            spread = ", ".join(f"{r:.2f}" for _, r in values)
            cells.append(f"{label} {value / 1e9:.3f} Gparam/s ({ratio:.2f}; runs {spread})")
        print(f"{figure}: " + " | ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1:])
