"""Host copies off the compute stream. On a GPU, gradients go
device-to-host and weights host-to-device on a side stream, each copy
ordered after the compute stream's work by an event, and the compute
stream waits (an event, not the host) only where it reads what a copy
wrote; a bucket's push, which needs its copy done, is made by a thread of
its own (Pusher), so the autograd hook never waits. On the CPU there is no
stream: the copies are plain copies, in the same order, with the same
results."""

import queue
import threading

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


class Pusher:
    """Runs each submitted call once its event is done, in order, on a
    thread of its own (the C calls release the GIL). drain() waits for
    every call submitted and raises the first error."""

    def __init__(self):
        self._queue = queue.Queue()
        self._error = None
        self._thread = threading.Thread(target=self._run, name="zerostate-push", daemon=True)
        self._thread.start()

    def submit(self, event, call):
        self._queue.put((event, call))

    def _run(self):
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                event, call = item
                host_waits(event)
                call()
            except BaseException as e:  # noqa: BLE001 - raised by drain()
                if self._error is None:
                    self._error = e
            finally:
                self._queue.task_done()

    def drain(self):
        self._queue.join()
        if self._error is not None:
            e, self._error = self._error, None
            raise e

    def close(self):
        self._queue.put(None)
        self._thread.join()
