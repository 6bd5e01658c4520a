"""The dashboard's NVMe-tier row shows a live NVMe-tier job.

The worker has no tier setting yet, so a small Python driver plays one
node of a job registered with tier TIER_NVME: it registers the job on two
zerostate-server processes started with --nvme_dir (temporary
directories), then pushes fp32 gradients and orders steps until the test
ends. Debian's Prometheus scrapes the servers (the example config and
rules, 1s interval) and every query of the dashboard's tier row must
return data for the job, and the tier recording rules must hold series
(server 0 runs without a block cache, so it reads from disk too).

Stubs are generated at run time from proto/ with protoc and
grpc_python_plugin (Debian's protobuf-compiler-grpc) for python3-grpcio.

  prometheus_tier_test.py SERVER_BINARY
Exits 77 (skip) only when prometheus, protoc, grpc_python_plugin, the
python grpc module or the server binary is absent.
"""
import importlib
import importlib.util
import os
import shutil
import struct
import subprocess
import sys
import threading
import time

import deploylib as lib
import prometheus_integration_test as live

JOB = "tiertest"
TENSOR_ELEMS = 16384
BLOCK_ELEMS = 4096  # 4 blocks: 2 on each server
TIER_PANELS = ("Tier traffic per server", "Tier I/O latency p99", "Tier cache hit ratio",
               "Tier queue depth")
TIER_RULES = ("instance:zerostate_tier_bytes_read:rate1m", "instance:zerostate_tier_bytes_written:rate1m",
              "instance_op:zerostate_tier_io_duration_seconds:p99_5m")


def generate_stubs(out):
    """Python modules of state_service.proto in `out`; returns (pb2, pb2_grpc)."""
    proto_dir = os.path.join(lib.ROOT, "proto")
    os.makedirs(out)
    subprocess.run([shutil.which("protoc"), f"--proto_path={proto_dir}", f"--python_out={out}",
                    f"--grpc_out={out}", f"--plugin=protoc-gen-grpc={shutil.which('grpc_python_plugin')}",
                    os.path.join(proto_dir, "zerostate", "v1", "state_service.proto")], check=True)
    sys.path.insert(0, out)
    return (importlib.import_module("zerostate.v1.state_service_pb2"),
            importlib.import_module("zerostate.v1.state_service_pb2_grpc"))


class Driver:
    """One node of an NVMe-tier AdamW job over the given servers."""

    def __init__(self, pb, pb_grpc, addresses):
        import grpc
        self.pb, self.addresses = pb, addresses
        self.stubs = [pb_grpc.StateServiceStub(grpc.insecure_channel(a)) for a in addresses]
        # Every call carries the job's token (servers started with --plaintext).
        self.token = [("zerostate-job-token", "prometheus-tier-test-token-0123456789abcdef")]
        self.shards = []  # (first_block, shard_blocks) per server
        self.stop = threading.Event()
        self.error = None

    def register(self):
        pb = self.pb
        spec = pb.JobSpec(job_id=JOB, tensors=[pb.TensorSpec(name="w", shape=[TENSOR_ELEMS])],
                          optimizer=pb.OptimizerConfig(kind=pb.OPTIMIZER_ADAMW), num_nodes=1,
                          grad_dtype=pb.DTYPE_FP32, weight_dtype=pb.DTYPE_FP32,
                          block_elems=BLOCK_ELEMS, seed=1, tier=pb.TIER_NVME)
        for i, stub in enumerate(self.stubs):
            info = stub.RegisterJob(pb.RegisterJobRequest(spec=spec, servers=self.addresses, shard_index=i),
                                    timeout=30, metadata=self.token).info
            self.shards.append((info.first_block, info.shard_blocks))
        if sum(n for _, n in self.shards) != TENSOR_ELEMS // BLOCK_ELEMS or min(n for _, n in self.shards) == 0:
            raise live.Failure(f"unexpected shard map {self.shards}")

    def step(self, step):
        grad = struct.pack(f"<{BLOCK_ELEMS}f", *([0.01 * (1 + step % 3)] * BLOCK_ELEMS))
        for stub, (first, count) in zip(self.stubs, self.shards):
            chunks = [self.pb.Chunk(job_id=JOB, step=step, node=0, block=b, offset=0,
                                    dtype=self.pb.DTYPE_FP32, data=grad) for b in range(first, first + count)]
            stub.PushGradients(iter(chunks), timeout=30, metadata=self.token)
        for stub in self.stubs:
            stub.Step(self.pb.StepRequest(job_id=JOB, step=step, lr=1e-3), timeout=30,
                      metadata=self.token)

    def run(self):
        try:
            step = 0
            while not self.stop.is_set():
                self.step(step)
                step += 1
        except Exception as e:  # reported by the test, which then fails
            self.error = e


