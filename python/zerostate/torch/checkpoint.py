"""Engine checkpoints, DeepSpeed's layout: save_dir/<tag>/ holds the
servers' shards (<tag>/<job_id>/v<version>, written by the servers through
the Checkpoint RPC, so save_dir must be a directory every server reaches)
and the engine's own state (steps, loss scale, LR scheduler, param_groups,
the module's buffers, client_state); save_dir/latest names the newest
tag. Loading replaces the job on the servers with the checkpoint
(Restore) and gathers its weights.
Every rank calls both; rank 0 talks to the servers and tells the others."""

import json
import os

import torch

from zerostate.client import ZerostateError
from zerostate.torch.weights import gather_into

ENGINE_FILE = "zerostate_engine.json"
EXTRA_FILE = "zerostate_engine.pt"


class RolledBack(ZerostateError):
    """engine.step() failed on the servers and the engine went back to its
    last checkpoint (initialize's checkpoint_every): `version` is the step
    to go on from (engine.global_steps), with the data of that step."""

    def __init__(self, message, code, version):
        super().__init__(message, code)
        self.version = version


def save(engine, save_dir, tag=None, client_state=None):
    """Returns the servers' checkpoint directory (for `zerostate ckpt export`)."""
    root = os.path.abspath(save_dir)
    tag = tag if tag is not None else f"global_step{engine.global_steps}"
    save_dir = os.path.join(root, str(tag))
    verdict = None
    if engine.topo.coordinator:
        try:
            os.makedirs(save_dir, exist_ok=True)
            path = engine.job.checkpoint(engine.global_steps, save_dir)
            meta = dict(trainer_state=engine.policy.state().decode(), job=engine.job_id, path=path,
                        version=engine.global_steps, micro_steps=engine.micro_steps)
            sched = engine.lr_scheduler
            torch.save({"lr_scheduler": sched.state_dict() if sched is not None else None,
                        "buffers": {n: b.detach().cpu().clone()
                                    for n, b in engine.module.named_buffers()},
                        "param_groups": [{k: v for k, v in g.items() if k != "params"}
                                         for g in engine.optimizer.param_groups],
                        "client_state": client_state},
                       os.path.join(save_dir, EXTRA_FILE))
            with open(os.path.join(save_dir, ENGINE_FILE), "w") as f:
                json.dump(meta, f)
            with open(os.path.join(root, "latest"), "w") as f:
                f.write(str(tag))
            verdict = ("ok", path)
        except (ZerostateError, OSError) as e:
            verdict = ("error", f"save_checkpoint {save_dir}: {e}", "INTERNAL")
    verdict = engine.topo.broadcast(verdict)
    if verdict[0] != "ok":
        raise ZerostateError(verdict[1], verdict[2])
    return verdict[1]


def _read(load_dir, tag, job_id):
    if tag is None and os.path.exists(os.path.join(load_dir, "latest")):
        with open(os.path.join(load_dir, "latest")) as f:
            tag = f.read().strip()
    if tag is not None:
        load_dir = os.path.join(load_dir, str(tag))
    try:
        with open(os.path.join(load_dir, ENGINE_FILE)) as f:
            meta = json.load(f)
        # Our own file; client_state may hold any object (torch >= 2.6 would
        # refuse it by default).
        extra = torch.load(os.path.join(load_dir, EXTRA_FILE), weights_only=False)
    except (OSError, ValueError) as e:
        raise ZerostateError(f"load_checkpoint {load_dir}: not an engine checkpoint: {e}",
                             "NOT_FOUND") from None
    if meta["job"] != job_id:
        raise ZerostateError(f"load_checkpoint {load_dir}: it is job '{meta['job']}', this "
                             f"engine runs '{job_id}'", "INVALID_ARGUMENT")
    return load_dir, meta, extra


def load(engine, load_dir, tag=None):
    """Returns (the checkpoint's directory, its client_state)."""
    load_dir, meta, extra = _read(os.path.abspath(load_dir), tag, engine.job_id)
    verdict = None
    if engine.topo.coordinator:
        try:
            try:
                engine.job.delete()
            except ZerostateError as e:  # a restarted server lost the job
                if e.code not in ("NOT_FOUND", "UNAUTHENTICATED", "UNAVAILABLE"):
                    raise
            engine.job = engine.client.restore_job(meta["path"], engine.job_id)
            verdict = ("ok",)
        except ZerostateError as e:
            verdict = ("error", f"load_checkpoint {load_dir}: {e}", e.code)
    verdict = engine.topo.broadcast(verdict)
    if verdict[0] != "ok":
        engine._failed = ZerostateError(verdict[1], verdict[2])
        raise engine._failed
    if not engine.topo.coordinator:
        engine.job = engine.client.attach_job(engine.job_id)
    engine._reset(meta["version"], meta["micro_steps"])
    engine.policy.restore(meta.get("trainer_state", "").encode())  # older: "" (DATA_LOSS in fp16)
    for g, saved in zip(engine.optimizer.param_groups, extra["param_groups"]):
        g.update(saved)
    if engine.lr_scheduler is not None and extra["lr_scheduler"] is not None:
        engine.lr_scheduler.load_state_dict(extra["lr_scheduler"])
    _load_buffers(engine.module, extra.get("buffers", {}))
    gather_into(engine.job, engine._entries, engine.global_steps, engine.dtype)
    engine.topo.barrier()
    return load_dir, extra["client_state"]


def _load_buffers(module, saved):
    """The module's buffers (BatchNorm statistics) as saved, each in its own dtype."""
    with torch.no_grad():
        for name, b in module.named_buffers():
            if name in saved:
                b.copy_(saved[name])


def roll_back(engine, failure, code):
    """The servers lost the job or cannot be reached: every rank loads the
    last checkpoint; raises RolledBack (or the failure, if that fails)."""
    try:
        load(engine, engine.last_checkpoint)
    except ZerostateError as e:
        engine._failed = ZerostateError(f"{failure}; rolling back to {engine.last_checkpoint} "
                                        f"failed: {e}", code)
        raise engine._failed from None
    raise RolledBack(f"{failure}; rolled back to the checkpoint of step {engine.global_steps} "
                     f"({engine.last_checkpoint}): go on from engine.global_steps", code,
                     engine.global_steps)
