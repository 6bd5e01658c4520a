"""The trainer's step policy (trainer/policy.h) through its C API
(trainer/zerostate_trainer_c.h): the clip factor, the fp16 overflow skip
and loss scale, the learning rate of each step, and the trainer_state blob
the Step carries. zerostate-worker calls the same C++ code, so both
drivers decide every step alike. A Policy is used by one thread at a time."""

import collections
import ctypes
import json

from zerostate import _capi
from zerostate._capi import lib
from zerostate.client import _call

Decision = collections.namedtuple(
    "Decision", "skip grad_scale grad_norm clip_factor lr next_loss_scale")


class Policy:
    def __init__(self, train):
        """`train`: a zerostate.v1.TrainConfig as a dict in protobuf's JSON
        mapping (parse_ds_config's). Raises ZerostateError naming a bad field."""
        h = ctypes.c_void_p()
        _call("step policy", lib.zs_policy_create, json.dumps(train).encode(), ctypes.byref(h))
        self._h, self._free = h.value, lib.zs_policy_free  # usable at interpreter exit

    def __del__(self):
        if getattr(self, "_h", None):
            self._free(self._h)

    @property
    def loss_scale(self):
        """The loss scale the next step runs with (1 unless fp16)."""
        return lib.zs_policy_loss_scale(self._h)

    @property
    def skipped(self):
        """Whether the last step decided (or restored) was skipped."""
        return bool(lib.zs_policy_skipped(self._h))

    def learning_rate(self, step):
        """The schedule's learning rate of step `step` (from 0)."""
        return lib.zs_policy_learning_rate(self._h, step)

    def ends_delayed(self, step, next_is_sync_point):
        """Whether step `step` ends with its update in flight (the delayed
        update, after its warm-up), unless version step + 1 is a sync
        point (a checkpoint)."""
        return bool(lib.zs_policy_ends_delayed(self._h, step, int(next_is_sync_point)))

    def unclipped_grad_scale(self, average_over):
        """decide()'s grad_scale when nothing is clipped or skipped."""
        out = ctypes.c_float()
        _call("step policy: unclipped grad_scale", lib.zs_policy_unclipped_grad_scale, self._h,
              float(average_over), ctypes.byref(out))
        return out.value

    def decide(self, step, sum_squares, nonfinite, average_over):
        """Step `step`'s Decision from its summed gradient's statistics (of
        loss * loss_scale over `average_over` rank micro-batches); moves the
        loss scale on. Raises ZerostateError naming a bad argument."""
        d = _capi.StepDecision()
        _call(f"step policy: step {step}", lib.zs_policy_decide, self._h, step,
              float(sum_squares), nonfinite, float(average_over), ctypes.byref(d))
        return Decision(bool(d.skip), d.grad_scale, d.grad_norm, d.clip_factor, d.lr,
                        d.next_loss_scale)

    def state(self):
        """The trainer_state blob (bytes; b"" unless fp16)."""
        out, n = ctypes.c_void_p(), ctypes.c_size_t()
        _call("step policy: state", lib.zs_policy_state, self._h, ctypes.byref(out),
              ctypes.byref(n))
        return _capi.take_bytes(out.value, n.value)

    def restore(self, blob):
        """Takes a state() blob (or Job.trainer_state's). Raises
        ZerostateError (DATA_LOSS) naming what is malformed."""
        _call("step policy: restore", lib.zs_policy_restore, self._h, blob or None, len(blob))
