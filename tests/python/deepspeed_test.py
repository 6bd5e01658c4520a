"""zerostate.torch as a DeepSpeed script sees it: a training loop written
for deepspeed.initialize, with only the import and servers=/job= added,
and the engine used as the module it wraps. Real servers, Debian's CPU
torch: deepspeed_test.py [TestCase ...]. Exit 77 without torch or a server."""

import copy
import json
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
from engine_test import CONFIG, Net, batch, loss_of, max_relative, reference, schedule, train

TUTORIAL_CONFIG = os.path.join(zs_servers.ROOT, "configs", "ds_config.json")


class Tied(torch.nn.Module):
    """A weight shared by two modules; the one that holds it second (in
    modules() order) runs first in forward."""

    def __init__(self, d=16):
        super().__init__()
        self.emb = torch.nn.Linear(d, d, bias=False)
        self.mid = torch.nn.Linear(d, d)
        self.head = torch.nn.Linear(d, d, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x):
        return self.emb(torch.tanh(self.mid(self.head(x))))


class Skips(torch.nn.Module):
    """A module the forward runs only when `use` is set."""

    def __init__(self, d=16):
        super().__init__()
        self.inp = torch.nn.Linear(d, d)
        self.extra = torch.nn.Linear(d, d)
        self.out = torch.nn.Linear(d, d)
        self.use = True

    def forward(self, x):
        h = torch.tanh(self.inp(x))
        return self.out(self.extra(h) if self.use else h)


class GradSums:
    """The gradient a step averages, as the engine sums it: each backward's
    gradient of each parameter (a hook sees it; p.grad is the engine's
    after backward), summed in fp32 and rounded to bf16 for the wire."""

    def __init__(self, module):
        self.sums = {}
        for name, p in module.named_parameters():
            p.register_hook(lambda g, name=name: self.add(name, g))

    def add(self, name, grad):
        self.sums.setdefault(name, torch.zeros_like(grad, dtype=torch.float32)).add_(grad)

    def norm(self, accum):
        """The norm of the sums over `accum` micro-steps (DeepSpeed averages
        them); the next step's sums start at zero."""
        total = sum(float((s.bfloat16().double() ** 2).sum()) for s in self.sums.values())
        self.sums = {}
        return total ** 0.5 / accum


