#!/usr/bin/env python3
"""The TLS target's table from two transport_bench --tls_dir --json logs
(bench/transport/device_tls.sh): one at 4 streams per server, one at 8.

    bench/transport/tls_target.py TLS_TCP_LOG TLS_TCP_S8_LOG

prints, per data plane figure (push|gather, dtype, servers): TLS over
plaintext at 4 streams, at 8, and TLS at 8 over plaintext at 4 (the
client's default); the GB/s; and the client's and servers' CPU s/GB under
TLS at 4 streams. "-" where a figure is missing (a run that failed or
timed out).
"""
import json
import sys


def figures(path):
    out = {}
    try:
        for line in open(path):
            if line.startswith("{"):
                d = json.loads(line)
                out[d["figure"]] = d
    except OSError:
        pass
    return out


def ratio(a, b):
    return "%.3f" % (a["value"] / b["value"]) if a and b else "-"


def rate(a):
    return "%.2f" % a["value"] if a else "-"


def main(s4_path, s8_path):
    s4, s8 = figures(s4_path), figures(s8_path)
    print("| figure | TLS/plain @4 | TLS/plain @8 | TLS@8 / plain@4 | TLS@4 GB/s | TLS@8 GB/s "
          "| plain@4 GB/s | plain@8 GB/s | TLS@4 CPU s/GB client/servers |")
    print("| --- " * 9 + "|")
    for name, plain in s4.items():
        if ".tcp" not in name or name.endswith((".tls", ".tls_user")):
            continue
        t4, t8, p8 = s4.get(name + ".tls"), s8.get(name + ".tls"), s8.get(name)
        cpu = ("%.2f/%.2f" % (t4["client_cpu_s_per_gb"], t4["server_cpu_s_per_gb"])
               if t4 else "-")
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" %
              (name, ratio(t4, plain), ratio(t8, p8), ratio(t8, plain), rate(t4), rate(t8),
               rate(plain), rate(p8), cpu))


if __name__ == "__main__":
    main(*sys.argv[1:3])
