"""Gradient buckets: runs of parameters contiguous in the job's flat space,
pushed as one range once every gradient in them is accumulated (during
backward). Inside a node the bucket is summed over the local ranks first
(reduce-scatter on NCCL, all-reduce on gloo) and each local rank pushes its
slice of the range."""

import torch
import torch.distributed as dist

from zerostate import _capi


def wire_dtype(torch_dtype):
    return {torch.float32: _capi.DTYPE_FP32, torch.bfloat16: _capi.DTYPE_BF16,
            torch.float16: _capi.DTYPE_FP16}[torch_dtype]


class Bucket:
    def __init__(self, entries, dtype, device, local_world):
        self.entries = entries  # [(param, begin, end)] in flat order
        self.begin, self.end = entries[0][1], entries[-1][2]
        n = self.end - self.begin
        self.chunk = -(-n // local_world)
        self.buffer = torch.zeros(self.chunk * local_world, dtype=dtype, device=device)
        self.host = None
        if device.type != "cpu":
            self.host = torch.zeros(self.chunk, dtype=dtype, pin_memory=True)
        self.ready = 0
        self.pushed = False  # this step (a rank may have an empty slice: no ticket)
        self.ticket = None

    def reset(self):
        self.ready = 0
        self.pushed = False
        self.ticket = None

    def push(self, job, step, topo):
        """Fills the buffer from the gradients (missing ones count as zero),
        reduces it inside the node and pushes this rank's slice."""
        self.pushed = True
        with torch.no_grad():
            self.buffer.zero_()
            for p, b, e in self.entries:
                if p.grad is not None:
                    self.buffer[b - self.begin:e - self.begin].copy_(p.grad.reshape(-1))
            mine = self.buffer
            if topo.local_group is not None:
                r = topo.local_rank
                if dist.get_backend(topo.local_group) == "nccl":
                    mine = torch.empty(self.chunk, dtype=self.buffer.dtype,
                                       device=self.buffer.device)
                    dist.reduce_scatter_tensor(mine, self.buffer, group=topo.local_group)
                else:
                    dist.all_reduce(self.buffer, group=topo.local_group)
                    mine = self.buffer[r * self.chunk:(r + 1) * self.chunk]
                lo = self.begin + r * self.chunk
            else:
                lo = self.begin
            hi = min(lo + self.chunk if topo.local_group is not None else self.end, self.end)
            if hi <= lo:
                return
            src = mine[:hi - lo]
            if self.host is not None:
                self.host[:hi - lo].copy_(src)
                src = self.host[:hi - lo]
            elif not src.is_contiguous():
                src = src.contiguous()
            self.ticket = job.push_async(step, topo.node, lo, hi, src.data_ptr(),
                                         src.numel() * src.element_size(),
                                         wire_dtype(src.dtype), keep=src)


def make_buckets(entries, bucket_elems, dtype, device, local_world):
    """Splits [(param, begin, end)] (flat order) into buckets of about
    bucket_elems elements each."""
    out, run = [], []
    for ent in entries:
        if run and ent[2] - run[0][1] > bucket_elems:
            out.append(Bucket(run, dtype, device, local_world))
            run = []
        run.append(ent)
    if run:
        out.append(Bucket(run, dtype, device, local_world))
    return out
