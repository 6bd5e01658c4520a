"""zerostate.torch on a GPU (skipped, exit 77, without CUDA: CI has none;
its run on the GPU machine is kept in bench/results). The delayed update's
landing with lazy weights starts every module's copy at the step and lets
each module's forward wait for its own copy alone (ModuleWeights.ready);
it must train bit for bit as the eager landing, which waits for every copy
before the next forward.

On the GPU machine, from the tree's root with the bundle in .device:
  source .device/env.sh && ZEROSTATE_SERVER=.device/bin/zerostate-server \\
    ZEROSTATE_CLIENT_LIB=.device/bin/libzerostate_client.so PYTHONPATH=python \\
    python3 tests/python/engine_gpu_test.py"""

import sys
import unittest

import zs_servers

try:
    import torch
except ImportError:
    print("skipped: no torch")
    sys.exit(77)
if not torch.cuda.is_available():
    print("skipped: no CUDA device")
    sys.exit(77)

import zerostate.torch as zs  # noqa: E402

STEPS = 12
WIDTH = 1024


class Stack(torch.nn.Module):
    """Layers large enough that each landing copy takes a while (about 4 MiB
    of bf16 each), so that a forward reading a parameter before its copy
    is done would show."""

    def __init__(self, layers=6):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(WIDTH, WIDTH) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(WIDTH)

    def forward(self, x):
        for layer in self.layers:
            x = x + torch.tanh(layer(x))
        return self.norm(x)


def batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(64, WIDTH, generator=g)
    return x.cuda().bfloat16(), torch.tanh(x.flip(1)).cuda().bfloat16()


CONFIG = {"optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}},
          "bf16": {"enabled": True}, "gradient_clipping": 1.0,
          "zero_optimization": {"delayed_update": {"enabled": True, "warmup_steps": 2}}}


class DelayedLandingGpuTest(zs_servers.ServersTestCase):
    # Both jobs stay registered: room for two of about 42 MiB a server.
    server_args = (f"--ram_budget_bytes={256 << 20}",)

    def train(self, job, lazy):
        torch.manual_seed(0)
        model = Stack().cuda()
        engine, *_ = zs.initialize(model=model, config=CONFIG, servers=self.addresses, job=job,
                                   plaintext=True, lazy_weights=lazy, bucket_elems=1 << 20,
                                   token=f"token-of-job-{job}".ljust(40, "x"))
        self.engines.append(engine)
        losses = []
        for s in range(STEPS):
            x, y = batch(s)
            loss = torch.nn.functional.mse_loss(engine(x).float(), y.float())
            engine.backward(loss)
            engine.step()
            losses.append(loss.detach())
        engine.sync_weights()
        return [float(v) for v in losses], [p.detach().clone() for p in engine.module.parameters()]

    def test_deferred_landing_trains_as_the_eager_one(self):
        eager_losses, eager = self.train("gpu-delayed-eager", lazy=False)
        lazy_losses, lazy = self.train("gpu-delayed-lazy", lazy=True)
        print(f"losses eager {eager_losses[-1]:.6f} lazy {lazy_losses[-1]:.6f}")
        self.assertEqual(eager_losses, lazy_losses)
        for a, b in zip(eager, lazy):
            self.assertTrue(torch.equal(a, b))
        self.assertNotEqual(eager_losses[0], eager_losses[-1])


if __name__ == "__main__":
    unittest.main()
