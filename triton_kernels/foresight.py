"""Triton kernel for foresight: the prediction + quantisation stage of our error-bounded compressor.

The compressor quantises first and predicts second ("dual quantisation", as cuSZ does), so that every
element is independent and the stage is one parallel pass::

    q[i, j, k] = round(x[i, j, k] / (2 e))                        (linear quantisation, |x - 2 e q| <= e)
    d[i, j, k] = sum_{a, b, c in {0, 1}} (-1)^(a + b + c) q[i - a, j - b, k - c]   (3D Lorenzo residual)

with ``q`` outside the grid taken as 0.  ``d`` is the mixed finite difference of ``q`` along the three
axes, so the decoder recovers ``q`` exactly with three integer prefix sums (``torch.cumsum``) and the
whole error is the quantisation error ``|x - 2 e q| <= e``.  A value whose ``|x / 2e|`` is not below
2^40 (or that is NaN/inf) gets ``q = 0``; the caller stores it losslessly as an outlier.

Kernel (top to bottom, as in Triton's tutorials):

* ``_lorenzo_quantize_kernel`` — one program per ``BLOCK`` flat elements of the ``(N0, N1, N2)`` volume:
  offsets → (i, j, k) → for each of the 8 Lorenzo corners: load ``x``, quantise in fp64, add with its
  sign → store ``q`` and ``d`` (int64).

``lorenzo_quantize_torch`` is the torch twin (the CPU path and the test reference); the dispatch lives
in ``torchhpc.ext.foresight.ops``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

QUANT_LIMIT = float(2**40)
"""``|x / 2e|`` at or above this is not quantised (the value becomes a lossless outlier)."""


@triton.jit
def _quantize(x, inv2e, LIMIT: tl.constexpr):
    # fp64 so that q = floor(x / 2e + 1/2) is the same number the torch twin computes (inv2e is fp64)
    xf = x.to(tl.float64) * inv2e
    ok = tl.abs(xf) < LIMIT  # false for NaN and inf
    return tl.where(ok, tl.floor(xf + 0.5), 0.0).to(tl.int64)


# The sizes are runtime values: a dimension of 1 (every 1-D and 2-D field is viewed as (1, N1, N2)) would
# otherwise become a constexpr, with no .to(); and one compiled kernel serves every shape.
@triton.jit(do_not_specialize=["N0", "N1", "N2"])
def _lorenzo_quantize_kernel(
    x_ptr,  # (N0, N1, N2) contiguous float32/float64 input
    q_ptr,  # (N0, N1, N2) int64 quantisation codes (out)
    d_ptr,  # (N0, N1, N2) int64 Lorenzo residuals (out)
    inv2e_ptr,  # (1,) fp64: 1 / (2 e) (a Python float argument would arrive as fp32)
    N0,
    N1,
    N2,
    LIMIT: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # 1. program id -> flat offsets and mask
    pid = tl.program_id(0)
    inv2e = tl.load(inv2e_ptr)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    total = N0.to(tl.int64) * N1 * N2
    mask = offs < total
    # 2. flat offset -> (i, j, k)
    plane = N1.to(tl.int64) * N2
    i = offs // plane
    j = (offs // N2) % N1
    k = offs % N2
    # 3. the 8 corners of the Lorenzo stencil, each quantised in fp64, summed with sign (-1)^(a+b+c)
    d = tl.zeros([BLOCK], dtype=tl.int64)
    q0 = tl.zeros([BLOCK], dtype=tl.int64)
    for a in tl.static_range(2):
        for b in tl.static_range(2):
            for c in tl.static_range(2):
                ok = mask & (i >= a) & (j >= b) & (k >= c)
                x = tl.load(x_ptr + offs - a * plane - b * N2 - c, mask=ok, other=0.0)
                q = tl.where(ok, _quantize(x, inv2e, LIMIT), 0)
                if (a + b + c) % 2 == 0:
                    d += q
                else:
                    d -= q
                if a + b + c == 0:
                    q0 = q
    # 4. store codes and residuals
    tl.store(q_ptr + offs, q0, mask=mask)
    tl.store(d_ptr + offs, d, mask=mask)


def lorenzo_quantize_triton(x: torch.Tensor, eb: float, block: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise ``x`` with absolute bound ``eb`` and take its 3D Lorenzo residual (the Triton kernel).

    Args:
        x: ``(N0, N1, N2)`` float32 or float64 (any 1-3D tensor is viewed as 3D by the caller).
        eb: the absolute error bound ``e > 0``.
        block: elements per program.

    Returns:
        ``(q, d)``: int64 codes and residuals, both ``(N0, N1, N2)``.

    Raises:
        ValueError: ``x`` not 3D floating point, or ``eb <= 0``.
    """
    if x.dim() != 3 or not x.is_floating_point():
        raise ValueError(f"expected a 3D float tensor, got {tuple(x.shape)} {x.dtype}")
    if not eb > 0:
        raise ValueError(f"error bound must be > 0, got {eb}")
    x = x.contiguous()
    q = torch.empty(x.shape, dtype=torch.int64, device=x.device)
    d = torch.empty_like(q)
    n = x.numel()
    if n == 0:
        return q, d
    grid = (triton.cdiv(n, block),)
    inv2e = torch.full((1,), 1.0 / (2.0 * eb), dtype=torch.float64, device=x.device)
    _lorenzo_quantize_kernel[grid](x, q, d, inv2e, x.shape[0], x.shape[1], x.shape[2],
                                   LIMIT=QUANT_LIMIT, BLOCK=block)
    return q, d


def quantize_torch(x: torch.Tensor, eb: float) -> torch.Tensor:
    """``q = floor(x / 2e + 1/2)`` in fp64 (0 where ``|x / 2e| >= 2^40`` or ``x`` is not finite)."""
    xf = x.to(torch.float64, copy=True).mul_(1.0 / (2.0 * eb))  # in place after one copy (never on x)
    bad = ~(xf.abs() < QUANT_LIMIT)
    return xf.add_(0.5).floor_().masked_fill_(bad, 0.0).to(torch.int64)


def lorenzo_quantize_torch(x: torch.Tensor, eb: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The torch twin of :func:`lorenzo_quantize_triton`: ``(q, d)`` for a 3D float ``x``."""
    if x.dim() != 3 or not x.is_floating_point():
        raise ValueError(f"expected a 3D float tensor, got {tuple(x.shape)} {x.dtype}")
    if not eb > 0:
        raise ValueError(f"error bound must be > 0, got {eb}")
    q = quantize_torch(x, eb)
    d = q
    for axis in range(3):  # mixed finite difference = the Lorenzo residual
        d = torch.diff(d, dim=axis, prepend=torch.zeros_like(d.narrow(axis, 0, 1)))
    return q, d


__all__ = ["QUANT_LIMIT", "lorenzo_quantize_torch", "lorenzo_quantize_triton", "quantize_torch"]
