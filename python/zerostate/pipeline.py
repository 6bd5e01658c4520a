"""The trainer engine's pipeline (trainer/engine/zerostate_engine_c.h),
the C++ that zerostate-worker runs too: the bucket plan of a job's flat
space, the push thread, the coordinator's step, the step whose update is
in flight (the delayed update) and the gathers landed once. Methods raise
ZerostateError."""

import collections
import ctypes
import threading

from zerostate import _capi
from zerostate._capi import lib
from zerostate.client import ZerostateError, _call, _check
from zerostate.policy import Decision

_ABORTED = 10
_CODES = {name: number for number, name in _capi.CODE_NAMES.items()}


def bucket_plan(job, ready_points, max_elems, local_size=1, local_rank=0):
    """[zs_bucket] of `job` in the order backward finishes them: cut at
    the block boundary at or after each flat offset of `ready_points`,
    consecutive pieces joined while within `max_elems` and longer ones
    cut to it (rounded up to blocks; 0: no cap, no joining), each
    with local rank `local_rank`'s share among `local_size`
    (trainer/bucket_plan.h)."""
    points = (ctypes.c_uint64 * len(ready_points))(*ready_points)
    count = ctypes.c_size_t()
    what = f"job {job.job_id}: bucket plan"
    args = (job._h, points, len(ready_points), max_elems, local_size, local_rank)
    _call(what, lib.zs_job_bucket_plan, *args, None, 0, ctypes.byref(count))
    out = (_capi.Bucket * count.value)()
    _call(what, lib.zs_job_bucket_plan, *args, out, count.value, ctypes.byref(count))
    return list(out)


def local_share(begin, end, local_size, local_rank):
    """(lo, hi, chunk): local rank `local_rank`'s share [lo, hi) of the flat
    elements [begin, end) among `local_size` ranks, and the length `chunk`
    of every share but the last ones (the node's all-gather runs on chunk
    * local_size elements): trainer::LocalShare, the bucket plan's and
    zerostate-worker's split."""
    lo, hi, chunk = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64()
    _call(f"share of [{begin}, {end}) for local rank {local_rank} of {local_size}",
          lib.zs_local_share, begin, end, local_size, local_rank, ctypes.byref(lo),
          ctypes.byref(hi), ctypes.byref(chunk))
    return lo.value, hi.value, chunk.value


def recovery_verdict(job, wait, last_checkpoint, off, enable):
    """After a step failed on the servers, the coordinator's verdict
    (trainer::DecideRecovery, zerostate-worker's rule): asks the servers
    whether they hold the job (waiting `wait` seconds for a silent one; a
    job that lost a server is deleted on those that answer). Returns
    (roll_back, lost, why): roll back to `last_checkpoint` (None: none),
    or not and why; `lost`: the job is gone on some server, `why` naming
    it and what to do, in words naming the setting `off` and `enable`.
    Raises ZerostateError when the servers cannot be asked."""
    roll_back, lost, why = ctypes.c_int(), ctypes.c_int(), ctypes.c_void_p()
    _call(f"job {job.job_id}: asking the servers whether they hold the job",
          lib.zs_recovery_verdict, job._h, int(wait * 1000),
          (last_checkpoint or "").encode(), off.encode(), enable.encode(),
          ctypes.byref(roll_back), ctypes.byref(lost), ctypes.byref(why))
    return bool(roll_back.value), bool(lost.value), _capi.take_string(why.value)


