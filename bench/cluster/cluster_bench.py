"""A step across hosts: one trainer node (zerostate-worker, CPU backend,
the built-in MLP) and three state hosts, each a network namespace whose
link tbf caps at 1, 10 and 25 Gbit/s (tests/testing/netns_cluster.py), for
synchronous (plain or speculative: the servers step each block as its
gradients arrive) and delayed steps and for each wire; and the failover time
under a real partition. One run prints, per case, the step time against
two floors measured in the same run:

- wire floor: the bytes that crossed the trainer's link per step (its
  tbf's counters, Ethernet, IP and TCP headers included) over the link
  rate; a synchronous step pushes and then gathers, so out + in; a
  delayed step pushes one version while the next lands, so max(out, in);
- memory floor: the bytes the step moves in host memory (MEMORY_BYTES per
  parameter, the convention of bench/replication/replication_floor.h)
  over this host's copy bandwidth (numpy, measured first). Every "host" is
  this one box, so the servers' and the trainer's traffic add up here.

Each row says which floor is the larger (`bound`); the 1.25x-of-the-wire
target of a synchronous step at 10 Gbit/s is judged (`target_judged`) only
where the wire's is: a box whose memory cannot move the step's bytes in
the wire's time cannot show a wire-bound step.

    /usr/bin/python3 bench/cluster/cluster_bench.py --json [--gbit 1,10,25]
        [--modes sync,speculative,delayed] [--wire bf16,int8] [--steps 8] [--failover]
        [--logs DIR] [--timeline DIR]

--wire int8 passes the worker --gradient_wire=int8 --weight_wire=int8; a
worker without them prints the row as unavailable with the worker's error.
--failover cuts the primary of shard 1 off from etcd and the trainer
(2 s leases, one backup per shard, a small MLP) and prints the longest
stall of the run against the lease TTL + 2 s. Latency is not modelled (netem is not in
this kernel). Needs root and iproute2 (exit 77 otherwise, with the reason).
"""

import argparse
import json
import os
import re
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "testing"))
import netns_cluster  # noqa: E402
import netns_hosts  # noqa: E402

# Host-memory bytes per parameter of a step, one node, TCP, every stage
# counted once as if nothing stayed in cache (replication_floor.h's
# convention). bf16: the client reads the fp32 gradient and writes bf16
# (6), the kernels copy it out and in (4 + 4), the server folds it into
# the fp32 sum (6), AdamW (30: reads p, g, m, v, writes p, m, v and the
# bf16 copy), the gather is copied out and in (4 + 4), the client widens
# it to fp32 (6). int8: the same stages at 1 byte on the wire, plus the
# error feedback's read and write of the fp32 residual (8) and the
# weights' quantization (read fp32 4, write 1).
MEMORY_BYTES = {"bf16": 6 + 4 + 4 + 6 + 30 + 4 + 4 + 6,
                "int8": 5 + 8 + 2 + 2 + 5 + 30 + 5 + 2 + 2 + 5}
WIRE_FLAGS = {"bf16": [], "int8": ["--gradient_wire=int8", "--weight_wire=int8"]}
TTL = 2


def emit(args, figure, value, unit, limit, **extra):
    row = {"figure": figure, "value": round(value, 4), "unit": unit,
           "limit": round(limit, 4) if limit is not None else None,
           "ratio": round(value / limit, 4) if limit else None, **extra}
    if args.json:
        print(json.dumps(row, separators=(",", ":")), flush=True)
    else:
        print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)


def copy_bandwidth():
    """Bytes per second numpy copies 256 MiB at (read + write), best of 5."""
    import numpy as np
    a = np.ones(32 << 20)
    b = np.empty_like(a)
    best = 0.0
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(b, a)
        best = max(best, 2 * a.nbytes / (time.perf_counter() - t))
    return best


def mlp_params(inp, hidden, out):
    dims = [inp, *hidden, out]
    return sum(a * b + b for a, b in zip(dims, dims[1:]))


def config(job, args, extra="", block_elems=262144):
    hidden = ", ".join(str(h) for h in args.hidden)
    return (f'train {{ job_id: "{job}" model {{ input_dim: {args.input} hidden: [{hidden}] '
            f'output_dim: {args.output} }} micro_batch_size: {args.batch} '
            f'block_elems: {block_elems} grad_dtype: DTYPE_BF16 weight_dtype: DTYPE_BF16 {extra} }}\n')


