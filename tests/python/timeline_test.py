"""zerostate.torch.timeline: the step's phases add up, each second counted
once (no servers; Debian's CPU torch, so the CUDA spans stay off).

Usage: timeline_test.py; exit 77 (skipped) without torch."""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

try:
    import torch
except ImportError:
    print("skipped: no torch")
    sys.exit(77)

from zerostate.torch import timeline as tl  # noqa: E402


class TimelineTest(unittest.TestCase):
    def test_a_phase_inside_another_counts_once(self):
        """A wait counted inside engine.step() (here 10 s added by hand, as
        the engine adds a measured wait) is not engine.step()'s own work:
        the outer phase is its time less the inner ones."""
        t = tl.Timeline(torch.device("cpu"))
        with t.host("step_call"):
            t.seconds["server_step"] += 10.0
            with t.host("send_ahead"):
                t.seconds["push_wait"] += 5.0
        self.assertEqual(t.seconds["server_step"], 10.0)
        self.assertEqual(t.seconds["push_wait"], 5.0)
        # each own time is the block's (well under a second) less what it held
        self.assertTrue(-5.0 < t.seconds["send_ahead"] < -4.0, t.seconds)
        self.assertTrue(-15.0 < t.seconds["step_call"] + t.seconds["send_ahead"] < -14.0,
                        t.seconds)

    def test_an_exception_still_counts(self):
        t = tl.Timeline(torch.device("cpu"))
        with self.assertRaises(RuntimeError):
            with t.host("hooks"):
                raise RuntimeError("a hook failed")
        self.assertGreaterEqual(t.seconds["hooks"], 0.0)

    def test_the_cpu_has_no_spans(self):
        """On the CPU trace() stays off: no event, nothing to wait for, the
        GPU phases stay 0; every phase is named in PHASES once."""
        t = tl.Timeline(torch.device("cpu"))
        t.trace(True)
        t.stall(None, "stall_grads")
        self.assertIsNone(t.copy_start(None))
        t.copy_end(None, None, "copy_d2h")
        seconds = t.harvest(wait=True)
        self.assertEqual(sorted(seconds), sorted(tl.PHASES))
        self.assertEqual(len(set(tl.PHASES)), len(tl.PHASES))
        self.assertLessEqual(set(tl.HOST) | set(tl.STALLS) | set(tl.COPIES), set(tl.PHASES))
        self.assertEqual({k: seconds[k] for k in tl.STALLS + tl.COPIES},
                         dict.fromkeys(tl.STALLS + tl.COPIES, 0.0))


if __name__ == "__main__":
    unittest.main()
