"""Transformers, every system, in one process, interleaved over rounds:
DDP with fused AdamW on the GPU, FSDP2 with CPUOffloadPolicy(pin_memory=True)
and AdamW(fused=True) on the CPU, and zerostate.torch (state servers on this
host, started here from --server_bin) in each of its modes: synchronous,
speculative and delayed (all with layer-by-layer landing). For each model
and gradient accumulation it prints tokens/s of each system (the mean over
the rounds, and each round's) and every ratio; for each zerostate mode,
per step, the exposed wait (push, step, gather: host time the training loop
waited), the compute (forward and backward of the same bf16 model alone,
measured in the same run), the host's floor for our path (bytes of host
memory traffic per parameter x parameters / the host bandwidth measured in
the same run), the step's ratio to max(compute, floor), the fraction
of pushed and gathered bytes a server read or wrote in place in the
client's shared buffers (in_place_fraction), the fraction of gathered
parameters whose copy the servers' pass wrote into the client's buffer
itself (direct_fraction; the servers' zerostate_gather_direct_elements_total),
and where the rest of the
step went (breakdown(): the engine's host work, the compute stream's
stalls on the side streams' copies, the copies, and what no figure
accounts for); with --profile_steps, a torch.profiler summary of a few
steps (profile_summary.py).

GPU machine: bash bench/torch/device_gpt.sh $OUT (GPT-2 759M, micro-batch 8, and
the Llama 1.1B shape, micro-batch 4; bf16; gradient accumulation 1 and 4).
The breakdown alone, in about 3 minutes: bash bench/torch/device_breakdown.sh $OUT.
Here (CPU, tiny):
  python3 bench/torch/bench_gpt.py --device=cpu --model=tiny --json
(FSDP2 needs CUDA and is skipped on the CPU; the CPU peer is torch AdamW,
under DDP over gloo with more than one rank.) Under torchrun every system
runs on every rank (DDP and FSDP2 over the ranks; zerostate as one node
whose ranks reduce-scatter before the push and all-gather the weights after
gathering a share each; rank 0 starts the servers); tokens/s count every
rank's tokens."""

import argparse
import contextlib
import copy
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

from model import GPT, param_groups, synthetic_batch  # noqa: E402
from profile_summary import profile_steps  # noqa: E402
from zerostate.torch import timeline as tl  # noqa: E402
from zs_servers import metric  # noqa: E402

# The metrics addresses of the servers this process started (rank 0's),
# for direct_fraction: the share of gathered parameters whose copy the
# servers' pass wrote into the client's buffer itself.
SERVER_METRICS = []

# Host memory traffic per parameter of one zerostate step of one node at
# the bf16 wire with fp32 state (bytes read + written on the host): the
# gradient's device-to-host copy into the client's shared buffer 2, the
# server landing it as bf16 (single-gradient pass) 2 + 2, AdamW reading
# master/m/v and the gradient 12 + 2 and writing master/m/v 12 and the
# bf16 copy 2 straight into the gather's shared buffer (the engine puts a
# step's gathers out before its first push, a delayed update's at its step:
# server/core/block.h, Block::direct), the host-to-device copy out of it 2.
# A synchronous or speculative step's pushes are held until the step
# (Job.set_pushes_held): the server reads the gradient where it was pushed,
# squaring it as it lands (2) without the landing's copy (2 less).
FLOOR_BYTES_PER_PARAM = 2 + 4 + 28 + 2
HELD_PUSH_BYTES_PER_PARAM = 2


def floor_bytes_per_param(mode):
    """FLOOR_BYTES_PER_PARAM for zerostate mode `mode` (all but the delayed
    update hold their pushes)."""
    return FLOOR_BYTES_PER_PARAM - (0 if mode.startswith("delayed") else HELD_PUSH_BYTES_PER_PARAM)


