"""A small GPT in plain torch (no transformers): token and position
embeddings, pre-norm blocks of causal self-attention and a GELU MLP, a
final LayerNorm and a head tied to the token embedding."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab=256, seq=64, d=64, layers=2, heads=4):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets=None):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def param_groups(model, weight_decay):
    """GPT training's groups: weight decay on matrices, none on biases,
    norms and embeddings' 1-D parameters."""
    decay = [p for n, p in model.named_parameters() if p.requires_grad and p.dim() >= 2]
    rest = [p for n, p in model.named_parameters() if p.requires_grad and p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": rest, "weight_decay": 0.0}]


def synthetic_batch(step, batch, seq, vocab, device, rank=0):
    """A deterministic token stream with structure to learn: each sequence
    counts up from a random start with a random stride, modulo vocab."""
    g = torch.Generator().manual_seed(step * 1009 + rank)
    start = torch.randint(0, vocab, (batch, 1), generator=g)
    stride = torch.randint(1, 4, (batch, 1), generator=g)
    tokens = (start + stride * torch.arange(seq + 1)) % vocab
    return tokens[:, :-1].to(device), tokens[:, 1:].to(device)


HELD_OUT_FIRST = 1 << 20  # held-out batches take synthetic_batch steps from here: none trains on them


def held_out_batches(n, batch, seq, vocab, device):
    """n fixed batches no training step draws (synthetic_batch of steps
    HELD_OUT_FIRST...), the same for every run of the same shape: the
    evaluation set."""
    return [synthetic_batch(HELD_OUT_FIRST + i, batch, seq, vocab, device) for i in range(n)]
