"""Weights coming back from the servers into the module's parameters, per
landing unit (modules next to each other, joined up to a size:
module_weights), each covering its parameters' flat range, split into one
share per local rank of the node. fetch() puts
this rank's gather of its share in flight (into a pinned buffer when the
parameters are on a GPU), so a node pulls one copy of the weights, not one
per rank; the C++ engine's GatherSlot (zerostate.pipeline) keeps which
version is in flight, its ticket, whether it landed and when the buffer
may be written again. land() waits for it, all-gathers the shares inside the node
(NCCL on GPUs, gloo on the CPU) and copies into the parameters in the
training dtype on the side stream (streams.py), the compute stream waiting
for the copy by an event. The engine calls it at the step, or in the
module's forward pre-hook, so the gather of a later module overlaps the
forward of the earlier ones."""

import time

import torch
import torch.distributed as dist

from zerostate.pipeline import GatherSlot, local_share
from zerostate.torch import streams
from zerostate.torch.buckets import wire_dtype


class ModuleWeights:
    def __init__(self, entries, dtype, device, topo, side, timers, staging=None):
        self.timers = timers  # the engine's; land() adds its wait to "gather_wait"
        self.entries = entries  # [(param, begin, end)]
        self.begin = min(e[1] for e in entries)
        self.end = max(e[2] for e in entries)
        self.topo, self.side = topo, side
        local = topo.local_world if topo.local_group is not None else 1
        r = topo.local_rank if local > 1 else 0
        # This rank's share [lo, hi), as the C++ engine splits a range.
        self.lo, self.hi, self.chunk = local_share(self.begin, self.end, local, r)
        gpu = device.type != "cpu"
        # The node's whole range (on the device), where the shares meet;
        # with one local rank on the CPU the share is the whole range.
        self.full = None
        if local > 1:
            self.full = torch.empty(self.chunk * local, dtype=dtype, device=device)
        if gpu or self.full is None:  # in the client's shared buffers (streams.Staging)
            self.buffer = staging.empty(self.chunk, dtype) if staging is not None else \
                torch.empty(self.chunk, dtype=dtype, pin_memory=gpu)
        else:  # gloo: the gather writes straight into the rank's part
            self.buffer = self.full[r * self.chunk:(r + 1) * self.chunk]
        self.copied = None  # the event of the last host-to-device copy out of buffer
        # A landing's copy the compute stream has not been made to wait for
        # yet (land(defer=True)): ready() does, before the module's forward.
        self.pending = None
        # The landing-once bookkeeping (trainer::GatherSlot): which version
        # is fetched, its ticket, the buffer's reuse after this copy.
        self.slot = GatherSlot(self.lo, self.hi, reuse=lambda: streams.host_waits(self.copied))

    def fetch(self, job, version):
        self.slot.fetch(job, version, self.buffer.data_ptr(),
                        (self.hi - self.lo) * self.buffer.element_size(),
                        wire_dtype(self.buffer.dtype), keep=self.buffer)

    def land(self, free=None, defer=False):
        """Waits for this rank's share, then (several local ranks) the
        node's all-gather, and copies into the parameters on the side
        stream; the compute stream waits for the copy, the host does not.
        The copy waits for everything the compute stream was given, or,
        given `free` (an event of Side.mark() after which the compute
        stream reads none of these parameters before this landing, as at
        the step before a lazy landing), for what it had been given then:
        so a lazy landing overlaps the forward of the modules before.
        `defer`: the compute stream is not made to wait here but at ready()
        (a delayed update's landing at the step: every copy starts once the
        backward is done, and each module's forward waits for its own copy
        alone, not for all of them).
        Collective among the local ranks: each takes part even after its
        gather failed (the slot says so), then raises."""
        t0 = time.perf_counter()
        if not self.slot.land():
            return
        self.timers["gather_wait"] += time.perf_counter() - t0
        try:
            self._copy_in(free, defer)
        except BaseException:
            try:
                self.slot.landed()
            except Exception:  # noqa: BLE001 - the copy's error is raised
                pass
            raise
        self.slot.landed()

    def ready(self):
        """The compute stream waits for this module's deferred copy (on
        the GPU, not the host), once."""
        if self.pending is not None:
            streams.compute_waits(self.pending)
            self.pending = None

    def _copy_in(self, free, defer):
        n = self.hi - self.lo
        with torch.no_grad(), self.side.after_compute(free):
            src = self.buffer
            if self.full is not None:
                r = self.topo.local_rank
                mine = self.full[r * self.chunk:(r + 1) * self.chunk]
                if mine.data_ptr() != self.buffer.data_ptr() and n > 0:
                    mine[:n].copy_(self.buffer[:n], non_blocking=True)
                self._all_gather(mine)
                src = self.full
            base = self.begin
            _copy_all([p.data for p, _, _ in self.entries],
                      [src[b - base:e - base].view(p.shape) for p, b, e in self.entries])
        self.copied = self.side.done()
        # A later copy on the same side stream covers an earlier one.
        self.pending = self.copied if defer else None
        if not defer:
            streams.compute_waits(self.copied)

    def _all_gather(self, mine):
        group = self.topo.local_group
        if dist.get_backend(group) == "nccl":
            dist.all_gather_into_tensor(self.full, mine, group=group)
        else:  # gloo gathers into a list
            parts = list(self.full.split(self.chunk))
            dist.all_gather(parts, mine.clone(), group=group)


def _copy_all(dst, src):
    """Each src into its dst, without waiting: one call from Python where
    torch has torch._foreach_copy_ (2.1 and later), the per-parameter
    Python calls being what held the host back at a landing."""
    if hasattr(torch, "_foreach_copy_"):
        torch._foreach_copy_(dst, src, non_blocking=True)
        return
    for d, s in zip(dst, src):
        d.copy_(s, non_blocking=True)


def module_weights(model, entries, dtype, device, topo, side, timers, staging=None,
                   unit_elems=0):
    """[ModuleWeights]: the landing units. Modules owning trainable
    parameters, in the model's order, join one unit while their parameters
    lie next to each other in the flat space, until it holds unit_elems
    elements or more (0: one unit per module): each gather and landing
    costs the host a fixed amount, which one per module (GPT-2 759M: 147)
    made the training loop wait for. A tied parameter goes to the first
    module that holds it. `staging`: the streams.Staging the gather
    buffers come from (None: plain memory, pinned on a GPU)."""
    at = {id(p): (p, b, e) for p, b, e in entries}
    seen, units, unit = set(), [], []
    for module in model.modules():
        mine = []
        for p in module._parameters.values():
            if p is not None and id(p) in at and id(p) not in seen:
                seen.add(id(p))
                mine.append(at[id(p)])
        if not mine:
            continue
        if unit and (sum(e - b for _, b, e in unit) >= unit_elems or
                     min(b for _, b, _ in mine) != max(e for _, _, e in unit)):
            units.append(unit)
            unit = []
        unit.extend(mine)
    if unit:
        units.append(unit)
    return [ModuleWeights(sorted(u, key=lambda x: x[1]), dtype, device, topo, side, timers,
                          staging) for u in units]


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
