"""The coordinator's verdict on a step, and every rank taking it: the
engine's part of the step protocol that decides (engine.py runs the rest).
The decisions are the C++ trainer engine's, as zerostate-worker's
(zerostate.pipeline): the coordinator's statistics, decision and Step
(coordinate), the delayed update's step in flight (engine._in_flight, an
InFlight) and the rule after a failed step (recovery_verdict). A verdict,
broadcast from the coordinator (global rank 0) to every rank, is
("ok", trainer_state, skipped, grad_norm), ("rollback", message, code) or
("error", message, code)."""

import time
import warnings

import torch

from zerostate.client import ZerostateError
from zerostate.pipeline import coordinate, recovery_verdict
from zerostate.torch import checkpoint as ckpt


def ratio_error(engine, step, lr, scales):
    """Why param_groups' lr ratios (`scales` at `lr`) are not the job's,
    or None."""
    for i, (now, was) in enumerate(zip(scales, engine._lr_scales)):
        if abs(now - was) > 1e-6 * max(abs(was), 1e-30) and lr != 0:
            return (f"step {step}: param_groups[{i}]['lr'] / param_groups[0]['lr'] is "
                    f"{now:g}, registered as {was:g}: a job's groups keep their lr ratios "
                    "(the LR scheduler must scale every group alike)")
    return None


def decide(engine, step, lr, scales):
    """The coordinator's synchronous step: statistics, clipping, loss
    scale, Step (zerostate.pipeline.coordinate). `lr` and `scales`:
    param_groups' as the step began."""
    ratio = ratio_error(engine, step, lr, scales)
    if ratio is not None:
        return ("error", ratio, "INVALID_ARGUMENT")
    # The gathers go out first, those the first push did not put out
    # (EarlyGathers): blocks stream back as the servers step them.
    d = coordinate(engine.job, engine.policy, step, engine._average_over(), lr=lr,
                   before_step=lambda: engine._fetch(step + 1))
    return of(engine, step, d, None, False)


def start_delayed(engine, step, lr, scales):
    """Step `step`'s update, left in flight (engine._in_flight) with the
    step's pushes (engine._pusher's so far): every rank's gathers of the
    next version go out; on the coordinator, a thread of the C++ engine
    waits for the pushes, then runs the statistics and Step (a failed push
    fails the step there, as a failed Step). The pushes finish behind the
    next forward."""
    flight, pusher = engine._in_flight, engine._pusher
    if not engine.topo.coordinator:
        engine._fetch(step + 1)
        flight.follow(step, pusher=pusher)
        return
    ratio = ratio_error(engine, step, lr, scales)
    if ratio is not None:
        flight.fail(step, ZerostateError(ratio, "INVALID_ARGUMENT"), refused=True, pusher=pusher)
        return

    def before_step():  # on the Step's thread: blocks stream back as the servers step them
        engine._fetch(step + 1)
    flight.start(engine.job, engine.policy, step, engine._average_over(), lr=lr,
                 before_step=before_step, pusher=pusher)


def finish_delayed(engine, defer=False):
    """The delayed update in flight: the coordinator's verdict to every
    rank, then its weights into the parameters (`defer`: engine._land's).
    Collective."""
    t0 = time.perf_counter()
    taken = engine._in_flight.take(engine.policy)
    verdict = of(engine, *taken) if engine.topo.coordinator else None
    verdict = engine.topo.broadcast(verdict)
    engine.timers["server_step"] += time.perf_counter() - t0
    apply(engine, verdict, engine.global_steps - 1)
    engine._land(defer)


def of(engine, step, decision, error, refused):
    """The coordinator's verdict on step `step`: ok with the policy's
    trainer_state; an error for a refused step; else as failure()."""
    if error is None:
        return ("ok", engine.policy.state(), decision.skip, decision.grad_norm)
    if refused:
        return ("error", str(error), error.code)
    return failure(engine, step, error)


def failure(engine, step, e):
    """The verdict on server call `e` that failed in step `step`: the
    coordinator asks the servers whether they hold the job, ending it on
    those that answer if a server lost it, so no rank's gather waits there
    for a version that will never come; then, by the trainer engine's rule
    (zerostate-worker's): a lost shard and a checkpoint roll back to it
    (load() deletes the job everywhere first), else the run ends saying
    why. Only the coordinator's verdict counts (every rank takes it by
    broadcast)."""
    message = f"step {step}: {e}"
    if not engine.topo.coordinator:
        return ("error", message, e.code)
    try:
        roll_back, lost, why = recovery_verdict(
            engine.job, engine._unavailable_wait, engine.last_checkpoint, "checkpoint_every=0",
            "initialize's checkpoint_every=N and checkpoint_dir")
    except ZerostateError as asked:
        return ("error", f"{message}; {asked}", e.code)
    if roll_back:
        return ("rollback", message, e.code)
    if lost or engine.last_checkpoint:
        message += f"; {why}" if lost else f"; no rollback: {why}"
    return ("error", message, e.code)


def apply(engine, verdict, step):
    """Every rank takes the coordinator's verdict on step `step`: rolls
    back (raising RolledBack), stops (raising the error), or takes the
    coordinator's trainer_state; a step without fp16 skipped for
    non-finite gradients is warned of on the coordinator. A failed step
    first drops what it left in flight (engine._abandon): no Step brings
    the version its gathers wait for."""
    if verdict[0] != "ok":
        engine._abandon()
    if verdict[0] == "rollback":
        ckpt.roll_back(engine, verdict[1], verdict[2])
    if verdict[0] == "error":
        engine._failed = ZerostateError(verdict[1], verdict[2])
        raise engine._failed
    engine.policy.restore(verdict[1])  # the coordinator's trainer_state
    engine._step_applied, engine._grad_norm = not verdict[2], verdict[3]
    if verdict[2] and engine.dtype != torch.float16 and engine.topo.coordinator:
        warnings.warn(f"step {step}: the summed gradient holds non-finite (NaN or Inf) "
                      "values; the step was skipped, the weights are unchanged")
