"""The engine: a torch module trained with its optimizer state on the
state servers.

- Registration. Every trainable parameter (requires_grad) is one tensor of
  the job, named as in model.named_parameters(); frozen parameters are never
  registered, pushed or stepped. torch param_groups become the job's tensor
  groups (weight decay, lr scale, betas). A new job's weights are streamed
  from the model; a job that already stepped gives its weights to the model.
- Precision: the parameters are in the training dtype (bf16, fp16 or
  fp32); a step's gradients accumulate over its micro-batches in fp32, or
  in the dtype ds_config data_types.grad_accum_dtype names (as FSDP2's
  reduce_dtype), and go on the wire in the job's grad_dtype (default the
  training dtype's), converted once per push.
- Gradients leave during backward: a hook on each parameter after its
  gradient is accumulated (register_post_accumulate_grad_hook, or a hook on
  its AccumulateGrad node before torch 2.1) adds it into its bucket's
  buffers and drops p.grad (as DeepSpeed's ZeRO-2 does: after backward the
  gradients live in the engine); at the accumulation boundary a full bucket
  is reduced inside the node and pushed (buckets.py) by the trainer
  engine's push thread. The buckets and the push thread are the C++ that
  zerostate-worker runs (zerostate.pipeline: trainer/bucket_plan.h,
  trainer/engine/pusher.h). On a GPU nothing on the compute stream waits
  for the host: a bucket goes device-to-host on a side stream into pinned
  memory, ordered by events, and the push thread pushes it once there;
  gathered weights go host-to-device on another side stream and the compute
  stream waits for them by an event (streams.py).
- Shares inside the node: each local rank gathers its share of each
  module's weights and the node all-gathers them (NCCL on GPUs, gloo on
  the CPU), so a node pulls one copy of the weights (weights.py).
- engine.step(): the coordinator (global rank 0) reads the summed gradient's
  statistics, clips, checks for non-finite values (a gradient holding any
  skips the step in every precision, the weights unchanged and
  was_step_applied() False, as DeepSpeed's check_grad_overflow and torch's
  GradScaler do; fp16 also backs off the loss scale; without fp16 a
  warning says so), and orders the Step with the lr of param_groups[0]; its
  verdict goes to every rank; then every rank gathers the new version, per
  landing unit (neighbouring modules up to landing_elems), into the
  parameters in the training dtype: at once (default), or just before each
  module's forward (lazy_weights=True, forward pre-hooks;
  every gather is in flight from the step on). Every rank's gathers go out
  with the step's first push (before any block's pass, so the servers write
  the new copies straight into the gather buffers), or else just before the
  Step: blocks come back as the servers step them.
- Delayed parameter update (ds_config zero_optimization.delayed_update,
  ZeRO-Offload's DPU; off by default): after max(warmup_steps, 1)
  synchronous steps, engine.step() returns with the update still in flight
  (the coordinator's statistics and Step on a thread, every rank's gathers
  out), so the next forward and backward run on the weights of the version
  before; the new version lands at the next engine.step(), after that
  backward. The servers take step t's gradients once at version t: with
  one local rank, a bucket leaves as soon as backward finished it and the
  gathers of the modules it overlaps are in (on the push thread); with
  several, after the landing. Step t's pushes finish behind the next
  forward: the delayed Step's thread waits for them before the statistics
  (a failed push fails step t as a failed Step does), and a bucket's push
  buffer is written again only once its last push is done. One step of
  staleness: W(t+1) = AdamW(W(t), gradient at W(t-1)). A step that a
  checkpoint follows (checkpoint_every) ends synchronously, as does
  sync_weights() or save_checkpoint(). A failure of the delayed Step is
  raised by the next engine.step().

The pieces: topology.py (ranks and nodes), config.py (ds_config), optimizer.py
(param_groups, the job's spec), buckets.py (gradients out), weights.py
(weights back), verdict.py (the coordinator's verdict on a step, the
delayed update's start and finish, every rank taking it), checkpoint.py
(save, load, roll back), surface.py (the rest of DeepSpeed's engine: module
methods, batch sizes, the last step's lr and gradient norm, no_sync). The
C++ trainer engine zerostate-worker runs too, through its C API:
zerostate.policy (clip, fp16 loss scale, LR schedule, trainer_state) and
zerostate.pipeline (the bucket plan, the shares inside a node, the push
thread, the coordinator's statistics, decision and Step, the delayed
update's step in flight and its verdict, the rule after a failed step).
"""