MODELS = {
    # GPT2LMHeadModel from config: 24 x 1536, 12 heads, tied head.
    "gpt2-759m": dict(kind="gpt2", layers=24, d=1536, heads=12, vocab=50304, micro_batch=8,
                      seq=1024),
    # LlamaForCausalLM from config: 22 x 2048, GQA 32/4, ffn 5632, untied.
    "llama-1.1b": dict(kind="llama", layers=22, d=2048, heads=32, kv_heads=4, ffn=5632,
                       vocab=32000, micro_batch=4, seq=1024),
    # GPT2LMHeadModel from config: GPT-2 small, 124M (moment_curves_gpu.py).
    "gpt2-124m": dict(kind="gpt2", layers=12, d=768, heads=12, vocab=50304, micro_batch=8,
                      seq=256),
    # examples/gpt's GPT (no transformers): the CPU check.
    "tiny": dict(kind="plain", layers=2, d=64, heads=4, vocab=256, micro_batch=4, seq=64),
}

ZS_MODES = ("sync", "speculative", "delayed")
# --wires: zerostate.wire of each (docs/wire.md); a mode on a wire other
# than bf16 is named MODE_WIRE in the figures ("sync_int8").
ZS_WIRES = {"bf16": None, "int8": {"gradients": "int8", "weights": "int8"}}


def zs_name(mode, wire):
    return mode if wire == "bf16" else f"{mode}_{wire}"
# Each mode's job is registered once and attached to by its later runs.
BENCH_TOKEN = "bench-gpt-job-token".ljust(40, "x")


def build(spec, device):
    # Made on the GPU at once (torch 2's device context); torch 1.13 has none.
    with device if device.type == "cuda" else contextlib.nullcontext():
        if spec["kind"] == "gpt2":
            from transformers import GPT2Config, GPT2LMHeadModel
            return GPT2LMHeadModel(GPT2Config(vocab_size=spec["vocab"], n_positions=spec["seq"],
                                              n_embd=spec["d"], n_layer=spec["layers"],
                                              n_head=spec["heads"]))
        if spec["kind"] == "llama":
            from transformers import LlamaConfig, LlamaForCausalLM
            return LlamaForCausalLM(LlamaConfig(
                vocab_size=spec["vocab"], hidden_size=spec["d"], intermediate_size=spec["ffn"],
                num_hidden_layers=spec["layers"], num_attention_heads=spec["heads"],
                num_key_value_heads=spec["kv_heads"], max_position_embeddings=spec["seq"],
                tie_word_embeddings=False))
        return GPT(spec["vocab"], spec["seq"], spec["d"], spec["layers"], spec["heads"])


def blocks_of(model, spec):
    return {"gpt2": lambda: model.transformer.h, "llama": lambda: model.model.layers,
            "plain": lambda: model.blocks}[spec["kind"]]()


def loss_of(model, x, y, spec):
    if spec["kind"] == "plain":
        return model(x, y)
    return model(input_ids=x, labels=x).loss


START = time.perf_counter()


def say(text):
    """A line on stderr, with the seconds since the start."""
    print(f"[{time.perf_counter() - START:7.1f}s] {text}", file=sys.stderr, flush=True)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def free_cuda(device):
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def barrier():
    if torch.distributed.get_world_size() > 1:
        torch.distributed.barrier()


