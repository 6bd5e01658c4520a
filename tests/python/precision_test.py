"""Precision as users expect: the parameters in the training dtype (bf16),
a step's gradients summed over its micro-batches in fp32 (or in the dtype
ds_config data_types.grad_accum_dtype names), converted once to the wire
dtype by the push. A GPT with a head tied to its embedding
(examples/gpt/model.py), bf16, lazy landing, 4 micro-batches a step, 50
steps, against torch.optim.AdamW on fp32 masters fed the same bf16 forward
and backward. Real servers, Debian's CPU torch: precision_test.py
[TestCase ...]. Exit 77 without torch or a server."""

import copy
import os
import sys
import unittest

import zs_servers

try:
    import torch
except ImportError:
    print("skipped: no torch")
    sys.exit(77)

import zerostate.torch as zs

sys.path.insert(0, os.path.join(zs_servers.ROOT, "examples", "gpt"))
from model import GPT  # noqa: E402

STEPS, ACCUM, VOCAB, SEQ = 50, 4, 64, 16
# The servers' AdamW against torch's in fp32 differs by rounding only
# (engine_test.py holds fp32 training to the same bound).
TOLERANCE = 1e-6
CONFIG = {"optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95],
                                                     "eps": 1e-8, "weight_decay": 0.1}},
          "bf16": {"enabled": True}, "gradient_accumulation_steps": ACCUM,
          "zerostate": {"train": {"block_elems": 256}}}


def tokens(step, micro):
    g = torch.Generator().manual_seed(100 * step + micro)
    idx = torch.randint(VOCAB, (4, SEQ + 1), generator=g)
    return idx[:, :-1], idx[:, 1:]


def gpt(layers=2):
    torch.manual_seed(0)
    model = GPT(vocab=VOCAB, seq=SEQ, d=32, layers=layers, heads=2)
    assert model.head.weight is model.wte.weight
    return model


class Reference:
    """torch.optim.AdamW on fp32 masters (a copy of the fp32 model), fed
    the gradients of the engine's own bf16 forward and backward: each
    micro-batch's, as a hook on each parameter sees it, summed in
    `accum_dtype`, rounded once to `wire_dtype` and averaged. The same
    gradients, so the masters differ by the optimizer's rounding only,
    not by bf16 rounding boundaries that rounding would tip."""

    def __init__(self, model, accum_dtype, wire_dtype=torch.bfloat16):
        self.master = copy.deepcopy(model)
        self.accum_dtype, self.wire_dtype = accum_dtype, wire_dtype
        self.opt = torch.optim.AdamW(self.master.parameters(), lr=3e-3, betas=(0.9, 0.95),
                                     eps=1e-8, weight_decay=0.1)
        self.sums = {}

    def add(self, name, grad):
        total = self.sums.setdefault(name, torch.zeros_like(grad, dtype=self.accum_dtype))
        total.add_(grad)

    def step(self):
        for name, p in self.master.named_parameters():
            p.grad = self.sums[name].to(self.wire_dtype).float() / ACCUM
        self.sums = {}
        self.opt.step()


def masters(engine):
    """{name: the servers' fp32 master} at the engine's version."""
    out = {}
    for (name, p), (_, b, e) in zip(engine._params, engine._entries):
        m = torch.empty(e - b)
        engine.job.gather_master(engine.global_steps, b, e, m.data_ptr(), m.numel() * 4)
        out[name] = m.view(p.shape)
    return out


def max_relative(got, ref):
    """The largest relative difference (norm of the difference over the
    reference's) over the tensors of {name: tensor} `got`."""
    want = dict(ref.named_parameters())
    return max(float((t.double() - want[n].detach().double()).norm() /
                     want[n].detach().double().norm()) for n, t in got.items())


