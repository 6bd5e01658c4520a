"""The step policy through the C API from Python (zerostate.policy), no
servers: the fixed sequence of tests/trainer/testdata/fp16_hysteresis2.json
gives the decisions written there, as it does through the C++ policy
(tests/trainer/policy_test.cc, which checks them against DeepSpeed's rule)
and the worker's path (tests/worker/policy_path_test.cc); the state goes
on exactly through the trainer_state blob; bad input is refused by name.
The share of a range inside a node (zerostate.pipeline.local_share) is
the C++ engine's. And the delayed update's step in flight (zerostate.pipeline.InFlight,
trainer/engine/in_flight.h) and a gather slot (zerostate.pipeline.GatherSlot,
trainer/engine/gather_slot.h) through their C API: their transitions without
servers and each bad input refused by name, nothing changed.

Run with /usr/bin/python3 and ZEROSTATE_CLIENT_LIB (libzerostate_client.so)."""

import ctypes
import json
import math
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

from zerostate.client import ZerostateError, parse_ds_config  # noqa: E402
from zerostate.policy import Policy  # noqa: E402
from zerostate import _capi  # noqa: E402
from zerostate.pipeline import GatherSlot, InFlight, Pusher, local_share  # noqa: E402

with open(os.path.join(ROOT, "tests", "trainer", "testdata", "fp16_hysteresis2.json")) as f:
    FIXTURE = json.load(f)


class PolicyTest(unittest.TestCase):
    def check(self, i, got, want):
        """Skip and the next loss scale exactly; doubles within 1e-12 and
        floats within 1e-6, relative."""
        why = f"step {i}: {want['why']}"
        self.assertEqual(got.skip, want["skip"], why)
        self.assertEqual(got.next_loss_scale, want["next_loss_scale"], why)
        for name, tol in (("grad_norm", 1e-12), ("clip_factor", 1e-12), ("grad_scale", 1e-6),
                          ("lr", 1e-6)):
            self.assertLessEqual(abs(getattr(got, name) - want[name]), tol * abs(want[name]),
                                 f"{why}: {name} {getattr(got, name)} != {want[name]}")

    def run_sequence(self, restore):
        policy = Policy(FIXTURE["train"])
        for i, want in enumerate(FIXTURE["steps"]):
            d = policy.decide(i, want["sum_squares"], want["nonfinite"], FIXTURE["average_over"])
            self.check(i, d, want)
            self.assertEqual(policy.loss_scale, want["next_loss_scale"])
            self.assertEqual(policy.skipped, want["skip"])
            if restore and i in FIXTURE["restore_after"]:
                blob = policy.state()
                policy = Policy(FIXTURE["train"])
                policy.restore(blob)
                self.assertEqual(policy.state(), blob)

    def test_decides_as_the_fixture(self):
        self.run_sequence(restore=False)

    def test_goes_on_exactly_through_the_blob(self):
        self.run_sequence(restore=True)

    def test_from_a_ds_config(self):
        """The ds_config the engine reads becomes the fixture's policy."""
        train, _ = parse_ds_config(json.dumps({
            "gradient_clipping": 1.0,
            "fp16": {"enabled": True, "initial_scale_power": 10, "loss_scale_window": 2,
                     "hysteresis": 2},
            "zerostate": {"train": {"lr": FIXTURE["train"]["lr"]}}}))
        policy = Policy(train)
        for i, want in enumerate(FIXTURE["steps"]):
            self.check(i, policy.decide(i, want["sum_squares"], want["nonfinite"],
                                        FIXTURE["average_over"]), want)

    def test_bad_input_is_refused_by_name_and_changes_nothing(self):
        policy = Policy(FIXTURE["train"])
        policy.decide(0, 0.0, 3, 4)  # an overflow: hysteresis 2 -> 1
        before = policy.state()
        for ss, avg, name in ((1.0, 0, "average_over"), (1.0, math.nan, "average_over"),
                              (-1.0, 4, "sum_squares")):
            with self.assertRaises(ZerostateError) as e:
                policy.decide(1, ss, 0, avg)
            self.assertEqual(e.exception.code, "INVALID_ARGUMENT")
            self.assertIn(name, str(e.exception))
            self.assertEqual(policy.state(), before)
        for blob in (b"", b"loss_scaler/1 skipped=0", b"not a state"):
            with self.assertRaises(ZerostateError) as e:
                policy.restore(blob)
            self.assertEqual(e.exception.code, "DATA_LOSS", blob)
            self.assertEqual(policy.state(), before)
        for train, field in (({"lr": {"lr": 1e-3, "min_lr": 1.0}}, "train.lr.min_lr"),
                             ({"gradient_clipping": -1}, "train.gradient_clipping"),
                             ({"no_such_field": 1}, "no_such_field")):
            with self.assertRaises(ZerostateError) as e:
                Policy(train)
            self.assertEqual(e.exception.code, "INVALID_ARGUMENT")
            self.assertIn(field, str(e.exception))

    def test_ends_delayed_as_the_worker(self):
        """The delayed update's steps (trainer::Policy::EndsDelayed, the
        cases of PolicyTest.EndsDelayedAfterTheWarmupButNotBeforeASyncPoint)."""
        self.assertFalse(Policy({}).ends_delayed(5, False))
        on = Policy({"delayed_update": {"enabled": True, "warmup_steps": 3}})
        self.assertEqual([on.ends_delayed(s, False) for s in range(4)], [False, False, True, True])
        self.assertFalse(on.ends_delayed(2, True))  # version 3 is a checkpoint
        self.assertTrue(Policy({"delayed_update": {"enabled": True}}).ends_delayed(0, False))

    def test_without_fp16_the_scale_stays_one(self):
        policy = Policy({"precision": "PRECISION_BF16"})
        d = policy.decide(0, 1.0, 2, 2)
        self.assertTrue(d.skip)
        self.assertEqual((d.next_loss_scale, policy.loss_scale), (1.0, 1.0))
        self.assertEqual(policy.state(), b"")
        policy.restore(b"")
        self.assertEqual(policy.unclipped_grad_scale(2), 0.5)