class Run:
    """One model at one gradient accumulation."""

    def __init__(self, args, spec, accum, device, template):
        self.args, self.spec, self.accum, self.device = args, spec, accum, device
        self.template = template  # every system starts from a copy of it
        self.steps = args.steps if accum == 1 else max(2, args.steps // 2)
        self.warmup = args.warmup if accum == 1 else max(1, args.warmup // 2)

    def model(self):
        return copy.deepcopy(self.template)

    def batches(self, step):
        s = self.spec
        for m in range(self.accum):
            yield synthetic_batch(step * self.accum + m, s["micro_batch"], s["seq"], s["vocab"],
                                  self.device, self.args.rank)

    def tokens(self, steps):
        return steps * self.accum * self.spec["micro_batch"] * self.spec["seq"] * self.args.world

    def loop(self, step_fn, name):
        """Tokens/s (every rank's) over self.steps steps after args.warmup."""
        say(f"{name} accum {self.accum}: set up")
        for s in range(self.warmup + self.steps):
            if s == self.warmup:
                sync(self.device)
                barrier()
                t0 = time.perf_counter()
            step_fn(s)
        sync(self.device)
        barrier()
        seconds = time.perf_counter() - t0
        tps = self.tokens(self.steps) / seconds
        say(f"{name} accum {self.accum}: {tps:,.0f} tokens/s")
        return tps, seconds / self.steps

    def plain(self):
        """The peer on the CPU, or DDP with fused AdamW on the GPU."""
        model = self.model()
        gpu = self.device.type == "cuda"
        if gpu:  # fp32 master weights, bf16 compute (autocast)
            model = torch.nn.parallel.DistributedDataParallel(model,
                                                              device_ids=[self.device.index])
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        else:
            if self.args.world > 1:
                model = torch.nn.parallel.DistributedDataParallel(model)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        cast = torch.autocast("cuda", dtype=torch.bfloat16) if gpu else contextlib.nullcontext()

        def step(s):
            for m, (x, y) in enumerate(self.batches(s)):
                last = m == self.accum - 1
                ctx = model.no_sync() if not last and hasattr(model, "no_sync") \
                    else contextlib.nullcontext()
                with ctx:
                    with cast:
                        loss = loss_of(model, x, y, self.spec) / self.accum
                    loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        tps, _ = self.loop(step, "ddp" if gpu else "torch_adamw")
        del model, opt
        free_cuda(self.device)
        return tps

    def fsdp2(self):
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
        model = self.model()
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        policy = CPUOffloadPolicy(pin_memory=True)
        for block in blocks_of(model, self.spec):
            fully_shard(block, offload_policy=policy, mp_policy=mp)
        fully_shard(model, offload_policy=policy, mp_policy=mp)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

        def step(s):
            for m, (x, y) in enumerate(self.batches(s)):
                # FSDP2's accumulation: the gradients are reduced (and
                # offloaded) once, at the last micro-batch.
                model.set_requires_gradient_sync(m == self.accum - 1)
                (loss_of(model, x, y, self.spec) / self.accum).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        tps, _ = self.loop(step, "fsdp2_offload")
        del model, opt
        free_cuda(self.device)
        return tps

    def zerostate(self, mode, addresses, job, wire="bf16"):
        """tokens/s and the figures of one zerostate mode on `wire`. The job
        is kept on the servers for the mode's next run (another round or
        accumulation), which attaches to it and starts from its weights."""
        import zerostate.torch as zs
        model = self.model()
        config = {"optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.1}},
                  "bf16": {"enabled": self.device.type == "cuda"},
                  "gradient_accumulation_steps": self.accum}
        train = {"moment_format": self.args.moment_format}
        if mode == "speculative":
            train["speculative_step"] = True
        config["zerostate"] = {"train": train}
        if ZS_WIRES[wire]:
            config["zerostate"]["wire"] = ZS_WIRES[wire]
        if mode == "delayed":
            config["zero_optimization"] = {"delayed_update": {"enabled": True,
                                                              "warmup_steps": 1}}
        engine, _, _, _ = zs.initialize(model=model, config=config, servers=addresses, job=job,
                                        model_parameters=param_groups(model, 0.1),
                                        plaintext=True, lazy_weights=True,
                                        bucket_elems=self.args.bucket_elems, token=BENCH_TOKEN)

        engine.timeline.trace(self.args.trace_streams)

        def step(s):
            for x, y in self.batches(s):
                engine.backward(loss_of(engine, x, y, self.spec))
                engine.step()

        before = {}

        def counters():  # after a sync: every traced span is complete
            return dict(engine.timeline.harvest(wait=True), moved=sum(engine.client.bytes()),
                        in_place=sum(engine.client.zero_copy_bytes()),
                        direct=sum(metric(a, "zerostate_gather_direct_elements_total", job_id=job)
                                   for a in SERVER_METRICS),
                        gathered=sum(metric(a, "zerostate_wire_elements_total", job_id=job,
                                            direction="gather") for a in SERVER_METRICS))

        def timed(s):
            if s == self.warmup:
                before.update(counters())
            step(s)

        tps, step_s = self.loop(timed, f"zerostate_{mode}")
        after = counters()
        per_step = {k: (after[k] - before[k]) / self.steps for k in before}
        profile = None
        if self.args.profile_steps:
            profile = profile_steps(step, self.warmup + self.steps, self.args.profile_steps,
                                    self.device.type == "cuda")
        engine.sync_weights()
        engine.close()
        compute_s = self.compute(engine.module)
        params = sum(p.numel() for _, p in engine._params)
        del engine, model
        free_cuda(self.device)
        exposed = {"push": per_step["push_wait"], "step": per_step["server_step"],
                   "gather": per_step["gather_wait"]}
        figures = {"step_s": step_s, "exposed_s": exposed, "wire_bytes": per_step["moved"],
                   "exposed_fraction": sum(exposed.values()) / step_s,
                   "compute_s": compute_s, "params": params,
                   "in_place_fraction": per_step["in_place"] / max(per_step["moved"], 1),
                   "direct_fraction": (per_step["direct"] / per_step["gathered"]
                                       if per_step["gathered"] else None),
                   **breakdown(step_s, compute_s, per_step)}
        if profile is not None:
            figures["profile"] = profile
        return tps, figures

    def compute(self, module):
        """Seconds per step of forward and backward alone on `module` (the
        engine's, in the training dtype, its hooks removed)."""
        def step(s):
            for x, y in self.batches(s):
                loss_of(module, x, y, self.spec).backward()
            for p in module.parameters():
                p.grad = None

        step(0)
        sync(self.device)
        t0 = time.perf_counter()
        n = 2
        for s in range(n):
            step(1 + s)
        sync(self.device)
        return (time.perf_counter() - t0) / n


def breakdown(step_s, compute_s, per_step):
    """Where a step's seconds went (timeline.py's phases, per step):
    host_s, the engine's own host work (the hooks, the lazy landing, the
    send-ahead, engine.step()); stall_s, the compute stream waiting for the side
    streams' copies (gradients off, weights back); copy_s, those copies
    (they overlap compute); unaccounted_s, the step less the compute, the
    exposed waits and the stalls. On the CPU the host work is inside
    unaccounted_s; on a GPU it overlaps the compute unless the host is
    behind, so an unaccounted_s near host_s says the host is."""
    host = {k: per_step[k] for k in tl.HOST if k not in tl.WAITS}
    stalls = {k: per_step[k] for k in tl.STALLS}
    rest = compute_s + sum(per_step[k] for k in tl.WAITS) + sum(stalls.values())
    return {"host_s": host, "stall_s": stalls, "copy_s": {k: per_step[k] for k in tl.COPIES},
            "unaccounted_s": step_s - rest}


def start_servers(args, tmp):
    procs, addresses = [], []
    for i in range(args.servers):
        log = open(os.path.join(tmp, f"server{i}.log"), "w")
        cpus = cpu_list(getattr(args, "server_cpus", ""))
        p = subprocess.Popen([args.server_bin, "--listen=127.0.0.1:0", "--plaintext",
                              "--metrics_listen=127.0.0.1:0", f"--threads={args.server_threads}"],
                             stdout=subprocess.PIPE, stderr=log, text=True,
                             preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
        for line in p.stdout:
            if "listening on" in line:
                words = line.split()
                addresses.append(words[words.index("on") + 1])
                if "metrics" in words:
                    SERVER_METRICS.append(words[words.index("metrics") + 2])
                break
        else:
            raise RuntimeError(f"server {i} did not start; see {log.name}")
        procs.append(p)
    return procs, ",".join(addresses)


def cpu_list(text):
    """The CPUs of a list such as "0-3,8" (taskset's form); empty: none."""
    cpus = set()
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def memory_bandwidth():
    """Host memory bandwidth (bytes read + written per second, torch's
    threads) of b += a over 512 MiB fp32 vectors: a and b read, b written,
    as the optimizer's state is (a copy into fresh memory also reads the
    lines it writes, which bytes moved would not count). Best of 3."""
    a = torch.ones(128 << 20, dtype=torch.float32)
    b = torch.ones_like(a)
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        b.add_(a)
        best = max(best, 3 * a.numel() * 4 / (time.perf_counter() - t0))
    return best


def bench(args, spec, accum, device, addresses, bandwidth, template):
    """Every system, interleaved over args.rounds rounds."""
    run = Run(args, spec, accum, device, template)
    systems = args.systems.split(",")
    gpu = device.type == "cuda"
    wires = args.wires.split(",")
    rounds, errors = {}, {}
    zs_rounds = {zs_name(m, w): [] for w in wires for m in ZS_MODES}

    def attempt(name, fn):
        if name in errors:
            return None
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - reported in the JSON, by name
            errors[name] = f"{type(e).__name__}: {e}"
            say(f"{name} failed: {errors[name]}")
            free_cuda(device)
            return None

    for r in range(args.rounds):
        plan = []
        if "ddp" in systems:
            plan.append(("ddp" if gpu else "torch_adamw", run.plain))
        if "fsdp2" in systems and gpu:
            plan.append(("fsdp2_offload_fused", run.fsdp2))
        for mode in ZS_MODES:
            for wire in wires if mode in systems else []:
                name = zs_name(mode, wire)
                plan.append((f"zerostate_{name}", lambda m=mode, w=wire, n=name:
                             run.zerostate(m, addresses, f"bench-{n}", w)))
        for name, fn in plan:
            out = attempt(name, fn)
            if out is None:
                continue
            if isinstance(out, tuple):
                out, figures = out
                zs_rounds[name[len("zerostate_"):]].append(figures)
            rounds.setdefault(name, []).append(out)
        if r + 1 < args.rounds:  # kept in the log should the run be cut short
            say(f"accum {accum} after round {r + 1}: " +
                json.dumps(summary(args, spec, run, rounds, zs_rounds, errors, bandwidth)))
    return summary(args, spec, run, rounds, zs_rounds, errors, bandwidth)


def summary(args, spec, run, rounds, zs_rounds, errors, bandwidth):
    """The figures of one model and accumulation over the rounds so far."""
    tps = {k: statistics.mean(v) for k, v in rounds.items()}
    names = sorted(tps)
    result = {"model": args.model, "accum": run.accum, "micro_batch": spec["micro_batch"],
              "seq": spec["seq"], "steps": run.steps, "tokens_per_s": tps,
              "tokens_per_s_rounds": rounds,
              "ratios": {f"{a}/{b}": tps[a] / tps[b] for a in names for b in names if a != b},
              "zerostate": {}, "errors": errors}
    for mode, figs in zs_rounds.items():
        if not figs:
            continue
        mean = {k: statistics.mean(f[k] for f in figs)
                for k in ("step_s", "exposed_fraction", "compute_s", "in_place_fraction",
                          "wire_bytes")}
        parts = {part: {k: statistics.mean(f[part][k] for f in figs) for k in figs[0][part]}
                 for part in ("exposed_s", "host_s", "stall_s", "copy_s")}
        params = figs[0]["params"]
        floor = params * floor_bytes_per_param(mode) / bandwidth
        direct = [f["direct_fraction"] for f in figs if f["direct_fraction"] is not None]
        result["zerostate"][mode] = dict(
            mean, **parts, params=params, floor_s=floor,
            direct_fraction=statistics.mean(direct) if direct else None,
            unaccounted_s=statistics.mean(f["unaccounted_s"] for f in figs),
            step_over_max_compute_floor=mean["step_s"] / max(mean["compute_s"], floor))
        if "profile" in figs[-1]:
            result["zerostate"][mode]["profile"] = figs[-1]["profile"]
        if args.link_gbit:
            # The payload bytes over the link (bench/cluster/gpu_wire.py's
            # cap): a synchronous step pushes, then gathers (out + in); a
            # delayed one overlaps them (half, at best).
            wire_floor = mean["wire_bytes"] / (args.link_gbit * 1e9 / 8)
            if mode.startswith("delayed"):
                wire_floor /= 2
            result["zerostate"][mode].update(
                wire_floor_s=wire_floor, step_over_wire_floor=mean["step_s"] / wire_floor)
    for mode in result["zerostate"]:
        base = mode.split("_")[0]
        if base != mode and base in result["zerostate"]:
            result["zerostate"][mode]["bf16_step_over_this"] = (
                result["zerostate"][base]["step_s"] / result["zerostate"][mode]["step_s"])
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model", default="gpt2-759m", choices=sorted(MODELS))
    ap.add_argument("--tiny", action="store_true", help="--model=tiny")
    ap.add_argument("--accum", default="1,4", help="gradient accumulation steps, comma-separated")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6,
                    help="timed steps at accumulation 1 (half that, at least 2, above)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--server_threads", type=int, default=6)
    ap.add_argument("--server_cpus", default="",
                    help="the CPUs the servers started here run on, e.g. 4-15 (default: any)")
    ap.add_argument("--trainer_cpus", default="",
                    help="the CPUs this process runs on, e.g. 0-3 (default: any)")
    ap.add_argument("--server_addresses", default="",
                    help="servers already running (comma-separated host:port), in place of "
                         "--servers started here")
    ap.add_argument("--wires", default="bf16",
                    help=f"zerostate's wires, comma-separated, interleaved: {sorted(ZS_WIRES)}")
    ap.add_argument("--link_gbit", type=float, default=0,
                    help="the link's rate to the servers: adds each zerostate mode's wire floor")
    ap.add_argument("--server_bin",
                    default=os.path.join(ROOT, "build", "server", "zerostate-server"))
    ap.add_argument("--bucket_elems", type=int, default=1 << 25)
    ap.add_argument("--systems", default="ddp,fsdp2," + ",".join(ZS_MODES))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--trace_streams", type=int, default=1,
                    help="1: CUDA timing events on the compute stream's stalls and the side "
                         "streams' copies (zerostate.torch.timeline); 0: none")
    ap.add_argument("--switch_interval", type=float, default=0,
                    help="sys.setswitchinterval in seconds (0: Python's 0.005): how long a "
                         "thread waits for the GIL while another runs Python, e.g. the push "
                         "thread's waits during the forward (a diagnosis, not a setting)")
    ap.add_argument("--profile_steps", type=int, default=0,
                    help="after each zerostate run, this many steps under torch.profiler, "
                         "summarized in its figures (profile_summary.py)")
    ap.add_argument("--moment_format", default="MOMENTS_FP32",
                    help="zerostate's moment storage: MOMENTS_FP32, MOMENTS_BF16 or MOMENTS_INT8")
    args = ap.parse_args()
    if args.trainer_cpus:
        os.sched_setaffinity(0, cpu_list(args.trainer_cpus))
    unknown = [w for w in args.wires.split(",") if w not in ZS_WIRES]
    if unknown:
        ap.error(f"--wires: {unknown} unknown; known: {sorted(ZS_WIRES)}")
    if args.tiny:
        args.model = "tiny"
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    spec = MODELS[args.model]
    if args.model == "tiny":
        args.steps, args.warmup, args.bucket_elems = min(args.steps, 4), 2, 1 << 14
    device = torch.device(args.device)
    args.rank = int(os.environ.get("RANK", "0"))
    args.world = int(os.environ.get("WORLD_SIZE", "1"))
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    accums = [int(a) for a in args.accum.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        backend = "nccl" if device.type == "cuda" else "gloo"
        if args.world > 1:  # torchrun's variables
            torch.distributed.init_process_group(backend)
        else:
            torch.distributed.init_process_group(
                backend, init_method=f"file://{os.path.join(tmp, 'pg')}", rank=0, world_size=1)
        bandwidth = memory_bandwidth() if args.rank == 0 else 1.0
        procs, addresses = [], args.server_addresses or None
        if args.rank == 0 and not addresses:
            procs, addresses = start_servers(args, tmp)
        box = [addresses]
        if args.world > 1:
            torch.distributed.broadcast_object_list(box, src=0)
        torch.manual_seed(0)
        template = build(spec, device)
        say("model built")
        try:
            runs = []
            for a in accums:  # each run's figures on stderr as soon as they are in
                runs.append(bench(args, spec, a, device, box[0], bandwidth, template))
                say("run: " + json.dumps(runs[-1]))
        finally:
            for p in procs:
                p.terminate()
                p.wait()
        torch.distributed.destroy_process_group()
    result = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "world": args.world, "model": args.model, "spec": spec, "rounds": args.rounds,
        "moment_format": args.moment_format, "wires": args.wires,
        "link_gbit": args.link_gbit or None,
        "torch": torch.__version__, "python": sys.version.split()[0],
        "host_bandwidth_bytes_per_s": bandwidth, "switch_interval_s": sys.getswitchinterval(), "floor_bytes_per_param": FLOOR_BYTES_PER_PARAM,
        "precision": {"ddp": "fp32 weights and fused AdamW on the GPU, bf16 autocast",
                      "fsdp2_offload_fused": "fp32 weights and fused AdamW on the CPU, bf16 "
                      "params on the GPU, fp32 reduce (MixedPrecisionPolicy)",
                      "zerostate": "bf16 params on the GPU and on the wire, fp32 gradient "
                      "accumulation, fp32 masters and AdamW on the state servers, moments "
                      f"stored as {args.moment_format}"}
        if device.type == "cuda" else "fp32",
        "runs": runs}
    if args.rank != 0:
        return
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