class PrecisionTest(zs_servers.ServersTestCase):
    def engine(self, model, job, config, **options):
        engine, *_ = zs.initialize(model=model, config=config, servers=self.addresses,
                                   job=job, plaintext=True, bucket_elems=600,
                                   lazy_weights=True, **options,
                                   token=f"token-of-job-{job}".ljust(40, "x"))
        self.engines.append(engine)
        return engine

    def train(self, job, config, refs, landed_exact=True, **options):
        """50 steps of the bf16 GPT; returns the servers' masters and those
        of a Reference per (accum_dtype, wire_dtype) of `refs`. The landed
        parameters are the masters in bf16 (`landed_exact`), or within an
        int8 weight quantum of them."""
        model = gpt()
        refs = [Reference(model, *r) for r in refs]
        engine = self.engine(model, job, config, **options)
        for name, p in engine.module.named_parameters():
            self.assertEqual(p.dtype, torch.bfloat16)
            for ref in refs:
                p.register_hook(lambda g, ref=ref, name=name: ref.add(name, g))
        for s in range(STEPS):
            for m in range(ACCUM):
                engine.backward(engine(*tokens(s, m)))
                engine.step()
            for ref in refs:
                ref.step()
        self.assertEqual(engine.global_steps, STEPS)
        got = masters(engine)
        engine.sync_weights()  # lazy: the last version lands in the next forward
        for name, p in engine.module.named_parameters():
            if landed_exact:
                self.assertTrue(torch.equal(p, got[name].bfloat16()), name)
                continue
            # int8 groups of 64 lie inside a tensor (tensors are 64-aligned):
            # half a power-of-two scale (< absmax / 127) plus the two bf16
            # roundings (the copy's and the parameters', 2^-9 of absmax each)
            quantum = (1 / 127 + 2 ** -8) * 1.01 * float(got[name].abs().max())
            self.assertLessEqual(float((p.float() - got[name]).abs().max()), quantum, name)
        return got, [ref.master for ref in refs]

    def test_bf16_accumulates_in_fp32_by_default(self):
        """The default: fp32 sums of the bf16 micro-batch gradients. The
        bf16 sums that casting the whole model gives differ measurably."""
        got, (fp32_sums, bf16_sums) = self.train("fp32-accum", CONFIG,
                                                 [(torch.float32,), (torch.bfloat16,)])
        err, gap = max_relative(got, fp32_sums), max_relative(got, bf16_sums)
        print(f"bf16 GPT, {ACCUM} micro-batches, {STEPS} steps: masters against fp32 sums "
              f"{err:.2e}, against bf16 sums {gap:.2e}")
        self.assertLess(err, TOLERANCE)
        self.assertGreater(gap, 100 * TOLERANCE)

    def test_grad_accum_dtype_bf16(self):
        """data_types.grad_accum_dtype "bf16" (DeepSpeed's key): the sums
        are bf16's, as the reference summing in bf16."""
        got, (bf16_sums,) = self.train(
            "bf16-accum", dict(CONFIG, data_types={"grad_accum_dtype": "bf16"}),
            [(torch.bfloat16,)])
        err = max_relative(got, bf16_sums)
        print(f"grad_accum_dtype bf16: masters against bf16 sums {err:.2e}")
        self.assertLess(err, TOLERANCE)

    def test_wire_dtype_is_the_specs(self):
        """zerostate.train.grad_dtype DTYPE_FP32: the fp32 sums go on the
        wire unrounded (JobSpec.grad_dtype)."""
        config = dict(CONFIG, zerostate={"train": {"block_elems": 256,
                                                   "grad_dtype": "DTYPE_FP32"}})
        got, (fp32_wire, bf16_wire) = self.train(
            "fp32-wire", config, [(torch.float32, torch.float32), (torch.float32,)])
        err, gap = max_relative(got, fp32_wire), max_relative(got, bf16_wire)
        print(f"grad_dtype fp32: masters against fp32 sums unrounded {err:.2e}, "
              f"rounded to bf16 {gap:.2e}")
        self.assertLess(err, TOLERANCE)
        self.assertGreater(gap, 100 * TOLERANCE)

    def test_int8_wire_from_ds_config(self):
        """zerostate.wire int8 both ways (JobSpec.gradient_wire /
        weight_wire), over gRPC (the same-host plane moves plain dtypes,
        docs/wire.md): the pushes are quantized, so the masters leave the
        bf16 wire's reference by more than rounding, yet train alongside
        it; the landed weights are the int8 gather's, near the masters."""
        config = dict(CONFIG, zerostate={"train": {"block_elems": 256},
                                         "wire": {"gradients": "int8", "weights": "int8"}})
        got, (bf16_wire,) = self.train("int8-wire", config, [(torch.float32,)],
                                       landed_exact=False, data_plane=False)
        err = max_relative(got, bf16_wire)
        trained = copy.deepcopy(bf16_wire)
        trained.load_state_dict(got, strict=False)
        with torch.no_grad():
            losses = [float(m(*tokens(STEPS, 0))) for m in (trained, bf16_wire, gpt())]
        print(f"int8 wire: masters against the bf16 wire's reference {err:.2e}; loss on a "
              f"new batch {losses[0]:.4f}, the reference's {losses[1]:.4f}, untrained "
              f"{losses[2]:.4f}")
        self.assertGreater(err, 100 * TOLERANCE)  # quantized: not the plain wire's sums
        self.assertLess(abs(losses[0] - losses[1]), 0.05 * (losses[2] - losses[1]))

    def test_bad_grad_accum_dtype_is_refused_by_name(self):
        for config, message in [
                ({"data_types": {"grad_accum_dtype": "int8"}},
                 "data_types.grad_accum_dtype: 'int8' is not one of fp32, bf16, fp16"),
                ({"zerostate": {"train": {"grad_accum_dtype": 7}}},
                 "zerostate.train.grad_accum_dtype: 7 is not one of"),
                ({"data_types": {"grad_dtype": "fp32"}},
                 "data_types.grad_dtype: unsupported ds_config key")]:
            with self.assertRaisesRegex(zs.ZerostateError, message):
                self.engine(gpt(layers=1), "refused", dict(CONFIG, **config))


if __name__ == "__main__":
    unittest.main()