class InFlightTest(unittest.TestCase):
    """No servers: the steps in flight here are followed or failed ones (a
    started one, whose Step runs on its own thread, is the C++ test's and
    the engines')."""

    def call(self, fn, *args):
        """fn(*args, &error) -> (code name or None, message)."""
        err = ctypes.c_void_p()
        rc = fn(*args, ctypes.byref(err))
        return _capi.CODE_NAMES.get(rc), _capi.take_string(err.value)

    def test_follow_fail_take(self):
        flight = InFlight()
        self.assertFalse(flight.active())
        self.assertIsNone(flight.take())
        flight.follow(4)
        self.assertTrue(flight.active())
        self.assertFalse(flight.wait_gathers_out(4))  # never waits on a followed step
        self.assertEqual(flight.take(), (4, None, None, False))
        self.assertFalse(flight.active())
        flight.fail(5, ZerostateError("step 5: push failed", "UNAVAILABLE"))
        step, decision, error, refused = flight.take()
        self.assertEqual((step, decision, refused), (5, None, False))
        self.assertEqual((str(error), error.code), ("step 5: push failed", "UNAVAILABLE"))
        flight.fail(6, ZerostateError("lr ratio", "INVALID_ARGUMENT"), refused=True)
        self.assertTrue(flight.take()[3])
        flight.follow(7)
        pusher = Pusher()
        flight.abandon(pusher)  # what a failed step left: dropped
        self.assertFalse(flight.active())
        pusher.drain()
        _capi.lib.zs_abandon(None, None, None, 0)  # nothing to drop
        flight.follow(8, pusher=pusher)  # owns the pusher's pushes (none)
        self.assertEqual(flight.take(), (8, None, None, False))
        flight.follow(9, pusher=pusher)
        pusher.close()  # closes the step owning its pushes first
        self.assertFalse(flight._h)
        flight.close()

    def test_bad_input_is_refused_by_name_and_changes_nothing(self):
        lib = _capi.lib
        flight = InFlight()
        flight.follow(3)
        h = flight._h
        policy = Policy(FIXTURE["train"])
        pusher = Pusher()
        wait = _capi.Wait(_capi.WAIT_FN(), None)  # no fn
        verdict = _capi.Verdict()
        cases = [
            ((lib.zs_in_flight_create, None), "INVALID_ARGUMENT", "out: null"),
            ((lib.zs_in_flight_start, None, 1, policy._h, 4, 1.0, 0.0, 0, None, None, 0),
             "INVALID_ARGUMENT", "in_flight: null"),
            ((lib.zs_in_flight_start, h, None, policy._h, 4, 1.0, 0.0, 0, None, None, 0),
             "INVALID_ARGUMENT", "job: null"),
            ((lib.zs_in_flight_follow, None, 4, None, 0), "INVALID_ARGUMENT", "in_flight: null"),
            ((lib.zs_in_flight_follow, h, 4, None, 0), "FAILED_PRECONDITION",
             "step 3 is in flight"),
            ((lib.zs_in_flight_fail, h, 4, 14, b"x", 0, None, 0), "FAILED_PRECONDITION",
             "step 3 is in flight"),
            ((lib.zs_in_flight_fail, h, 4, 0, b"x", 0, None, 0), "INVALID_ARGUMENT",
             "code: 0 is not a failed status's"),
            ((lib.zs_in_flight_fail, h, 4, 17, b"x", 0, None, 0), "INVALID_ARGUMENT",
             "code: 17 is not a failed status's"),
            ((lib.zs_in_flight_fail, h, 4, 14, None, 0, None, 0), "INVALID_ARGUMENT",
             "message: null"),
            # A mark past the pushes queued (none): refused before the state is looked at.
            ((lib.zs_in_flight_follow, h, 4, pusher._h, 1), "INVALID_ARGUMENT",
             "mark: 1 is past the 0 pushes queued"),
            ((lib.zs_in_flight_fail, h, 4, 14, b"x", 0, pusher._h, 2), "INVALID_ARGUMENT",
             "mark: 2 is past the 0 pushes queued"),
            ((lib.zs_pusher_drain, None, 0, None), "INVALID_ARGUMENT", "pusher: null"),
            ((lib.zs_pusher_drain, pusher._h, 1, None), "INVALID_ARGUMENT",
             "mark: 1 is past the 0 pushes queued"),
            ((lib.zs_pusher_wait_through, None, 0), "INVALID_ARGUMENT", "pusher: null"),
            ((lib.zs_pusher_wait_through, pusher._h, 3), "INVALID_ARGUMENT",
             "mark: 3 is past the 0 pushes queued"),
            ((lib.zs_in_flight_take, None, None, ctypes.byref(verdict), None, None),
             "INVALID_ARGUMENT", "in_flight: null"),
            ((lib.zs_in_flight_take, h, None, None, None, None), "INVALID_ARGUMENT", "out: null"),
        ]
        for args, code, message in cases:
            got = self.call(*args)
            self.assertEqual(got[0], code, f"{args[0].__name__}: {got}")
            self.assertIn(message, got[1], args[0].__name__)
            self.assertTrue(flight.active(), args[0].__name__)  # step 3 still in flight
        # before_step without a fn: refused before the job is looked at.
        got = self.call(lib.zs_in_flight_start, h, 1, policy._h, 4, 1.0, 0.0, 0,
                        ctypes.byref(wait), None, 0)
        self.assertEqual(got, ("INVALID_ARGUMENT", "before_step->fn: null"))
        got = self.call(lib.zs_in_flight_start, h, 1, policy._h, 4, 1.0, 0.0, 0, None,
                        pusher._h, 1)
        self.assertEqual(got, ("INVALID_ARGUMENT", "mark: 1 is past the 0 pushes queued"))
        self.assertEqual((lib.zs_pusher_mark(None), lib.zs_pusher_done_through(None, 0)), (0, 0))
        self.assertEqual(lib.zs_pusher_done_through(pusher._h, 1), 0)  # past: not done
        self.assertEqual(lib.zs_pusher_done_through(pusher._h, 0), 1)
        pusher.close()
        self.assertEqual(lib.zs_in_flight_active(None, None), 0)
        self.assertEqual(lib.zs_in_flight_wait_gathers_out(None, 3), 0)
        self.assertEqual(flight.take()[0], 3)
        flight.close()


