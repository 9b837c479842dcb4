"""Interval arithmetic on tensors, rounded outward.

An interval is a pair ``(lo, hi)`` of float64 tensors of one shape.  Every result is widened by one
ulp per bound with ``torch.nextafter`` after the round-to-nearest evaluation (for + - * / sqrt,
whose results are correctly rounded, that encloses the exact result); the elementary functions
(exp, log, sin, ...), whose torch implementations are accurate to a few ulps but not correctly
rounded, are widened by a relative 2^-49 plus one subnormal first.
"""

from __future__ import annotations

import math

import torch

_INF = math.inf
_REL = 2.0 ** -49
_TINY = 2.0 ** -1074
_PI = math.pi
_TWO_PI = 2 * math.pi


def down(x: torch.Tensor) -> torch.Tensor:
    """The next float64 below ``x`` (one ulp outward)."""
    return torch.nextafter(x, torch.full_like(x, -_INF))


def up(x: torch.Tensor) -> torch.Tensor:
    """The next float64 above ``x``."""
    return torch.nextafter(x, torch.full_like(x, _INF))


def wdown(x: torch.Tensor) -> torch.Tensor:
    """``x`` lowered by a few ulps (for a non-correctly-rounded elementary function)."""
    return down(x - x.abs() * _REL - _TINY)


def wup(x: torch.Tensor) -> torch.Tensor:
    return up(x + x.abs() * _REL + _TINY)


def add(al, ah, bl, bh):
    return down(al + bl), up(ah + bh)


def sub(al, ah, bl, bh):
    return down(al - bh), up(ah - bl)


def mul(al, ah, bl, bh):
    p = torch.stack([al * bl, al * bh, ah * bl, ah * bh])
    p = torch.nan_to_num(p, nan=0.0)  # 0 * inf inside an interval product: 0 is the right corner value
    return down(p.amin(0)), up(p.amax(0))


def square(al, ah):
    """``x * x`` with both factors the same variable: never negative."""
    lo = torch.where(al >= 0, al * al, torch.where(ah <= 0, ah * ah, torch.zeros_like(al)))
    hi = torch.maximum(al * al, ah * ah)
    return down(lo).clamp(min=0), up(hi)


def div(al, ah, bl, bh):
    """``a / b`` for ``b`` not containing 0 (callers check); a b containing 0 gives (-inf, inf)."""
    p = torch.stack([al / bl, al / bh, ah / bl, ah / bh])
    lo, hi = down(p.amin(0)), up(p.amax(0))
    bad = (bl <= 0) & (bh >= 0)
    return torch.where(bad, -_INF, lo), torch.where(bad, _INF, hi)


def recip(bl, bh):
    one = torch.ones_like(bl)
    return div(one, one, bl, bh)


def neg(al, ah):
    return -ah, -al


def absval(al, ah):
    lo = torch.where(al >= 0, al, torch.where(ah <= 0, -ah, torch.zeros_like(al)))
    hi = torch.maximum(al.abs(), ah.abs())
    return lo, hi


def mag(al, ah):
    """sup |x| over the interval."""
    return torch.maximum(al.abs(), ah.abs())


def sqrt(al, ah):
    return down(torch.sqrt(al.clamp(min=0))).clamp(min=0), up(torch.sqrt(ah.clamp(min=0)))


def monotone(fn, al, ah, lower=None):
    lo, hi = wdown(fn(al)), wup(fn(ah))
    if lower is not None:
        lo = lo.clamp(min=lower)
    return lo, hi


def exp(al, ah):
    return monotone(torch.exp, al, ah, 0.0)


def log(al, ah):
    lo, hi = wdown(torch.log(al)), wup(torch.log(ah))
    return torch.where(al > 0, lo, -_INF), hi


def _contains(al, ah, offset: float, period: float) -> torch.Tensor:
    """Whether [al, ah] may contain ``offset + k * period`` for an integer k (conservative)."""
    slack = 1e-9 * (1 + torch.maximum(al.abs(), ah.abs())) / period
    k = torch.ceil((al - offset) / period - slack)
    return offset + k * period <= ah + slack * period


def sin(al, ah):
    lo = torch.minimum(torch.sin(al), torch.sin(ah))
    hi = torch.maximum(torch.sin(al), torch.sin(ah))
    lo, hi = wdown(lo), wup(hi)
    wide = (ah - al) >= _TWO_PI
    top = wide | _contains(al, ah, _PI / 2, _TWO_PI)
    bot = wide | _contains(al, ah, -_PI / 2, _TWO_PI)
    hi = torch.where(top, 1.0, hi.clamp(max=1.0))
    lo = torch.where(bot, -1.0, lo.clamp(min=-1.0))
    return lo, hi


def cos(al, ah):
    lo = torch.minimum(torch.cos(al), torch.cos(ah))
    hi = torch.maximum(torch.cos(al), torch.cos(ah))
    lo, hi = wdown(lo), wup(hi)
    wide = (ah - al) >= _TWO_PI
    top = wide | _contains(al, ah, 0.0, _TWO_PI)
    bot = wide | _contains(al, ah, _PI, _TWO_PI)
    hi = torch.where(top, 1.0, hi.clamp(max=1.0))
    lo = torch.where(bot, -1.0, lo.clamp(min=-1.0))
    return lo, hi


def tan(al, ah):
    pole = ((ah - al) >= _PI) | _contains(al, ah, _PI / 2, _PI)
    lo, hi = wdown(torch.tan(al)), wup(torch.tan(ah))
    return torch.where(pole, -_INF, lo), torch.where(pole, _INF, hi)


def cosh(al, ah):
    c1, c2 = torch.cosh(al), torch.cosh(ah)
    hi = wup(torch.maximum(c1, c2))
    lo = torch.where((al <= 0) & (ah >= 0), torch.ones_like(al), wdown(torch.minimum(c1, c2)).clamp(min=1.0))
    return lo, hi


def vmax(al, ah, bl, bh):
    return torch.maximum(al, bl), torch.maximum(ah, bh)


def hull(al, ah, bl, bh):
    return torch.minimum(al, bl), torch.maximum(ah, bh)


def scale_out(al, ah, u: torch.Tensor, eta: torch.Tensor):
    """The interval widened to contain ``x (1 + d) + e`` for |d| <= u, |e| <= eta (rounded values)."""
    return down(al - al.abs() * u - eta), up(ah + ah.abs() * u + eta)
