"""examples/gpt/train.py and bench/torch/bench_gpt.py run end to end on the
CPU against real servers: the tiny GPT learns (its loss falls) and ends
where train.py's --reference mode (torch.optim.AdamW, what make demo
compares against) ends, and the bench's CPU variant prints every figure it
promises.

Usage: example_test.py [TestCase ...]; exit 77 (skipped) without torch or
a server binary."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import zs_servers

try:
    import torch  # noqa: F401
except ImportError:
    print("skipped: no torch")
    sys.exit(77)

ROOT = zs_servers.ROOT
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from demo_report import distance  # noqa: E402


def run(argv, env=None):
    proc = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), timeout=240)
    if proc.returncode != 0:
        raise AssertionError(f"{argv[0]} failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


class GptExampleTest(unittest.TestCase):
    def test_tiny_gpt_learns(self):
        servers = zs_servers.start(2)
        tiny = ["examples/gpt/train.py", "--steps=30", "--batch=4", "--seq=32", "--json",
                "--eval_every=10"]
        with tempfile.TemporaryDirectory() as tmp:
            try:
                out = run([*tiny, "--servers=" + ",".join(s.address for s in servers),
                           "--plaintext", f"--save_weights={tmp}/zs.pt",
                           f"--loss_log={tmp}/zs.json"])
            finally:
                for s in servers:
                    s.stop()
            ref = run([*tiny, "--reference=1", f"--save_weights={tmp}/ref.pt",
                       f"--loss_log={tmp}/ref.json"])
            rel, largest = distance(torch.load(f"{tmp}/zs.pt"), torch.load(f"{tmp}/ref.pt"))
            with open(f"{tmp}/zs.json") as f, open(f"{tmp}/ref.json") as g:
                zs_log, ref_log = json.load(f), json.load(g)
        print(out, ref, f"relative distance {rel:.2e}, largest element {largest:.2e}")
        self.assertEqual(out["steps"], 30)
        # ln(256) = 5.55 at the start; about 4.3 after 30 steps.
        self.assertLess(out["last_loss"], 0.85 * out["first_loss"])
        self.assertAlmostEqual(out["first_loss"], ref["first_loss"], places=5)
        self.assertLess(rel, 1e-4)
        # The held-out batches: before training, every 10 steps, at the end;
        # the servers' run lands each step's weights first, so it evaluates
        # what the reference does.
        self.assertEqual(zs_log["eval_steps"], [0, 10, 20, 30])
        self.assertEqual(ref_log["eval_steps"], [0, 10, 20, 30])
        self.assertLess(zs_log["eval_loss"][-1], 0.85 * zs_log["eval_loss"][0])
        for a, b in zip(zs_log["eval_loss"], ref_log["eval_loss"]):
            self.assertAlmostEqual(a, b, delta=1e-3 * b)
        self.assertEqual(out["held_out_loss"], zs_log["eval_loss"][-1])


class BenchTinyTest(unittest.TestCase):
    def test_cpu_variant_prints_every_figure(self):
        out = run(["bench/torch/bench_gpt.py", "--device=cpu", "--model=tiny", "--json",
                   "--rounds=2", "--accum=2", "--steps=2", "--server_threads=1",
                   "--wires=bf16,int8", "--link_gbit=25", "--profile_steps=1",
                   "--server_bin=" + zs_servers.server_binary()])
        print(out)
        self.assertEqual([r["accum"] for r in out["runs"]], [2])
        modes = {"sync", "speculative", "delayed", "sync_int8", "speculative_int8",
                 "delayed_int8"}
        systems = {"torch_adamw"} | {f"zerostate_{m}" for m in modes}
        for r in out["runs"]:
            self.assertEqual(r["errors"], {})
            self.assertEqual(set(r["tokens_per_s"]), systems)
            self.assertEqual({k: len(v) for k, v in r["tokens_per_s_rounds"].items()},
                             {k: 2 for k in systems})
            self.assertIn("zerostate_delayed/torch_adamw", r["ratios"])
            self.assertEqual(set(r["zerostate"]), modes)
            for m in ("sync", "speculative", "delayed"):
                plain, int8 = r["zerostate"][m], r["zerostate"][f"{m}_int8"]
                # (servers on this host: the same-host plane moves plain
                # dtypes, so both wires move about the same bytes here)
                self.assertGreater(int8["wire_bytes"], 0)
                self.assertGreater(int8["bf16_step_over_this"], 0)
                self.assertGreater(plain["step_over_wire_floor"], 0)
            for z in r["zerostate"].values():
                self.assertEqual(set(z["exposed_s"]), {"push", "step", "gather"})
                # Where the step went: the engine's host work (in the
                # hooks, the lazy landing, the send-ahead, engine.step()), the stalls for and
                # the time of the side streams' copies (none on the CPU),
                # and what is left of the step after compute, waits, stalls.
                self.assertEqual(set(z["host_s"]), {"hooks", "land", "send_ahead", "step_call"})
                self.assertEqual(z["stall_s"], {"stall_grads": 0.0, "stall_weights": 0.0})
                self.assertEqual(z["copy_s"], {"copy_d2h": 0.0, "copy_h2d": 0.0})
                self.assertGreater(z["host_s"]["hooks"], 0)
                self.assertGreater(z["host_s"]["land"], 0)  # bench_gpt lands lazily
                self.assertGreater(z["host_s"]["step_call"], 0)
                rest = z["compute_s"] + sum(z["exposed_s"].values()) + sum(z["stall_s"].values())
                self.assertAlmostEqual(z["unaccounted_s"], z["step_s"] - rest, places=9)
                # One step under torch.profiler, summarized (the CPU's ops).
                self.assertTrue(z["profile"]["top_ms"])
                self.assertGreater(z["profile"]["kernels_ms"], 0)
            for m in ("speculative", "speculative_int8"):
                self.assertGreater(r["zerostate"][m]["host_s"]["send_ahead"], 0)
                self.assertGreater(z["params"], 0)
                self.assertGreater(z["compute_s"], 0)
                self.assertGreater(z["floor_s"], 0)
                self.assertGreater(z["step_over_max_compute_floor"], 0)


class DeviceBreakdownTest(unittest.TestCase):
    def test_cpu_variant_prints_the_breakdown(self):
        """bench/torch/device_breakdown.sh as the GPU machine runs it, on
        the CPU with the tiny model (accumulation 2 in place of 4, fewer
        systems): both processes, then the breakdown table of every run."""
        with tempfile.TemporaryDirectory() as tmp:
            proc = subprocess.run(
                ["bash", "bench/torch/device_breakdown.sh", tmp,
                 "--server_bin=" + os.path.abspath(zs_servers.server_binary())],
                cwd=ROOT, capture_output=True, text=True, timeout=240,
                env=dict(os.environ, BREAKDOWN_CPU="1", PROFILE_STEPS="0"))
        print(proc.stdout[-3000:])
        self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
        self.assertIn("tiny-accum2-1 rc=0", proc.stdout)
        self.assertIn("tiny-accum2 rc=0", proc.stdout)
        table = proc.stdout[proc.stdout.index("| unaccounted ms |"):].splitlines()
        for mode in ("2, sync", "2, speculative", "2, delayed", "1, sync", "1, delayed"):
            # its row in the breakdown table: 8 columns, unaccounted last
            self.assertTrue(any(r.startswith(f"| tiny, {mode} |") and r.count("|") == 9
                                for r in table), mode)

if __name__ == "__main__":
    unittest.main()
