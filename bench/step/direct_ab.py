"""Direct gather copies, old server against new on this host: one server,
a job of N parameters (bf16 gradients and weights, one node), a same-host
client whose push and gather buffers lie in its shared memory (as
zerostate.torch's Staging); each step pushes, puts the gather of the next
version out before the Step (as the engine does), steps, and waits for the
gather. SPECULATIVE=1: a speculative job; each step puts the gather out,
sends the Step ahead, pushes (the server speculates each block as it
completes), then steps (as zerostate.torch's speculative steps). HELD=1:
the pushes promise their buffer until the step (Job.set_pushes_held; an
older server ignores it). Prints per server the median milliseconds of
step + gather (speculative or held: push + step + gather), the server's CPU milliseconds per step, and the share of
gathered elements the step wrote into the client's buffer itself
(zerostate_gather_direct_elements_total; 0 for a server without that
metric), rounds alternated (the order swapped each round); and whether
the last gather's bytes are the same in every run (they must be: the same
steps). Moved here from bench/results/direct-gather-2026-12-07-vm.

    OLD=old/zerostate-server NEW=build/server/zerostate-server ROUNDS=8 N=$((32<<20)) \
      /usr/bin/python3 bench/step/direct_ab.py
"""
import ctypes, hashlib, os, sys, time, statistics, json
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python")); sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import numpy as np
import zs_servers
from zerostate.client import Client
from zerostate import _capi

N = int(os.environ.get("N", str(32 << 20)))
SERVERS = {"old": os.environ["OLD"], "new": os.environ["NEW"]}
ROUNDS, STEPS = int(os.environ.get("ROUNDS", "4")), int(os.environ.get("STEPS", "6"))
MOMENTS = os.environ.get("MOMENTS", "MOMENTS_FP32")  # the job's moment_format
SPECULATIVE = os.environ.get("SPECULATIVE") == "1"
HELD = os.environ.get("HELD") == "1"  # pushes held until the step (Job.set_pushes_held)

def spec(n):
    return {"job_id": "j", "tensors": [{"name": "w", "shape": [n]}],
            "optimizer": {"kind": "OPTIMIZER_ADAMW"}, "num_nodes": 1,
            "grad_dtype": "DTYPE_BF16", "weight_dtype": "DTYPE_BF16", "streamed_init": True,
            "moment_format": MOMENTS, "speculative_step": SPECULATIVE}

def cpu_seconds(pid):
    """The process's user + system CPU seconds so far."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

def run(server_bin):
    os.environ["ZEROSTATE_SERVER"] = server_bin
    srv = zs_servers.start(1, ["--threads=2", f"--ram_budget_bytes={8 << 30}",
                               "--metrics_listen=127.0.0.1:0"])[0]
    c = Client([srv.address], plaintext=True)
    job = c.register_job(spec(N))
    job.set_pushes_held(HELD)
    w = np.zeros(N, np.float32)
    job.init_weights(0, N, w.ctypes.data, w.nbytes)
    gaddr, _ = c.allocate_shared(N * 2)
    oaddr, _ = c.allocate_shared(N * 2)
    g = np.ctypeslib.as_array((ctypes.c_uint16 * N).from_address(gaddr))
    g[:] = 0x3c00
    times = []
    for s in range(STEPS + 2):
        if s == 2:
            cpu0 = cpu_seconds(srv.proc.pid)
        t0 = time.perf_counter()
        if SPECULATIVE:
            ticket = job.gather_async(s + 1, 0, N, oaddr, N * 2, _capi.DTYPE_BF16)
            job.step_ahead(s, 1e-4, 1.0)
        job.push_async(s, 0, 0, N, gaddr, N * 2, _capi.DTYPE_BF16).wait()
        t1 = time.perf_counter()
        if not SPECULATIVE:
            ticket = job.gather_async(s + 1, 0, N, oaddr, N * 2, _capi.DTYPE_BF16)
        job.step(s, 1e-4, 1.0)
        ticket.wait()
        if s >= 2:
            times.append(time.perf_counter() - (t0 if SPECULATIVE or HELD else t1))
    cpu = (cpu_seconds(srv.proc.pid) - cpu0) / STEPS
    out = np.ctypeslib.as_array((ctypes.c_uint16 * N).from_address(oaddr))
    digest = hashlib.sha256(out.tobytes()).hexdigest()[:16]
    # The share of gathered elements the step wrote into the client's buffer.
    direct = zs_servers.metric(srv.metrics_address, "zerostate_gather_direct_elements_total") / ((STEPS + 2) * N)
    job.close(); c.close(); srv.stop()
    return statistics.median(times) * 1e3, digest, direct, cpu * 1e3

res = {"old": [], "new": []}
cpu_ms = {"old": [], "new": []}  # the server's CPU per step
digests = set()
for r in range(ROUNDS):
    for side in (("old", "new") if r % 2 == 0 else ("new", "old")):
        ms, digest, direct, cpu = run(SERVERS[side])
        res[side].append(ms)
        cpu_ms[side].append(cpu)
        digests.add(digest)
        print(side, round(ms, 1), digest, f"direct {direct:.2f}", f"server CPU {cpu:.1f} ms",
              flush=True)
print("the last gather's bytes, every run:", "the same" if len(digests) == 1 else f"DIFFER {digests}")
print(json.dumps({k: [round(x, 1) for x in v] for k, v in res.items()}))
print(json.dumps({k: round(statistics.median(v), 1) for k, v in res.items()}))
print("server CPU ms per step:", json.dumps({k: round(statistics.median(v), 1) for k, v in cpu_ms.items()}))
