#!/usr/bin/env python3
"""The TLS target's table from two transport_bench --tls_dir --json logs
(bench/transport/device_tls.sh): one at 4 streams per server, one at 8.

    bench/transport/tls_target.py TLS_TCP_LOG TLS_TCP_S8_LOG [AES_LOG CORES]

prints, per data plane figure (push|gather, dtype, servers): TLS over
plaintext at 4 streams, at 8, TLS at 8 over plaintext at 4, and TLS at
the streams a default client runs over plaintext at 4 (the target: 8 per
server, but no more over all servers than CORES, and never fewer than 4,
client/data_streams.h; also printed as a --json figure
`tls_default.<figure>` against the target's 0.6); the GB/s; and the
client's and servers' CPU s/GB under TLS at 4 streams. "-" where a figure
is missing (a run that failed or timed out).

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


def default_streams(name, cores):
    """Streams per server of a default client under userspace TLS records
    (client/data_streams.h) for the figure `name` (..servers=N..): 8, but
    no more over all servers than `cores`, never fewer than 4; of the
    measured 4 and 8, the one it picks (8 only when it gets all 8)."""
    m = re.search(r"servers=(\d+)", name)
    servers = int(m.group(1)) if m else 1
    n = max(4, min(8, (cores or 16) // servers))
    return 8 if n >= 8 else 4


def main(s4_path, s8_path, aes_path=None, cores="0"):
    s4, s8 = figures(s4_path), figures(s8_path)
    rate, cores = (aes_rate(aes_path) if aes_path else None), int(cores)
    if rate:
        print(json.dumps({"figure": "aes128gcm.one_core", "value": round(rate, 3),
                          "unit": "GB/s", "cpu_s_per_gb": round(1 / rate, 4)}))
        print(json.dumps({"figure": "tls.crypto_ceiling", "value": round(cores * rate / 2, 2),
                          "unit": "GB/s", "cores": cores,
                          "crypto_cpu_s_per_gb": round(2 / rate, 4)}))
    rows = []
    for name, plain in s4.items():
        if ".tcp" not in name or name.endswith((".tls", ".tls_user")):
            continue
        t4, t8, p8 = s4.get(name + ".tls"), s8.get(name + ".tls"), s8.get(name)
        streams = default_streams(name, cores)
        tdef = t8 if streams == 8 else t4
        if tdef and plain:
            print(json.dumps({"figure": "tls_default." + name,
                              "value": round(tdef["value"] / plain["value"], 3), "unit": "x",
                              "limit": 0.6, "streams_per_server": streams}))
        cpu = ("%.2f/%.2f" % (t4["client_cpu_s_per_gb"], t4["server_cpu_s_per_gb"])
               if t4 else "-")
        rows.append("| %s | %s | %s | %s | %s (%d) | %s | %s | %s | %s | %s | %s |" %
                    (name, ratio(t4, plain), ratio(t8, p8), ratio(t8, plain),
                     ratio(tdef, plain), streams, gbs(t4), gbs(t8), gbs(plain), gbs(p8), cpu,
                     ceiling(plain, rate, cores)))
    print("| figure | TLS/plain @4 | TLS/plain @8 | TLS@8 / plain@4 | TLS default / plain@4 "
          "(streams) | TLS@4 GB/s | TLS@8 GB/s | plain@4 GB/s | plain@8 GB/s "
          "| TLS@4 CPU s/GB client/servers | ceiling |")
    print("| --- " * 11 + "|")
    print("\n".join(rows))


if __name__ == "__main__":
    main(*sys.argv[1:5])