import os
import time
import warnings

import torch

from zerostate.client import Client, ZerostateError
from zerostate.pipeline import InFlight, Pusher, send_ahead
from zerostate.policy import Policy
from zerostate.torch import buckets as bk
from zerostate.torch.ahead import Ahead, EarlyGathers
from zerostate.torch import checkpoint as ckpt
from zerostate.torch import optimizer as zopt
from zerostate.torch import streams
from zerostate.torch import verdict as verdicts
from zerostate.torch.config import EngineConfig
from zerostate.torch.surface import ModuleSurface, data_loader
from zerostate.torch.timeline import Timeline
from zerostate.torch.topology import Topology
from zerostate.torch.weights import gather_into, holders, module_weights

_PRECISION_DTYPE = {"PRECISION_FP32": torch.float32, "PRECISION_BF16": torch.bfloat16,
                    "PRECISION_FP16": torch.float16}


class Engine(ModuleSurface):
    def __init__(self, model, config=None, servers=None, job=None, model_parameters=None,
                 lr_scheduler=None, token=None, plaintext=False, tls_ca_file=None,
                 tls_cert_file=None, tls_key_file=None, bucket_elems=1 << 24, lazy_weights=False,
                 landing_elems=1 << 24,
                 rpc_timeout_ms=None, max_attempts=None, checkpoint_dir=None,
                 checkpoint_every=0, optimizer=None, unavailable_wait=None, data_plane=True):
        if not isinstance(model, torch.nn.Module):
            raise ValueError("model: give the torch.nn.Module to train")
        if not servers:
            raise ValueError("servers: give the state servers, e.g. 'host1:7070,host2:7070'")
        if not job:
            raise ValueError("job: give the job id")
        self.module = model
        self._servers = servers
        self.config = EngineConfig(config)
        if optimizer is not None:
            model_parameters = zopt.take_optimizer(optimizer, config, self.config,
                                                   model_parameters)
        self.topo = Topology()
        self.config.check_batch(self.topo.world)
        self.job_id = job
        self.dtype = _PRECISION_DTYPE[self.config.precision]
        self.reduce_dtype = zopt.PROTO_DTYPE[self.config.grad_accum_dtype]
        self.grad_dtype = zopt.PROTO_DTYPE.get(self.config.grad_dtype, self.dtype)
        self.device = next(model.parameters()).device
        self.lazy_weights = lazy_weights
        if checkpoint_every and not checkpoint_dir:
            raise ValueError("checkpoint_every needs checkpoint_dir")
        self.checkpoint_dir, self.checkpoint_every = checkpoint_dir, checkpoint_every
        self.last_checkpoint = None
        self.global_steps = 0
        self.micro_steps = 0
        self._failed = None
        self._boundary = False
        self._ahead = Ahead()  # the Step sent ahead (speculative_step), on its thread
        self._early = EarlyGathers(self._fetch)  # a step's gathers, before its first push
        # The delayed update's step in flight and its verdict (the C++ the
        # worker holds); the gathers it put out are the modules' slots'.
        self._in_flight = InFlight()
        self._no_sync = False  # inside no_sync()
        self._grad_norm = self._step_applied = None  # the last step's (surface.py)
        self.policy = Policy(self.config.train)
        # Where the loop's time goes, summed since initialize (for
        # benchmarks): the waits for pushes, for the coordinator's Step and
        # verdict and for gathered weights, the engine's own host work and,
        # traced on a GPU, the compute stream's stalls (timeline.py).
        self.timeline = Timeline(self.device)
        self.timers = self.timeline.seconds

        groups = zopt.groups_of(model, model_parameters)
        c = self.config
        defaults = {"lr": c.lr, "betas": c.betas, "eps": c.eps, "weight_decay": c.weight_decay}
        self.optimizer = zopt.ZerostateOptimizer(groups, defaults, self)
        if optimizer is not None:
            self.optimizer.share_groups(optimizer)
        for g in self.optimizer.param_groups:
            g.setdefault("initial_lr", g["lr"])
        self._lr_scales = zopt.lr_scales(self.optimizer.param_groups)

        # The job's tensors: trainable parameters in the model's order.
        order = {id(p): i for i, p in enumerate(model.parameters())}
        params = sorted((p for g in self.optimizer.param_groups for p in g["params"]),
                        key=lambda p: order[id(p)])
        names = {id(p): n for n, p in model.named_parameters()}
        self._params = [(names[id(p)], p) for p in params]
        spec = zopt.job_spec(job, self._params, self.optimizer.param_groups, self._lr_scales,
                             c, self.topo.num_nodes, self.dtype, self.grad_dtype)
        if unavailable_wait is None:  # a run that can roll back outlives a restart
            unavailable_wait = 300.0 if checkpoint_every else 0.0
        self._unavailable_wait = unavailable_wait
        self.client, self.job = self._connect(spec, token, plaintext, tls_ca_file, tls_cert_file,
                                              tls_key_file, rpc_timeout_ms, max_attempts,
                                              unavailable_wait, data_plane)
        # Nothing writes a push buffer before its step is applied, but under a
        # delayed update (the next backward's pushes, while the servers step):
        # a server on this host may read the gradients where they were pushed.
        self.job.set_pushes_held(not self.config.delayed)
        self._entries = []
        for n, p in self._params:
            b, e = self.job.tensor_range(n)
            self._entries.append((p, b, b + p.numel()))
        # Every rank starts from rank 0's module, as DDP and DeepSpeed.
        self.topo.broadcast_tensors([*model.parameters(), *model.buffers()])
        self._start()
        if self.dtype != torch.float32:
            model.to(self.dtype)
        self._install(bucket_elems, lazy_weights, landing_elems)
        self.lr_scheduler = self._scheduler(lr_scheduler)

    # ----- setup -----

    def _install(self, bucket_elems, lazy_weights, landing_elems):
        """Buckets and gradient hooks; gather buffers and (lazy) forward
        pre-hooks; on a GPU the side streams of the host copies and the push
        thread (zerostate.pipeline)."""
        # Gradients leave on one side stream, weights come back on another:
        # the host link carries both ways at once.
        self._side = streams.Side(self.device, self.timeline, "stall_grads", "copy_d2h")
        self._side_in = streams.Side(self.device, self.timeline, "stall_weights", "copy_h2d")
        self._step_mark = None  # Side.mark() at the last step
        self._staging = streams.Staging(self.client, self.device)
        self._pusher = Pusher()
        # Under a delayed update, a bucket is pushed as soon as backward
        # finished it and the gathers of the modules it overlaps are in (its
        # blocks reached the version its gradients are for); with several
        # local ranks, whose shares of weights and gradients differ, after
        # the landing.
        self._early_push = self.topo.local_group is None
        self._buckets = bk.make_buckets(self.job, self._entries, bucket_elems,
                                        self.reduce_dtype, self.grad_dtype, self.device,
                                        self.topo, self._staging)
        self._buckets_of = {}  # id(param) -> the buckets it lies in
        for bucket in self._buckets:
            for p, _, _ in bucket.entries:
                self._buckets_of.setdefault(id(p), []).append(bucket)
        self._hooks = []
        self._grad_nodes = []
        for _, p in self._params:
            self._hook(p)
        self._weights = module_weights(self.module, self._entries, self.dtype, self.device,
                                       self.topo, self._side_in, self.timers, self._staging,
                                       landing_elems)
        if not lazy_weights:
            return
        # Before a module's forward, and in its state_dict(): every module
        # holding a parameter (tied: each of them) lands its weights.
        for module, ws in holders(self.module, self._weights):
            self._hooks.append(module.register_forward_pre_hook(
                lambda m, i, ws=ws: self._land_timed(ws)))
            self._hooks.append(module._register_state_dict_hook(
                lambda m, sd, prefix, meta, ws=ws: self._land_lazy(ws)))

    def _land_timed(self, ws):
        with self.timeline.host("land"):  # less the gather's wait
            self._land_lazy(ws)

    def _land_lazy(self, ws):
        for w in ws:
            w.ready()  # a delayed update's copy, started at the step
        # Not while a delayed update is in flight: the module runs on the weights it has.
        if not self._in_flight.active():
            for w in ws:
                w.land(self._step_mark)

    def _connect(self, spec, token, plaintext, ca, cert, key, timeout, attempts, wait,
                 data_plane):
        """Rank 0 registers (or attaches to an equal job); the others attach
        with its token. Any rank's failure is raised on every rank."""
        token = token or os.environ.get("ZEROSTATE_JOB_TOKEN") or None
        topo = self.topo
        opts = dict(plaintext=plaintext, tls_ca_file=ca, tls_cert_file=cert, tls_key_file=key,
                    rpc_timeout_ms=timeout, max_attempts=attempts,
                    unavailable_wait_ms=int(wait * 1000), data_plane=data_plane)
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
        if e.code == "ALREADY_EXISTS" and "is taken" in str(e):
            return (f"job '{self.job_id}': the job token is not this job's (the id is taken by "
                    f"a job of another token: check ZEROSTATE_JOB_TOKEN or token=, or choose "
                    f"another job id; nothing was changed): {e}")
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
        if version == 0:
            self._stream_weights([p for p, _, _ in self._entries])
        self.topo.barrier()
        self.global_steps = version
        if version > 0:
            gather_into(self.job, self._entries, version, torch.float32)

    def _stream_weights(self, tensors):
        """The coordinator streams `tensors` (one per parameter of the job,
        in its order) to the servers as the job's version 0."""
        if not self.topo.coordinator:
            return
        for (p, b, e), t in zip(self._entries, tensors):
            w = t.detach().to("cpu", torch.float32).contiguous().reshape(-1)
            self.job.init_weights(b, e, w.data_ptr(), w.numel() * 4)

    def _hook(self, p):
        def ready(*_):
            self._grad_ready(p)

        if hasattr(p, "register_post_accumulate_grad_hook"):
            self._hooks.append(p.register_post_accumulate_grad_hook(ready))
        else:  # torch < 2.1: the parameter's AccumulateGrad node runs after accumulation
            node = p.expand_as(p).grad_fn.next_functions[0][0]
            self._grad_nodes.append(node)
            self._hooks.append(node.register_hook(ready))

    def _scheduler(self, sched):
        if sched is None and self.config.has_schedule:
            base = self.config.lr
            sched = torch.optim.lr_scheduler.LambdaLR(
                self.optimizer, lambda s: self.policy.learning_rate(s) / base)
        elif callable(sched) and not hasattr(sched, "step"):
            sched = sched(self.optimizer)
        if sched is not None and self.global_steps > 0 and getattr(sched, "last_epoch", 0) == 0:
            # A job that already stepped: its schedule goes on where the job is.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "lr_scheduler.step() before optimizer.step()"
                for _ in range(self.global_steps):
                    sched.step()
        return sched

    # ----- training -----

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        self._check_alive()
        return self.module(*args, **kwargs)

    def is_gradient_accumulation_boundary(self):
        return (self.micro_steps + 1) % self.config.grad_accum == 0

    @property
    def loss_scale(self):
        return self.policy.loss_scale if self.dtype == torch.float16 else 1.0

    def backward(self, loss):
        """loss.backward() (times the fp16 loss scale); at the accumulation
        boundary the gradients leave for the servers during it."""
        self._check_alive()
        self._ready()  # before the backward reads a parameter its module's forward skipped
        self._boundary = not self._no_sync and self.is_gradient_accumulation_boundary()
        for b in self._buckets:
            b.reset()
        if self._boundary:
            if self.config.speculative_step and self.topo.coordinator:
                with self.timeline.host("send_ahead"):
                    self._send_ahead()
            if not self.config.delayed:  # a delayed update puts them out at its step
                self._early.arm(self.global_steps + 1)
        (loss * self.loss_scale if self.dtype == torch.float16 else loss).backward()
        return loss

    def _send_ahead(self):
        """The coordinator's Step parameters as the gradients begin to
        leave, as verdict.decide will send them if nothing is clipped (the
        policy's grad_scale): the servers step each block as soon as it is
        complete. Sent on a thread (ahead.py), so the backward does not
        wait for the servers; the step waits for it before its Step and
        raises its failure, where every rank hears of it."""
        step, over = self.global_steps, self._average_over()
        lr = self.optimizer.param_groups[0]["lr"]
        self._ahead.send(lambda: send_ahead(self.job, self.policy, step, over, lr=lr))

    def _grad_ready(self, p):
        """p's gradient into the buckets it lies in, then dropped; at the
        boundary each bucket it completes is pushed."""
        # (timeline.host's sum, inline: a hook runs once per parameter)
        timers = self.timers
        t0, waited = time.perf_counter(), timers["push_wait"]
        self._take(p)
        timers["hooks"] += time.perf_counter() - t0 - (timers["push_wait"] - waited)

    def _take(self, p):
        grad, p.grad = p.grad, None
        for bucket in self._buckets_of[id(p)]:
            if bucket.take(p, grad) and self._boundary:
                self._push(bucket)

    def _push(self, bucket):
        if not self._in_flight.active():
            fetch = self._early.take()  # the first push of a speculative step's
            self._push_bucket(bucket, self.global_steps, after=fetch)
            if fetch is not None:
                self._early.pushed(bucket.mark)
        elif self._early_push:
            # A delayed update in flight: the servers take these gradients
            # once its blocks are at this step's version.
            self._push_bucket(bucket, self.global_steps,
                              after=self._versioned(bucket, self.global_steps - 1))

    def _push_bucket(self, bucket, step, after=None):
        """bucket.push; the wait for its last push to be done before its
        buffer is written again (a delayed step's pushes finish behind the
        next forward) counts as push_wait."""
        self.timers["push_wait"] += bucket.push(self.job, step, self.topo, self._side,
                                                self._pusher, after=after)

    def _versioned(self, bucket, step):
        """A call that returns once every gather of the delayed update of
        step `step` overlapping `bucket` is in (on the push thread): the
        gather slots' waits on version step + 1, ABORTED when the update
        failed before its gathers went out."""
        overlap = [w.slot for w in self._weights if w.begin < bucket.end and bucket.begin < w.end]

        def wait():
            self._in_flight.wait_gathers_out(step)
            for slot in overlap:
                slot.wait(step + 1)
        return wait

    def step(self):
        """At a gradient accumulation boundary: the service's step, then the
        LR scheduler given to initialize (if any). Else counts the micro-step."""
        self._check_alive()
        if self._no_sync:
            raise RuntimeError("engine.step() inside engine.no_sync(): step after the block "
                               "(as DeepSpeed requires)")
        if not self.is_gradient_accumulation_boundary():
            self.micro_steps += 1
            return
        self.optimizer.step()

    def _ends_delayed(self, step):
        """Step `step` returns with its update in flight (delayed update)."""
        checkpoint = bool(self.checkpoint_every and (step + 1) % self.checkpoint_every == 0)
        return self.policy.ends_delayed(step, checkpoint)

    def _service_step(self):
        # The compute stream's end at the step: the backward has read every
        # parameter; a lazy landing's copy waits for it alone (weights.py).
        self._step_mark = self._side.mark()
        if self._in_flight.active():
            # This version, after the backward on the one before; with lazy
            # landing each module's forward waits for its own copy alone.
            verdicts.finish_delayed(self, defer=self.lazy_weights)
        elif self.lazy_weights:
            self._early.settle(self._pusher)  # then no gather goes out meanwhile
            self._land()  # what the forward did not land (a module it skipped)
        step = self.global_steps
        delayed = self._ends_delayed(step)
        try:
            for b in self._buckets:  # a bucket whose parameters got no gradient (or held back)
                if not b.pushed:
                    self._push_bucket(b, step)
            with self.timeline.host("send_ahead"):  # before the Step (raised after the pushes)
                ahead_error = self._ahead.take()
            t0 = time.perf_counter()
            if not delayed:  # else the step in flight waits for them, not this thread
                self._pusher.drain()
                self._early.cancel()  # a boundary without pushes: decide's fetch
            t1 = time.perf_counter()
            self.timers["push_wait"] += t1 - t0
            if ahead_error is not None:
                raise ahead_error
            groups = self.optimizer.param_groups
            lr, scales = groups[0]["lr"], zopt.lr_scales(groups)
            verdict = None
            if delayed:
                verdicts.start_delayed(self, step, lr, scales)
            elif self.topo.coordinator:
                verdict = verdicts.decide(self, step, lr, scales)
        except ZerostateError as e:
            t1 = time.perf_counter()
            if delayed:  # every rank meets at the next step's verdict (rank 0's counts)
                self._in_flight.fail(step, e, pusher=self._pusher)
            else:  # a server call failed: roll back to the last checkpoint if any
                verdict = verdicts.failure(self, step, e)
        if not delayed:
            verdict = self.topo.broadcast(verdict)
            self.timers["server_step"] += time.perf_counter() - t1
            verdicts.apply(self, verdict, step)
        self.global_steps = step + 1
        self.micro_steps += 1
        self._boundary = False
        self.zero_grad()
        if self.lr_scheduler is not None:  # before a checkpoint of this version stores it
            self.lr_scheduler.step()
        if delayed:
            return  # the weights land at the next step, or sync_weights()
        if not self.topo.coordinator:
            self._fetch(step + 1)
        if not self.lazy_weights:
            self._land()
        if self.checkpoint_every and self.global_steps % self.checkpoint_every == 0:
            tag = f"global_step{self.global_steps}"
            self.save_checkpoint(self.checkpoint_dir, tag)
            self.last_checkpoint = os.path.join(os.path.abspath(self.checkpoint_dir), tag)

    def _average_over(self):
        """The (rank, micro-batch) terms the summed gradient averages over."""
        return self.topo.world * self.config.grad_accum

    def _fetch(self, version, idle_only=False, backward=False):
        """Every module's gather of `version` but those already out
        (EarlyGathers); `idle_only`: none whose gather of another version
        is still out either; `backward`: last module first."""
        for w in reversed(self._weights) if backward else self._weights:
            pending = w.slot.pending()
            if pending != version and (pending is None or not idle_only):
                w.fetch(self.job, version)

    def sync_weights(self):
        """Lands every gather still in flight into the parameters; a delayed
        update in flight is finished first (collective then)."""
        if self._in_flight.active():
            verdicts.finish_delayed(self)
        self._land()
        self._ready()

    def _land(self, defer=False):
        """Every module's weights into its parameters; `defer`: the copies
        start after the step's mark (the backward's end), and the compute
        stream waits for each at its module's forward (ModuleWeights.ready)."""
        for w in self._weights:
            if (w.slot.pending() or 0) <= self.global_steps:  # not a version still to come
                w.land(self._step_mark if defer else None, defer=defer)

    def _ready(self):
        """The compute stream waits for every deferred copy still pending
        (a module the forward skipped)."""
        for w in self._weights:
            w.ready()

    def zero_grad(self):
        """Drops the gradients accumulated since the last step."""
        for _, p in self._params:
            p.grad = None
        for b in self._buckets:
            b.zero()

    def close(self):
        """Removes the hooks and closes the connections (the job stays on
        the servers). The engine is unusable afterwards. A delayed update in
        flight is waited for, not landed (sync_weights() lands it); gathers
        not landed are cancelled, so after a failed step (whose version no
        Step brings) close() returns at once, the job on the servers as the
        failure left it."""
        self._abandon()
        self._pusher.close()
        self._in_flight.close()
        for h in self._hooks:
            h.remove()
        self._hooks, self._grad_nodes = [], []
        for b in self._buckets:
            b.zero()
            b.reset()
        self._staging.close()
        self.job.close()
        self.client.close()
        self._failed = ZerostateError("the engine was closed", "FAILED_PRECONDITION")

    def _abandon(self):
        """Drops what a step left in flight: a delayed update (after the
        coordinator's Step ends), the modules' gathers (cancelled: after a
        failed Step the servers, alive, would keep them waiting for a
        version that does not come) and the push thread's pushes (their
        errors dropped): the C++ engine's order, as zerostate-worker's."""
        self._ahead.take()  # its failure dropped too: no Step follows it
        self._early.cancel()
        self._in_flight.abandon(self._pusher, [w.slot for w in self._weights])

    def _check_alive(self):
        if self._failed is not None:
            raise ZerostateError(f"the engine stopped at an earlier error (load a checkpoint to "
                                 f"go on): {self._failed}", self._failed.code)

    # ----- checkpoints (checkpoint.py) -----

    def save_checkpoint(self, save_dir, tag=None, client_state=None):
        """Every rank calls it, as DeepSpeed's: the checkpoint goes to
        save_dir/tag (tag default "global_step<N>"), save_dir/latest names
        it; save_dir must be reached by every server. Returns the servers'
        checkpoint directory (for `zerostate ckpt export`)."""
        self._check_alive()
        self.sync_weights()
        return ckpt.save(self, save_dir, tag, client_state)

    def load_checkpoint(self, load_dir, tag=None):
        """Every rank calls it, as DeepSpeed's: loads load_dir/tag (default:
        the tag load_dir/latest names) onto the servers in place of the job
        and into the module. Returns (its directory, its client_state)."""
        return ckpt.load(self, load_dir, tag)

    def _reset(self, version, micro_steps):
        """After a restore: nothing in flight, no gradient, at `version`."""
        self._abandon()
        self._failed = None
        for b in self._buckets:
            b.reset()
        self.zero_grad()
        self._boundary = False
        self.global_steps, self.micro_steps = version, micro_steps


