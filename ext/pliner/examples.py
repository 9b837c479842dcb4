"""Build functions for ``torchhpc pliner find --model torchhpc.ext.pliner.examples:NAME``.

* :func:`tiny_transformer` — a 2-layer pre-LN transformer with rotary position embeddings (RoPE),
  run on a window of 16 tokens at positions 2000-2015 (a late window of a long context).  Under bf16
  autocast its output drifts: autocast runs the ``positions @ inv_freq`` matmul of the rotary angles
  in bfloat16, whose 8-bit significand spaces numbers near 2000 eight apart, so the angles are off
  by radians.  (Real models hit exactly this; the usual fix computes the rotary angles with autocast
  disabled — the recipe pliner hands back.)
* :func:`cancelling_mlp` — an MLP whose middle layer computes ``W (x + c) - W c`` with a large ``c``:
  the subtraction cancels, so the rounding of that one matmul (bf16, TF32) is amplified.
* :func:`long_sum` — a 262144-term sum of offset values: torch.compile's reduction differs from
  eager's cascade sum by 5x eager's own error (the torch.compile case).
"""

from __future__ import annotations

import math

import torch
from torch import nn


class Rotary(nn.Module):
    """Rotary position embedding angles (Su et al. 2021): ``cos, sin`` of ``positions x inv_freq``, ``(T, Dh)``."""

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, head_dim, 2).float() / head_dim))

    def forward(self, positions):  # positions: (T,) integers
        freqs = positions[:, None].float() @ self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    """Multi-head self-attention with RoPE, written out (so each step has its own source line)."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x, cos, sin):  # x: (B, T, D); cos, sin: (T, D / heads)
        b, t, d = x.shape
        h = self.heads
        q = self.q(x).view(b, t, h, d // h).transpose(1, 2)
        k = self.k(x).view(b, t, h, d // h).transpose(1, 2)
        v = self.v(x).view(b, t, h, d // h).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // h)
        probs = torch.softmax(scores, dim=-1)
        y = (probs @ v).transpose(1, 2).reshape(b, t, d)
        return self.o(y)


class Block(nn.Module):
    """Pre-LN transformer block: ``x + attn(ln1(x))``, then ``x + mlp(ln2(x))``."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, cos, sin):
        x = x + self.attn(self.ln1(x), cos, sin)
        return x + self.mlp(self.ln2(x))


class TinyTransformer(nn.Module):
    """Embedding, rotary angles, ``layers`` blocks, final layer norm and a linear head.

    ``forward(tokens (B, T) ints, positions (T,) ints) -> logits (B, T, vocab)``.
    """

    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.rotary = Rotary(dim // heads)
        self.layers = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens, positions):
        cos, sin = self.rotary(positions)
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.head(self.ln(x))


def tiny_transformer(seed: int = 0, start: int = 2000):
    """``(model, (tokens, positions))``: a 2-layer RoPE transformer; tokens ``(4, 16)`` at positions ``start..``."""
    torch.manual_seed(seed)
    model = TinyTransformer().eval()
    tokens = torch.randint(0, 64, (4, 16))
    return model, (tokens, torch.arange(start, start + 16))


class CancellingMLP(nn.Module):
    """``tanh(l1(x))``, then ``l2(h + c) - l2(c)`` (cancels for large ``c``), then ``l3``."""

    def __init__(self, dim: int = 32, offset: float = 2000.0):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.register_buffer("c", torch.full((dim,), offset))

    def forward(self, x):
        h = torch.tanh(self.l1(x))
        d = self.l2(h + self.c) - self.l2(self.c)
        return self.l3(torch.tanh(d))


def cancelling_mlp(seed: int = 0):
    """``(model, x)``: :class:`CancellingMLP`, ``x`` of shape ``(8, 32)``."""
    torch.manual_seed(seed)
    return CancellingMLP().eval(), (torch.randn(8, 32),)





class OffsetSum(nn.Module):
    """``(x + 1000).sum(-1) - 1000 n``: a long reduction whose terms carry a large offset."""

    def forward(self, x):
        s = (x + 1000.0).sum(dim=-1)
        return s - 1000.0 * x.shape[-1]


def long_sum(seed: int = 0):
    """``(model, x)``: :class:`OffsetSum` over ``x`` of shape ``(4, 262144)``, uniform in [0, 1).

    Eager PyTorch sums with a cascade; torch.compile's generated reduction loop accumulates in a
    different order and loses more to the offset (``--problem compile --tol 3e-4``).
    """
    return OffsetSum(), (torch.rand(4, 1 << 18, generator=torch.Generator().manual_seed(seed)),)


__all__ = ["CancellingMLP", "OffsetSum", "TinyTransformer", "cancelling_mlp", "long_sum", "tiny_transformer"]
