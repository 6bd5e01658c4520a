"""zerostate.torch with two ranks (torch.distributed, gloo) against real
servers: ranks that seed their initial weights differently start from
rank 0's, as DDP and DeepSpeed broadcast them; a server restarted under
two ranks is named, and rolled back from, at once. Debian's CPU torch:
engine_ranks_test.py [TestCase ...]. Exit 77 without torch or a server."""

import os
import sys
import tempfile
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


class RanksTest(zs_servers.ServersTestCase):
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


if __name__ == "__main__":
    unittest.main()
