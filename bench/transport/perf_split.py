#!/usr/bin/env python3
"""Where stream_bench's CPU goes under TLS: `perf script` of a call-graph
profile, cut into the plaintext phase and the TLS phase, each sample put in
one category by its innermost frame.

    perf record -g -F 2000 -o P -- stream_bench --connections=1 --mib=1024 --reps=1
    perf script -i P | bench/transport/perf_split.py 2000 1.0737

(HZ: perf's -F; GB: the payload of each phase, 1024 MiB = 1.0737 GB.) The
TLS phase starts at the first sample whose stack holds a TLS method of
DataStream (RecvTls, SendTls, ...). Categories: libcrypto (the cipher, and
OpenSSL's per-record work there), libssl, user copies (libc's memcpy and
memmove: OpenSSL's and the buffer BIO's), the kernel's copies to and from
user memory, the rest of the kernel (TCP, loopback, scheduling), other user
code. Prints CPU seconds per GB of each.
"""
import collections
import re
import sys

TLS_METHODS = re.compile(r"DataStream::(RecvTls|SendTls|WriteTls|ReadBatch|Flush|WriteOnce)")


def samples(lines):
    cur = None
    for line in lines:
        if not line.strip():
            if cur:
                yield cur
            cur = None
        elif not line[0].isspace():
            m = re.search(r"\s(\d+\.\d+):", line)
            cur = {"t": float(m.group(1)) if m else 0.0, "comm": line.split()[0], "frames": []}
        elif cur is not None:
            cur["frames"].append(line.strip())
    if cur:
        yield cur


def category(leaf):
    if "memmove" in leaf or "memcpy" in leaf:
        return "user copies"
    for lib in ("libcrypto", "libssl"):
        if lib in leaf:
            return lib
    if "_copy_to_iter" in leaf or "_copy_from_iter" in leaf:
        return "kernel copies"
    if "kernel" in leaf:
        return "kernel other"
    return "other user"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    hz, gb = float(sys.argv[1]), float(sys.argv[2])
    ours = [s for s in samples(sys.stdin) if s["comm"] == "stream_bench" and s["frames"]]
    tls = [s["t"] for s in ours if any(TLS_METHODS.search(f) for f in s["frames"])]
    if not tls:
        sys.exit("no sample in a TLS method of DataStream: was perf record given -g?")
    start = min(tls)
    for name, part in (("plaintext", [s for s in ours if s["t"] < start]),
                       ("TLS", [s for s in ours if s["t"] >= start])):
        counts = collections.Counter(category(s["frames"][0]) for s in part)
        print("%s phase: %.3f CPU s/GB" % (name, len(part) / hz / gb))
        for what, n in counts.most_common():
            print("  %-14s %.3f" % (what, n / hz / gb))


if __name__ == "__main__":
    main()
