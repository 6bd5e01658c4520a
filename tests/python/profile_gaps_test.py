"""bench/torch/profile_summary.py's idle_gaps: where a chrome trace's
busiest stream sat idle, by cause (no servers, no GPU: the trace's events
are written here as torch.profiler exports them).

Usage: profile_gaps_test.py; exit 77 (skipped) without torch."""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench", "torch"))

try:
    import torch  # noqa: F401 - profile_summary imports torch.profiler
except ImportError:
    print("skipped: no torch")
    sys.exit(77)

from profile_summary import idle_gaps  # noqa: E402


def kernel(ts, dur, correlation, stream=7):
    return {"ph": "X", "cat": "kernel", "name": "k", "ts": ts, "dur": dur,
            "args": {"stream": stream, "correlation": correlation}}


def launch(ts, correlation, cat="cuda_runtime", tid=1):
    return {"ph": "X", "cat": cat, "name": "cudaLaunchKernel", "ts": ts, "dur": 2, "tid": tid,
            "args": {"correlation": correlation}}


def op(name, ts, dur, tid=1, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid}


class IdleGapsTest(unittest.TestCase):
    def test_gaps_by_cause(self):
        events = [
            kernel(0, 100, 1), launch(-10, 1),
            # 300 us idle: its kernel launched at 390, inside the step's mm.
            kernel(400, 100, 2), launch(390, 2),
            op("Optimizer.step", 200, 300), op("aten::mm", 385, 10),
            # 400 us idle: launched long before (waited on another stream).
            kernel(900, 100, 3), launch(50, 3),
            # 50 us idle: under the 100 us shown; counted as idle all the same.
            kernel(1050, 100, 4), launch(1049, 4, cat="cuda_driver"),
            # 200 us idle: a driver launch inside one op alone.
            kernel(1350, 50, 5), launch(1340, 5, cat="cuda_driver"), op("aten::mm", 1300, 60),
            # 150 us idle: a launch the trace does not have.
            kernel(1550, 50, 6),
            kernel(0, 10, 9, stream=9),  # another, idler stream: not the compute stream
        ]
        got = idle_gaps(events, steps=2)
        self.assertEqual(got["busy_ms"], 0.25)  # 500 us over 2 steps
        self.assertEqual(got["idle_ms"], 0.55)  # 300 + 400 + 50 + 200 + 150 us
        self.assertEqual(got["gaps_ms"], [
            ["device wait", 0.2, 0.5],
            ["host: Optimizer.step > aten::mm", 0.15, 0.5],
            ["host: aten::mm", 0.1, 0.5],
            ["unknown launch", 0.075, 0.5]])

    def test_overlapping_kernels_leave_no_gap(self):
        events = [kernel(0, 100, 1), kernel(50, 100, 2), kernel(150, 10, 3)]
        self.assertEqual(idle_gaps(events, steps=1),
                         {"busy_ms": 0.16, "idle_ms": 0.0, "gaps_ms": []})

    def test_no_device_work(self):
        self.assertEqual(idle_gaps([op("aten::mm", 0, 5)], steps=1),
                         {"busy_ms": 0.0, "idle_ms": 0.0, "gaps_ms": []})


if __name__ == "__main__":
    unittest.main()
