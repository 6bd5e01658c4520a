"""Every resume and rollback of zerostate.torch is exact: by re-initializing
the job, from a checkpoint_every checkpoint, across a server restart, with
an LR scheduler and BatchNorm buffers; a server back after 10 s; a
restarted server named at once. Real servers, Debian's CPU torch:
engine_resume_test.py [TestCase ...]. Exit 77 without torch or a server."""

import copy
import os
import re
import signal
import sys
import tempfile
import threading
import unittest

import zs_servers

try:
    import torch
except ImportError:
    print("skipped: no torch")
    sys.exit(77)

import zerostate.torch as zs
from engine_test import CONFIG, batch, schedule

SCHEDULED = dict(CONFIG, scheduler={"type": "WarmupDecayLR", "params": {
    "warmup_min_lr": 0, "warmup_max_lr": 0.01, "warmup_num_steps": 4,
    "total_num_steps": 30, "warmup_type": "linear"}})


class BnNet(torch.nn.Module):
    """An MLP with a BatchNorm: running statistics (fp32) and a counter
    (int64) besides the weights."""

    def __init__(self, d=16, hidden=32):
        super().__init__()
        self.inp = torch.nn.Linear(d, hidden)
        self.bn = torch.nn.BatchNorm1d(hidden)
        self.out = torch.nn.Linear(hidden, d)

    def forward(self, x):
        return self.out(torch.relu(self.bn(self.inp(x))))


def step_once(engine, s):
    x, y = batch(s)
    engine.backward(torch.nn.functional.mse_loss(engine(x), y))
    engine.step()


def run(engine, start, stop):
    for s in range(start, stop):
        step_once(engine, s)
    return engine


def run_through_fault(engine, stop, at, fault):
    """Steps 0 to `stop`, with fault() before step `at` (once); after a
    RolledBack, on from engine.global_steps. Returns the RolledBack messages."""
    s, rolled, done = 0, [], False
    while s < stop:
        if s == at and not done:
            fault()
            done = True
        try:
            step_once(engine, s)
            s += 1
        except zs.RolledBack as e:
            rolled.append(str(e))
            s = engine.global_steps
    return rolled


def assert_same_state(test, a, b):
    """Every parameter and buffer of modules a and b, bit for bit, same dtype."""
    sa, sb = a.state_dict(), b.state_dict()
    test.assertEqual(list(sa), list(sb))
    for k in sa:
        test.assertEqual(sa[k].dtype, sb[k].dtype, k)
        test.assertTrue(torch.equal(sa[k], sb[k]), k)


class ServersTest(zs_servers.ServersTestCase):
    def engine(self, job, model=None, seed=0, **kw):
        kw.setdefault("config", CONFIG)
        kw.setdefault("lr_scheduler", lambda o: torch.optim.lr_scheduler.LambdaLR(o, schedule))
        torch.manual_seed(seed)
        kw.setdefault("bucket_elems", 600)
        engine, *_ = zs.initialize(model=model or BnNet(), servers=self.addresses, job=job,
                                   plaintext=True, token="resume-test-token".ljust(40, "x"),
                                   **kw)
        self.engines.append(engine)
        return engine


