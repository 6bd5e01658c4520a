"""Gradient buckets. Which buckets there are, and each local rank's share
of each, is the trainer engine's bucket plan (zerostate.pipeline, the C++
of trainer/bucket_plan.h that zerostate-worker runs): block-aligned
ranges of the job's flat space, cut at the block boundary at or after a
parameter's begin, parameters joined up to bucket_elems, so that only a
parameter at a bucket's edge lies in two buckets. Each bucket's flat buffer, in the reduce dtype (fp32 unless the
config's data_types.grad_accum_dtype names another), is where the step's
gradients accumulate: after each backward, each parameter's gradient (in
the training dtype) is added into the buckets it lies in and dropped
(take(), added a bucket at a time), so the micro-batches of a step sum in
the reduce dtype, not in the parameters' dtype. At the accumulation
boundary a bucket is pushed as one range once every gradient in it is in
(during backward): inside a node
it is summed over the local ranks first (reduce-scatter on NCCL,
all-reduce on gloo, in the reduce dtype), and each local rank pushes its
share, converted once to the wire dtype (the job's grad_dtype), through
the engine's push thread (zerostate.pipeline.Pusher, C++), from a push
buffer in the client's shared memory, which a server on this host reads in
place (streams.Staging). On a GPU the share goes there on the side stream
and the push thread waits for that copy before it pushes (streams.py): the
backward never waits for it. The accumulation is dropped at the step but
zeroed only before the next step's first gradient goes in (or its push):
the compute stream waits for the copy reading it there, in the next
backward, not before the next forward."""

import time

import torch
import torch.distributed as dist

from zerostate import _capi
from zerostate.pipeline import bucket_plan
from zerostate.torch import streams


def wire_dtype(torch_dtype):
    return {torch.float32: _capi.DTYPE_FP32, torch.bfloat16: _capi.DTYPE_BF16,
            torch.float16: _capi.DTYPE_FP16}[torch_dtype]


