"""zerostate.torch with two ranks (torch.distributed, gloo) against real
servers: ranks that seed their initial weights differently start from
rank 0's, as DDP and DeepSpeed broadcast them; a server restarted under
two ranks is named, and every rank rolls back from it, at once; a server
gone for good ends every rank, naming it, after the server wait. Debian's
CPU torch: engine_ranks_test.py [TestCase ...]. Exit 77 without torch or
a server."""

import os
import re
import signal
import sys
import tempfile
import threading
import time
import unittest

import zs_servers

try:
    import torch
except ImportError:
    print("skipped: no torch")
    sys.exit(77)

import zerostate.torch as zs
from engine_test import CONFIG, Net, loss_of, max_relative, reference, schedule

STEPS = 10


def join(rank, world, init_file):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world), GROUP_RANK="0")
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                                         world_size=world)


def seeded_rank(rank, world, init_file, addresses, out_dir):
    """Rank r seeds its model with r; every rank saves its weights after
    initialize and after STEPS steps."""
    join(rank, world, init_file)
    torch.manual_seed(rank)
    model = Net()
    buffer = torch.full((3,), float(rank))
    model.register_buffer("marker", buffer)
    engine, *_ = zs.initialize(model=model, config=CONFIG, servers=addresses, job="seeded",
                               plaintext=True, bucket_elems=600,
                               lr_scheduler=lambda o: torch.optim.lr_scheduler.LambdaLR(
                                   o, schedule))
    torch.save(model.state_dict(), os.path.join(out_dir, f"start{rank}.pt"))
    for s in range(STEPS):
        engine.backward(loss_of(engine, s, rank))
        engine.step()
    torch.save(model.state_dict(), os.path.join(out_dir, f"end{rank}.pt"))
    engine.close()
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def restarted_rank(rank, world, init_file, addresses, ckpt_dir, out_dir, restart, restarted):
    """One node of two ranks (each pushes half of every bucket), a
    checkpoint every 3 steps; before step 4 rank 0 has the test restart
    server 1 empty; every rank rolls back to step 3 and trains to step 6.
    Each rank saves its weights and the RolledBack messages."""
    join(rank, world, init_file)
    torch.manual_seed(0)
    engine, *_ = zs.initialize(model=Net(), config=CONFIG, servers=addresses, job="restarted",
                               plaintext=True, bucket_elems=1 << 20, checkpoint_dir=ckpt_dir,
                               checkpoint_every=3, token="ranks-test-token".ljust(40, "x"),
                               lr_scheduler=lambda o: torch.optim.lr_scheduler.LambdaLR(
                                   o, schedule))
    s, rolled = 0, []
    while s < 6:
        if s == 4 and not rolled:
            torch.distributed.barrier()
            if rank == 0:
                restart.set()
                restarted.wait()
            torch.distributed.barrier()
        try:
            engine.backward(loss_of(engine, s, rank))
            engine.step()
            s += 1
        except zs.RolledBack as e:
            rolled.append(str(e))
            s = engine.global_steps
    torch.save({"weights": engine.module.state_dict(), "rolled": rolled},
               os.path.join(out_dir, f"rank{rank}.pt"))
    engine.close()
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def gone_rank(rank, world, init_file, addresses, out_dir, fetched, kill, killed):
    """Two ranks, a delayed update, no checkpoint, a 1 s server wait:
    server 1 dies after serving step 3's pushes, with rank 1's gathers of
    version 4 in flight, before rank 0 asks for the step's statistics
    (the test kills it in between). Each rank saves its error."""
    join(rank, world, init_file)
    torch.manual_seed(0)
    config = dict(CONFIG, zero_optimization={"delayed_update": {"enabled": True,
                                                                "warmup_steps": 1}})
    engine, *_ = zs.initialize(model=Net(), config=config, servers=addresses, job="gone",
                               plaintext=True, bucket_elems=1 << 20, unavailable_wait=1,
                               token="ranks-test-token".ljust(40, "x"))
    if rank == 0:  # the delayed step in flight (statistics, decision, Step) in the C++ engine
        start = engine._in_flight.start

        def kill_first(job, policy, step, *args, **kwargs):
            if step == 3:
                fetched.wait()
                kill.set()
                killed.wait()
            return start(job, policy, step, *args, **kwargs)
        engine._in_flight.start = kill_first
    else:
        fetch = engine._fetch

        def signal_fetch(version):
            fetch(version)
            if version == 4:
                fetched.set()
        engine._fetch = signal_fetch
    error = None
    try:
        for s in range(8):
            engine.backward(loss_of(engine, s, rank))
            engine.step()
        engine.sync_weights()
    except zs.ZerostateError as e:
        error = str(e)
    with open(os.path.join(out_dir, f"rank{rank}.txt"), "w") as f:
        f.write(repr(error))
    engine.close()
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


