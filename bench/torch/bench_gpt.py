"""One GPT, three ways, in one run: DDP with fused AdamW on the GPU, FSDP2
with CPUOffloadPolicy(pin_memory=True) and AdamW(fused=True) on the CPU, and
zerostate (state servers on this host, started here from --server_bin).
Prints tokens/s of each and every ratio; for zerostate also the time split
(forward, backward, push, server step, gather) and the host's memory-
traffic floor for our path with our ratio to it.

GPU machine: bench/torch/device_gpt.sh $OUT (the issue's 759M model, bf16).
Here (CPU, tiny):
  python3 bench/torch/bench_gpt.py --device=cpu --tiny --json
(FSDP2 needs CUDA and is skipped on the CPU; the CPU peer is torch AdamW,
under DDP over gloo with more than one rank.) Under torchrun every system
runs on every rank (DDP and FSDP2 over the ranks; zerostate as one node
whose ranks reduce-scatter before the push; rank 0 starts the servers);
tokens/s count every rank's tokens."""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))

from model import GPT, param_groups, synthetic_batch  # noqa: E402

# Host memory traffic per parameter of one synchronous zerostate step at a
# 2-byte wire with fp32 state (bytes read + written on the state host):
# gradient device->pinned copy 2, socket send+receive 2+2, fold into the
# fp32 accumulator 2+4+4, AdamW on master/m/v/grad 16 read + 12 written,
# bf16 copy 2, gather socket 2+2, pinned buffer 2+2 (write, device copy).
FLOOR_BYTES_PER_PARAM = 2 + 4 + 10 + 28 + 2 + 4 + 4


def build(args, device):
    if args.hf:
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config(vocab_size=args.vocab, n_positions=args.seq, n_embd=args.d,
                         n_layer=args.layers, n_head=args.heads)
        model = GPT2LMHeadModel(cfg)
    else:
        model = GPT(args.vocab, args.seq, args.d, args.layers, args.heads)
    return model.to(device)


def loss_of(model, x, y, hf):
    return model(input_ids=x, labels=x).loss if hf else model(x, y)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def free_cuda(device):
    import gc
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def barrier():
    if torch.distributed.get_world_size() > 1:
        torch.distributed.barrier()


def run_loop(args, device, model, step_fn, name):
    """Tokens/s (every rank's) over args.steps steps after args.warmup."""
    for s in range(args.warmup + args.steps):
        if s == args.warmup:
            sync(device)
            barrier()
            t0 = time.perf_counter()
        x, y = synthetic_batch(s, args.batch, args.seq, args.vocab, device, args.rank)
        step_fn(x, y)
    sync(device)
    barrier()
    seconds = time.perf_counter() - t0
    tps = args.steps * args.batch * args.seq * args.world / seconds
    print(f"{name}: {tps:,.0f} tokens/s", file=sys.stderr, flush=True)
    return tps


def bench_plain(args, device):
    """The peer on the CPU, or DDP (world 1) with fused AdamW on the GPU."""
    torch.manual_seed(0)
    model = build(args, device)
    if device.type == "cuda":  # fp32 master weights, bf16 compute (autocast)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index])
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    else:
        if args.world > 1:
            model = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    cast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=bool(args.bf16)) \
        if device.type == "cuda" else contextlib.nullcontext()

    def step(x, y):
        with cast:
            loss = loss_of(model, x, y, args.hf)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    tps = run_loop(args, device, model, step, "ddp" if device.type == "cuda" else "torch_adamw")
    del model, opt
    free_cuda(device)
    return tps


