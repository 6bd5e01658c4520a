"""The engine: a torch module trained with its optimizer state on the
state servers.

- Registration. Every trainable parameter (requires_grad) is one tensor of
  the job, named as in model.named_parameters(); frozen parameters are never
  registered, pushed or stepped. torch param_groups become the job's tensor
  groups (weight decay, lr scale, betas). A new job's weights are streamed
  from the model; a job that already stepped gives its weights to the model.
- Gradients leave during backward: a hook on each parameter after its
  gradient is accumulated (register_post_accumulate_grad_hook, or a hook on
  its AccumulateGrad node before torch 2.1) counts it into its bucket; a
  full bucket is reduced inside the node and pushed (buckets.py).
- engine.step(): the coordinator (global rank 0) reads the summed gradient's
  statistics, clips, checks for non-finite values (fp16: skip and back off
  the loss scale), and orders the Step with the lr of param_groups[0]; its
  verdict goes to every rank; then every rank gathers the new version, per
  module, into the parameters in the training dtype: at once (default), or
  just before each module's forward (lazy_weights=True, forward pre-hooks;
  every gather is in flight from the step on). The coordinator's gathers go
  out just before its Step, so blocks come back as the servers step them.
"""

import json
import os
import time

import torch

from zerostate.client import Client, ZerostateError
from zerostate.torch import buckets as bk
from zerostate.torch.config import EngineConfig
from zerostate.torch.topology import Topology

_KIND_PROTO = {"adamw": "OPTIMIZER_ADAMW", "adam": "OPTIMIZER_ADAM",
               "sgd": "OPTIMIZER_SGD_MOMENTUM", "lion": "OPTIMIZER_LION"}
_PRECISION_DTYPE = {"PRECISION_FP32": torch.float32, "PRECISION_BF16": torch.bfloat16,
                    "PRECISION_FP16": torch.float16}
_DTYPE_PROTO = {torch.float32: "DTYPE_FP32", torch.bfloat16: "DTYPE_BF16",
                torch.float16: "DTYPE_FP16"}
_ENGINE_FILE = "zerostate_engine.json"
_EXTRA_FILE = "zerostate_engine.pt"


class RolledBack(ZerostateError):
    """engine.step() failed on the servers and the engine went back to its
    last checkpoint (initialize's checkpoint_every): `version` is the step
    to go on from (engine.global_steps), with the data of that step."""

    def __init__(self, message, code, version):
        super().__init__(message, code)
        self.version = version


class ZerostateOptimizer(torch.optim.Optimizer):
    """engine.optimizer: holds param_groups (lr, weight_decay, betas) for
    torch LR schedulers; step() is the engine's step. The state lives on
    the servers."""

    def __init__(self, groups, defaults, engine):
        super().__init__(groups, defaults)
        self._engine = engine

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        self._engine._service_step()
        return loss

    def zero_grad(self, set_to_none=True):
        self._engine.zero_grad()


class _ModuleWeights:
    """The parameters one module owns and their gather buffer."""

    def __init__(self, entries, dtype, pin, timers):
        self.timers = timers
        self.entries = entries  # [(param, begin, end)]
        self.begin = min(e[1] for e in entries)
        self.end = max(e[2] for e in entries)
        self.buffer = torch.empty(self.end - self.begin, dtype=dtype, pin_memory=pin)
        self.ticket = None

    def fetch(self, job, version):
        self.ticket = job.gather_async(version, self.begin, self.end, self.buffer.data_ptr(),
                                       self.buffer.numel() * self.buffer.element_size(),
                                       bk.wire_dtype(self.buffer.dtype), keep=self.buffer)

    def land(self):
        if self.ticket is None:
            return
        ticket, self.ticket = self.ticket, None
        t0 = time.perf_counter()
        ticket.wait()
        self.timers["gather_wait"] += time.perf_counter() - t0
        with torch.no_grad():
            for p, b, e in self.entries:
                src = self.buffer[b - self.begin:e - self.begin].view(p.shape)
                p.data.copy_(src, non_blocking=True)


