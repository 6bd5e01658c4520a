"""Does an idle job resident on a server slow another job's Step? One server,
job B (N params) stepped alone, then with job A (3N params, registered and
initialized, then idle) resident, then A deleted; repeated."""
import ctypes, os, sys, time, statistics
sys.path.insert(0, "/work/main/python"); sys.path.insert(0, "/work/main/tests/python")
import numpy as np
import zs_servers
from zerostate.client import Client
from zerostate import _capi

N = int(os.environ.get("N", str(48 << 20)))
server_bin = os.environ.get("SERVER", "/work/main/build/server/zerostate-server")
os.environ["ZEROSTATE_SERVER"] = server_bin
srv = zs_servers.start(1, ["--threads=2", f"--ram_budget_bytes={20 << 30}"])[0]
c = Client([srv.address], plaintext=True)

def spec(job, n):
    return {"job_id": job, "tensors": [{"name": "w", "shape": [n]}],
            "optimizer": {"kind": "OPTIMIZER_ADAMW"}, "num_nodes": 1,
            "grad_dtype": "DTYPE_BF16", "weight_dtype": "DTYPE_BF16", "streamed_init": True}

def init(job, n):
    w = np.zeros(n, np.float32)
    job.init_weights(0, n, w.ctypes.data, w.nbytes)

b = c.register_job(spec("b", N)); init(b, N)
g = np.ones(N, np.uint16) * 0x3c00  # bf16 small values
out = np.zeros(N, np.uint16)
step = [0]
def step_b(k):
    ts = []
    for _ in range(k):
        s = step[0]
        b.push_async(s, 0, 0, N, g.ctypes.data, g.nbytes, _capi.DTYPE_BF16).wait()
        t0 = time.perf_counter(); b.step(s, 1e-4, 1.0); ts.append(time.perf_counter() - t0)
        b.gather_async(s + 1, 0, N, out.ctypes.data, out.nbytes, _capi.DTYPE_BF16).wait()
        step[0] += 1
    return statistics.median(ts) * 1e3
res = {"alone": [], "with_a": []}
step_b(2)
for r in range(int(os.environ.get("ROUNDS", "4"))):
    res["alone"].append(step_b(5))
    a = c.register_job(spec(f"a{r}", 3 * N)); init(a, 3 * N)
    res["with_a"].append(step_b(5))
    a.delete(); a.close()
print({k: [round(x, 1) for x in v] for k, v in res.items()})
print({k: round(statistics.median(v), 1) for k, v in res.items()})
srv.stop()