def bench_fsdp2(args, device):
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
    torch.manual_seed(0)
    model = build(args, device)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if args.bf16 else MixedPrecisionPolicy()
    policy = CPUOffloadPolicy(pin_memory=True)
    blocks = model.transformer.h if args.hf else model.blocks
    for block in blocks:
        fully_shard(block, offload_policy=policy, mp_policy=mp)
    fully_shard(model, offload_policy=policy, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def step(x, y):
        loss_of(model, x, y, args.hf).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    tps = run_loop(args, device, model, step, "fsdp2_offload")
    del model, opt
    free_cuda(device)
    return tps


def start_servers(args, tmp):
    procs, addresses = [], []
    for i in range(args.servers):
        log = open(os.path.join(tmp, f"server{i}.log"), "w")
        p = subprocess.Popen([args.server_bin, "--listen=127.0.0.1:0", "--plaintext",
                              "--metrics_listen=", f"--threads={args.server_threads}"],
                             stdout=subprocess.PIPE, stderr=log, text=True)
        for line in p.stdout:
            if "listening on" in line:
                words = line.split()
                addresses.append(words[words.index("on") + 1])
                break
        else:
            raise RuntimeError(f"server {i} did not start; see {log.name}")
        procs.append(p)
    return procs, ",".join(addresses)


def memory_bandwidth():
    """Host copy bandwidth (bytes read + written per second) of a 512 MiB copy."""
    a = torch.empty(128 << 20, dtype=torch.float32)
    a.fill_(1)
    b = torch.empty_like(a)
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        b.copy_(a)
        best = max(best, 2 * a.numel() * 4 / (time.perf_counter() - t0))
    return best


def bench_zerostate(args, device, addresses):
    import zerostate.torch as zs
    torch.manual_seed(0)
    model = build(args, device)
    config = {"optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.1}},
              "bf16": {"enabled": bool(args.bf16)}}
    engine, _, _, _ = zs.initialize(model=model, config=config, servers=addresses,
                                    job="bench-gpt", model_parameters=param_groups(model, 0.1),
                                    plaintext=True, lazy_weights=True,
                                    bucket_elems=args.bucket_elems)
    split = {"forward": 0.0, "backward": 0.0}

    def step(x, y):
        t0 = time.perf_counter()
        loss = loss_of(engine, x, y, args.hf)
        sync(device)
        t1 = time.perf_counter()
        engine.backward(loss)
        sync(device)
        t2 = time.perf_counter()
        engine.step()
        split["forward"] += t1 - t0
        split["backward"] += t2 - t1

    for s in range(args.warmup):
        x, y = synthetic_batch(s, args.batch, args.seq, args.vocab, device, args.rank)
        step(x, y)
    sync(device)
    barrier()
    before = dict(engine.timers, **split)
    t0 = time.perf_counter()
    for s in range(args.steps):
        x, y = synthetic_batch(args.warmup + s, args.batch, args.seq, args.vocab, device,
                               args.rank)
        step(x, y)
    engine.sync_weights()
    sync(device)
    barrier()
    seconds = time.perf_counter() - t0
    after = dict(engine.timers, **split)
    engine.close()
    per_step = {k: (after[k] - before[k]) / args.steps for k in after}
    params = sum(p.numel() for _, p in engine._params)
    tps = args.steps * args.batch * args.seq * args.world / seconds
    print(f"zerostate: {tps:,.0f} tokens/s", file=sys.stderr, flush=True)
    return tps, seconds / args.steps, per_step, params


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="a small GPT (CPU check)")
    ap.add_argument("--hf", action="store_true", help="transformers' GPT2LMHeadModel")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--d", type=int, default=1536)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--bf16", type=int, default=1)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--server_threads", type=int, default=4)
    ap.add_argument("--server_bin",
                    default=os.path.join(ROOT, "build", "server", "zerostate-server"))
    ap.add_argument("--bucket_elems", type=int, default=1 << 25)
    ap.add_argument("--systems", default="ddp,fsdp2,zerostate")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.tiny:
        args.layers, args.d, args.heads, args.vocab, args.seq, args.batch = 2, 64, 4, 256, 64, 4
        args.steps, args.warmup, args.bucket_elems = 5, 2, 1 << 14
    device = torch.device(args.device)
    if device.type == "cpu":
        args.bf16 = 0
    args.rank = int(os.environ.get("RANK", "0"))
    args.world = int(os.environ.get("WORLD_SIZE", "1"))
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    systems = args.systems.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        backend = "nccl" if device.type == "cuda" else "gloo"
        if args.world > 1:  # torchrun's variables
            torch.distributed.init_process_group(backend)
        else:
            torch.distributed.init_process_group(
                backend, init_method=f"file://{os.path.join(tmp, 'pg')}", rank=0, world_size=1)
        result = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                  "world": args.world,
                  "model": {"layers": args.layers, "d": args.d, "heads": args.heads,
                            "vocab": args.vocab, "seq": args.seq, "micro_batch": args.batch,
                            "hf": args.hf, "bf16": bool(args.bf16)},
                  "steps": args.steps, "tokens_per_s": {},
                  "precision": {"ddp": "fp32 weights and fused AdamW on the GPU, bf16 autocast",
                                "fsdp2_offload_fused": "fp32 weights and fused AdamW on the "
                                "CPU, bf16 params on the GPU (MixedPrecisionPolicy)",
                                "zerostate": "bf16 params on the GPU and on the wire, fp32 "
                                "masters and AdamW on the state servers"}
                  if args.bf16 else "fp32"}
        tps = result["tokens_per_s"]
        result["torch"], result["python"] = torch.__version__, sys.version.split()[0]
        errors = result["errors"] = {}  # a system that failed; the others still run

        def attempt(name, fn):
            try:
                tps[name] = fn()
            except Exception as e:  # noqa: BLE001 - reported in the JSON, by name
                errors[name] = f"{type(e).__name__}: {e}"
                print(f"{name} failed: {errors[name]}", file=sys.stderr, flush=True)
                free_cuda(device)

        if "ddp" in systems:
            attempt("ddp" if device.type == "cuda" else "torch_adamw",
                    lambda: bench_plain(args, device))
        if "fsdp2" in systems and device.type == "cuda":
            attempt("fsdp2_offload_fused", lambda: bench_fsdp2(args, device))
        if "zerostate" in systems:
            procs, addresses = start_servers(args, tmp) if args.rank == 0 else ([], None)
            box = [addresses]
            if args.world > 1:
                torch.distributed.broadcast_object_list(box, src=0)
            try:
                z, step_s, split, params = bench_zerostate(args, device, box[0])
            except Exception as e:  # noqa: BLE001 - reported in the JSON
                errors["zerostate"] = f"{type(e).__name__}: {e}"
                print(f"zerostate failed: {errors['zerostate']}", file=sys.stderr, flush=True)
            finally:
                for p in procs:
                    p.terminate()
                    p.wait()
        if "zerostate" in systems and "zerostate" not in errors:
            tps["zerostate"] = z
            bw = memory_bandwidth() if args.rank == 0 else 1.0
            floor = params * FLOOR_BYTES_PER_PARAM / bw
            result["zerostate"] = {
                "params": params, "step_s": step_s,
                "split_s": {"forward": split["forward"], "backward": split["backward"],
                            "push_wait": split["push_wait"], "server_step": split["server_step"],
                            "gather_wait": split["gather_wait"]},
                "host_bandwidth_bytes_per_s": bw, "floor_bytes_per_param": FLOOR_BYTES_PER_PARAM,
                "floor_s": floor, "step_over_floor": step_s / floor}
        names = sorted(tps)
        result["ratios"] = {f"{a}/{b}": tps[a] / tps[b] for a in names for b in names if a != b}
        torch.distributed.destroy_process_group()
    if args.rank != 0:
        return
    if args.json:
        print(json.dumps(result))
    else:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
