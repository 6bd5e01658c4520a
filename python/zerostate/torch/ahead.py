"""The speculative step's parameters, sent ahead of the gradients off the
training loop's thread: the call goes to every server and waits for each
(zerostate.pipeline.send_ahead), so made on the loop's thread it would
hold the backward back by a round trip to the slowest server. The servers
take the parameters whenever they come (blocks completed before are
stepped then), so only the step's own Step must follow them: take()
waits for the call before it."""

import threading


class Ahead:
    def __init__(self):
        self._thread = None
        self._error = None

    def send(self, call):
        """Runs `call` on a thread of its own, after the last send()'s call
        (whose exception, if any, take() still returns first)."""
        if self._thread is not None:
            self._thread.join()
        self._thread = threading.Thread(target=self._run, args=(call,),
                                        name="zerostate-send-ahead", daemon=True)
        self._thread.start()

    def _run(self, call):
        try:
            call()
        except Exception as e:  # noqa: BLE001 - take() hands it over
            if self._error is None:
                self._error = e

    def take(self):
        """Waits for the last send()'s call; returns the exception it
        raised, or None (also when nothing was sent)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        error, self._error = self._error, None
        return error
