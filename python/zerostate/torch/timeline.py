"""Where a training step's time goes, for benchmarks (engine.timeline;
engine.timers is its seconds, summed since initialize).

Host phases (seconds of the training loop's threads, time.perf_counter):
  push_wait    waiting for pushes: after backward, or before a bucket's
               push buffer is written again (a delayed step still pushing it)
  server_step  waiting for the coordinator's statistics, Step and verdict
  gather_wait  waiting for a module's gathered weights
  hooks        the gradient hooks' own work (into the buckets, the pushes
               queued), less push_wait
  land         a lazy landing's own work in the forward's pre-hooks (the
               node's all-gather, the copies queued), less gather_wait
  send_ahead   the speculative step's parameters sent ahead (a blocking
               call to every server before backward)
  step_call    engine.step()'s own work, less every phase above (a
               landing's own work at the step inside it)
On a GPU, the host phases other than the waits overlap the GPU's compute
unless the host is behind it.

GPU phases (seconds, from CUDA timing events, on a GPU only, once trace()
turned them on; read once the events completed, never by a host sync):
  stall_grads    the compute stream waiting for a gradient copy off the
                 device (before the buffer it reads is written again)
  stall_weights  the compute stream waiting for landed weights' copies
  copy_d2h       the gradients' side stream copying to the host (busy time)
  copy_h2d       the weights' side stream copying to the device (and the
                 node's all-gather; busy time)
The stalls add to the step; the copies overlap compute and show how long
the host link takes. The side streams report them (streams.Side: its
events' compute_waits and its after_compute blocks)."""

import collections
import contextlib
import time

import torch

WAITS = ("push_wait", "server_step", "gather_wait")
HOST = WAITS + ("hooks", "land", "send_ahead", "step_call")
STALLS = ("stall_grads", "stall_weights")
COPIES = ("copy_d2h", "copy_h2d")
PHASES = HOST + STALLS + COPIES


class Timeline:
    def __init__(self, device):
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.gpu = device.type == "cuda"
        self._events = False
        self._pending = collections.deque()  # (phase, start event, end event), in record order

    def trace(self, on=True):
        """Turns the GPU phases' timing events on (two events per stall and
        per copy; off by default)."""
        self._events = bool(on) and self.gpu

    @contextlib.contextmanager
    def host(self, phase):
        """Adds the seconds the block takes, less the waits and other
        phases counted inside it, to `phase`."""
        inner = sum(self.seconds[p] for p in HOST)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - t0
            self.seconds[phase] += spent - (sum(self.seconds[p] for p in HOST) - inner)

    def stall(self, event, phase):
        """The compute stream waits (on the GPU, not the host) for `event`
        (None: nothing to wait for); traced, the time it stood still
        counts as `phase`."""
        if event is None or event.query():  # done: no wait, nothing to trace
            return
        if not self._events:
            event.wait()  # the current stream
            return
        stream = torch.cuda.current_stream()
        start = self._record(stream)
        stream.wait_event(event)
        self._pending.append((phase, start, self._record(stream)))

    def copy_start(self, stream):
        """Traced: an event on `stream` before a copy (copy_end's `start`)."""
        return self._record(stream) if self._events else None

    def copy_end(self, stream, start, phase):
        """Traced: the copy since copy_start's `start` counts as `phase`."""
        if start is not None:
            self._pending.append((phase, start, self._record(stream)))

    def harvest(self, wait=False):
        """Adds the traced spans whose events completed (every one, waiting
        for them, with `wait`); returns the seconds."""
        while self._pending:
            phase, start, end = self._pending[0]
            if wait:
                end.synchronize()
            elif not end.query():
                break
            self.seconds[phase] += start.elapsed_time(end) / 1e3
            self._pending.popleft()
        return self.seconds

    @staticmethod
    def _record(stream):
        event = torch.cuda.Event(enable_timing=True)
        event.record(stream)
        return event