class DeepSpeedTest(zs_servers.ServersTestCase):
    def initialize(self, model, job, **kw):
        kw.setdefault("config", CONFIG)
        out = zs.initialize(model=model, servers=self.addresses, job=job, plaintext=True,
                            token=f"token-of-job-{job}".ljust(40, "x"), **kw)
        self.engines.append(out[0])
        return out

    def test_deepspeed_tutorial_loop(self):
        """configs/ds_config.json (ZeRO-2, bf16, WarmupDecayLR, accumulation
        2) and a loop written for DeepSpeed: the four-tuple, the data loader
        of training_data, get_lr(), get_global_grad_norm(),
        was_step_applied(), the batch sizes, world_size, local_rank,
        no_sync() and global_samples as DeepSpeed documents them."""
        with open(TUTORIAL_CONFIG) as f:
            config = json.load(f)
        config["train_batch_size"] = 64  # 32 per micro-batch * 2 accumulated * 1 rank
        config["zerostate"]["train"]["block_elems"] = 256
        torch.manual_seed(0)
        model = Net()
        data = [batch(i) for i in range(64)]
        samples = [(x[i], y[i]) for x, y in data for i in range(x.shape[0])]
        engine, optimizer, loader, lr_scheduler = self.initialize(
            model, "tutorial", config=config, model_parameters=model.parameters(),
            training_data=samples)
        self.assertIs(optimizer, engine.optimizer)
        self.assertIs(lr_scheduler, engine.lr_scheduler)
        self.assertIs(engine.module, model)
        self.assertEqual(engine.train_batch_size(), 64)
        self.assertEqual(engine.train_micro_batch_size_per_gpu(), 32)
        self.assertEqual(engine.gradient_accumulation_steps(), 2)
        self.assertEqual((engine.world_size, engine.local_rank, engine.global_rank), (1, 0, 0))
        self.assertEqual(len(loader), len(samples) // 32)
        sums = GradSums(model)
        warmup, peak = 20, 0.003
        it = iter(loader)
        for step in range(6):
            self.assertEqual(engine.get_lr(), [g["lr"] for g in optimizer.param_groups])
            self.assertAlmostEqual(engine.get_lr()[0], peak * (step + 1) / warmup, places=9)
            for micro in range(engine.gradient_accumulation_steps()):
                x, y = next(it)
                self.assertEqual(x.shape[0], 32)
                loss = torch.nn.functional.mse_loss(engine(x.bfloat16()).float(), y)
                engine.backward(loss)
                if engine.is_gradient_accumulation_boundary():
                    want = sums.norm(2)
                engine.step()
            self.assertTrue(engine.was_step_applied())
            self.assertLess(abs(engine.get_global_grad_norm() - want), 1e-5 * want)
            self.assertEqual(engine.global_steps, step + 1)
            self.assertEqual(engine.global_samples, (step + 1) * 64)
        # no_sync(): backward without a micro-step; the gradients stay and
        # go with the next boundary's; step() inside is refused.
        x, y = batch(100)
        with engine.no_sync():
            engine.backward(torch.nn.functional.mse_loss(engine(x.bfloat16()).float(), y))
            with self.assertRaisesRegex(RuntimeError, "no_sync"):
                engine.step()
        self.assertEqual(engine.micro_steps, 12)
        for micro in range(2):
            x, y = batch(101 + micro)
            engine.backward(torch.nn.functional.mse_loss(engine(x.bfloat16()).float(), y))
            if micro == 1:
                want = sums.norm(2)
            engine.step()
        self.assertEqual(engine.global_steps, 7)
        self.assertLess(abs(engine.get_global_grad_norm() - want), 1e-5 * want)

    def test_engine_is_a_module(self):
        """parameters(), named_parameters(), state_dict(), load_state_dict(),
        train(), eval(); save_checkpoint/load_checkpoint with tag=."""
        torch.manual_seed(0)
        model = Net()
        engine, _, loader, _ = self.initialize(model, "as-module")
        self.assertIsNone(loader)
        self.assertEqual([id(p) for p in engine.parameters()],
                         [id(p) for p in model.parameters()])
        self.assertEqual([n for n, _ in engine.named_parameters()],
                         [n for n, _ in model.named_parameters()])
        self.assertIs(engine.eval(), engine)
        self.assertFalse(model.training)
        engine.train()
        self.assertTrue(model.training)
        train(engine, 0, 3)
        state = engine.state_dict()
        self.assertEqual(list(state), list(model.state_dict()))
        with tempfile.TemporaryDirectory() as tmp:
            engine.save_checkpoint(tmp, tag="mine", client_state={"k": 1})
            train(engine, 3, 5)
            where, client_state = engine.load_checkpoint(tmp, tag="mine")
            self.assertEqual(where, os.path.join(tmp, "mine"))
            self.assertEqual(client_state, {"k": 1})
        self.assertEqual(engine.global_steps, 3)
        for k, v in state.items():
            self.assertTrue(torch.equal(engine.state_dict()[k], v), k)
        # Weights that are not the servers' version: refused by name, the
        # module unchanged.
        other = {k: v + 1 for k, v in state.items()}
        with self.assertRaisesRegex(ValueError, "load_state_dict: .*inp.weight.*version 3.*"
                                    "load_checkpoint"):
            engine.load_state_dict(other)
        for k, v in state.items():
            self.assertTrue(torch.equal(model.state_dict()[k], v), k)
        engine.load_state_dict(state)  # the servers' own weights: fine

    def test_load_state_dict_before_the_first_step(self):
        """Before the first step, load_state_dict's weights become the job's."""
        torch.manual_seed(0)
        ref = Net()
        want = reference(copy.deepcopy(ref), 5)
        torch.manual_seed(3)
        engine, *_ = self.initialize(Net(), "load-first",
                                     lr_scheduler=lambda o: torch.optim.lr_scheduler.LambdaLR(
                                         o, schedule))
        engine.load_state_dict(ref.state_dict())
        train(engine, 0, 5)
        self.assertLess(max_relative(engine.module, want), 1e-6)

    def test_optimizer_state_dict_is_refused_by_name(self):
        torch.manual_seed(0)
        engine, optimizer, _, _ = self.initialize(Net(), "opt-state")
        train(engine, 0, 2)
        with self.assertRaisesRegex(zs.ZerostateError, "optimizer.state_dict.*moments.*on the "
                                    "state servers.*save_checkpoint"):
            optimizer.state_dict()
        with self.assertRaisesRegex(zs.ZerostateError, "optimizer.load_state_dict.*"
                                    "load_checkpoint"):
            optimizer.load_state_dict({"state": {}, "param_groups": []})

    def test_tied_weights_land_before_either_module(self):
        """lazy_weights=True with a tied weight whose second holder runs
        first: every step is the eager engine's, bit for bit."""
        torch.manual_seed(0)
        model = Tied()
        eager, *_ = self.initialize(copy.deepcopy(model), "tied-eager")
        # landing_elems=0: each module its own unit, as a large model's
        lazy, *_ = self.initialize(model, "tied-lazy", lazy_weights=True, landing_elems=0)
        for s in range(6):
            a, b = loss_of(eager, s), loss_of(lazy, s)
            self.assertTrue(torch.equal(a, b), f"step {s}")
            eager.backward(a)
            eager.step()
            lazy.backward(b)
            lazy.step()

    def test_lazy_landing_of_a_module_the_forward_skips(self):
        """lazy_weights=True and a module the forward skips on some steps:
        its weights land at the next step before the next gather goes out
        (each module's gather lands once), every step as the eager
        engine's, bit for bit."""
        torch.manual_seed(0)
        model = Skips()
        eager, *_ = self.initialize(copy.deepcopy(model), "skips-eager")
        lazy, *_ = self.initialize(model, "skips-lazy", lazy_weights=True, landing_elems=0)
        for s in range(6):
            eager.module.use = lazy.module.use = s in (0, 3)
            a, b = loss_of(eager, s), loss_of(lazy, s)
            self.assertTrue(torch.equal(a, b), f"step {s}")
            eager.backward(a)
            eager.step()
            lazy.backward(b)
            lazy.step()
        got, want = lazy.module.state_dict(), eager.module.state_dict()
        for k, v in want.items():
            self.assertTrue(torch.equal(got[k], v), k)

    def test_lazy_state_dict_after_the_last_step(self):
        """lazy_weights=True: module.state_dict() right after the last step
        holds that step's weights, as the eager engine's."""
        torch.manual_seed(0)
        model = Net()
        eager = train(self.initialize(copy.deepcopy(model), "sd-eager")[0], 0, 4)
        lazy = train(self.initialize(model, "sd-lazy", lazy_weights=True)[0], 0, 4)
        got, want = lazy.module.state_dict(), eager.module.state_dict()
        for k, v in want.items():
            self.assertTrue(torch.equal(got[k], v), k)

    def test_user_optimizer_with_its_scheduler(self):
        """optimizer= a torch AdamW and a LambdaLR of that AdamW, given to
        initialize or stepped by the script: the schedule is the job's,
        as torch's AdamW with the same scheduler."""
        torch.manual_seed(0)
        model = Net()
        want = reference(copy.deepcopy(model), 30)
        for given in (True, False):
            mine = copy.deepcopy(model)
            opt = torch.optim.AdamW(mine.parameters(), lr=1e-2, betas=(0.9, 0.95), eps=1e-8,
                                    weight_decay=0.1)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
            engine, *_ = self.initialize(mine, f"user-sched-{given}", optimizer=opt,
                                         config={"gradient_clipping": 0.5},
                                         lr_scheduler=sched if given else None)
            for s in range(30):
                engine.backward(loss_of(engine, s))
                engine.step()
                if not given:
                    sched.step()
            err = max_relative(engine.module, want)
            print(f"user AdamW + LambdaLR (given: {given}): max relative difference {err:.2e}")
            self.assertLess(err, 1e-6, given)


if __name__ == "__main__":
    unittest.main()
