#!/usr/bin/python3
"""What one call with huge request metadata costs a real zerostate-server.

Starts the server (plaintext, loopback), sends one JobStatus call whose
metadata holds a value of --bytes bytes (no valid token: the server's
16 KiB metadata cap refuses it), and meanwhile has another client, on a
connection of its own, call grpc.health.v1.Health/Check every 50 ms.
Prints the server's CPU seconds and peak RSS growth over the call, the
attacker's answer and wall time, and the other client's worst latency.

  /usr/bin/python3 bench/limits/metadata_cost.py --json \
      --server build/server/zerostate-server --bytes 100000000

Needs Debian's python3-grpcio (the same gRPC core, 1.51, as the server).
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time

import grpc


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status_bytes(pid, field):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return -1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default="build/server/zerostate-server")
    ap.add_argument("--bytes", type=int, default=100_000_000)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--server_args", default="", help="extra server flags, space separated")
    args = ap.parse_args()

    cmd = [args.server, "--listen=127.0.0.1:0", "--plaintext", "--metrics_listen=",
           "--threads=1", "--ram_budget_bytes=100000000", "--data_listen=off"]
    cmd += args.server_args.split()
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    address = None
    for line in server.stdout:
        if "listening on " in line:
            address = line.split("listening on ")[1].split()[0]
            break
    if address is None:
        sys.exit("the server did not start")
    threading.Thread(target=lambda: [None for _ in server.stdout], daemon=True).start()

    health = "/grpc.health.v1.Health/Check"
    victim_latencies, victim_failures = [], []
    attack_running = threading.Event()
    stop = threading.Event()

    def victim():
        channel = grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
        check = channel.unary_unary(health)
        check(b"", timeout=30)
        while not stop.is_set():
            start = time.monotonic()
            try:
                check(b"", timeout=args.timeout)
                ok = True
            except grpc.RpcError as e:
                ok = False
                victim_failures.append(str(e.code()))
            if attack_running.is_set():
                victim_latencies.append(time.monotonic() - start)
            time.sleep(0.05)

    t = threading.Thread(target=victim)
    t.start()
    channel = grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
    job_status = channel.unary_unary("/zerostate.v1.StateService/JobStatus")
    request = b"\x0a\x01x"  # JobStatusRequest{job_id: "x"}
    try:
        job_status(request, timeout=30)
    except grpc.RpcError:
        pass  # UNAUTHENTICATED: the connection is up
    value = "v" * args.bytes
    cpu0 = cpu_seconds(server.pid)
    hwm0 = status_bytes(server.pid, "VmHWM")
    rss0 = status_bytes(server.pid, "VmRSS")
    attack_running.set()
    start = time.monotonic()
    try:
        job_status(request, metadata=[("x-padding", value)], timeout=args.timeout)
        answer = "OK"
    except grpc.RpcError as e:
        answer = f"{e.code().name}: {e.details()[:120]}"
    wall = time.monotonic() - start
    attack_running.clear()
    time.sleep(0.2)
    cpu1 = cpu_seconds(server.pid)
    result = {
        "grpc": grpc.__version__,
        "metadata_bytes": args.bytes,
        "server_args": args.server_args,
        "attacker_answer": answer,
        "attacker_wall_s": round(wall, 2),
        "server_cpu_s": round(cpu1 - cpu0, 2),
        "server_peak_rss_growth_mb": round((status_bytes(server.pid, "VmHWM") - hwm0) / 1e6, 1),
        "server_rss_after_mb": round(status_bytes(server.pid, "VmRSS") / 1e6, 1),
        "server_rss_before_mb": round(rss0 / 1e6, 1),
        "other_client_calls_during": len(victim_latencies),
        "other_client_max_latency_s": round(max(victim_latencies), 3) if victim_latencies else None,
        "other_client_failures": victim_failures,
    }
    stop.set()
    t.join()
    server.terminate()
    server.wait()
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k}: {v}")


if __name__ == "__main__":
    main()