def start_worker(cluster, args, servers, job, text, steps, flags=()):
    """Starts the trainer node on job `job` (config `text`); its Proc."""
    path = os.path.join(cluster.dir, job + ".textproto")
    if args.timeline:
        flags = [*flags, f"--timeline={os.path.join(args.timeline, job + '.jsonl')}"]
    with open(path, "w") as f:
        f.write(text)
    return cluster.start_worker(0, args.worker, [
        f"--config={path}", f"--servers={','.join(servers)}", "--plaintext", f"--steps={steps}",
        "--metrics_port=0", f"--run_id={job}", *flags],
        {"WORLD_SIZE": "1", "ZEROSTATE_JOB_TOKEN": f"token-of-{job}-0123456789abcdef0123"}, job)


def sample_steps(cluster, proc, steps, timeout):
    """[(time, link bytes of t0)] as each step's progress line arrives
    (read a few ms after it: steps take seconds here)."""
    samples = []
    for k in range(steps):
        t = proc.wait_for(rf"^step {k} loss", timeout)
        if t is None:
            break
        samples.append((t, cluster.hosts.link_bytes("t0")))
    return samples


def step_case(cluster, args, servers, gbit, mode, wire, membw, params):
    job = f"{mode}-{wire}-{gbit:g}g".replace(".", "p")
    extra = {"delayed": "delayed_update { enabled: true warmup_steps: 1 }",
             "speculative": "speculative_step: true"}.get(mode, "")
    cluster.hosts.set_rate(gbit)  # every link
    proc = start_worker(cluster, args, servers, job, config(job, args, extra), args.steps,
                        WIRE_FLAGS[wire])
    samples = sample_steps(cluster, proc, args.steps, args.timeout)
    code = proc.wait(args.timeout)
    name = f"cluster.{mode}.{wire}.{gbit:g}gbit"
    if code != 0 or len(samples) < 4:
        emit(args, name, 0, "s", None, unavailable=f"exit {code}: {proc.text()[-600:].strip()}")
        return
    # Steps 0 and 1 warm up (registration, first gathers, the delayed
    # update's warm-up) and the last is a sync point: the window is from
    # step 1's line to the line of the step before the last.
    (t0, b0), (t1, b1) = samples[1], samples[-2]
    n = len(samples) - 3
    step_s = (t1 - t0) / n
    out_b, in_b = (b1["out"] - b0["out"]) / n, (b1["in"] - b0["in"]) / n
    rate = gbit * 1e9 / 8
    wire_floor = max(out_b, in_b) / rate if mode == "delayed" else (out_b + in_b) / rate
    memory_floor = MEMORY_BYTES[wire] * params / membw
    # Where the timed steps' time went, by the worker's own progress lines.
    phases = {}
    for _, m in proc.matches(r"^step (\d+) loss [^|]*\| ([^|]*)"):
        if 2 <= int(m.group(1)) <= len(samples) - 2:
            for phase, ms in re.findall(r"(\w+) ([\d.]+)ms", m.group(2)):
                phases.setdefault(f"{phase}_s", []).append(float(ms) / 1000)
    phases = {k: round(sum(v) / len(v), 4) for k, v in phases.items()}
    # The 1.25x target speaks of a step the wire bounds: where this host
    # cannot move the step's bytes through memory in the wire's time, it
    # is not judged here (the row says so).
    target = 1.25 if (gbit == 10 and mode != "delayed") else None
    bound = "wire" if wire_floor >= memory_floor else "host memory"
    emit(args, name, step_s, "s", wire_floor, **phases, memory_floor_s=round(memory_floor, 4),
         of_memory_floor=round(step_s / memory_floor, 4), bound=bound,
         out_bytes_per_step=int(out_b), in_bytes_per_step=int(in_b),
         out_bytes_per_param=round(out_b / params, 3), in_bytes_per_param=round(in_b / params, 3),
         target=target, target_judged=(bound == "wire") if target else None, steps_timed=n,
         params=params)


