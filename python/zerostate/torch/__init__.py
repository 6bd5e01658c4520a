"""PyTorch training through the state service, DeepSpeed-style:

    import zerostate.torch as zs
    engine, optimizer, _, lr_scheduler = zs.initialize(
        model=model, config="ds_config.json", servers="host1:7070,host2:7070",
        job="gpt2-760m")
    for batch in loader:
        loss = engine(batch)
        engine.backward(loss)
        engine.step()

See zerostate/torch/engine.py for the mechanism."""

from zerostate.client import ZerostateError
from zerostate.torch.checkpoint import RolledBack
from zerostate.torch.engine import Engine, initialize
from zerostate.torch.optimizer import ZerostateOptimizer

__all__ = ["Engine", "RolledBack", "ZerostateError", "ZerostateOptimizer", "initialize"]