def _groups_of(model_parameters, trainable):
    """torch param_groups (list of dicts) from model_parameters, or one group."""
    if model_parameters is None:
        return [{"params": trainable}]
    groups = list(model_parameters)
    if groups and not isinstance(groups[0], dict):
        return [{"params": groups}]
    return [dict(g, params=list(g["params"])) for g in groups]


class Engine:
    def __init__(self, model, config=None, servers=None, job=None, model_parameters=None,
                 lr_scheduler=None, token=None, plaintext=False, tls_ca_file=None,
                 tls_cert_file=None, tls_key_file=None, bucket_elems=1 << 24, lazy_weights=False,
                 rpc_timeout_ms=None, max_attempts=None, checkpoint_dir=None,
                 checkpoint_every=0, optimizer=None):
        if not servers:
            raise ValueError("servers: give the state servers, e.g. 'host1:7070,host2:7070'")
        if not job:
            raise ValueError("job: give the job id")
        self.module = model
        self._servers = servers
        self.config = EngineConfig(config)
        if optimizer is not None:
            model_parameters = self._take_optimizer(optimizer, config, model_parameters)
        self.topo = Topology()
        self.config.check_batch(self.topo.world)
        self.job_id = job
        self.dtype = _PRECISION_DTYPE[self.config.precision]
        self.device = next(model.parameters()).device
        self.lazy_weights = lazy_weights
        if checkpoint_every and not checkpoint_dir:
            raise ValueError("checkpoint_every needs checkpoint_dir")
        self.checkpoint_dir, self.checkpoint_every = checkpoint_dir, checkpoint_every
        self.last_checkpoint = None
        self.global_steps = 0
        self.micro_steps = 0
        self._failed = None
        self._loss_scale = float(self.config.loss_scaling.get("initial_scale", 65536.0))
        self._good_steps = 0
        self._hysteresis = int(self.config.loss_scaling.get("hysteresis", 1))
        self._last_skipped = False
        # Seconds spent waiting, summed since initialize (for benchmarks): for
        # pushes after backward, for the coordinator's statistics and Step
        # (and its verdict), for gathered weights.
        self.timers = {"push_wait": 0.0, "server_step": 0.0, "gather_wait": 0.0}

        names = {id(p): n for n, p in model.named_parameters()}
        trainable = [p for p in model.parameters() if p.requires_grad]
        groups = _groups_of(model_parameters, trainable)
        for i, g in enumerate(groups):
            for p in g["params"]:
                if id(p) not in names:
                    raise ValueError(f"model_parameters group {i} holds a tensor that is not a "
                                     "parameter of the model")
            g["params"] = [p for p in g["params"] if p.requires_grad]
        groups = [g for g in groups if g["params"]]
        if not groups:
            raise ValueError("the model has no trainable parameter (requires_grad=True)")
        c = self.config
        defaults = {"lr": c.lr, "betas": c.betas, "eps": c.eps, "weight_decay": c.weight_decay}
        self.optimizer = ZerostateOptimizer(groups, defaults, self)
        for g in self.optimizer.param_groups:
            g.setdefault("initial_lr", g["lr"])
        self._lr_scales = self._group_lr_scales()

        # The job's tensors: trainable parameters in the model's order.
        order = {id(p): i for i, p in enumerate(model.parameters())}
        params = sorted((p for g in self.optimizer.param_groups for p in g["params"]),
                        key=lambda p: order[id(p)])
        self._params = [(names[id(p)], p) for p in params]
        spec = self._spec()
        self.client, self.job = self._connect(spec, token, plaintext, tls_ca_file, tls_cert_file,
                                              tls_key_file, rpc_timeout_ms, max_attempts)
        self._entries = []
        for n, p in self._params:
            b, e = self.job.tensor_range(n)
            self._entries.append((p, b, b + p.numel()))
        self._start()
        if self.dtype != torch.float32:
            model.to(self.dtype)
        self._buckets = bk.make_buckets(self._entries, bucket_elems, self.dtype, self.device,
                                        self.topo.local_world)
        self._bucket_of = {}
        for bucket in self._buckets:
            for p, _, _ in bucket.entries:
                self._bucket_of[id(p)] = bucket
        self._hooks = []
        self._grad_nodes = []
        for _, p in self._params:
            self._hook(p)
        self._weights = self._module_weights()
        self.lr_scheduler = self._scheduler(lr_scheduler)

    # ----- setup -----

    def _take_optimizer(self, opt, config, model_parameters):
        """initialize(optimizer=a torch optimizer): its kind and param_groups
        replace the ds_config's optimizer section."""
        if model_parameters is not None:
            raise ValueError("optimizer= holds the param_groups: leave model_parameters out")
        if isinstance(config, dict) and "optimizer" in config or \
                "kind" in self.config.optimizer:
            raise ValueError("the optimizer is given twice: in the ds_config's 'optimizer' "
                             "section and as optimizer=")
        g0 = opt.param_groups[0]
        c = self.config
        if isinstance(opt, torch.optim.AdamW) or isinstance(opt, torch.optim.Adam):
            if any(g.get("amsgrad") for g in opt.param_groups):
                raise ValueError("optimizer: amsgrad is not supported")
            c.kind = "adamw" if isinstance(opt, torch.optim.AdamW) else "adam"
            c.eps = g0["eps"]
            c.optimizer = {"eps": g0["eps"]}
        elif isinstance(opt, torch.optim.SGD):
            if any(g.get("dampening", 0) for g in opt.param_groups):
                raise ValueError("optimizer: SGD dampening is not supported (0 only)")
            c.kind = "sgd"
            c.optimizer = {"momentum": g0["momentum"], "nesterov": bool(g0["nesterov"])}
        else:
            raise ValueError(f"optimizer: {type(opt).__name__} is not supported; use "
                             "torch.optim.AdamW, Adam or SGD, or the ds_config's section "
                             "(AdamW, Adam, SGD, Lion)")
        c.lr = g0["lr"]
        c.betas = tuple(g0.get("betas", c.betas))
        c.weight_decay = g0["weight_decay"]
        return [dict(g) for g in opt.param_groups]

    def _group_lr_scales(self):
        groups = self.optimizer.param_groups
        base = groups[0]["lr"]
        return [g["lr"] / base if base else 1.0 for g in groups]

    def _spec(self):
        c = self.config
        opt = dict(c.optimizer, kind=_KIND_PROTO[c.kind])
        g0 = self.optimizer.param_groups[0]
        if c.kind in ("adamw", "adam", "lion"):
            opt["beta1"], opt["beta2"] = g0["betas"]
            opt["eps"] = g0["eps"]
        opt["weight_decay"] = g0["weight_decay"]
        names = {id(p): n for n, p in self._params}
        groups = []
        for g, scale in zip(self.optimizer.param_groups[1:], self._lr_scales[1:]):
            tg = {"tensors": [names[id(p)] for p in g["params"]],
                  "weight_decay": g["weight_decay"], "lr_scale": scale}
            if c.kind in ("adamw", "adam", "lion"):
                tg["beta1"], tg["beta2"] = g["betas"]
            groups.append(tg)
        spec = {"job_id": self.job_id,
                "tensors": [{"name": n, "shape": list(p.shape) or [1]} for n, p in self._params],
                "optimizer": opt, "num_nodes": self.topo.num_nodes,
                "grad_dtype": _DTYPE_PROTO[self.dtype], "weight_dtype": _DTYPE_PROTO[self.dtype],
                "block_elems": c.block_elems, "streamed_init": True, "seed": c.seed}
        if groups:
            spec["groups"] = groups
        return spec

    def _connect(self, spec, token, plaintext, ca, cert, key, timeout, attempts):
        """Rank 0 registers (or attaches to an equal job); the others attach
        with its token. Any rank's failure is raised on every rank."""
        token = token or os.environ.get("ZEROSTATE_JOB_TOKEN") or None
        topo = self.topo
        opts = dict(plaintext=plaintext, tls_ca_file=ca, tls_cert_file=cert, tls_key_file=key,
                    rpc_timeout_ms=timeout, max_attempts=attempts)
        client = job = None
        verdict = None
        if topo.coordinator:
            try:
                client = Client(self._servers, job_token=token, **opts)
                job = client.register_job(spec)
                verdict = ("ok", job.token)
            except ZerostateError as e:
                verdict = ("error", self._explain(e), e.code)
        verdict = topo.broadcast(verdict)
        if verdict[0] != "ok":
            raise ZerostateError(verdict[1], verdict[2])
        if not topo.coordinator:
            client = Client(self._servers, job_token=verdict[1], **opts)
            job = client.attach_job(self.job_id)
        return client, job

    def _explain(self, e):
        if e.code == "ALREADY_EXISTS":
            return (f"the model does not match job '{self.job_id}' registered on the servers "
                    f"(its tensors, shapes, optimizer or nodes differ; nothing was changed): {e}")
        if e.code in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
            return (f"job '{self.job_id}': the job token is not this job's (check "
                    f"ZEROSTATE_JOB_TOKEN or token=; nothing was changed): {e}")
        if e.code == "UNAVAILABLE":
            return f"job '{self.job_id}': a state server cannot be reached: {e}"
        return str(e)

    def _start(self):
        """A new job (version 0) takes the model's weights; a job that already
        stepped gives its weights to the model."""
        version = self.job.version() if self.topo.coordinator else None
        version = self.topo.broadcast(version)
        if version == 0 and self.topo.coordinator:
            for p, b, e in self._entries:
                w = p.detach().to("cpu", torch.float32).contiguous().reshape(-1)
                self.job.init_weights(b, e, w.data_ptr(), w.numel() * 4)
        self.topo.barrier()
        self.global_steps = version
        if version > 0:
            self._gather_into_model(version, torch.float32)

    def _gather_into_model(self, version, dtype):
        for p, b, e in self._entries:
            buf = torch.empty(e - b, dtype=dtype)
            t = self.job.gather_async(version, b, e, buf.data_ptr(), buf.numel() * buf.element_size(),
                                      bk.wire_dtype(dtype), keep=buf)
            t.wait()
            with torch.no_grad():
                p.data.copy_(buf.view(p.shape))

    def _hook(self, p):
        bucket = self._bucket_of[id(p)]

        def ready(*_):
            self._grad_ready(bucket)

        if hasattr(p, "register_post_accumulate_grad_hook"):
            self._hooks.append(p.register_post_accumulate_grad_hook(ready))
        else:  # torch < 2.1: the parameter's AccumulateGrad node runs after accumulation
            node = p.expand_as(p).grad_fn.next_functions[0][0]
            self._grad_nodes.append(node)
            self._hooks.append(node.register_hook(ready))

    def _module_weights(self):
        """One _ModuleWeights per module owning trainable parameters (a tied
        parameter goes to the first module that holds it)."""
        at = {id(p): (p, b, e) for p, b, e in self._entries}
        seen, out = set(), []
        pin = self.device.type != "cpu"
        for module in self.module.modules():
            mine = []
            for p in module._parameters.values():
                if p is not None and id(p) in at and id(p) not in seen:
                    seen.add(id(p))
                    mine.append(at[id(p)])
            if not mine:
                continue
            w = _ModuleWeights(sorted(mine, key=lambda x: x[1]), self.dtype, pin, self.timers)
            out.append(w)
            if self.lazy_weights:
                self._hooks.append(module.register_forward_pre_hook(lambda m, i, w=w: w.land()))
        return out

    def _scheduler(self, sched):
        if sched is None and self.config.has_schedule:
            base = self.config.lr
            sched = torch.optim.lr_scheduler.LambdaLR(
                self.optimizer, lambda s: self.config.learning_rate(s) / base)
        elif callable(sched) and not hasattr(sched, "step"):
            sched = sched(self.optimizer)
        return sched

    # ----- training -----

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        self._check_alive()
        return self.module(*args, **kwargs)

    def train(self, mode=True):
        self.module.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def is_gradient_accumulation_boundary(self):
        return (self.micro_steps + 1) % self.config.grad_accum == 0

    @property
    def loss_scale(self):
        return self._loss_scale if self.dtype == torch.float16 else 1.0

    def backward(self, loss):
        """loss.backward() (times the fp16 loss scale); at the accumulation
        boundary the gradients leave for the servers during it."""
        self._check_alive()
        self._boundary = self.is_gradient_accumulation_boundary()
        if self._boundary:
            for b in self._buckets:
                b.reset()
        (loss * self.loss_scale if self.dtype == torch.float16 else loss).backward()
        return loss

    def _grad_ready(self, bucket):
        if not getattr(self, "_boundary", False):
            return
        bucket.ready += 1
        if bucket.ready == len(bucket.entries):
            bucket.push(self.job, self.global_steps, self.topo)

    def step(self):
        """At a gradient accumulation boundary: the service's step, then the
        LR scheduler given to initialize (if any). Else counts the micro-step."""
        self._check_alive()
        if not self.is_gradient_accumulation_boundary():
            self.micro_steps += 1
            return
        self.optimizer.step()
        if self.lr_scheduler is not None:
            self.lr_scheduler.step()

    def _service_step(self):
        step = self.global_steps
        try:
            for b in self._buckets:  # a bucket whose parameters got no gradient
                if not b.pushed:
                    b.push(self.job, step, self.topo)
            t0 = time.perf_counter()
            for b in self._buckets:
                if b.ticket is not None:
                    b.ticket.wait()
            t1 = time.perf_counter()
            self.timers["push_wait"] += t1 - t0
            verdict = self._decide(step) if self.topo.coordinator else None
        except ZerostateError as e:
            # A server call failed: roll back to the last checkpoint if any.
            verdict = ("rollback" if self.last_checkpoint else "error", f"step {step}: {e}", e.code)
            t1 = time.perf_counter()
        verdict = self.topo.broadcast(verdict)
        self.timers["server_step"] += time.perf_counter() - t1
        if verdict[0] == "rollback":
            self._roll_back(verdict[1], verdict[2])
        if verdict[0] == "error":
            self._failed = ZerostateError(verdict[1], verdict[2])
            raise self._failed
        _, self._loss_scale, self._last_skipped = verdict
        self.global_steps = step + 1
        self.micro_steps += 1
        self._boundary = False
        self.zero_grad()
        if not self.topo.coordinator:
            self._fetch(step + 1)
        if not self.lazy_weights:
            self.sync_weights()
        if self.checkpoint_every and self.global_steps % self.checkpoint_every == 0:
            tag = f"global_step{self.global_steps}"
            self.save_checkpoint(self.checkpoint_dir, tag)
            self.last_checkpoint = os.path.join(os.path.abspath(self.checkpoint_dir), tag)

    def _roll_back(self, failure, code):
        """The servers lost the job or cannot be reached: every rank loads
        the last checkpoint and raises RolledBack."""
        try:
            self.load_checkpoint(self.last_checkpoint)
        except ZerostateError as e:
            self._failed = ZerostateError(f"{failure}; rolling back to {self.last_checkpoint} "
                                          f"failed: {e}", code)
            raise self._failed from None
        raise RolledBack(f"{failure}; rolled back to the checkpoint of step {self.global_steps} "
                         f"({self.last_checkpoint}): go on from engine.global_steps", code,
                         self.global_steps)

    def _decide(self, step):
        """The coordinator's step: statistics, clipping, loss scale, Step."""
        ss, nonfinite = self.job.grad_stats(step)
        fp16 = self.dtype == torch.float16
        if nonfinite and not fp16:
            return ("error", f"step {step}: the summed gradient holds {nonfinite} non-finite "
                    "(NaN or Inf) values; the step was not applied and the weights are "
                    "unchanged on the servers", "INVALID_ARGUMENT")
        groups = self.optimizer.param_groups
        scales = self._group_lr_scales()
        for i, (now, was) in enumerate(zip(scales, self._lr_scales)):
            if abs(now - was) > 1e-6 * max(abs(was), 1e-30) and groups[0]["lr"] != 0:
                return ("error", f"step {step}: param_groups[{i}]['lr'] / param_groups[0]['lr'] "
                        f"is {now:g}, registered as {was:g}: a job's groups keep their lr "
                        "ratios (the LR scheduler must scale every group alike)",
                        "INVALID_ARGUMENT")
        ranks = self.topo.world * self.config.grad_accum * self.loss_scale
        scale = 1.0 / ranks
        skip = bool(nonfinite)
        if not skip and self.config.clip > 0:
            norm = ss ** 0.5 / ranks
            coef = self.config.clip / (norm + 1e-6)
            if coef < 1.0:
                scale *= coef
        new_scale = self._next_loss_scale(skip) if fp16 else self._loss_scale
        state = json.dumps({"loss_scale": new_scale, "skipped": skip,
                            "good_steps": self._good_steps}).encode()
        # The gathers go out first: blocks stream back as the servers step them.
        self._fetch(step + 1)
        self.job.step(step, groups[0]["lr"], scale, skip=skip, state=state)
        return ("ok", new_scale, skip)

    def _next_loss_scale(self, overflow):
        ls = self.config.loss_scaling
        if ls.get("static_scale"):
            return self._loss_scale
        if overflow:
            self._good_steps = 0
            self._hysteresis -= 1
            if self._hysteresis > 0:
                return self._loss_scale
            self._hysteresis = int(ls.get("hysteresis", 1))
            return max(self._loss_scale * ls.get("backoff_factor", 0.5), ls.get("min_scale", 1.0))
        self._good_steps += 1
        if self._good_steps >= int(ls.get("growth_interval", 1000)):
            self._good_steps = 0
            return self._loss_scale * ls.get("growth_factor", 2.0)
        return self._loss_scale

    def _fetch(self, version):
        for w in self._weights:
            w.fetch(self.job, version)

    def sync_weights(self):
        """Lands every gather still in flight into the parameters."""
        for w in self._weights:
            w.land()
        if self.device.type == "cuda":
            torch.cuda.current_stream().synchronize()

    def zero_grad(self):
        for _, p in self._params:
            p.grad = None

    def close(self):
        """Removes the hooks and closes the connections (the job stays on
        the servers). The engine is unusable afterwards."""
        for h in self._hooks:
            h.remove()
        self._hooks, self._grad_nodes = [], []
        for w in self._weights:
            w.ticket = None
        for b in self._buckets:
            b.reset()
        self.job.close()
        self.client.close()
        self._failed = ZerostateError("the engine was closed", "FAILED_PRECONDITION")

    def _check_alive(self):
        if self._failed is not None:
            raise ZerostateError(f"the engine stopped at an earlier error (load a checkpoint to "
                                 f"go on): {self._failed}", self._failed.code)

    # ----- checkpoints -----

    def save_checkpoint(self, save_dir, tag=None, client_state=None):
        """Every rank calls it, as DeepSpeed's: the checkpoint goes to
        save_dir/tag (tag default "global_step<N>") and save_dir/latest names
        it. The servers write their shards of the current version there (a
        directory every server reaches); rank 0 writes the engine's own state
        (steps, loss scale, LR scheduler, client_state). Returns the
        servers' checkpoint directory (for `zerostate ckpt export`)."""
        self._check_alive()
        self.sync_weights()
        root = os.path.abspath(save_dir)
        tag = tag if tag is not None else f"global_step{self.global_steps}"
        save_dir = os.path.join(root, str(tag))
        verdict = None
        if self.topo.coordinator:
            try:
                os.makedirs(save_dir, exist_ok=True)
                path = self.job.checkpoint(self.global_steps, save_dir)
                meta = {"job": self.job_id, "path": path, "version": self.global_steps,
                        "micro_steps": self.micro_steps, "loss_scale": self._loss_scale,
                        "good_steps": self._good_steps, "hysteresis": self._hysteresis}
                torch.save({"lr_scheduler": self.lr_scheduler.state_dict()
                            if self.lr_scheduler is not None else None,
                            "param_groups": [{k: v for k, v in g.items() if k != "params"}
                                             for g in self.optimizer.param_groups],
                            "client_state": client_state},
                           os.path.join(save_dir, _EXTRA_FILE))
                with open(os.path.join(save_dir, _ENGINE_FILE), "w") as f:
                    json.dump(meta, f)
                with open(os.path.join(root, "latest"), "w") as f:
                    f.write(str(tag))
                verdict = ("ok", path)
            except (ZerostateError, OSError) as e:
                verdict = ("error", f"save_checkpoint {save_dir}: {e}", "INTERNAL")
        verdict = self.topo.broadcast(verdict)
        if verdict[0] != "ok":
            raise ZerostateError(verdict[1], verdict[2])
        return verdict[1]

    def load_checkpoint(self, load_dir, tag=None):
        """Every rank calls it, as DeepSpeed's: loads load_dir/tag (tag
        default: the one load_dir/latest names). Rank 0 replaces the job on
        the servers with that checkpoint (deleting the job first), every
        rank attaches and takes its weights. Returns (the checkpoint's
        directory, the client_state saved with it)."""
        load_dir = os.path.abspath(load_dir)
        if tag is None and os.path.exists(os.path.join(load_dir, "latest")):
            with open(os.path.join(load_dir, "latest")) as f:
                tag = f.read().strip()
        if tag is not None:
            load_dir = os.path.join(load_dir, str(tag))
        try:
            with open(os.path.join(load_dir, _ENGINE_FILE)) as f:
                meta = json.load(f)
            # Our own file; client_state may hold any object (torch >= 2.6 would
            # refuse it by default).
            extra = torch.load(os.path.join(load_dir, _EXTRA_FILE), weights_only=False)
        except (OSError, ValueError) as e:
            raise ZerostateError(f"load_checkpoint {load_dir}: not an engine checkpoint: {e}",
                                 "NOT_FOUND") from None
        if meta["job"] != self.job_id:
            raise ZerostateError(f"load_checkpoint {load_dir}: it is job '{meta['job']}', this "
                                 f"engine runs '{self.job_id}'", "INVALID_ARGUMENT")
        verdict = None
        if self.topo.coordinator:
            try:
                try:
                    self.job.delete()
                except ZerostateError as e:  # a restarted server lost the job
                    if e.code not in ("NOT_FOUND", "UNAUTHENTICATED", "UNAVAILABLE"):
                        raise
                self.job = self.client.restore_job(meta["path"], self.job_id)
                verdict = ("ok",)
            except ZerostateError as e:
                verdict = ("error", f"load_checkpoint {load_dir}: {e}", e.code)
        verdict = self.topo.broadcast(verdict)
        if verdict[0] != "ok":
            self._failed = ZerostateError(verdict[1], verdict[2])
            raise self._failed
        if not self.topo.coordinator:
            self.job = self.client.attach_job(self.job_id)
        self._failed = None
        for w in self._weights:
            w.ticket = None
        for b in self._buckets:
            b.reset()
        self.zero_grad()
        self._boundary = False
        self.global_steps = meta["version"]
        self.micro_steps = meta["micro_steps"]
        self._loss_scale = meta["loss_scale"]
        self._good_steps = meta["good_steps"]
        self._hysteresis = meta["hysteresis"]
        for g, saved in zip(self.optimizer.param_groups, extra["param_groups"]):
            g.update(saved)
        if self.lr_scheduler is not None and extra["lr_scheduler"] is not None:
            self.lr_scheduler.load_state_dict(extra["lr_scheduler"])
        self._gather_into_model(self.global_steps, self.dtype)
        self.topo.barrier()
        return load_dir, extra["client_state"]