def failover_case(cluster, args, servers):
    """The primary of shard 1 (server 1) cut off from etcd and the trainer
    (--failover_cut) after step 20 for 2 TTL + 1 s; the longest stall of
    the run against TTL + 2 s."""
    text = config("failover", argparse.Namespace(input=64, hidden=[256, 256, 128], output=16,
                                                 batch=32), "replicas: 1", 16384)
    cluster.hosts.set_rate(10)
    proc = start_worker(cluster, args, servers, "failover", text, 300)
    if proc.wait_for(r"^step 20 loss", args.timeout) is None:
        emit(args, "cluster.failover", 0, "s", TTL + 2, unavailable=proc.text()[-600:])
        return
    cluster.hosts.partition("s1", args.failover_cut.split(","))
    cut = time.monotonic()
    time.sleep(2 * TTL + 1)
    cluster.hosts.heal("s1")
    if proc.wait(args.timeout) != 0:
        emit(args, "cluster.failover", 0, "s", TTL + 2, unavailable=proc.text()[-600:])
        return
    stall, step = netns_cluster.longest_stall(proc, cut)
    emit(args, "cluster.failover", stall, "s", TTL + 2, lease_ttl_s=TTL, step=step,
         cut=f"primary of shard 1 from {args.failover_cut}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--gbit", default="1,10,25", help="link rates, Gbit/s")
    p.add_argument("--modes", default="sync,delayed", help="of sync, speculative, delayed")
    p.add_argument("--wire", default="bf16", help="bf16 and/or int8")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--input", type=int, default=2048)
    p.add_argument("--hidden", type=lambda s: [int(x) for x in s.split(",")], default=[8192, 8192])
    p.add_argument("--output", type=int, default=2048)
    p.add_argument("--batch", type=int, default=16, help="micro-batch")
    p.add_argument("--failover", action="store_true", help="also the failover case")
    p.add_argument("--failover_cut", default="etcd,t0",
                   help="the hosts the primary is cut off from (etcd, t0: the trainer)")
    p.add_argument("--timeout", type=float, default=900, help="per run, against hangs")
    p.add_argument("--logs", default="", help="keep the processes' logs in this folder")
    p.add_argument("--timeline", default="",
                   help="the worker's and servers' --timeline files into this folder "
                   "(bench/step/timeline.py merges them)")
    args = p.parse_args()
    args.server = netns_cluster.binary("ZEROSTATE_SERVER", "server/zerostate-server")
    args.worker = netns_cluster.binary("ZEROSTATE_WORKER", "worker/zerostate-worker")
    reason = (None if args.server and args.worker else "no zerostate-server or zerostate-worker "
              "(build them, or set ZEROSTATE_SERVER and ZEROSTATE_WORKER)") or netns_hosts.probe()
    if reason:
        print(f"skipped: {reason}", file=sys.stderr)
        sys.exit(77)
    params = mlp_params(args.input, args.hidden, args.output)
    membw = copy_bandwidth()
    emit(args, "cluster.host_copy_bandwidth", membw / 1e9, "GB/s", None)
    cluster = netns_cluster.NetnsCluster(state_hosts=3, trainer_nodes=1, gbit=10)
    try:
        cluster.start_etcd()
        if args.timeline:
            os.makedirs(args.timeline, exist_ok=True)
        servers = cluster.start_servers(
            args.server, ["--metrics_listen="], ttl_seconds=TTL,
            per_server_args={i: [f"--timeline={os.path.join(args.timeline, f'server{i}.jsonl')}"]
                             for i in range(3) if args.timeline})
        for gbit in (float(g) for g in args.gbit.split(",") if g):
            for mode in args.modes.split(","):
                for wire in args.wire.split(","):
                    step_case(cluster, args, servers, gbit, mode, wire, membw, params)
        if args.failover:
            failover_case(cluster, args, servers)
    finally:
        for proc in cluster.servers if args.timeline else []:
            proc.kill(signal.SIGTERM)  # a server writes its timeline as it stops
        if args.logs:
            os.makedirs(args.logs, exist_ok=True)
            for proc in cluster.procs:
                os.system(f"cp {proc.log} {args.logs}/")
        cluster.close()


if __name__ == "__main__":
    main()
