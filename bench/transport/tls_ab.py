#!/usr/bin/env python3
"""Two builds' TLS target runs side by side: bench/transport/device_tls.sh
run back to back, interleaved, once per build and round on one machine.

    bench/transport/tls_ab.py A_DIR[,A_DIR...] B_DIR[,B_DIR...]

Each DIR holds one run's target.txt (bench/transport/tls_target.py). Per
figure it prints the TLS / plaintext ratio of every run of A and of B, the
CPU seconds per GB of client plus servers under TLS (each run's), and the
median of B's over the median of A's ("TLS s/GB B/A"). On a shared host the
ratios move with what the other work leaves the run; the CPU seconds per GB
of the same work move less, which is why both are printed.
"""
import json
import statistics
import sys


def runs(dirs):
    """[{figure: line}] for each folder of a comma-separated list."""
    out = []
    for d in dirs.split(","):
        figs = {}
        for line in open(d.rstrip("/") + "/target.txt"):
            if line.startswith("{"):
                f = json.loads(line)
                if "tls_gbps" in f:
                    figs[f["figure"]] = f
        out.append(figs)
    return out


def tls_cpu(f):
    return f["tls_client_cpu_s_per_gb"] + f["tls_server_cpu_s_per_gb"]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    a, b = runs(sys.argv[1]), runs(sys.argv[2])
    print("| figure | A TLS / plain | B TLS / plain | A TLS CPU s/GB | B TLS CPU s/GB | TLS s/GB B/A |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in a[0]:
        fa = [r[name] for r in a if name in r]
        fb = [r[name] for r in b if name in r]
        if not fb:
            continue
        change = statistics.median(map(tls_cpu, fb)) / statistics.median(map(tls_cpu, fa))
        cells = [
            " ".join("%.3f" % f["value"] for f in fa),
            " ".join("%.3f" % f["value"] for f in fb),
            " ".join("%.2f" % tls_cpu(f) for f in fa),
            " ".join("%.2f" % tls_cpu(f) for f in fb),
            "%.3f" % change,
        ]
        print("| %s | %s |" % (name.replace("tls_vs_plain.", ""), " | ".join(cells)))


if __name__ == "__main__":
    main()
