"""zerostate.torch.weights.module_weights: which modules land as one unit
(no servers; Debian's CPU torch). Modules next to each other in the model's
order and in the flat space join a unit until it reaches the size asked;
a gap in the flat space starts a new one; a tied parameter lands with the
first module holding it.

Usage: landing_units_test.py; exit 77 (skipped) without torch."""

import os
import sys
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

try:
    import torch
except ImportError:
    print("skipped: no torch")
    sys.exit(77)

from zerostate.torch import streams  # noqa: E402
from zerostate.torch.weights import holders, module_weights  # noqa: E402

ONE_RANK = types.SimpleNamespace(local_group=None, local_world=1, local_rank=0)


def flat(model, gap_before=()):
    """(param, begin, end) in the model's order, packed, with 100 elements
    left out before each parameter named in gap_before."""
    out, at = [], 0
    for name, p in model.named_parameters():
        at += 100 if name in gap_before else 0
        out.append((p, at, at + p.numel()))
        at += p.numel()
    return out


def units(model, unit_elems, gap_before=()):
    cpu = torch.device("cpu")
    ws = module_weights(model, flat(model, gap_before), torch.float32, cpu, ONE_RANK,
                        streams.Side(cpu), {"gather_wait": 0.0}, None, unit_elems)
    return ws, [(w.begin, w.end) for w in ws]


def linears(n):
    return torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(n)])  # 20 each


class LandingUnitsTest(unittest.TestCase):
    def test_zero_is_one_unit_per_module(self):
        _, ranges = units(linears(3), 0)
        self.assertEqual(ranges, [(0, 20), (20, 40), (40, 60)])

    def test_modules_join_until_the_size(self):
        _, ranges = units(linears(5), 40)
        self.assertEqual(ranges, [(0, 40), (40, 80), (80, 100)])
        _, ranges = units(linears(5), 1 << 24)
        self.assertEqual(ranges, [(0, 100)])

    def test_a_gap_in_the_flat_space_starts_a_unit(self):
        _, ranges = units(linears(3), 1 << 24, gap_before=("1.weight",))
        self.assertEqual(ranges, [(0, 20), (120, 160)])

    def test_a_tied_parameter_lands_with_its_first_holder(self):
        class Tied(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = torch.nn.Embedding(8, 4)  # 32
                self.mid = torch.nn.Linear(4, 4)  # 20
                self.head = torch.nn.Linear(4, 8, bias=False)
                self.head.weight = self.emb.weight
        model = Tied()
        ws, ranges = units(model, 0)
        self.assertEqual(ranges, [(0, 32), (32, 52)])
        # head has no unit of its own; its forward lands emb's
        held = {id(m): [w.begin for w in mine] for m, mine in holders(model, ws)}
        self.assertEqual(held[id(model.head)], [0])
        self.assertEqual(held[id(model.emb)], [0])
        ws, ranges = units(model, 1 << 24)
        self.assertEqual(ranges, [(0, 52)])
        held = {id(m): [w.begin for w in mine] for m, mine in holders(model, ws)}
        self.assertEqual(held[id(model.head)], [0])
        self.assertEqual(held[id(model.mid)], [0])


if __name__ == "__main__":
    unittest.main()