def initialize(model=None, config=None, servers=None, job=None, model_parameters=None,
               lr_scheduler=None, training_data=None, collate_fn=None, args=None,
               config_params=None, **options):
    """DeepSpeed's initialize, for the state service. Returns DeepSpeed's
    four-tuple (engine, engine.optimizer, a DataLoader of training_data or
    None, engine.lr_scheduler).

    model: a torch.nn.Module on its training device (fp32 weights: they
      seed a new job; every rank starts from rank 0's). config (or
      config_params, or args.deepspeed_config): ds_config.json path or dict
      (optimizer, scheduler, gradient_clipping, bf16/fp16,
      gradient_accumulation_steps; a "zerostate" section takes a
      zerostate.v1.WorkerConfig's fields).
    servers: "host:port,..." or a list, in shard order. job: the job id.
    model_parameters: parameters or torch param_groups (dicts with their
      own lr, weight_decay, betas). lr_scheduler: a scheduler or a callable
      taking the optimizer; stepped by engine.step(). A job that already
      stepped starts the ds_config's schedule, or one the engine makes or
      is given at epoch 0, at its version.
    training_data: a torch Dataset: the DataLoader returned gives each rank
      its share in micro-batches (collate_fn as DataLoader's).
    options: token (else $ZEROSTATE_JOB_TOKEN), plaintext, tls_ca_file,
      tls_cert_file, tls_key_file, bucket_elems, lazy_weights, landing_elems
      (modules next to each other land as one unit up to this many
      elements; 0: each module alone), rpc_timeout_ms, max_attempts; data_plane (False: pushes and gathers
      over gRPC, not the servers' TCP or same-host plane); unavailable_wait (seconds a server may
      stay unreachable, every call retrying: default 300 with
      checkpoint_every, as zerostate-worker's --server_wait_seconds, else
      0; one away longer ends the run on every rank, naming it); checkpoint_dir and checkpoint_every (a checkpoint every N steps
      under checkpoint_dir, a directory every server reaches; a step that
      fails on the servers then rolls back to the last one and raises
      RolledBack); optimizer (a torch.optim AdamW, Adam or SGD whose kind
      and param_groups the job takes, in place of the ds_config's optimizer
      section; its param_groups become the engine's, so its own LR
      schedulers drive the job)."""
    if config is None:
        config = config_params if config_params is not None else \
            getattr(args, "deepspeed_config", None)
    engine = Engine(model, config, servers, job, model_parameters, lr_scheduler, **options)
    engine.training_dataloader = data_loader(engine, training_data, collate_fn)
    return engine, engine.optimizer, engine.training_dataloader, engine.lr_scheduler
