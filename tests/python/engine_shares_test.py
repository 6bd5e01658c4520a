"""Shares inside the node: 2 ranks of one node (torch.distributed, gloo)
against 2 real servers. Each rank gathers only its share of every
module's weights and the node all-gathers them, so the node pulls one copy
of the weights per step, not two; counted by the client library's own
byte counters (Client.bytes). Every mode still equals its reference: the
synchronous step with lazy layer-by-layer landing and the speculative
step equal AdamW on the mean gradient, the delayed update equals it
applied one step late. Debian's CPU torch: engine_shares_test.py. Exit 77
without torch or a server."""

import copy
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
from engine_test import CONFIG, Net, loss_of, max_relative, reference, reference_delayed, schedule

STEPS = 8

# (job, ds_config changes, lazy landing)
MODES = [
    ("sync-lazy", {}, True),
    ("speculative", {"zerostate": {"train": {"block_elems": 256, "speculative_step": True}}},
     True),
    ("delayed", {"zero_optimization": {"delayed_update": {"enabled": True, "warmup_steps": 1}}},
     False),
]


def rank_main(rank, init_file, addresses, out_dir):
    """One of 2 ranks of one node: trains each mode STEPS steps and saves,
    per mode, its weights, the bytes its client gathered while training,
    its own shares' and the node's whole module ranges (elements)."""
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE="2", GROUP_RANK="0")
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                                         world_size=2)
    out = {}
    for job, changes, lazy in MODES:
        torch.manual_seed(0)
        config = dict(copy.deepcopy(CONFIG), **changes)
        engine, *_ = zs.initialize(
            model=Net(), config=config, servers=addresses, job=job, plaintext=True,
            bucket_elems=600, lazy_weights=lazy,
            lr_scheduler=lambda o: torch.optim.lr_scheduler.LambdaLR(o, schedule))
        _, before = engine.client.bytes()
        for s in range(STEPS):
            engine.backward(loss_of(engine, s, rank))
            engine.step()
        engine.sync_weights()
        _, after = engine.client.bytes()
        out[job] = {"weights": copy.deepcopy(engine.module.state_dict()),
                    "gathered": after - before,
                    "share": sum(w.hi - w.lo for w in engine._weights),
                    "whole": sum(w.end - w.begin for w in engine._weights)}
        engine.close()
    torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


class SharesTest(zs_servers.ServersTestCase):
    def test_each_rank_gathers_its_share_and_every_mode_matches(self):
        torch.manual_seed(0)
        want = {"sync-lazy": reference(Net(), STEPS, ranks=2)}
        want["speculative"] = want["sync-lazy"]
        torch.manual_seed(0)
        want["delayed"] = reference_delayed(Net(), STEPS, 1, ranks=2)
        with tempfile.TemporaryDirectory() as tmp:
            torch.multiprocessing.spawn(rank_main, nprocs=2,
                                        args=(os.path.join(tmp, "init"), self.addresses, tmp))
            ranks = [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(2)]
        for job, _, _ in MODES:
            a, b = ranks[0][job], ranks[1][job]
            for k, v in a["weights"].items():
                self.assertTrue(torch.equal(b["weights"][k], v), f"{job}: {k}")
            model = Net()
            model.load_state_dict(a["weights"])
            err = max_relative(model, want[job])
            # fp32 weights on the wire: 4 bytes an element, one gather a step.
            per_step = [r["gathered"] / (4 * STEPS) for r in (a, b)]
            print(f"{job}: max relative difference {err:.2e}; elements gathered per step by "
                  f"rank 0, rank 1: {per_step[0]:.0f}, {per_step[1]:.0f} of {a['whole']}")
            self.assertLess(err, 1e-6, job)
            self.assertEqual(a["whole"], b["whole"])
            for r in (a, b):  # its share, no more
                self.assertEqual(r["gathered"], 4 * STEPS * r["share"], job)
                self.assertLess(r["share"], 0.6 * r["whole"], job)
            # Together, the node pulled one copy of the weights per step.
            self.assertEqual(a["gathered"] + b["gathered"], 4 * STEPS * a["whole"], job)


if __name__ == "__main__":
    unittest.main()
