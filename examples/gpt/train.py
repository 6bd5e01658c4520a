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
and the ds_config's LR schedule at that step.
--reference=N: no servers; the same training of N ranks by torch.optim.AdamW
in this one process (the mean of the N ranks' gradients, the ds_config's
clipping and linear warmup/decay), to compare against (scripts/demo.sh)."""

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
from model import GPT, held_out_batches, param_groups, synthetic_batch  # noqa: E402


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
    ap.add_argument("--servers", default="")
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
    ap.add_argument("--seed", type=int, default=0, help="the initial weights' seed")
    ap.add_argument("--no_data_plane", action="store_true",
                    help="pushes and gathers over gRPC, not the servers' TCP or same-host "
                         "plane (a compressed wire on one host: the same-host plane moves "
                         "plain dtypes)")
    ap.add_argument("--loss_log", default="", help="rank 0 writes its loss per step here (JSON)")
    ap.add_argument("--save_weights", default="", help="rank 0 saves the final weights here")
    ap.add_argument("--eval_every", type=int, default=0, metavar="STEPS",
                    help="rank 0's loss on the held-out batches (model.held_out_batches) "
                         "before training, every STEPS steps and at the end, into --loss_log "
                         "(eval_steps, eval_loss); 0: none. Lands the step's weights first "
                         "(a delayed update ends synchronously at those steps)")
    ap.add_argument("--eval_batches", type=int, default=16,
                    help="how many held-out batches of --batch sequences --eval_every uses")
    ap.add_argument("--reference", type=int, default=0, metavar="RANKS",
                    help="train as RANKS ranks would, by torch.optim.AdamW on the CPU, "
                         "without servers")
    args = ap.parse_args()
    if args.reference:
        return train_reference(args)
    if not args.servers:
        ap.error("--servers is required (or --reference=RANKS)")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        torch.distributed.init_process_group("nccl" if args.device == "cuda" else "gloo")
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        device = torch.device("cuda", torch.cuda.current_device())
    torch.manual_seed(args.seed)
    model = build_model(args).to(device)
    with open(args.config) as f:
        config = json.load(f)
    if args.delayed_warmup >= 0:
        config.setdefault("zero_optimization", {})["delayed_update"] = {
            "enabled": True, "warmup_steps": args.delayed_warmup}
    wd = config.get("optimizer", {}).get("params", {}).get("weight_decay", 0.0)
    engine, _, _, _ = zs.initialize(model=model, config=config, servers=args.servers,
                                    job=args.job, model_parameters=param_groups(model, wd),
                                    plaintext=args.plaintext,
                                    data_plane=not args.no_data_plane)
    rank = int(os.environ.get("RANK", "0"))
    evals = Evaluation(args, device, rank)
    losses = []
    t0 = time.time()
    for step in range(engine.global_steps, args.steps):
        evals.at(step, engine.module, engine.sync_weights)
        x, y = synthetic_batch(step, args.batch, args.seq, args.vocab, device, rank)
        loss = loss_of(engine, x, y, args.hf)
        engine.backward(loss)
        engine.step()
        losses.append(float(loss))
        if rank == 0 and not args.json and step % 10 == 0:
            print(f"step {step} loss {losses[-1]:.4f}", flush=True)
    engine.sync_weights()  # a delayed update in flight lands (collective)
    evals.at(args.steps, engine.module, final=True)
    seconds = time.time() - t0
    engine.close()
    if rank == 0:
        report(args, engine.module, losses, seconds, int(os.environ.get("WORLD_SIZE", "1")),
               evals)


class Evaluation:
    """--eval_every: the mean loss over the fixed held-out batches of the
    model as it is before step s (after s steps), on rank 0."""

    def __init__(self, args, device, rank):
        self.every, self.hf, self.rank = args.eval_every, args.hf, rank
        self.batches = (held_out_batches(args.eval_batches, args.batch, args.seq, args.vocab,
                                         device) if self.every > 0 else [])
        self.steps, self.loss = [], []

    def at(self, step, model, land=None, final=False):
        """Evaluates `model` if step is due (or `final`); `land()` (every
        rank: it may be collective) brings the step's weights in first."""
        if self.every <= 0 or not (final or step % self.every == 0):
            return
        if land is not None:
            land()
        if self.rank != 0 or (self.steps and self.steps[-1] == step):
            return
        was_training = model.training
        model.eval()
        with torch.no_grad():
            total = sum(float(loss_of(model, x, y, self.hf)) for x, y in self.batches)
        model.train(was_training)
        self.steps.append(step)
        self.loss.append(total / len(self.batches))


