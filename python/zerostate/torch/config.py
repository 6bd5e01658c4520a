"""ds_config.json for the engine: read by the worker's own rules through
the C API (zs_parse_ds_config, worker/ds_config.h), so a key means the same
to zerostate-worker and to zerostate.torch."""

import json
import warnings

from zerostate.client import parse_ds_config

KINDS = {"OPTIMIZER_ADAMW": "adamw", "OPTIMIZER_ADAM": "adam",
         "OPTIMIZER_SGD_MOMENTUM": "sgd", "OPTIMIZER_LION": "lion"}


class EngineConfig:
    """The parts of a TrainConfig (proto/zerostate/v1/config.proto) the
    engine honours, with the proto's defaults filled in."""

    def __init__(self, config):
        if config is None:
            config = {}
        if isinstance(config, dict):
            text = json.dumps(config)
        else:
            with open(config) as f:
                text = f.read()
        train, notes = parse_ds_config(text)
        for note in notes:
            # The worker warns of stage 0 also when the section is absent.
            if note.startswith("zero_optimization.stage: 0") and \
                    "stage" not in json.loads(text).get("zero_optimization", {}):
                continue
            warnings.warn(note)
        # The TrainConfig as a dict: the step policy's config (zerostate.policy:
        # clip, fp16 loss scale, LR schedule).
        self.train = train
        opt = train.get("optimizer", {})
        self.kind = KINDS.get(opt.get("kind", "OPTIMIZER_ADAMW"), "adamw")
        self.optimizer = opt
        lion = self.kind == "lion"
        self.betas = (opt.get("beta1", 0.9), opt.get("beta2", 0.99 if lion else 0.999))
        self.eps = opt.get("eps", 1e-8)
        self.weight_decay = opt.get("weight_decay", 0.0)
        self.momentum = opt.get("momentum", 0.9)
        self.nesterov = bool(opt.get("nesterov", False))
        self.schedule = train.get("lr", {})
        self.lr = self.schedule.get("lr", 1e-3)
        self.has_schedule = "warmup_steps" in self.schedule or "decay" in self.schedule
        self.precision = train.get("precision", "PRECISION_FP32")
        # data_types.grad_accum_dtype (train.grad_accum_dtype): the dtype a
        # step's gradients accumulate and reduce in; train.grad_dtype: the
        # wire's (default: the training dtype's). "DTYPE_FP32" etc.
        self.grad_accum_dtype = train.get("grad_accum_dtype", "DTYPE_FP32")
        if self.grad_accum_dtype == "DTYPE_UNSPECIFIED":
            self.grad_accum_dtype = "DTYPE_FP32"
        self.grad_dtype = train.get("grad_dtype")
        if self.grad_dtype == "DTYPE_UNSPECIFIED":
            self.grad_dtype = None
        self.grad_accum = int(train.get("grad_accum_steps", 1))
        self.micro_batch = int(train.get("micro_batch_size", 0))
        self.global_batch = int(train.get("global_batch_size", 0))
        self.block_elems = int(train.get("block_elems", 0))
        self.seed = int(train.get("seed", 1))
        # {"zerostate": {"train": {"speculative_step": true}}}: the servers
        # step each block as its gradients arrive (JobSpec.speculative_step).
        self.speculative_step = bool(train.get("speculative_step", False))
        # {"zerostate": {"train": {"moment_format": "MOMENTS_INT8"}}}: how the
        # servers store the optimizer moments (JobSpec.moment_format).
        self.moment_format = train.get("moment_format", "MOMENTS_FP32")
        # {"zerostate": {"wire": {"gradients": "int8", "weights": "int8"}}}:
        # the compressed wire (JobSpec.gradient_wire / weight_wire,
        # docs/wire.md); the C API maps it into the TrainConfig.
        self.gradient_wire = train.get("gradient_wire", "WIRE_PLAIN")
        self.weight_wire = train.get("weight_wire", "WIRE_PLAIN")
        # zero_optimization.delayed_update (train.delayed_update): ZeRO-Offload's
        # delayed parameter update after `warmup_steps` synchronous steps
        # (which steps: the step policy's, zerostate.policy.Policy.ends_delayed).
        delayed = train.get("delayed_update", {})
        self.delayed = bool(delayed.get("enabled", False))
        if self.delayed and self.precision == "PRECISION_FP16":
            raise ValueError("ds_config zero_optimization.delayed_update.enabled: not with fp16 "
                             "(the loss scale of step t depends on step t-1's overflow check, "
                             "which a delayed update has not made yet); use bf16 or fp32")
        if self.delayed and self.speculative_step:
            raise ValueError("ds_config zero_optimization.delayed_update.enabled: not with "
                             "speculative_step (its parameters go ahead of each step's "
                             "gradients, and so of a delayed Step still in flight); choose one")

    def check_batch(self, world):
        """DeepSpeed's rule: train_batch_size = train_micro_batch_size_per_gpu
        * gradient_accumulation_steps * world size, when both are given."""
        if self.global_batch and self.micro_batch:
            want = self.micro_batch * self.grad_accum * world
            if self.global_batch != want:
                raise ValueError(f"ds_config train_batch_size: {self.global_batch} != "
                                 f"train_micro_batch_size_per_gpu {self.micro_batch} * "
                                 f"gradient_accumulation_steps {self.grad_accum} * world size "
                                 f"{world}")
