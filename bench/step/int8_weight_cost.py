"""What quantizing a trained examples/gpt's weights for the int8 wire's
gather costs its held-out loss (model.held_out_batches), by group layout:
the parameters laid out flat as the job's layout lays them (each tensor
64-aligned, the tied head once), rounded as the gather would round them,
then to the trainer's bf16. Prints the loss of each against the bf16
copy's:

- bf16: the bf16 copy alone (what the bf16 wire's trainer runs on);
- int8_g256_fp32: 256-element groups, an fp32 scale of amax / 127 (the
  int8 wire's first format: a group spans tensors);
- int8_g64_e8m0: 64-element groups, the least power of two >= amax / 127
  (common/int8_wire.h: a group lies inside one tensor).

The weights: train.py --reference=1 --steps=1000 --save_weights=W.pt (the
bf16 wire's training without servers), then
    /usr/bin/python3 bench/step/int8_weight_cost.py W.pt"""

import json
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
from model import GPT, held_out_batches  # noqa: E402

ALIGN = 64  # common/job_spec.h kTensorAlignElems


def quantize(flat, group, power_of_two):
    """flat rounded through int8 groups of `group` counted from element 0."""
    n = flat.numel()
    x = torch.cat([flat, flat.new_zeros((-n) % group)]).view(-1, group)
    scale = x.abs().amax(1, keepdim=True) / 127
    if power_of_two:
        scale = torch.where(scale > 0, 2.0 ** torch.ceil(torch.log2(scale)), scale)
    codes = torch.round(x / torch.where(scale > 0, scale, torch.ones_like(scale)))
    return (codes.clamp(-127, 127) * scale).reshape(-1)[:n]


def main():
    model = GPT()
    model.load_state_dict(torch.load(sys.argv[1]))
    params, seen = [], set()
    for _, p in model.named_parameters():
        if id(p) not in seen:
            seen.add(id(p))
            params.append(p)
    master = [p.detach().float().clone() for p in params]
    parts = [torch.cat([m.reshape(-1), m.new_zeros((-m.numel()) % ALIGN)]) for m in master]
    flat = torch.cat(parts)
    batches = held_out_batches(16, 8, 64, 256, "cpu")

    def loss_with(values):
        at = 0
        for p, m in zip(params, master):
            p.data.copy_(values[at:at + m.numel()].view_as(p).bfloat16().float())
            at += m.numel() + (-m.numel()) % ALIGN
        with torch.no_grad():
            return sum(float(model(x, y)) for x, y in batches) / len(batches)

    losses = {"bf16": loss_with(flat),
              "int8_g256_fp32": loss_with(quantize(flat, 256, False)),
              "int8_g64_e8m0": loss_with(quantize(flat, 64, True))}
    print(json.dumps({"held_out_loss": losses,
                      "ratio_to_bf16": {k: round(v / losses["bf16"], 5)
                                        for k, v in losses.items()}}))


if __name__ == "__main__":
    main()
