"""Gradient buckets: runs of parameters contiguous in the job's flat space.
Each bucket's flat buffer, in the reduce dtype (fp32 unless the config's
data_types.grad_accum_dtype names another), is where the step's gradients
accumulate: after each backward, each parameter's gradient (in the training
dtype) is added into it and dropped (take()), so the micro-batches of a step
sum in the reduce dtype, not in the parameters' dtype. At the accumulation
boundary a bucket is pushed as one range once every gradient in it is in
(during backward): inside a node it is summed over the local ranks first
(reduce-scatter on NCCL, all-reduce on gloo, in the reduce dtype), and each
local rank pushes its slice, converted once to the wire dtype (the job's
grad_dtype), from a push buffer in the client's shared memory, which a
server on this host reads in place (streams.Staging). On a GPU the slice
goes there on the side stream and is pushed by the push thread once there
(streams.py): the backward never waits for it."""

import torch
import torch.distributed as dist

from zerostate import _capi
from zerostate.torch import streams


def wire_dtype(torch_dtype):
    return {torch.float32: _capi.DTYPE_FP32, torch.bfloat16: _capi.DTYPE_BF16,
            torch.float16: _capi.DTYPE_FP16}[torch_dtype]


class Bucket:
    def __init__(self, entries, reduce_dtype, wire_dtype, device, local_world, staging=None):
        self.entries = entries  # [(param, begin, end)] in flat order
        self.begin, self.end = entries[0][1], entries[-1][2]
        n = self.end - self.begin
        self.chunk = -(-n // local_world)
        self.buffer = torch.zeros(self.chunk * local_world, dtype=reduce_dtype, device=device)
        self._slices = {id(p): self.buffer[b - self.begin:e - self.begin]
                        for p, b, e in entries}
        self.wire_dtype = wire_dtype
        self.gpu = device.type != "cpu"
        # The push buffer: the slice in the wire dtype, in the client's
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
        self.ready = 0
        self.pushed = False  # this step (a rank may have an empty slice: no ticket)
        self.ticket = None

    def reset(self):
        """A new push (the accumulated gradients stay)."""
        self.ready = 0
        self.pushed = False
        self.ticket = None

    def zero(self):
        """Drops the accumulated gradients (after the copy that reads them)."""
        streams.compute_waits(self.copied)
        self.buffer.zero_()

    def take(self, p):
        """Adds p.grad (p one of this bucket's parameters) into the
        accumulation, in the reduce dtype, and drops it."""
        if p.grad is not None:
            with torch.no_grad():
                self._slices[id(p)].add_(p.grad.reshape(-1))
            p.grad = None

    def push(self, job, step, topo, side, pusher, after=None):
        """Reduces the accumulated gradients inside the node and pushes this
        rank's slice in the wire dtype (a parameter that got no gradient
        counts as zero). On a GPU the slice goes to pinned memory on the
        side stream and `pusher` pushes it once there; nothing waits on the
        host. `after`: a call the push waits for, on `pusher`'s thread.
        The buffer holds the node's sum afterwards, until zero()."""
        self.pushed = True
        with torch.no_grad():
            mine = self.buffer
            lo, hi = self.begin, self.end
            if topo.local_group is not None:
                r = topo.local_rank
                if dist.get_backend(topo.local_group) == "nccl":
                    streams.compute_waits(self.copied)  # the last copy read self.mine
                    mine = self.mine
                    dist.reduce_scatter_tensor(mine, self.buffer, group=topo.local_group)
                else:
                    dist.all_reduce(self.buffer, group=topo.local_group)
                    mine = self.buffer[r * self.chunk:(r + 1) * self.chunk]
                lo = self.begin + r * self.chunk
                hi = min(lo + self.chunk, self.end)
            if hi <= lo:
                return
            src = mine[:hi - lo]
            if not self.gpu:  # the CPU: the one conversion to the wire dtype
                host = self.host[:hi - lo]
                host.copy_(src)
                if after is None:
                    self.ticket = self._push(job, step, topo, lo, hi, host)
                    return
            else:
                host = self._to_host(src, hi - lo, side)

            def push():
                if after is not None:
                    after()
                self.ticket = self._push(job, step, topo, lo, hi, host)
            pusher.submit(self.copied, push)

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

    def _push(self, job, step, topo, lo, hi, src):
        return job.push_async(step, topo.node, lo, hi, src.data_ptr(),
                              src.numel() * src.element_size(), wire_dtype(src.dtype), keep=src)


def make_buckets(entries, bucket_elems, reduce_dtype, wire_dtype, device, local_world,
                 staging=None):
    """Splits [(param, begin, end)] (flat order) into buckets of about
    bucket_elems elements each, accumulating in reduce_dtype and pushing
    in wire_dtype; each pushes from a host buffer of `staging`
    (streams.Staging; None: plain memory, pinned on a GPU)."""
    runs, run = [], []
    for ent in entries:
        if run and ent[2] - run[0][1] > bucket_elems:
            runs.append(run)
            run = []
        run.append(ent)
    if run:
        runs.append(run)
    return [Bucket(r, reduce_dtype, wire_dtype, device, local_world, staging) for r in runs]