class _Waits:
    """Python callables as zs_wait_fn: an exception is kept (the first)
    and the C++ side sees ABORTED; raise_first() raises it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._error = None

    def wrap(self, call):
        def run(_arg):
            try:
                call()
                return 0
            except BaseException as e:  # noqa: BLE001 - raised by raise_first()
                with self._lock:
                    if self._error is None:
                        self._error = e
                return _ABORTED
        return _capi.WAIT_FN(run)

    def take_first(self):
        """The first exception kept (None if none), forgotten."""
        with self._lock:
            raised, self._error = self._error, None
        return raised

    def raise_first(self, err):
        """Raises the first exception kept, if any (freeing the C error
        message `err`, a c_void_p, then)."""
        raised = self.take_first()
        if raised is not None:
            _capi.take_string(err.value)
            raise raised


def coordinate(job, policy, step, average_over, lr=None, before_step=None):
    """The coordinator's part of step `step` (trainer::CoordinateStep, as
    zerostate-worker runs it): the summed gradient's statistics, `policy`'s
    decision (moving it on), then `before_step()` (if given: e.g. the
    gathers of the new version put out) and the Step carrying the policy's
    trainer_state, with `lr` (None: the policy's schedule). A gradient
    holding non-finite values is skipped, in every precision. Returns the
    Decision. Raises ZerostateError naming the call that failed, or
    before_step's own exception."""
    waits = _Waits()
    wait = _capi.Wait(waits.wrap(before_step), None) if before_step is not None else None
    d = _capi.StepDecision()
    stage, err = ctypes.c_void_p(), ctypes.c_void_p()
    rc = lib.zs_coordinate(job._h, policy._h, step, float(average_over),
                           float(lr if lr is not None else 0), int(lr is not None),
                           ctypes.byref(wait) if wait else None, ctypes.byref(d),
                           ctypes.byref(stage), ctypes.byref(err))
    stage = _capi.take_string(stage.value)
    waits.raise_first(err)
    _check(rc, err, f"job {job.job_id}: {stage}")
    return _decision(d)


def _decision(d):
    return Decision(bool(d.skip), d.grad_scale, d.grad_norm, d.clip_factor, d.lr,
                    d.next_loss_scale)


def send_ahead(job, policy, step, average_over, lr=None):
    """The speculative step's parameters for step `step`, sent ahead of its
    gradients (trainer::SendAhead): the grad_scale coordinate() will carry
    if nothing is clipped or skipped, and `lr` (None: the policy's
    schedule). Raises ZerostateError."""
    _call(f"job {job.job_id}: step {step} sent ahead", lib.zs_send_ahead, job._h, policy._h,
          step, float(average_over), float(lr if lr is not None else 0), int(lr is not None))


class Pusher:
    """A push thread (trainer::Pusher): push() queues a push behind the
    earlier ones and returns its mark (the number of pushes queued through
    it); on the thread its waits (Python callables, e.g. a CUDA event's
    synchronize) run in order, then the push starts. drain(mark) waits for
    the pushes before `mark` (default: every one queued) and raises the
    first error of those not drained before (a wait's own exception if a
    wait raised); later pushes go on. wait_through(mark) waits without
    taking errors (before a buffer a push reads is written again). Each
    push's buffer and waits are kept alive until a drain through it: this
    one's, or one elsewhere (the step in flight's) that release() then
    records."""

    def __init__(self):
        h = ctypes.c_void_p()
        _call("push thread", lib.zs_pusher_create, ctypes.byref(h))
        self._h = h
        self._keep = collections.deque()  # (mark, buffer, fns, array, job, waits)
        self._step = None  # the InFlight whose step owns pushes of this one

    def push(self, job, step, node, begin, end, ptr, nbytes, dtype, keep=None, waits=()):
        caught = _Waits()  # this push's, so its error goes with its mark
        fns = [caught.wrap(w) for w in waits]
        array = (_capi.Wait * len(fns))(*[_capi.Wait(f, None) for f in fns])
        # With the GIL held (_capi.held): it only queues, and no other
        # Python thread queues between it and the mark.
        _call(f"job {job.job_id}: push of step {step} [{begin}, {end})", _capi.held.zs_pusher_push,
              self._h, job._h, step, node, begin, end, ptr, nbytes, dtype, array, len(fns))
        mark = self.mark()
        self._keep.append((mark, keep, fns, array, job, caught))
        return mark

    def mark(self):
        """The number of pushes queued so far."""
        return _capi.held.zs_pusher_mark(self._h)

    def drain(self, mark=None):
        mark = self.mark() if mark is None else mark
        what, err = ctypes.c_void_p(), ctypes.c_void_p()
        rc = lib.zs_pusher_drain(self._h, mark, ctypes.byref(what), ctypes.byref(err))
        what = _capi.take_string(what.value)
        jobs, raised = self.release(mark)
        if raised is not None:
            _capi.take_string(err.value)
            raise raised
        # As a push's ticket names it: "job <id>: push of step <s> [<b>, <e>)".
        _check(rc, err, f"job {', '.join(sorted(jobs))}: {what}" if what else "push thread")

    def wait_through(self, mark):
        """Returns once every push before `mark` ran and is done (at once,
        the GIL kept, when they are); takes no error."""
        if not _capi.held.zs_pusher_done_through(self._h, mark):
            _call("push thread", lib.zs_pusher_wait_through, self._h, mark)

    def release(self, mark):
        """The pushes before `mark` were drained (here or by the step in
        flight): their buffers and waits go. Returns (the ids of their
        jobs, the first exception their waits raised or None)."""
        jobs, raised = set(), None
        while self._keep and self._keep[0][0] <= mark:
            _, _, _, _, job, caught = self._keep.popleft()
            jobs.add(job.job_id)
            first = caught.take_first()
            raised = raised if raised is not None else first
        return jobs, raised

    def _forget(self):
        """After zs_abandon drained the pushes: their buffers and errors go."""
        self._keep.clear()

    def close(self):
        """Waits for every push (errors dropped) and ends the thread. A step
        in flight that owns pushes of it is closed first (its Step's thread
        drains them)."""
        step, self._step = self._step, None
        if step is not None:
            step.close()
        if self._h:
            lib.zs_pusher_free(self._h)
            self._h = ctypes.c_void_p()
            self._keep.clear()

    def __del__(self):
        self.close()


class InFlight:
    """The step whose update is in flight (trainer::InFlightStep, as
    zerostate-worker holds it): start() runs the coordinator's step (as
    coordinate()) on a thread of its own, on a copy of the policy;
    follow() marks a step whose Step another rank runs; fail() one that
    failed before its Step. Each takes `pusher` (a Pusher, or None): the
    step owns the pushes queued on it so far, drained before its Step
    (start) or by take() (follow, fail); a failed one fails the step as
    its Step would. take() hands its verdict over, once."""

    def __init__(self):
        h = ctypes.c_void_p()
        _call("step in flight", lib.zs_in_flight_create, ctypes.byref(h))
        self._h = h
        self._job = None  # the running Step's job and before_step, kept alive
        self._keep = None
        self._pushes = None  # (pusher, mark, whether their errors are the verdict's)
        self._waits = _Waits()

    def _own(self, pusher, verdict):
        """The C call's (pusher handle, mark) for a transition giving the
        step `pusher`'s pushes queued so far, and what _owned() keeps of
        them once it was made (`verdict`: their errors are the verdict's)."""
        mark = pusher.mark() if pusher is not None else 0
        return (pusher._h if pusher is not None else None, mark), (pusher, mark, verdict)

    def _owned(self, pushes):
        """The step made owns `pushes` (_own's); their pusher closes this
        step before it frees itself."""
        self._pushes = pushes
        if pushes[0] is not None:
            pushes[0]._step = self

    def start(self, job, policy, step, average_over, lr=None, before_step=None, pusher=None):
        """Step `step`'s coordination, left running: `pusher`'s pushes
        drained, then the statistics, the decision, `before_step()` (which
        puts the gathers out: once it returned, wait_gathers_out(step)
        does) and the Step."""
        fn = self._waits.wrap(before_step) if before_step is not None else None
        wait = _capi.Wait(fn, None) if fn is not None else None
        pushes, owned = self._own(pusher, True)
        _call(f"job {job.job_id}: step {step} in flight", lib.zs_in_flight_start, self._h,
              job._h, policy._h, step, float(average_over),
              float(lr if lr is not None else 0), int(lr is not None),
              ctypes.byref(wait) if wait else None, *pushes)
        self._job, self._keep = job, (fn, wait)
        self._owned(owned)

    def follow(self, step, pusher=None):
        """Step `step` in flight, its Step the coordinator's."""
        pushes, owned = self._own(pusher, True)
        _call(f"step {step} in flight", lib.zs_in_flight_follow, self._h, step, *pushes)
        self._owned(owned)

    def fail(self, step, error, refused=False, pusher=None):
        """Step `step` in flight, failed already with ZerostateError `error`
        (refused: bad input, nothing to roll back); its pushes' errors are
        dropped."""
        pushes, owned = self._own(pusher, False)
        _call(f"step {step} in flight", lib.zs_in_flight_fail, self._h, step,
              _CODES.get(error.code, 2), str(error).encode(), int(refused), *pushes)
        self._owned(owned)

    def active(self):
        """True while a step is in flight (until take())."""
        return bool(_capi.held.zs_in_flight_active(self._h, None))

    def wait_gathers_out(self, step):
        """Returns once step `step`'s gathers are out (True), or its Step
        ended without them or it is no longer in flight (False)."""
        return bool(lib.zs_in_flight_wait_gathers_out(self._h, step))

    def take(self, policy=None):
        """Waits for the Step in flight (or the pushes of a followed or
        failed step) and hands its verdict over: None when nothing was in
        flight, else (step, decision, error, refused): the Decision its
        Step carried (None unless coordinated and OK), `error` a
        ZerostateError (before_step's or a push wait's own if it raised
        one; any other exception of theirs is raised) or None. `policy`
        (given, the Step coordinated and OK) takes the policy after it."""
        v = _capi.Verdict()
        stage, message, err = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        rc = lib.zs_in_flight_take(self._h, policy._h if policy is not None else None,
                                   ctypes.byref(v), ctypes.byref(stage), ctypes.byref(message),
                                   ctypes.byref(err))
        job, self._job, self._keep = self._job, None, None
        stage, message = _capi.take_string(stage.value), _capi.take_string(message.value)
        _check(rc, err, "step in flight")
        jobs, raised, own = self._release()
        if not v.active:
            return None
        error = self._waits.take_first()  # before_step's own exception, if it raised
        if error is None and own:
            error = raised  # a push wait's: the pushes failed the step
        if error is not None and not isinstance(error, ZerostateError):
            raise error
        if error is None and v.code != 0:
            name = _capi.CODE_NAMES.get(v.code, str(v.code))
            who = job.job_id if job is not None else ", ".join(sorted(jobs))
            text = message if not own or v.refused else f"job {who}: {stage}: {name}: {message}"
            error = ZerostateError(text, name)
        decision = _decision(v.decision) if v.code == 0 and v.coordinated else None
        return v.step, decision, error, bool(v.refused)

    def _release(self):
        """The step's pushes, drained by the C++ step: (their jobs' ids,
        the first exception their waits raised, whether their errors are
        the verdict's)."""
        pushes = self._disown()
        if pushes is None or pushes[0] is None:
            return set(), None, pushes is not None and pushes[2]
        jobs, raised = pushes[0].release(pushes[1])
        return jobs, raised, pushes[2]

    def _disown(self):
        """Forgets the step's pushes (drained, or dropped); returns them."""
        pushes, self._pushes = self._pushes, None
        if pushes is not None and pushes[0] is not None and pushes[0]._step is self:
            pushes[0]._step = None
        return pushes

    def abandon(self, pusher, slots=()):
        """Drops what a failed, reset or closing step left in flight (as the
        worker does: zs_abandon): waits for the Step (its pushes
        drained) and forgets its verdict; drops the gathers of `slots` (GatherSlots), cancelling
        them, so none waits on for a version no Step brings; waits for
        every push of `pusher` (a Pusher), their errors dropped; then for
        the dropped gathers (their buffers are free again)."""
        handles = (ctypes.c_void_p * len(slots))(*[s._h for s in slots])
        lib.zs_abandon(self._h, pusher._h, handles, len(slots))
        self._disown()
        self._job = self._keep = None
        self._waits.take_first()
        pusher._forget()
        for slot in slots:
            slot._keep = None

    def close(self):
        """Waits for a Step still running (its verdict dropped) and frees."""
        if self._h:
            lib.zs_in_flight_free(self._h)
            self._h = ctypes.c_void_p()
            self._disown()
            self._job = self._keep = None

    def __del__(self):
        self.close()


class GatherSlot:
    """One range's gather of new weights, landed once (trainer::GatherSlot,
    as zerostate-worker lands each bucket): fetch() puts the gather of this
    rank's share [begin, end) in flight; land() waits for it and says
    whether the driver's part (the node's all-gather, the copies) follows,
    which landed() closes, raising the gather's error then (every local
    rank takes part even after its gather failed); drop() forgets it,
    cancelling it.
    wait(version), from any thread, returns once the share is at version
    or later. An illegal transition raises FAILED_PRECONDITION naming it."""

    def __init__(self, begin, end, reuse=None):
        """`reuse`: a callable returning once the last landing's copy out of
        the buffer is done (run by the next fetch, before the gather writes it)."""
        h = ctypes.c_void_p()
        self.begin, self.end = begin, end
        _call(f"gather slot [{begin}, {end})", lib.zs_gather_slot_create, begin, end,
              ctypes.byref(h))
        self._h = h
        self._waits = _Waits()
        self._reuse = None
        if reuse is not None:
            self._reuse = _capi.Wait(self._waits.wrap(reuse), None)
        self._keep = None  # the buffer and job of the gather in flight

    def fetch(self, job, version, ptr, nbytes, dtype, keep=None):
        err = ctypes.c_void_p()
        rc = lib.zs_gather_slot_fetch(self._h, job._h, version, ptr, nbytes, dtype,
                                      ctypes.byref(err))
        self._waits.raise_first(err)
        _check(rc, err, f"job {job.job_id}: gather of version {version} "
                        f"[{self.begin}, {self.end})")
        self._keep = (keep, job, version)

    def land(self):
        """Waits for the gather fetched (the GIL released): True, the
        driver's part follows, then landed(); False when nothing is fetched."""
        if self.pending() is None:  # landed once already: no GIL handover (forward pre-hooks)
            return False
        take = ctypes.c_int()
        _call(f"gather slot [{self.begin}, {self.end})", lib.zs_gather_slot_land, self._h,
              ctypes.byref(take))
        return bool(take.value)

    def landed(self):
        """The driver's part is done: raises the gather's error, if any."""
        keep, self._keep = self._keep, None
        err = ctypes.c_void_p()
        rc = _capi.held.zs_gather_slot_landed(
            self._h, ctypes.byref(self._reuse) if self._reuse is not None else None,
            ctypes.byref(err))
        what = f"job {keep[1].job_id}: gather of version {keep[2]}" if keep is not None \
            else "gather slot"
        _check(rc, err, f"{what} [{self.begin}, {self.end})")

    def drop(self):
        """Forgets the gather fetched, not landed: cancelled, and waited for
        (at once), so its buffer is free again."""
        _call(f"gather slot [{self.begin}, {self.end})", lib.zs_gather_slot_drop, self._h)
        self._keep = None

    def wait(self, version):
        """Returns once the share is at `version` or later (the push
        thread's wait); raises ZerostateError (ABORTED: not fetched)."""
        _call(f"gather of version {version} [{self.begin}, {self.end})",
              lib.zs_gather_slot_wait, self._h, version)

    def pending(self):
        """The version fetched or landing, or None."""
        v = ctypes.c_uint64()
        return v.value if _capi.held.zs_gather_slot_pending(self._h, ctypes.byref(v)) else None

    def close(self):
        if self._h:
            lib.zs_gather_slot_free(self._h)
            self._h = ctypes.c_void_p()
            self._keep = None

    def __del__(self):
        self.close()