def tier_checks(api, driver, deadline):
    def alive(check):
        if driver.error is not None:
            raise live.Failure(f"the driver failed: {driver.error}")
        return check()
    for title, expr in lib.dashboard_queries(lib.load_dashboard()):
        if title in TIER_PANELS:
            expr = expr.replace("$__rate_interval", "10s").replace("$job", JOB)
            live.wait_for(f"dashboard panel '{title}' has data: {expr[:60]}...",
                          lambda e=expr: alive(lambda: len(live.query(api, e)) > 0), deadline)
    def instances(rule):
        return {dict(labels).get("instance") for labels in live.query(api, rule)}
    for rule in TIER_RULES:
        live.wait_for(f"recording rule {rule} has both servers",
                      lambda r=rule: alive(lambda: len(instances(r)) == 2), deadline)
    live.wait_for("disk reads on the server without a cache",
                  lambda: alive(lambda: len(live.query(api, f"{TIER_RULES[0]} > 0")) == 1), deadline)
    for what, rule in (("tier bytes read/s", TIER_RULES[0]), ("tier bytes written/s", TIER_RULES[1])):
        for labels, value in sorted(live.query(api, rule).items()):
            print(f"figure {what} [{dict(labels).get('instance')}]: {value:.4g}B")


def run(server_bin, prom_bin, tmp):
    pb, pb_grpc = generate_stubs(os.path.join(tmp, "gen"))
    cluster = live.Cluster(tmp)
    driver = None
    try:
        dirs = [os.path.join(tmp, f"nvme{i}") for i in range(2)]
        for d in dirs:
            os.makedirs(d)
        # Server 0 has no block cache, so its steps read from disk too.
        servers = live.start_servers(cluster, server_bin, [[f"--nvme_dir={dirs[0]}", "--nvme_cache_bytes=0"],
                                                           [f"--nvme_dir={dirs[1]}"]])
        driver = Driver(pb, pb_grpc, [s[0] for s in servers])
        driver.register()
        threading.Thread(target=driver.run, daemon=True).start()
        config = os.path.join(tmp, "prometheus.yml")
        live.prometheus_config(servers, [], config)
        api = live.start_prometheus(cluster, prom_bin, config, tmp)
        tier_checks(api, driver, time.monotonic() + live.DEADLINE_S)
    except live.Failure:
        print(cluster.logs())
        raise
    finally:
        if driver is not None:
            driver.stop.set()
        cluster.stop()


def main():
    server = sys.argv[1] if len(sys.argv) > 1 else ""
    prom = shutil.which("prometheus") or "/usr/bin/prometheus"
    tools = [shutil.which("protoc"), shutil.which("grpc_python_plugin")]
    if not (os.access(server, os.X_OK) and os.access(prom, os.X_OK) and all(tools)
            and importlib.util.find_spec("grpc")):
        print(f"SKIP: needs prometheus, protoc, grpc_python_plugin, python3-grpcio and the server ({server})")
        return lib.SKIP
    return live.run_in_tmp(lambda tmp: run(server, prom, tmp), "the dashboard's NVMe-tier row shows the job")


if __name__ == "__main__":
    sys.exit(main())