class RanksTest(zs_servers.ServersTestCase):
    def test_restarted_server_rolls_every_rank_back_at_once(self):
        """Server 1 restarted empty under two ranks: each hears the new
        process's answer, the server named, and every rank rolls back to
        the checkpoint of step 3 together, ending as AdamW on the mean
        gradient of an undisturbed run."""
        torch.manual_seed(0)
        want = reference(Net(), 6, ranks=2)
        ctx = torch.multiprocessing.get_context("spawn")
        restart, restarted = ctx.Event(), ctx.Event()

        def serve():
            restart.wait()
            self.servers[1].restart()
            restarted.set()

        helper = threading.Thread(target=serve, daemon=True)
        helper.start()
        with tempfile.TemporaryDirectory() as tmp:
            torch.multiprocessing.spawn(
                restarted_rank, nprocs=2,
                args=(2, os.path.join(tmp, "init"), self.addresses, os.path.join(tmp, "ck"), tmp,
                      restart, restarted))
            out = [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(2)]
        helper.join()
        victim = self.servers[1].address
        for r, o in enumerate(out):
            self.assertEqual(len(o["rolled"]), 1, o["rolled"])
            self.assertRegex(o["rolled"][0], f"step 4: .*{re.escape(victim)}.*the job token is "
                             "not valid on this server.*rolled back to the checkpoint of step 3")
        model = Net()
        model.load_state_dict(out[0]["weights"])
        for k, v in out[1]["weights"].items():
            self.assertTrue(torch.equal(out[0]["weights"][k], v), k)
        self.assertLess(max_relative(model, want), 1e-6)

    def test_differently_seeded_ranks_start_from_rank_0(self):
        torch.manual_seed(0)
        want = reference(Net(), STEPS, ranks=2)
        with tempfile.TemporaryDirectory() as tmp:
            torch.multiprocessing.spawn(seeded_rank, nprocs=2,
                                        args=(2, os.path.join(tmp, "init"), self.addresses, tmp))
            states = {n: torch.load(os.path.join(tmp, f"{n}.pt"))
                      for n in ("start0", "start1", "end0", "end1")}
        for k, v in states["start0"].items():
            self.assertTrue(torch.equal(states["start1"][k], v), k)
        for k, v in states["end0"].items():
            self.assertTrue(torch.equal(states["end1"][k], v), k)
        model = Net()
        model.register_buffer("marker", torch.zeros(3))
        model.load_state_dict(states["end0"])
        err = max_relative(model, want)
        print(f"ranks seeded 0 and 1, {STEPS} steps: max relative difference {err:.2e} to rank "
              "0's start")
        self.assertLess(err, 1e-6)


class ServerGoneTest(zs_servers.ServersTestCase):
    def test_server_gone_ends_every_rank_naming_it(self):
        """Server 1 killed for good under two ranks with a delayed update
        and no checkpoint: rank 0 waits the server wait (unavailable_wait)
        for it, deletes the job on server 0, so rank 1's gather of a version
        that never comes ends at once, and every rank raises an error naming
        the server, well before the gathers' rpc_timeouts (5 x 60 s) ran out.
        The bound is for "it ends", not a speed target."""
        ctx = torch.multiprocessing.get_context("spawn")
        fetched, kill, killed = ctx.Event(), ctx.Event(), ctx.Event()
        killed_at = []

        def killer():
            kill.wait()
            self.servers[1].stop(signal.SIGKILL)
            killed_at.append(time.monotonic())
            killed.set()

        helper = threading.Thread(target=killer, daemon=True)
        helper.start()
        with tempfile.TemporaryDirectory() as tmp:
            ranks = torch.multiprocessing.spawn(
                gone_rank, nprocs=2, join=False,
                args=(2, os.path.join(tmp, "init"), self.addresses, tmp, fetched, kill, killed))
            deadline = time.monotonic() + 240
            while not ranks.join(timeout=1):
                if killed_at and time.monotonic() > min(deadline, killed_at[0] + 60):
                    for p in ranks.processes:
                        p.kill()
                    self.fail("the ranks did not end within 60 s of the kill")
            errors = []
            for r in range(2):
                with open(os.path.join(tmp, f"rank{r}.txt")) as f:
                    errors.append(f.read())
        victim = re.escape(self.servers[1].address)
        for r, e in enumerate(errors):
            print(f"rank {r}: {e}")
            self.assertRegex(e, f"step 3: .*{victim}.*a server did not answer within the server "
                             f"wait \\(1s\\): .*{victim}.*job gone was deleted on the servers "
                             "that answer", f"rank {r}")


if __name__ == "__main__":
    unittest.main()