def report(args, model, losses, seconds, ranks, evals):
    """Writes --loss_log and --save_weights; prints the JSON summary line."""
    if args.loss_log:
        with open(args.loss_log, "w") as f:
            json.dump({"steps": list(range(args.steps - len(losses), args.steps)),
                       "loss": losses, "eval_steps": evals.steps, "eval_loss": evals.loss}, f)
    if args.save_weights:
        torch.save(model.state_dict(), args.save_weights)
    tokens = args.steps * args.batch * args.seq * ranks
    print(json.dumps({"first_loss": losses[0] if losses else None,
                      "last_loss": losses[-1] if losses else None, "steps": args.steps,
                      "held_out_loss": evals.loss[-1] if evals.loss else None,
                      "tokens_per_s": tokens / seconds}))


def lr_factor(config):
    """The ds_config scheduler (WarmupLR or WarmupDecayLR, linear warmup) as
    a factor of the peak LR per step, as zerostate reads it: warmup from
    warmup_min_lr over warmup_num_steps, then linear decay to 0 at
    total_num_steps."""
    sched = config.get("scheduler")
    if sched is None:
        return lambda s: 1.0
    if sched["type"] not in ("WarmupLR", "WarmupDecayLR"):
        raise ValueError(f"--reference: scheduler.type {sched['type']!r} is not supported")
    p = sched["params"]
    peak, low = p["warmup_max_lr"], p.get("warmup_min_lr", 0.0)
    warm, total = p.get("warmup_num_steps", 0), p.get("total_num_steps", 0)

    def factor(s):
        if s < warm:
            return (low + (peak - low) * (s + 1) / warm) / peak
        if sched["type"] == "WarmupLR":
            return 1.0
        return 1.0 - min((s - warm) / (total - warm), 1.0)
    return factor


def train_reference(args):
    """torch.optim.AdamW on the mean gradient of args.reference ranks'
    batches: what the servers compute for a job of that many ranks."""
    with open(args.config) as f:
        config = json.load(f)
    opt_cfg = config["optimizer"]
    if opt_cfg["type"] != "AdamW":
        raise ValueError(f"--reference: optimizer.type {opt_cfg['type']!r} is not AdamW")
    p = opt_cfg["params"]
    torch.manual_seed(args.seed)
    model = build_model(args)
    opt = torch.optim.AdamW(param_groups(model, p.get("weight_decay", 0.0)), lr=p["lr"],
                            betas=tuple(p.get("betas", (0.9, 0.999))), eps=p.get("eps", 1e-8))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(config))
    clip = config.get("gradient_clipping", 0.0)
    evals = Evaluation(args, "cpu", 0)
    losses = []
    t0 = time.time()
    for step in range(args.steps):
        evals.at(step, model)
        opt.zero_grad()
        for r in range(args.reference):
            x, y = synthetic_batch(step, args.batch, args.seq, args.vocab, "cpu", r)
            loss = loss_of(model, x, y, args.hf)
            (loss / args.reference).backward()
            if r == 0:
                losses.append(float(loss))
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        sched.step()
    evals.at(args.steps, model, final=True)
    report(args, model, losses, time.time() - t0, args.reference, evals)


if __name__ == "__main__":
    main()
