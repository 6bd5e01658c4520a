"""Host copies off the compute stream. On a GPU, gradients go
device-to-host and weights host-to-device on a side stream, each copy
ordered after the compute stream's work by an event, and the compute
stream waits (an event, not the host) only where it reads what a copy
wrote; a bucket's push, which needs its copy done, is made by the trainer
engine's push thread (zerostate.pipeline.Pusher, C++), which waits for the
copy (host_wait), so the autograd hook never waits. On the CPU there is no
stream: the copies are plain copies, in the same order, with the same
results."""

import torch


class Side:
    """The side stream of `device` (None on the CPU)."""

    def __init__(self, device):
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def after_compute(self):
        """A context in which work runs on the side stream after everything
        the compute stream has been given so far (on the CPU: nothing)."""
        return _After(self.stream)

    def done(self):
        """An event at the side stream's present end (None on the CPU)."""
        if self.stream is None:
            return None
        event = torch.cuda.Event(blocking=True)
        event.record(self.stream)
        return event


class _After:
    def __init__(self, stream):
        self.stream, self._ctx = stream, None

    def __enter__(self):
        if self.stream is not None:
            self.stream.wait_stream(torch.cuda.current_stream(self.stream.device))
            self._ctx = torch.cuda.stream(self.stream)
            self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        if self._ctx is not None:
            self._ctx.__exit__(*exc)


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
