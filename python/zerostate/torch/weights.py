"""Weights coming back from the servers into the module's parameters, per
module: each module owning trainable parameters has one gather buffer
(pinned when the parameters are on a GPU) covering its parameters' flat
range. fetch() puts the gather in flight; land() waits for it and copies
into the parameters in the training dtype (the engine calls it at the step,
or in the module's forward pre-hook)."""

import time

import torch

from zerostate.torch.buckets import wire_dtype


class ModuleWeights:
    def __init__(self, entries, dtype, pin, timers):
        self.timers = timers  # the engine's; land() adds its wait to "gather_wait"
        self.entries = entries  # [(param, begin, end)]
        self.begin = min(e[1] for e in entries)
        self.end = max(e[2] for e in entries)
        self.buffer = torch.empty(self.end - self.begin, dtype=dtype, pin_memory=pin)
        self.ticket = None

    def fetch(self, job, version):
        self.ticket = job.gather_async(version, self.begin, self.end, self.buffer.data_ptr(),
                                       self.buffer.numel() * self.buffer.element_size(),
                                       wire_dtype(self.buffer.dtype), keep=self.buffer)

    def land(self):
        if self.ticket is None:
            return
        ticket, self.ticket = self.ticket, None
        t0 = time.perf_counter()
        ticket.wait()
        self.timers["gather_wait"] += time.perf_counter() - t0
        with torch.no_grad():
            for p, b, e in self.entries:
                src = self.buffer[b - self.begin:e - self.begin].view(p.shape)
                p.data.copy_(src, non_blocking=True)


def module_weights(model, entries, dtype, pin, timers):
    """[(module, ModuleWeights)] for every module owning trainable
    parameters; a tied parameter goes to the first module that holds it."""
    at = {id(p): (p, b, e) for p, b, e in entries}
    seen, out = set(), []
    for module in model.modules():
        mine = []
        for p in module._parameters.values():
            if p is not None and id(p) in at and id(p) not in seen:
                seen.add(id(p))
                mine.append(at[id(p)])
        if mine:
            out.append((module, ModuleWeights(sorted(mine, key=lambda x: x[1]), dtype, pin,
                                              timers)))
    return out


def holders(model, weights):
    """[(module, [ModuleWeights])]: every module holding a parameter of
    `weights` (a list of ModuleWeights), with those that cover its
    parameters. A tied parameter is listed under each module holding it,
    so whichever runs first lands it (land() is a no-op the second time)."""
    of = {id(p): w for w in weights for p, _, _ in w.entries}
    out = []
    for module in model.modules():
        mine = []
        for p in module._parameters.values():
            w = of.get(id(p)) if p is not None else None
            if w is not None and not any(w is x for x in mine):
                mine.append(w)
        if mine:
            out.append((module, mine))
    return out


def gather_into(job, entries, version, dtype):
    """Every parameter of `entries` from the servers at `version`, now."""
    for p, b, e in entries:
        buf = torch.empty(e - b, dtype=dtype)
        job.gather_async(version, b, e, buf.data_ptr(), buf.numel() * buf.element_size(),
                         wire_dtype(dtype), keep=buf).wait()
        with torch.no_grad():
            p.data.copy_(buf.view(p.shape))