def initialize(model, config=None, servers=None, job=None, model_parameters=None,
               lr_scheduler=None, **options):
    """DeepSpeed's initialize, for the state service. Returns the Engine.

    model: a torch.nn.Module on its training device (fp32 weights: they
      seed a new job). config: ds_config.json path or dict (optimizer,
      scheduler, gradient_clipping, bf16/fp16, gradient_accumulation_steps;
      a "zerostate" section takes a zerostate.v1.WorkerConfig's fields).
    servers: "host:port,..." or a list, in shard order. job: the job id.
    model_parameters: parameters or torch param_groups (dicts with their
      own lr, weight_decay, betas). lr_scheduler: a scheduler or a callable
      taking the optimizer; stepped by engine.step().
    options: token (else $ZEROSTATE_JOB_TOKEN), plaintext, tls_ca_file,
      tls_cert_file, tls_key_file, bucket_elems, lazy_weights,
      rpc_timeout_ms, max_attempts; checkpoint_dir and checkpoint_every
      (a checkpoint every N steps under checkpoint_dir, a directory every
      server reaches; a step that fails on the servers then rolls back to
      the last one and raises RolledBack); optimizer (a torch.optim AdamW,
      Adam or SGD whose kind and param_groups the job takes, in place of
      the ds_config's optimizer section)."""
    return Engine(model, config, servers, job, model_parameters, lr_scheduler, **options)
