"""zerostate.torch.buckets: a micro-batch's gradients taken at once after
the backward (Bucket.hold, then flush_all: what engine.backward does
before the accumulation boundary) sum to the same bits as taken one
parameter at a time by the hooks (Bucket.take), over micro-batches and a
dropped accumulation, with a parameter cut between two buckets and one
that got no gradient (no servers; Debian's CPU torch).

Usage: bucket_intake_test.py; exit 77 (skipped) without torch."""

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

from zerostate.torch import buckets as bk  # noqa: E402

CPU = torch.device("cpu")


def buckets(params, cut):
    """Two buckets over params laid out flat, the first ending at `cut`
    (inside the second parameter)."""
    flat, at = [], 0
    for p in params:
        flat.append((p, at, at + p.numel()))
        at += p.numel()
    out = []
    for begin, end in ((0, cut), (cut, at)):
        plan = types.SimpleNamespace(begin=begin, end=end, share_begin=begin, share_end=end,
                                     chunk=end - begin)
        mine = [f for f in flat if f[1] < end and begin < f[2]]
        out.append(bk.Bucket(plan, mine, torch.float32, torch.bfloat16, CPU, 1))
    return out


class BucketIntakeTest(unittest.TestCase):
    def setUp(self):
        self.params = [torch.nn.Parameter(torch.zeros(s, dtype=torch.bfloat16))
                       for s in ((3, 5), (7,), (4, 4), (2,))]
        self.cut = 15 + 4  # inside the second parameter

    def grads(self, micro):
        g = torch.Generator().manual_seed(micro)
        out = [torch.randn(p.shape, generator=g).to(torch.bfloat16) * 10 ** (micro % 5)
               for p in self.params]
        out[3] = None if micro % 2 else out[3]  # no gradient in odd micro-batches
        return out

    def run_micro_batches(self, at_once):
        bs = buckets(self.params, self.cut)
        of = {id(p): [b for b in bs if any(e[0] is p for e in b.entries)] for p in self.params}
        sums = []
        for micro in range(6):
            if micro == 3:  # a step: the accumulation dropped, zeroed at the next add
                sums.append([b.buffer.clone() for b in bs])
                for b in bs:
                    b.zero()
            for b in bs:
                b.reset()
            for p, g in zip(self.params, self.grads(micro)):
                for b in of[id(p)]:
                    if at_once:
                        b.hold(p, g)
                    else:
                        b.take(p, g)
            if at_once:
                bk.flush_all(bs)
            self.assertTrue(all(b.ready == len(b.entries) for b in bs))
            self.assertTrue(all(not b._grads for b in bs))  # nothing left held
        sums.append([b.buffer.clone() for b in bs])
        return sums

    def test_the_same_sums_bit_for_bit(self):
        hooks, at_once = self.run_micro_batches(False), self.run_micro_batches(True)
        for step_h, step_a in zip(hooks, at_once):
            for h, a in zip(step_h, step_a):
                self.assertTrue(torch.equal(h, a))
        # The sums are the gradients' (not zeros): the first step's first
        # bucket holds micro-batches 0-2 of the first parameter.
        want = sum(g[0].float().reshape(-1) for g in (self.grads(m) for m in range(3)))
        self.assertTrue(torch.equal(hooks[0][0][:15], want))

    def test_a_dropped_accumulation_starts_from_zero(self):
        sums = self.run_micro_batches(True)
        want = sum(g[0].float().reshape(-1) for g in (self.grads(m) for m in range(3, 6)))
        self.assertTrue(torch.equal(sums[1][0][:15], want))


if __name__ == "__main__":
    unittest.main()