class Bucket:
    def __init__(self, plan, entries, reduce_dtype, wire_dtype, device, local_world,
                 staging=None):
        self.begin, self.end = plan.begin, plan.end
        self.lo, self.hi = plan.share_begin, plan.share_end  # this rank's share
        self.chunk = plan.chunk
        self.entries = entries  # [(param, begin, end)] overlapping [begin, end), flat order
        self.buffer = torch.zeros(self.chunk * local_world, dtype=reduce_dtype, device=device)
        # id(param) -> (its part of the buffer, that part's [from, to) in the
        # parameter, or None where the part is the whole parameter: then
        # the part has the parameter's shape, and take() is one add)
        self._parts = {}
        for p, b, e in entries:
            lo, hi = max(b, self.begin), min(e, self.end)
            part = self.buffer[lo - self.begin:hi - self.begin]
            whole = lo == b and hi == e
            self._parts[id(p)] = (part.view(p.shape), None) if whole else (part, (lo - b, hi - b))
        self.wire_dtype = wire_dtype
        self.gpu = device.type != "cpu"
        # The push buffer: the share in the wire dtype, in the client's
        # shared buffers (streams.Staging), so a server on this host reads
        # it in place; on a GPU it gets there on the side stream.
        self.host = staging.empty(self.chunk, wire_dtype) if staging is not None else \
            torch.zeros(self.chunk, dtype=wire_dtype, pin_memory=self.gpu)
        self.wire = self.mine = None
        if self.gpu:
            if wire_dtype != reduce_dtype:
                self.wire = torch.empty(self.chunk, dtype=wire_dtype, device=device)
            if local_world > 1:
                self.mine = torch.empty(self.chunk, dtype=reduce_dtype, device=device)
        self.copied = None  # the event of the last device-to-host copy
        self.stale = False  # the accumulation was dropped, not yet zeroed
        self.mark = 0  # the push thread's mark through this bucket's last push
        self.ready = 0  # parameters taken in this backward
        self.pushed = False  # this step
        # This backward's gradients held until the bucket's last one is in,
        # then added at once (flush()), and their parts of the buffer.
        self._held, self._grads = [], []

    def reset(self):
        """A new backward (the accumulated gradients stay; those still
        held, of parameters the last backward left without one, go in)."""
        self.flush()
        self.ready = 0
        self.pushed = False

    def zero(self):
        """Drops the accumulated gradients; the buffer is zeroed by the
        next flush() or push() (fresh())."""
        self._held, self._grads = [], []
        self.stale = True

    def fresh(self):
        """Zeroes the buffer if its gradients were dropped, once the copy
        that reads it is done (the compute stream waits for it)."""
        if self.stale:
            streams.compute_waits(self.copied)
            self.buffer.zero_()
            self.stale = False

    def take(self, p, grad):
        """Takes `grad` (p's gradient, p one of this bucket's parameters;
        None: it got none) over this bucket's part of p. Once every
        parameter of the bucket is in, adds them into the accumulation
        (flush()) and returns True."""
        if grad is not None:
            part, cut = self._parts[id(p)]
            self._held.append(part)
            self._grads.append(grad if cut is None else grad.reshape(-1)[cut[0]:cut[1]])
        self.ready += 1
        if self.ready < len(self.entries):
            return False
        self.flush()
        return True

    def flush(self):
        """Adds the held gradients into the accumulation, in the reduce
        dtype: one call for the bucket (torch._foreach_add_), not one per
        parameter from Python, whose cost per parameter made the backward
        wait for the host. Each element still gets one addition per
        micro-batch, in order: the same sums bit for bit."""
        if not self._grads:
            return
        with torch.no_grad():
            self.fresh()
            torch._foreach_add_(self._held, self._grads)
        self._held, self._grads = [], []

    def push(self, job, step, topo, side, pusher, after=None):
        """Reduces the accumulated gradients inside the node and queues the
        push of this rank's share in the wire dtype on `pusher` (a
        parameter that got no gradient counts as zero). On a GPU the share
        goes to pinned memory on the side stream and the push waits for
        the copy on the push thread; nothing waits on the host here.
        `after`: a call the push waits for too, on the push thread.
        The buffer holds the node's sum afterwards, until zero(). Before
        the push buffer is written, the last push from it must be done
        (the step in flight may still be pushing it): waited for here, on
        the host. Returns the seconds that wait took."""
        self.pushed = True
        self.flush()
        with torch.no_grad():
            self.fresh()
            mine = self.buffer
            if topo.local_group is not None:
                r = topo.local_rank
                if dist.get_backend(topo.local_group) == "nccl":
                    streams.compute_waits(self.copied)  # the last copy read self.mine
                    mine = self.mine
                    dist.reduce_scatter_tensor(mine, self.buffer, group=topo.local_group)
                else:
                    dist.all_reduce(self.buffer, group=topo.local_group)
                    mine = self.buffer[r * self.chunk:(r + 1) * self.chunk]
            n = self.hi - self.lo
            if n <= 0:
                return 0.0
            t0 = time.perf_counter()
            pusher.wait_through(self.mark)
            waited = time.perf_counter() - t0
            waits = []
            if not self.gpu:  # the CPU: the one conversion to the wire dtype
                src = self.host[:n]
                src.copy_(mine[:n])
            else:
                src = self._to_host(mine[:n], n, side)
                waits.append(streams.host_wait(self.copied))
            if after is not None:
                waits.append(after)
            self.mark = pusher.push(job, step, topo.node, self.lo, self.hi, src.data_ptr(),
                                    src.numel() * src.element_size(), wire_dtype(src.dtype),
                                    keep=src, waits=waits)
        return waited

    def _to_host(self, src, n, side):
        """src (on the device, n elements) into the pinned buffer, on the
        side stream after the compute stream's work (self.copied)."""
        if self.wire is not None:
            streams.compute_waits(self.copied)  # the last copy read self.wire
            self.wire[:n].copy_(src)
            src = self.wire[:n]
        with side.after_compute():
            self.host[:n].copy_(src, non_blocking=True)
        self.copied = side.done()
        return self.host[:n]


def make_buckets(job, entries, bucket_elems, reduce_dtype, wire_dtype, device, topo,
                 staging=None):
    """The buckets of `entries` ([(param, begin, end)] in flat order, every
    tensor of `job`): the engine's bucket plan with ready points at each
    parameter's begin, parameters joined up to bucket_elems elements
    (rounded up to whole blocks) and longer ones cut to it, accumulating in reduce_dtype and pushing in wire_dtype,
    each from a host buffer of `staging` (streams.Staging; None: plain
    memory, pinned on a GPU)."""
    local = topo.local_world if topo.local_group is not None else 1
    rank = topo.local_rank if local > 1 else 0
    plans = bucket_plan(job, [b for _, b, _ in entries], bucket_elems, local, rank)
    out = []
    for plan in plans:
        mine = [ent for ent in entries if ent[1] < plan.end and plan.begin < ent[2]]
        out.append(Bucket(plan, mine, reduce_dtype, wire_dtype, device, local, staging))
    return out
