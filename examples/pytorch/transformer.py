#!/usr/bin/env python3
"""A small decoder-only transformer in plain PyTorch (random weights), in two configurations:

  A  the reference: rotary position angles computed in float32 for every head
  B  a deliberate fault: layer 2 computes head 1's rotary angles in float16, as a fused kernel
     with a half-precision angle table would. The angle error grows with the position, so the
     error grows along T, in one head of one layer.

`python3 transformer.py DIR` dumps both (loupe.dump) into DIR/a and DIR/b and prints the
`loupe diff` command that finds where they part ways.
"""

import math
import os
import sys

import torch
from torch import nn

import loupe

VOCAB, WIDTH, HEADS, LAYERS, TOKENS = 256, 128, 4, 4, 512
FAULT_LAYER, FAULT_HEAD = 2, 1


class Rotary(nn.Module):
    """Rotates q and k (B, H, T, Dh) by position; `half_heads` get float16 angles (the fault)."""

    def __init__(self, head_dim, half_heads=()):
        super().__init__()
        self.register_buffer("inv_freq", 10000.0 ** (-torch.arange(0, head_dim, 2) / head_dim))
        self.half_heads = tuple(half_heads)

    def angles(self, tokens, heads):
        positions = torch.arange(tokens, dtype=torch.float32)
        exact = positions[:, None] * self.inv_freq[None, :]  # (T, Dh/2)
        per_head = exact.expand(heads, *exact.shape).clone()  # (H, T, Dh/2)
        for head in self.half_heads:
            per_head[head] = (positions.half()[:, None] * self.inv_freq.half()[None, :]).float()
        return per_head

    def forward(self, q, k):
        angles = self.angles(q.shape[2], q.shape[1])
        cos, sin = angles.cos(), angles.sin()

        def rotate(x):
            even, odd = x[..., 0::2], x[..., 1::2]
            return torch.stack((even * cos - odd * sin, even * sin + odd * cos), -1).flatten(-2)

        return rotate(q), rotate(k)


class Attention(nn.Module):
    def __init__(self, half_heads=()):
        super().__init__()
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.rope = Rotary(WIDTH // HEADS, half_heads)
        self.heads = nn.Identity()  # a named point for hooks: the per-head context (B, H, T, Dh)
        self.out = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        batch, tokens, _ = x.shape
        q, k, v = self.qkv(x).view(batch, tokens, 3, HEADS, WIDTH // HEADS).permute(2, 0, 3, 1, 4)
        q, k = self.rope(q, k)
        scores = q @ k.transpose(-1, -2) / math.sqrt(WIDTH // HEADS)
        causal = torch.ones(tokens, tokens, dtype=torch.bool).triu(1)
        context = self.heads(scores.masked_fill(causal, float("-inf")).softmax(-1) @ v)
        return self.out(context.transpose(1, 2).reshape(batch, tokens, WIDTH))


class Layer(nn.Module):
    def __init__(self, half_heads=()):
        super().__init__()
        self.norm1 = nn.LayerNorm(WIDTH)
        self.attn = Attention(half_heads)
        self.norm2 = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Transformer(nn.Module):
    def __init__(self, config="A"):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.layers = nn.ModuleList(
            Layer((FAULT_HEAD,) if config == "B" and index == FAULT_LAYER else ())
            for index in range(LAYERS))
        self.norm = nn.LayerNorm(WIDTH)
        self.logits = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens, hidden=None):
        x = self.embed(tokens)
        if hidden is not None:
            hidden["embed"] = x
        for index, layer in enumerate(self.layers):
            x = layer(x)
            if hidden is not None:
                hidden["layers.%d" % index] = x
        return self.logits(self.norm(x))


def build(config, seed=0):
    """Configuration A or B with the same random weights (the seed decides them)."""
    torch.manual_seed(seed)
    return Transformer(config).eval()


def tokens(seed=1, batch=2):
    return torch.randint(0, VOCAB, (batch, TOKENS), generator=torch.Generator().manual_seed(seed))


# Axis names per module output: rotary q/k and the per-head context are (B, H, T, Dh).
DIMS = {"*.attn.rope": "B H T D", "*.attn.heads": "B H T D", "*": "B T D"}


def dump_both(directory):
    inputs = tokens()
    for config in ("A", "B"):
        model = build(config)
        with torch.no_grad(), loupe.dump(model, os.path.join(directory, config.lower()),
                                         dims=DIMS):
            model(inputs)


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "pytorch-dumps"
    dump_both(out)
    print("dumped A and B into %s/a and %s/b; now:\n  loupe diff %s/a %s/b --axes B,H,T,D "
          "--along T" % (out, out, out, out))
