"""Host copies off the compute stream. On a GPU, gradients go
device-to-host and weights host-to-device each on a side stream of their
own (the engine's two Sides), each copy ordered after the compute stream's
work by an event, and the compute stream waits (an event, not the host)
only where it reads what a copy wrote; a bucket's push, which needs its copy done, is made by the trainer
engine's push thread (zerostate.pipeline.Pusher, C++), which waits for the
copy (host_wait), so the autograd hook never waits. On the CPU there is no
stream: the copies are plain copies, in the same order, with the same
results. The host side of each copy lies in the client's shared buffers
(Staging), so a server on this host reads the pushes from it and writes
the gathers into it in place."""

import ctypes
import warnings

import torch

from zerostate.client import ZerostateError


class Side:
    """The side stream of `device` (None on the CPU). Given `timeline`
    (timeline.py), its copies count as phase `copy` and the compute
    stream's waits for them (compute_waits on the events of done()) as
    phase `stall`, when the timeline traces."""

    def __init__(self, device, timeline=None, stall=None, copy=None):
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.timeline, self.stall, self.copy = timeline, stall, copy

    def after_compute(self, event=None):
        """A context in which work runs on the side stream after everything
        the compute stream has been given so far, or, given `event` (of
        mark()), after what it had been given then (on the CPU: nothing)."""
        return _After(self, event)

    def mark(self):
        """An event at the compute stream's present end (None on the CPU):
        after_compute(event) orders side work after it alone, not after
        what the compute stream is given later."""
        if self.stream is None:
            return None
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self.stream.device))
        return event

    def done(self):
        """An event at the side stream's present end (None on the CPU)."""
        if self.stream is None:
            return None
        event = torch.cuda.Event(blocking=True)
        event.record(self.stream)
        return event if self.timeline is None else _Traced(event, self.timeline, self.stall)


class _After:
    def __init__(self, side, event):
        self.side, self.event, self._ctx, self._start = side, event, None, None

    def __enter__(self):
        stream = self.side.stream
        if stream is not None:
            if self.event is not None:
                stream.wait_event(self.event)
            else:
                stream.wait_stream(torch.cuda.current_stream(stream.device))
            self._ctx = torch.cuda.stream(stream)
            self._ctx.__enter__()
            if self.side.timeline is not None:
                self._start = self.side.timeline.copy_start(stream)
        return self

    def __exit__(self, *exc):
        if self._ctx is not None:
            if self._start is not None:
                self.side.timeline.copy_end(self.side.stream, self._start, self.side.copy)
            self._ctx.__exit__(*exc)


class _Traced:
    """A side stream's event (Side.done()) whose wait on the compute stream
    counts in the timeline as the stall `phase` (Timeline.stall)."""

    def __init__(self, event, timeline, phase):
        self.event, self.timeline, self.phase = event, timeline, phase

    def wait(self, stream=None):
        if stream is None:
            self.timeline.stall(self.event, self.phase)
        else:
            self.event.wait(stream)

    def synchronize(self):
        self.event.synchronize()

    def query(self):
        return self.event.query()


class Staging:
    """The host buffers between the device and the servers (each bucket's
    push buffer, each module's gather buffer), carved out of the client's
    shared buffers (Client.allocate_shared): a server on this host reads a
    push from one and writes a gather into one in place, so neither is
    copied through the client, which halves the host memory traffic of
    pushes and gathers. On a GPU each shared buffer is page-locked in
    place (cudaHostRegister), so the side stream copies straight into and
    out of it. Buffers come from slabs that double from 8 MiB to 512 MiB
    (a server maps few buffers per connection), each carved at page
    boundaries. Where the client cannot allocate a shared buffer (or CUDA
    cannot register it), buffers are plain (pinned on a GPU) memory, with
    a warning. close() unregisters the slabs; the client unmaps them when
    it is closed, so a buffer must not be used after that."""

    SLAB_MIN, SLAB_MAX, ALIGN = 8 << 20, 512 << 20, 4096

    def __init__(self, client, device):
        self.client, self.gpu = client, device.type == "cuda"
        self.slabs = []  # [(uint8 tensor over the slab, address, registered)]
        self.used = 0  # bytes carved from the last slab
        self.shared = True  # False once a shared buffer could not be had

    def empty(self, n, dtype):
        """A buffer of `n` elements of `dtype` (zeroed when shared)."""
        nbytes = max(n, 1) * torch.empty(0, dtype=dtype).element_size()
        if self.shared and (not self.slabs or self.used + nbytes > self.slabs[-1][0].numel()):
            self.shared = self._grow(nbytes)
        if not self.shared:
            return torch.zeros(n, dtype=dtype, pin_memory=self.gpu)
        slab = self.slabs[-1][0]
        out = slab[self.used:self.used + nbytes].view(dtype)[:n]
        self.used += -(-nbytes // self.ALIGN) * self.ALIGN
        return out

    def _grow(self, nbytes):
        """A new slab of at least `nbytes`; False (warned) if none."""
        last = self.slabs[-1][0].numel() if self.slabs else self.SLAB_MIN // 2
        want = max(nbytes, min(2 * last, self.SLAB_MAX))
        try:
            address, size = self.client.allocate_shared(want)
        except ZerostateError as e:
            warnings.warn(f"zerostate: host buffers in plain memory (the servers copy "
                          f"through the client): {e}")
            return False
        if self.gpu:
            try:
                rc = torch.cuda.cudart().cudaHostRegister(address, size, 0)
                failed = int(getattr(rc, "value", rc)) != 0
            except (AttributeError, TypeError, RuntimeError) as e:  # no such binding
                rc, failed = e, True
            if failed:
                warnings.warn(f"zerostate: host buffers in pinned memory (the servers copy "
                              f"through the client): cudaHostRegister of {size} bytes: {rc}")
                return False
        array = (ctypes.c_uint8 * size).from_address(address)
        self.slabs.append((torch.frombuffer(array, dtype=torch.uint8), address, self.gpu))
        self.used = 0
        return True

    def close(self):
        """Unregisters the slabs from CUDA (before the client unmaps them),
        once no copy reads or writes them."""
        if self.gpu and self.slabs:
            torch.cuda.synchronize()
        for _, address, registered in self.slabs:
            if registered:
                torch.cuda.cudart().cudaHostUnregister(address)
        self.slabs = []


def compute_waits(event):
    """The compute stream waits (on the GPU, not the host) for `event`."""
    if event is not None:
        event.wait()  # the current stream


def host_waits(event):
    """The host waits for `event` (a copy reading or writing host memory)."""
    if event is not None:
        event.synchronize()


def host_wait(event):
    """A call that makes the host wait for `event` (a push thread's wait)."""
    return lambda: host_waits(event)
