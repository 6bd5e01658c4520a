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


class EarlyGathers:
    """A synchronous or speculative step's gathers of the next version, put
    out on the push thread ahead of the step's first push (a wait of that
    push, after its device copy): the servers then hold each block's gather
    memory before its pass (or speculation) runs, and the pass writes the
    block's new copy straight into it (the server's direct copies), rather
    than into the block's and again by the gather (a gather put out just
    before the Step would race the pass for the first blocks). Last module
    first: a speculation runs as each block's gradient lands, in the
    backward's order, and a block's gather must reach its server before it
    does (a race the first blocks may lose: nothing waits for the gathers
    to arrive). arm() at
    the boundary's backward; the first push take()s it and says pushed();
    settle() waits for that push
    (the driver's thread then knows which gathers are out); cancel() before
    what is in flight is dropped (under the lock a queued fetch runs under:
    none puts gathers out after the drop). A module whose gather is still
    out (the forward skipped it) is left to the step's own fetch."""

    def __init__(self, fetch):
        self._fetch = fetch  # fetch(version, idle_only): the modules' gathers of it
        self._lock = threading.Lock()
        self._armed = None  # the version the next push puts out first
        self._live = None  # the version a queued fetch may still put out
        self._mark = None  # the push mark of the queued fetch

    def arm(self, version):
        self._armed = version

    def take(self):
        """The wait that puts the gathers out, for the first push after
        arm(); None for any other."""
        version, self._armed = self._armed, None
        if version is None:
            return None
        with self._lock:
            self._live = version

        def fetch():
            with self._lock:
                if self._live == version:
                    self._fetch(version, True, backward=True)
        return fetch

    def pushed(self, mark):
        """The push that took the wait was queued as `mark`."""
        self._mark = mark

    def settle(self, pusher):
        """Returns once the queued fetch ran (its errors stay with its push)."""
        mark, self._mark = self._mark, None
        if mark is not None:
            pusher.wait_through(mark)

    def cancel(self):
        self._armed = self._mark = None
        with self._lock:
            self._live = None