class GatherSlotTest(unittest.TestCase):
    """No servers: an idle slot's transitions and the C API's bad input
    (a fetch's, whose gather needs servers, is the engines' tests')."""

    def test_idle_slot(self):
        slot = GatherSlot(0, 8)
        self.assertIsNone(slot.pending())
        self.assertFalse(slot.land())  # nothing fetched: nothing to land
        with self.assertRaises(ZerostateError) as e:
            slot.landed()
        self.assertEqual(e.exception.code, "FAILED_PRECONDITION")
        self.assertIn("gather slot [0, 8): landed while idle", str(e.exception))
        slot.drop()  # nothing to drop
        with self.assertRaises(ZerostateError) as e:
            slot.wait(3)
        self.assertEqual(e.exception.code, "ABORTED")
        self.assertIn("version 3 was not fetched", str(e.exception))
        slot.close()

    def test_bad_input_is_refused_by_name(self):
        lib = _capi.lib
        slot = GatherSlot(0, 8)
        h = slot._h
        wait = _capi.Wait(_capi.WAIT_FN(), None)  # no fn
        take = ctypes.c_int()
        cases = [
            ((lib.zs_gather_slot_create, 0, 8, None), "INVALID_ARGUMENT", "out: null"),
            ((lib.zs_gather_slot_create, 9, 8, ctypes.byref(ctypes.c_void_p())),
             "INVALID_ARGUMENT", "begin: 9 is past end 8"),
            ((lib.zs_gather_slot_fetch, None, None, 1, None, 0, 0), "INVALID_ARGUMENT",
             "slot: null"),
            ((lib.zs_gather_slot_fetch, h, None, 1, None, 0, 0), "INVALID_ARGUMENT",
             "job: null"),
            ((lib.zs_gather_slot_land, None, ctypes.byref(take)), "INVALID_ARGUMENT",
             "slot: null"),
            ((lib.zs_gather_slot_land, h, None), "INVALID_ARGUMENT", "take_part: null"),
            ((lib.zs_gather_slot_landed, None, None), "INVALID_ARGUMENT", "slot: null"),
            ((lib.zs_gather_slot_landed, h, ctypes.byref(wait)), "INVALID_ARGUMENT",
             "reuse->fn: null"),
            ((lib.zs_gather_slot_drop, None), "INVALID_ARGUMENT", "slot: null"),
            ((lib.zs_gather_slot_wait, None, 1), "INVALID_ARGUMENT", "slot: null"),
        ]
        for args, code, message in cases:
            err = ctypes.c_void_p()
            rc = args[0](*args[1:], ctypes.byref(err))
            got = (_capi.CODE_NAMES.get(rc), _capi.take_string(err.value))
            self.assertEqual(got[0], code, f"{args[0].__name__}: {got}")
            self.assertIn(message, got[1], args[0].__name__)
            self.assertIsNone(slot.pending(), args[0].__name__)
        self.assertEqual(lib.zs_gather_slot_pending(None, None), 0)
        slot.close()



