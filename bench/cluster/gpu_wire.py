"""bf16 against the int8 wire across a capped link, with a GPU trainer:
the state servers on one namespaced host, the trainer
(bench/torch/bench_gpt.py) on another (tests/testing/netns_hosts.py), both
links tbf-capped at --gbit each way (default 25). bench_gpt.py runs every
zerostate mode of --systems on every wire of --wires, interleaved over its
rounds in one process, and prints each mode's step against its wire floor
(the payload bytes a step moved over the link rate, `--link_gbit`) and
the bf16 wire's step over the int8 wire's (`bf16_step_over_this`). This
script adds the bytes the trainer's link carried (headers included) and
prints bench_gpt.py's JSON with them.

GPU machine (GPT-2 759M, micro-batch 8, bf16, seq 1024):
    python3 bench/cluster/gpu_wire.py --server_bin=BIN/zerostate-server -- \\
        --model=gpt2-759m --accum=1 --systems=sync,speculative --json
Here (CPU, the tiny GPT):
    /usr/bin/python3 bench/cluster/gpu_wire.py -- --device=cpu --tiny --accum=1 \\
        --systems=sync --rounds=1 --json
Needs root and iproute2 (exit 77 otherwise, with the reason)."""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "testing"))
import netns_hosts  # noqa: E402

PORT = 7000


def start_servers(hosts, args, logs):
    """args.servers zerostate-servers on host s0 (ports PORT, PORT + 1,
    ...); (their processes, their addresses)."""
    ip = hosts["s0"].ip
    procs, addresses = [], []
    for i in range(args.servers):
        address = f"{ip}:{PORT + i}"
        log = open(os.path.join(logs, f"server{i}.log"), "w")
        p = hosts.popen("s0", [args.server_bin, f"--listen={address}", "--plaintext",
                               "--metrics_listen=", f"--threads={args.server_threads}"],
                        stdout=subprocess.PIPE, stderr=log, text=True)
        for line in p.stdout:
            if "listening on" in line:
                break
        else:
            raise RuntimeError(f"server {i} did not start; see {log.name}")
        procs.append(p)
        addresses.append(address)
    return procs, addresses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="arguments after -- go to bench_gpt.py")
    ap.add_argument("--gbit", type=float, default=25, help="each link's rate, Gbit/s")
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--server_threads", type=int, default=6)
    ap.add_argument("--server_bin",
                    default=os.path.join(ROOT, "build", "server", "zerostate-server"))
    ap.add_argument("--wires", default="bf16,int8")
    ap.add_argument("--logs", default="", help="keep the servers' and the trainer's logs here")
    ap.add_argument("--timeout", type=float, default=1800, help="bench_gpt.py's limit, s")
    argv = sys.argv[1:]
    rest = argv[argv.index("--") + 1:] if "--" in argv else []
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    reason = (None if os.path.exists(args.server_bin) else
              f"no zerostate-server at {args.server_bin} (--server_bin)") or netns_hosts.probe()
    if reason:
        print(f"skipped: {reason}", file=sys.stderr)
        sys.exit(77)
    logs = args.logs or tempfile.mkdtemp(prefix="gpu-wire-")
    os.makedirs(logs, exist_ok=True)
    with netns_hosts.NetnsHosts(["s0", "t0"], args.gbit) as hosts:
        procs, addresses = start_servers(hosts, args, logs)
        try:
            before, t0 = hosts.link_bytes("t0"), time.monotonic()
            cmd = [sys.executable, os.path.join(ROOT, "bench", "torch", "bench_gpt.py"),
                   f"--server_addresses={','.join(addresses)}", f"--wires={args.wires}",
                   f"--link_gbit={args.gbit:g}", *rest]
            with open(os.path.join(logs, "bench_gpt.log"), "w") as err:
                out = hosts.popen("t0", cmd, stdout=subprocess.PIPE, stderr=err, text=True)
                stdout, _ = out.communicate(timeout=args.timeout)
            after = hosts.link_bytes("t0")
        finally:
            for p in procs:
                p.terminate()
                p.wait()
    if out.returncode != 0:
        sys.exit(f"bench_gpt.py exited {out.returncode}; see {logs}/bench_gpt.log")
    result = json.loads(stdout.strip().splitlines()[-1])
    result["link"] = {"gbit": args.gbit, "servers_host": "s0", "trainer_host": "t0",
                      "servers": addresses, "seconds": round(time.monotonic() - t0, 1),
                      "trainer_link_bytes": {k: after[k] - before[k] for k in after},
                      "command": " ".join(cmd[1:])}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
