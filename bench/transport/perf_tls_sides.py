#!/usr/bin/env python3
"""Where the client's and the servers' CPU goes under TLS in a
transport_bench run: `perf script` of a DWARF call-graph profile, its TLS
phase (from the first sample in a TLS method of DataStream, as
perf_split.py cuts it) split into the client (the transport_bench process)
and the servers (every other process), each sample put in one category by
its innermost frame and, for copies and kernel time, by the first OpenSSL
or BIO function that called it.

    perf record --call-graph dwarf,32768 -F 999 -o P -- transport_bench \\
        --planes=tcp --servers=1 --tls_dir=DIR --json ... > LOG
    perf script -i P -F comm,tid,time,ip,sym,dso | \\
        bench/transport/perf_tls_sides.py LOG

Prints per side the share of its samples in each category and that share
of the side's mean TLS CPU s/GB over the LOG's ".tcp.tls" figures (the
bench's own accounting). Categories: libcrypto (AES-GCM and OpenSSL's
per-record EVP calls; the Debian library has no symbols for its assembly),
libssl (the record layer), OpenSSL's copies of the plaintext (the caller's
bytes into its write buffer before sealing: "copy: caller->wbuf"; opened
bytes out of its read buffer: "copy: rbuf->caller"), the buffer BIO's
copies (data_tls.cc's BufferRecords), the SIGPIPE mask, the kernel's
copies and other kernel work under TLS I/O (a BIO or SSL call on the
stack) or not, page faults, DataStream itself, and the rest.
"""
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from perf_split import TLS_METHODS, samples  # noqa: E402

COPY_CALLERS = (("BIO_write", "copy: wbuf->buffer BIO"), ("BIO_read", "copy: buffer BIO->rbuf"),
                ("SSL_write_ex", "copy: caller->wbuf"), ("SSL_read_ex", "copy: rbuf->caller"))
IO_CALLERS = ("BIO_read", "BIO_write", "BIO_ctrl", "SSL_write_ex", "SSL_read_ex",
              "DataStream::Wait")


def names(sample):
    return [" ".join(f.split()[1:]) for f in sample["frames"]]


def called_by(stack, callers):
    for frame in stack[1:]:
        for caller in callers:
            if caller in frame:
                return caller
    return None


def category(stack):
    leaf = stack[0]
    if "memmove" in leaf or "memcpy" in leaf:
        caller = called_by(stack, [c for c, _ in COPY_CALLERS])
        return dict(COPY_CALLERS).get(caller, "copy: not TLS")
    if "ScopedNoSigpipe" in " ".join(stack[:8]) or "sigpending" in leaf:
        return "SIGPIPE mask"
    if "libcrypto" in leaf:
        return "libcrypto (cipher)"
    if "libssl" in leaf:
        return "libssl (records)"
    if "kernel" in leaf:
        if "page_fault" in " ".join(stack[:6]) or "clear_page" in leaf:
            return "kernel page faults"
        kind = "kernel copies" if "_copy_to_iter" in leaf or "_copy_from_iter" in leaf else \
            "kernel other"
        return kind + (" (TLS I/O)" if called_by(stack, IO_CALLERS) else "")
    if any("DataStream" in f for f in stack[:3]):
        return "DataStream"
    return "other user"


def mean_tls_cpu(log):
    """{side: mean CPU s/GB over the log's .tcp.tls figures}."""
    sums, n = collections.Counter(), 0
    for line in open(log):
        if line.startswith("{"):
            d = json.loads(line)
            if d["figure"].endswith(".tcp.tls") and "client_cpu_s_per_gb" in d:
                sums["client"] += d["client_cpu_s_per_gb"]
                sums["servers"] += d["server_cpu_s_per_gb"]
                n += 1
    return {side: total / n for side, total in sums.items()} if n else {}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    cpu = mean_tls_cpu(sys.argv[1])
    ours = [s for s in samples(sys.stdin) if s["frames"]]
    tls = [s["t"] for s in ours if any(TLS_METHODS.search(f) for f in s["frames"])]
    if not tls:
        sys.exit("no sample in a TLS method of DataStream: was perf record given --call-graph?")
    start = min(tls)
    for side in ("client", "servers"):
        part = [s for s in ours if s["t"] >= start and
                (s["comm"] == "transport_bench") == (side == "client")]
        counts = collections.Counter(category(names(s)) for s in part)
        print("%s: %d samples, %s CPU s/GB under TLS" %
              (side, len(part), "%.3f" % cpu[side] if side in cpu else "-"))
        for what, k in counts.most_common():
            share = k / len(part)
            print("  %-26s %5.1f%%  %s" % (what, 100 * share,
                                          "%.3f s/GB" % (share * cpu[side]) if cpu else ""))


if __name__ == "__main__":
    main()
