#!/usr/bin/env python3
"""The TLS target's table from one transport_bench --tls_dir --json log
(bench/transport/device_tls.sh): the TCP data plane under TLS against
plaintext in the same run, the client sized as a default client is
(client/data_streams.h: under OpenSSL's userspace records one stream per
core over all servers, at most 8 per server, at least 1; plaintext at
--streams).

    bench/transport/tls_target.py TLS_TCP_LOG [AES_LOG CORES|CLIENT+SERVERS]

prints per data plane figure (push|gather, dtype, servers) a --json figure
`tls_vs_plain.<figure>`: TLS GB/s over plaintext GB/s against the target
(limit 0.6), with the CPU seconds per GB of client and servers under TLS
and in plaintext; then the same as a table. With AES_LOG (the output of
`openssl speed -evp aes-128-gcm -bytes 16384` on one core) and CORES, it
first prints the cipher's GB/s per core, and per figure the ratio the host
allows if TLS costs plaintext's CPU s/GB plus one seal and one open of
every byte with every core busy ("ceiling": min(1, CORES / (plain s/GB +
2 / rate) / plain GB/s)). CORES may be CLIENT+SERVERS (e.g. 8+8) when the
client and the servers ran on disjoint cores (device_tls.sh with
ZS_TLS_SPLIT): each side then has its own cores for its own CPU s/GB and
one pass of the cipher, and the ceiling is the slower side's. "-" where a
figure is missing.
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
    """`cores`: (all,) when client and servers share them, else (client, servers)."""
    if not plain or not rate or "client_cpu_s_per_gb" not in plain:
        return None
    client, server = plain["client_cpu_s_per_gb"], plain["server_cpu_s_per_gb"]
    if len(cores) == 1:
        gbps = cores[0] / (client + server + 2 / rate)
    else:
        gbps = min(cores[0] / (client + 1 / rate), cores[1] / (server + 1 / rate))
    return min(1.0, gbps / plain["value"])


def parse_cores(text):
    """"16" -> (16,); "8+8" -> (8, 8): client's and servers' cores."""
    return tuple(int(c) for c in text.split("+"))


def cpu(f):
    return "%.2f / %.2f" % (f["client_cpu_s_per_gb"], f["server_cpu_s_per_gb"]) if f else "-"


def main(log, aes_path=None, cores="0"):
    figs = figures(log)
    rate, cores = (aes_rate(aes_path) if aes_path else None), parse_cores(cores)
    if rate:
        print(json.dumps({"figure": "aes128gcm.one_core", "value": round(rate, 3),
                          "unit": "GB/s", "cpu_s_per_gb": round(1 / rate, 4)}))
    rows = []
    for name, tls in figs.items():
        if ".tcp" not in name or not name.endswith(".tls") or "plain" not in tls:
            continue
        plain = figs.get(name[:-len(".tls")])
        top = ceiling(plain, rate, cores)
        d = {"figure": "tls_vs_plain." + name[:-len(".tls")], "value": tls["plain_ratio"],
             "unit": "x", "limit": 0.6, "tls_gbps": tls["value"], "plain_gbps": tls["plain"],
             "records": tls.get("records", "")}
        for side in ("client", "server"):
            key = side + "_cpu_s_per_gb"
            d["tls_" + key] = tls.get(key)
            d["plain_" + key] = plain.get(key) if plain else None
        if top is not None:
            d["ceiling"] = round(top, 3)
        print(json.dumps(d))
        rows.append("| %s | %.3f | %.2f | %.2f | %s | %s | %s |" %
                    (name[:-len(".tls")], tls["plain_ratio"], tls["value"], tls["plain"],
                     cpu(tls), cpu(plain), "%.2f" % top if top is not None else "-"))
    print("| figure | TLS / plain | TLS GB/s | plain GB/s | TLS CPU s/GB client / servers "
          "| plain CPU s/GB client / servers | ceiling |")
    print("| --- " * 7 + "|")
    print("\n".join(rows))


if __name__ == "__main__":
    main(*sys.argv[1:4])
