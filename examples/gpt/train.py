"""Trains the GPT of model.py through the state service.

CI (tiny, CPU):   python3 examples/gpt/train.py --servers=HOST:PORT --plaintext --steps=30
GPU machine:      python3 examples/gpt/train.py --servers=... --plaintext --device=cuda \\
                    --config=examples/gpt/ds_config_gpu.json --hf --layers=24 --d=1536 \\
                    --heads=12 --vocab=50304 --seq=1024 --batch=8
--hf uses transformers' GPT2LMHeadModel (installed on the GPU machine).
torchrun sets RANK/WORLD_SIZE/...: every rank runs this script. Debian's torchrun
(torch 1.13, Python 3.11) needs --redirects=1 --tee=1 (its default fails):
  torchrun --nproc_per_node=2 --redirects=1 --tee=1 examples/gpt/train.py --servers=...
Run again with the same --job to resume: the servers' weights and step,
and the ds_config's LR schedule at that step."""

import argparse
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
sys.path.insert(0, HERE)

import zerostate.torch as zs  # noqa: E402
from model import GPT, param_groups, synthetic_batch  # noqa: E402


def build_model(args):
    if args.hf:
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config(vocab_size=args.vocab, n_positions=args.seq, n_embd=args.d,
                         n_layer=args.layers, n_head=args.heads)
        return GPT2LMHeadModel(cfg)
    return GPT(args.vocab, args.seq, args.d, args.layers, args.heads)


def loss_of(model, x, y, hf):
    if hf:
        return model(input_ids=x, labels=x).loss  # shifted inside
    return model(x, y)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servers", required=True)
    ap.add_argument("--job", default="gpt")
    ap.add_argument("--config", default=os.path.join(HERE, "ds_config.json"))
    ap.add_argument("--plaintext", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--hf", action="store_true")
    ap.add_argument("--json", action="store_true", help="print one JSON line at the end")
    ap.add_argument("--delayed_warmup", type=int, default=-1,
                    help="delayed parameter update after this many synchronous steps "
                         "(zero_optimization.delayed_update; -1: the config's)")
    ap.add_argument("--loss_log", default="", help="rank 0 writes its loss per step here (JSON)")
    args = ap.parse_args()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        torch.distributed.init_process_group("nccl" if args.device == "cuda" else "gloo")
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        device = torch.device("cuda", torch.cuda.current_device())
    torch.manual_seed(0)
    model = build_model(args).to(device)
    with open(args.config) as f:
        config = json.load(f)
    if args.delayed_warmup >= 0:
        config.setdefault("zero_optimization", {})["delayed_update"] = {
            "enabled": True, "warmup_steps": args.delayed_warmup}
    wd = config.get("optimizer", {}).get("params", {}).get("weight_decay", 0.0)
    engine, _, _, _ = zs.initialize(model=model, config=config, servers=args.servers,
                                    job=args.job, model_parameters=param_groups(model, wd),
                                    plaintext=args.plaintext)
    rank = int(os.environ.get("RANK", "0"))
    first = last = None
    losses = []
    t0 = time.time()
    for step in range(engine.global_steps, args.steps):
        x, y = synthetic_batch(step, args.batch, args.seq, args.vocab, device, rank)
        loss = loss_of(engine, x, y, args.hf)
        engine.backward(loss)
        engine.step()
        last = float(loss)
        losses.append(last)
        first = last if first is None else first
        if rank == 0 and not args.json and step % 10 == 0:
            print(f"step {step} loss {last:.4f}", flush=True)
    engine.sync_weights()  # a delayed update in flight lands (collective)
    seconds = time.time() - t0
    engine.close()
    if rank == 0 and args.loss_log:
        with open(args.loss_log, "w") as f:
            json.dump({"steps": list(range(args.steps - len(losses), args.steps)),
                       "loss": losses}, f)
    if rank == 0:
        tokens = (args.steps * args.batch * args.seq * int(os.environ.get("WORLD_SIZE", "1")))
        print(json.dumps({"first_loss": first, "last_loss": last, "steps": args.steps,
                          "tokens_per_s": tokens / seconds}))


if __name__ == "__main__":
    main()
