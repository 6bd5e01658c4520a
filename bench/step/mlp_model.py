"""The MLP of zerostate-worker's built-in model in PyTorch, for the bench
scripts that compare against it: Linear layers with tanh-GELU between them,
and its command-line shape (--input, --hidden, --output, --batch)."""
import json

import torch


def add_model_args(parser):
    parser.add_argument("--input", type=int, default=2048)
    parser.add_argument("--hidden", default="8192,8192")
    parser.add_argument("--output", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10)


def build_mlp(args):
    dims = [args.input] + [int(h) for h in args.hidden.split(",")] + [args.output]
    layers = []
    for i in range(len(dims) - 1):
        layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
        if i + 2 < len(dims):
            layers.append(torch.nn.GELU(approximate="tanh"))
    return torch.nn.Sequential(*layers)


def batch(args, device):
    x = torch.rand(args.batch, args.input, device=device) * 2 - 1
    y = torch.tanh(torch.randn(args.batch, args.output, device=device))
    return x, y


def print_figures(figures):
    """figures: (name, value, unit) triples, one JSON object per line as step_bench prints."""
    for fig, val, unit in figures:
        print(json.dumps({"figure": fig, "value": val, "unit": unit, "limit": None, "ratio": None}),
              flush=True)