class ResumeTest(ServersTest):
    def test_reinitialize_resumes_the_ds_config_schedule(self):
        """A new engine of the same job id (a new process, as
        examples/gpt/train.py resumes) goes on with the ds_config schedule
        where the job is, and ends bit-identical to an uninterrupted run."""
        whole = run(self.engine("sched-whole", config=SCHEDULED, lr_scheduler=None), 0, 12)
        first = run(self.engine("sched-again", config=SCHEDULED, lr_scheduler=None), 0, 6)
        lr_at_6 = first.optimizer.param_groups[0]["lr"]
        first.close()
        self.engines.remove(first)
        again = self.engine("sched-again", config=SCHEDULED, lr_scheduler=None, seed=7)
        self.assertEqual(again.global_steps, 6)
        self.assertEqual(again.optimizer.param_groups[0]["lr"], lr_at_6)
        self.assertEqual(again.lr_scheduler.last_epoch, 6)
        run(again, 6, 12)
        for (n, p), q in zip(again.module.named_parameters(), whole.module.parameters()):
            self.assertTrue(torch.equal(p, q), n)

    def test_checkpoint_every_resume_is_bit_identical(self):
        """checkpoint_every=5 with an LR scheduler: the checkpoint of step 10
        holds the scheduler at epoch 10; a resume from it ends bit-identical
        (weights and BatchNorm buffers) to an uninterrupted run."""
        whole = run(self.engine("every-whole"), 0, 16)
        with tempfile.TemporaryDirectory() as tmp:
            first = run(self.engine("every-resumed", checkpoint_dir=tmp, checkpoint_every=5),
                        0, 12)
            first.close()
            self.engines.remove(first)
            second = self.engine("every-resumed", seed=5)
            where, _ = second.load_checkpoint(tmp)
            self.assertEqual(where, os.path.join(tmp, "global_step10"))
            self.assertEqual(second.global_steps, 10)
            self.assertEqual(second.lr_scheduler.last_epoch, 10)
            run(second, 10, 16)
        assert_same_state(self, second.module, whole.module)

    def test_batchnorm_buffers_across_save_and_load(self):
        """Buffers are saved and loaded in their own dtype (int64 counter)."""
        engine = run(self.engine("bn-save"), 0, 4)
        with tempfile.TemporaryDirectory() as tmp:
            engine.save_checkpoint(tmp)
            saved = copy.deepcopy(engine.module.state_dict())
            run(engine, 4, 7)
            self.assertFalse(torch.equal(engine.module.bn.running_mean, saved["bn.running_mean"]))
            engine.load_checkpoint(tmp)
        got = engine.module.state_dict()
        for k, v in saved.items():
            self.assertEqual(got[k].dtype, v.dtype, k)
            self.assertTrue(torch.equal(got[k], v), k)
        self.assertEqual(int(got["bn.num_batches_tracked"]), 4)


class RollbackTest(ServersTest):
    def test_rollback_with_a_scheduler_and_batchnorm_is_bit_identical(self):
        """A server restarted empty at step 8, checkpoint_every=5, an LR
        scheduler and BatchNorm: the engine rolls back to step 5 and ends
        bit-identical (weights and buffers) to a run without the fault."""
        whole = run(self.engine("rb-whole"), 0, 12)
        with tempfile.TemporaryDirectory() as tmp:
            faulty = self.engine("rb-faulty", checkpoint_dir=tmp, checkpoint_every=5,
                                 max_attempts=2)
            rolled = run_through_fault(faulty, 12, 8, self.servers[1].restart)
        self.assertEqual(len(rolled), 1, rolled)
        self.assertRegex(rolled[0], "step 8: .*rolled back to the checkpoint of step 5")
        assert_same_state(self, faulty.module, whole.module)

    def test_restarted_server_is_named_at_once(self):
        """A restarted server that lost the job, with a long unavailable_wait,
        30 attempts and many idle data-plane connections to its old process
        (a gather per module, at once, every step): the step
        fails with the new process's answer, the server named, after a
        broken connection or two, not one retry per stale connection (no
        checkpoint: the engine stops)."""
        layers = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(12)])
        engine = run(self.engine("named", model=layers, unavailable_wait=120, max_attempts=30),
                     0, 3)
        self.servers[0].restart()
        x, y = batch(3)
        engine.backward(torch.nn.functional.mse_loss(engine(x), y))
        address = self.servers[0].address.replace(".", r"\.")
        with self.assertRaisesRegex(zs.ZerostateError, f"step 3: .*UNAUTHENTICATED: "
                                    f"PushGradients to {address}"
                                    r"( \(after \d+ attempts\))?: the job token is not "
                                    "valid on this server") as caught:
            engine.step()
        attempts = re.search(r"after (\d+) attempts", str(caught.exception))
        self.assertLessEqual(int(attempts.group(1)) if attempts else 1, 5, caught.exception)


class ServerBackTest(ServersTest):
    def test_server_back_after_10s_rolls_back(self):
        """A server killed at step 8 and back 10 s later, empty: the step
        waits for it (unavailable_wait: by default with checkpoint_every),
        the engine rolls back to its checkpoint of step 5 and ends
        bit-identical to a run without the fault."""
        whole = run(self.engine("back-whole"), 0, 12)
        with tempfile.TemporaryDirectory() as tmp:
            # unavailable_wait's default with checkpoint_every: 300 s.
            faulty = self.engine("back-faulty", checkpoint_dir=tmp, checkpoint_every=5)
            back = threading.Timer(10.0, self.servers[1].start_again)

            def kill():
                self.servers[1].stop(signal.SIGKILL)
                back.start()

            rolled = run_through_fault(faulty, 12, 8, kill)
            back.join()
        self.assertEqual(len(rolled), 1, rolled)
        self.assertRegex(rolled[0], "step 8: .*rolled back to the checkpoint of step 5")
        assert_same_state(self, faulty.module, whole.module)


if __name__ == "__main__":
    unittest.main()
