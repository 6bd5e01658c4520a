"""What a DeepSpeed script asks of its engine besides backward and step:
the module's own methods (parameters, state_dict, train/eval), the batch
sizes and ranks, the last step's outcome (lr, gradient norm, applied or
skipped) and no_sync(). A mixin of Engine (engine.py), whose fields it reads."""

import contextlib

import torch


class ModuleSurface:
    # ----- the module -----

    def parameters(self, recurse=True):
        return self.module.parameters(recurse)

    def named_parameters(self, prefix="", recurse=True):
        return self.module.named_parameters(prefix, recurse)

    def buffers(self, recurse=True):
        return self.module.buffers(recurse)

    def named_buffers(self, prefix="", recurse=True):
        return self.module.named_buffers(prefix, recurse)

    def state_dict(self, *args, **kwargs):
        """The module's state_dict, with the newest weights (lazy_weights:
        landed first; a delayed update in flight: the weights in use)."""
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict=True):
        """The module's load_state_dict. Before the first step the trainable
        weights become the job's (streamed to the servers); after it, the
        servers' weights of the current version are the job's, and a state
        dict with other trainable weights is refused, nothing changed (load
        a checkpoint instead). Buffers and frozen parameters load as given."""
        self._land_lazy(self._weights)
        if self.global_steps > 0:
            for name, p in self._params:
                t = state_dict.get(name)
                if t is not None and not torch.equal(t.to(p.device, p.dtype), p.detach()):
                    raise ValueError(
                        f"load_state_dict: {name} differs from the servers' weights of version "
                        f"{self.global_steps}: the job's weights change only by its steps; use "
                        "load_checkpoint, or load_state_dict before the first step")
        result = self.module.load_state_dict(state_dict, strict)
        if self.global_steps == 0:
            self._stream_weights([state_dict.get(n, p) for n, p in self._params])
        return result

    def train(self, mode=True):
        self.module.train(mode)
        return self

    def eval(self):
        return self.train(False)

    # ----- sizes and ranks, as DeepSpeed's engine -----

    @property
    def world_size(self):
        return self.topo.world

    @property
    def local_rank(self):
        return self.topo.local_rank

    @property
    def global_rank(self):
        return self.topo.rank

    def gradient_accumulation_steps(self):
        return self.config.grad_accum

    def train_micro_batch_size_per_gpu(self):
        c = self.config
        return c.micro_batch or c.global_batch // (c.grad_accum * self.topo.world)

    def train_batch_size(self):
        c = self.config
        return c.global_batch or c.micro_batch * c.grad_accum * self.topo.world

    @property
    def global_samples(self):
        """Samples trained on: global_steps * train_batch_size()."""
        return self.global_steps * self.train_batch_size()

    # ----- the last step -----

    def get_lr(self):
        """Each param group's lr for the next step."""
        return [g["lr"] for g in self.optimizer.param_groups]

    def get_global_grad_norm(self):
        """The last step's gradient norm over every rank, before clipping:
        of the averaged gradient (None before the first step)."""
        return self._grad_norm

    def was_step_applied(self):
        """False when the last step was skipped (fp16 overflow)."""
        return self._step_applied

    @contextlib.contextmanager
    def no_sync(self):
        """Backward inside accumulates the gradients locally without
        counting a micro-step; they leave with the next boundary's. step()
        is refused inside, as in DeepSpeed."""
        if self._no_sync:
            raise RuntimeError("no_sync: already inside engine.no_sync()")
        self._no_sync = True
        try:
            yield
        finally:
            self._no_sync = False


def data_loader(engine, training_data, collate_fn):
    """DeepSpeed's training dataloader: micro-batches of
    train_micro_batch_size_per_gpu, each rank its share of the data."""
    if training_data is None:
        return None
    batch = engine.train_micro_batch_size_per_gpu()
    if batch < 1:
        raise ValueError("training_data: the ds_config gives no batch size "
                         "(train_micro_batch_size_per_gpu or train_batch_size)")
    sampler = None
    if engine.topo.world > 1:
        sampler = torch.utils.data.distributed.DistributedSampler(
            training_data, num_replicas=engine.topo.world, rank=engine.topo.rank)
    return torch.utils.data.DataLoader(training_data, batch_size=batch, sampler=sampler,
                                       collate_fn=collate_fn)
