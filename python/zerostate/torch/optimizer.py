"""engine.optimizer and the job's description: torch param_groups become
the job's tensors (trainable parameters, by name) and tensor groups (weight
decay, lr scale, betas); a torch optimizer given to initialize takes the
place of the ds_config's optimizer section."""

import torch

from zerostate.client import ZerostateError

KIND_PROTO = {"adamw": "OPTIMIZER_ADAMW", "adam": "OPTIMIZER_ADAM",
              "sgd": "OPTIMIZER_SGD_MOMENTUM", "lion": "OPTIMIZER_LION"}
DTYPE_PROTO = {torch.float32: "DTYPE_FP32", torch.bfloat16: "DTYPE_BF16",
               torch.float16: "DTYPE_FP16"}
PROTO_DTYPE = {v: k for k, v in DTYPE_PROTO.items()}
_BETAS = ("adamw", "adam", "lion")


class ZerostateOptimizer(torch.optim.Optimizer):
    """engine.optimizer: holds param_groups (lr, weight_decay, betas) for
    torch LR schedulers; step() is the engine's step. The state lives on
    the servers."""

    def __init__(self, groups, defaults, engine):
        super().__init__(groups, defaults)
        self._engine = engine
        self._shadows = []  # torch optimizers given to initialize, sharing param_groups

    def share_groups(self, opt):
        """`opt` (the script's optimizer) takes these param_groups, so that
        its LR schedulers move the job's lr, and counts these steps (torch's
        schedulers warn of a step of theirs before any of the optimizer)."""
        opt.param_groups = self.param_groups
        self._shadows.append(opt)

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        timeline = self._engine.timeline
        timeline.harvest()  # the traced spans of the steps before that completed
        with timeline.host("step_call"):
            self._engine._service_step()
        for opt in self._shadows:
            opt._step_count = getattr(opt, "_step_count", 0) + 1
        return loss

    def zero_grad(self, set_to_none=True):
        self._engine.zero_grad()

    def state_dict(self):
        raise ZerostateError(
            "engine.optimizer.state_dict(): the optimizer's state (fp32 master weights and "
            "moments) is not in this process: it lives on the state servers, sharded, and no "
            "call gathers it here; engine.save_checkpoint(dir) saves it (its servers write "
            "their shards)", "UNIMPLEMENTED")

    def load_state_dict(self, state_dict):
        raise ZerostateError(
            "engine.optimizer.load_state_dict(): the optimizer's state lives on the state "
            "servers; engine.load_checkpoint(dir) loads a saved one", "UNIMPLEMENTED")


def groups_of(model, model_parameters):
    """torch param_groups (dicts) of the trainable parameters, from
    model_parameters (parameters or param_groups) or all of them."""
    names = {id(p): n for n, p in model.named_parameters()}
    if model_parameters is None:
        groups = [{"params": [p for p in model.parameters() if p.requires_grad]}]
    else:
        groups = list(model_parameters)
        if groups and not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        groups = [dict(g, params=list(g["params"])) for g in groups]
    for i, g in enumerate(groups):
        for p in g["params"]:
            if id(p) not in names:
                raise ValueError(f"model_parameters group {i} holds a tensor that is not a "
                                 "parameter of the model")
        g["params"] = [p for p in g["params"] if p.requires_grad]
    groups = [g for g in groups if g["params"]]
    if not groups:
        raise ValueError("the model has no trainable parameter (requires_grad=True)")
    return groups


def take_optimizer(opt, config_arg, config, model_parameters):
    """initialize(optimizer=a torch optimizer): its kind and hyper-parameters
    go into `config` (an EngineConfig); returns its param_groups."""
    if model_parameters is not None:
        raise ValueError("optimizer= holds the param_groups: leave model_parameters out")
    if isinstance(config_arg, dict) and "optimizer" in config_arg or "kind" in config.optimizer:
        raise ValueError("the optimizer is given twice: in the ds_config's 'optimizer' "
                         "section and as optimizer=")
    g0 = opt.param_groups[0]
    if isinstance(opt, (torch.optim.AdamW, torch.optim.Adam)):
        if any(g.get("amsgrad") for g in opt.param_groups):
            raise ValueError("optimizer: amsgrad is not supported")
        config.kind = "adamw" if isinstance(opt, torch.optim.AdamW) else "adam"
        config.eps = g0["eps"]
        config.optimizer = {"eps": g0["eps"]}
    elif isinstance(opt, torch.optim.SGD):
        if any(g.get("dampening", 0) for g in opt.param_groups):
            raise ValueError("optimizer: SGD dampening is not supported (0 only)")
        config.kind = "sgd"
        config.optimizer = {"momentum": g0["momentum"], "nesterov": bool(g0["nesterov"])}
    else:
        raise ValueError(f"optimizer: {type(opt).__name__} is not supported; use "
                         "torch.optim.AdamW, Adam or SGD, or the ds_config's section "
                         "(AdamW, Adam, SGD, Lion)")
    config.lr = g0["lr"]
    config.betas = tuple(g0.get("betas", config.betas))
    config.weight_decay = g0["weight_decay"]
    return [dict(g) for g in opt.param_groups]


def lr_scales(param_groups):
    """Each group's lr over the first group's (1 when that is 0)."""
    base = param_groups[0]["lr"]
    return [g["lr"] / base if base else 1.0 for g in param_groups]


def job_spec(job_id, params, param_groups, scales, config, num_nodes, dtype, grad_dtype):
    """A zerostate.v1.JobSpec (protobuf JSON names) for named parameters
    [(name, param)], weights in `dtype` and gradients in `grad_dtype` on the
    wire: group 0's hyper-parameters are the job's optimizer, the other
    groups its tensor groups."""
    opt = dict(config.optimizer, kind=KIND_PROTO[config.kind])
    g0 = param_groups[0]
    if config.kind in _BETAS:
        opt["beta1"], opt["beta2"] = g0["betas"]
        opt["eps"] = g0["eps"]
    opt["weight_decay"] = g0["weight_decay"]
    names = {id(p): n for n, p in params}
    groups = []
    for g, scale in zip(param_groups[1:], scales[1:]):
        tg = {"tensors": [names[id(p)] for p in g["params"]],
              "weight_decay": g["weight_decay"], "lr_scale": scale}
        if config.kind in _BETAS:
            tg["beta1"], tg["beta2"] = g["betas"]
        groups.append(tg)
    spec = {"job_id": job_id,
            "tensors": [{"name": n, "shape": list(p.shape) or [1]} for n, p in params],
            "optimizer": opt, "num_nodes": num_nodes,
            "grad_dtype": DTYPE_PROTO[grad_dtype], "weight_dtype": DTYPE_PROTO[dtype],
            "block_elems": config.block_elems, "streamed_init": True, "seed": config.seed}
    if groups:
        spec["groups"] = groups
    if config.speculative_step:
        spec["speculative_step"] = True
    if config.moment_format != "MOMENTS_FP32":
        spec["moment_format"] = config.moment_format
    if config.gradient_wire != "WIRE_PLAIN":
        spec["gradient_wire"] = config.gradient_wire
    if config.weight_wire != "WIRE_PLAIN":
        spec["weight_wire"] = config.weight_wire
    return spec
