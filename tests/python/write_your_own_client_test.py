"""The example of docs/write-your-own-client.md, run as the page says
against three real zerostate-server processes (the third holds no block),
ends at the weights of AdamW written in numpy with torch's formulas in fp32,
within TOLERANCE.

  write_your_own_client_test.py  (the server binary: $ZEROSTATE_SERVER)
Exits 77 (skip) when protoc, grpc_python_plugin, python3-grpcio or the
server binary is absent.
"""
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

import grpc_stubs
import zs_servers

TOLERANCE = 1e-5  # absolute, on weights of order 1: fp32 constants rounded differently


def numpy_adamw(ex):
    """The example's training, with torch.optim.AdamW's update in numpy."""
    b1, b2, eps, wd = 0.9, 0.999, 1e-8, 0.01  # the server's defaults, the example's decay
    w = np.zeros(ex.D, np.float32)
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t in range(1, ex.STEPS + 1):
        g = ex.gradient(w).astype(np.float32)
        squares = float(np.sum(g.astype(np.float64) ** 2))
        g = g * np.float32(min(1.0, ex.CLIP / (math.sqrt(squares) + 1e-6)))
        w = w * np.float32(1 - ex.LR * wd)
        m = np.float32(b1) * m + np.float32(1 - b1) * g
        v = np.float32(b2) * v + np.float32(1 - b2) * g * g
        denom = np.sqrt(v) / np.float32(math.sqrt(1 - b2 ** t)) + np.float32(eps)
        w = w - np.float32(ex.LR / (1 - b1 ** t)) * m / denom
    return w


def main():
    grpc_stubs.require()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "train.py")
        with open(path, "w") as f:
            f.write(grpc_stubs.example_source())
        servers = zs_servers.start(3)
        try:
            run = subprocess.run([sys.executable, path, grpc_stubs.PROTO,
                                  *[s.address for s in servers]],
                                 capture_output=True, text=True, timeout=100, cwd=tmp)
        finally:
            for s in servers:
                s.stop()
        if run.returncode != 0:
            print(run.stdout, run.stderr, sep="\n")
            raise AssertionError(f"the example exited with {run.returncode}")
        got = np.array(json.loads(run.stdout.splitlines()[-1]), np.float32)
        spec = importlib.util.spec_from_file_location("example", path)
        ex = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(ex)  # its definitions only: main() is not run on import
    want = numpy_adamw(ex)
    err = float(np.max(np.abs(got - want)))
    print(f"figure max |server - numpy AdamW| after {ex.STEPS} steps: {err:.3g} (tolerance {TOLERANCE})")
    assert got.shape == want.shape, (got.shape, want.shape)
    assert np.max(np.abs(want)) > 0.1, "training did not move the weights: the check is vacuous"
    loss = lambda w: float(np.mean((ex.X @ w - ex.Y) ** 2))
    assert loss(got) < loss(np.zeros_like(got)), "the loss did not go down"
    assert err <= TOLERANCE, f"weights differ from the numpy reference by {err}"
    print("ok")


if __name__ == "__main__":
    main()