class LocalShareTest(unittest.TestCase):
    def test_shares_are_the_engines(self):
        """Chunks of whole 64-element units (trainer::LocalChunk), in rank
        order, the last ones shorter or empty; they cover the range."""
        self.assertEqual(local_share(0, 816, 2, 0), (0, 448, 448))
        self.assertEqual(local_share(0, 816, 2, 1), (448, 816, 448))
        self.assertEqual(local_share(100, 130, 4, 1), (130, 130, 64))  # empty
        self.assertEqual(local_share(100, 130, 1, 0), (100, 130, 64))
        for n, ranks in ((1, 3), (64, 2), (1000, 8), (12345, 3)):
            shares = [local_share(7, 7 + n, ranks, r) for r in range(ranks)]
            self.assertEqual(shares[0][0], 7)
            self.assertEqual(shares[-1][1], 7 + n)
            for (_, hi, _), (lo, _, _) in zip(shares, shares[1:]):
                self.assertEqual(hi, lo)

    def test_bad_input_is_refused_by_name(self):
        for args, message in (((0, 10, 0, 0), "local_size: must be >= 1"),
                              ((0, 10, 2, 2), "local_rank: 2 is not below local_size 2"),
                              ((11, 10, 1, 0), "begin: 11 is past end 10")):
            with self.assertRaisesRegex(ZerostateError, "INVALID_ARGUMENT: " + message):
                local_share(*args)
        err = ctypes.c_void_p()
        rc = _capi.lib.zs_local_share(0, 10, 1, 0, None, None, None, ctypes.byref(err))
        self.assertEqual((_capi.CODE_NAMES[rc], _capi.take_string(err.value)),
                         ("INVALID_ARGUMENT", "share_begin: null"))


if __name__ == "__main__":
    unittest.main()
