#!/usr/bin/env python3
"""The TLS target's table from two transport_bench --tls_dir --json logs
(bench/transport/device_tls.sh): one at 4 streams per server, one at 8.

    bench/transport/tls_target.py TLS_TCP_LOG TLS_TCP_S8_LOG [AES_LOG CORES]

prints, per data plane figure (push|gather, dtype, servers): TLS over
plaintext at 4 streams, at 8, and TLS at 8 over plaintext at 4 (the
client's default); the GB/s; and the client's and servers' CPU s/GB under
TLS at 4 streams. "-" where a figure is missing (a run that failed or
timed out).

With AES_LOG (the output of `openssl speed -evp aes-128-gcm -bytes 16384`
on one core) and CORES (the host's), it first prints as --json figures the
raw AES-128-GCM rate per core and the ceiling it implies on this host,
where every byte is sealed once and opened once on the same cores (client
and servers share the host): crypto alone, CORES * rate / 2 GB/s; and per
figure a column "ceiling": the TLS/plain ratio the host allows if TLS costs
plaintext's CPU s/GB (client + servers, measured at 4 streams) plus the two
cipher passes and every core is busy: min(1, CORES / (plain s/GB +
2 / rate) / plain GB/s).
"""
import json
import re
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


def gbs(a):
    return "%.2f" % a["value"] if a else "-"


def aes_rate(path):
    """AES-128-GCM GB/s on one core from `openssl speed` output, or None."""
    try:
        for line in open(path):
            m = re.match(r"\s*AES-128-GCM\s+.*?([0-9.]+)k\s*$", line)
            if m:
                return float(m.group(1)) * 1e3 / 1e9  # openssl prints 1000s of bytes/s
    except OSError:
        pass
    return None


def ceiling(plain, rate, cores):
    """The TLS/plain ratio `cores` allow at the cipher's `rate` (see above)."""
    if not plain or not rate or "client_cpu_s_per_gb" not in plain:
        return "-"
    s_per_gb = plain["client_cpu_s_per_gb"] + plain["server_cpu_s_per_gb"] + 2 / rate
    return "%.2f" % min(1.0, cores / s_per_gb / plain["value"])


def main(s4_path, s8_path, aes_path=None, cores="0"):
    s4, s8 = figures(s4_path), figures(s8_path)
    rate, cores = (aes_rate(aes_path) if aes_path else None), int(cores)
    if rate:
        print(json.dumps({"figure": "aes128gcm.one_core", "value": round(rate, 3),
                          "unit": "GB/s", "cpu_s_per_gb": round(1 / rate, 4)}))
        print(json.dumps({"figure": "tls.crypto_ceiling", "value": round(cores * rate / 2, 2),
                          "unit": "GB/s", "cores": cores,
                          "crypto_cpu_s_per_gb": round(2 / rate, 4)}))
    print("| figure | TLS/plain @4 | TLS/plain @8 | TLS@8 / plain@4 | TLS@4 GB/s | TLS@8 GB/s "
          "| plain@4 GB/s | plain@8 GB/s | TLS@4 CPU s/GB client/servers | ceiling |")
    print("| --- " * 10 + "|")
    for name, plain in s4.items():
        if ".tcp" not in name or name.endswith((".tls", ".tls_user")):
            continue
        t4, t8, p8 = s4.get(name + ".tls"), s8.get(name + ".tls"), s8.get(name)
        cpu = ("%.2f/%.2f" % (t4["client_cpu_s_per_gb"], t4["server_cpu_s_per_gb"])
               if t4 else "-")
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" %
              (name, ratio(t4, plain), ratio(t8, p8), ratio(t8, plain), gbs(t4), gbs(t8),
               gbs(plain), gbs(p8), cpu, ceiling(plain, rate, cores)))


if __name__ == "__main__":
    main(*sys.argv[1:5])
