"""Pointwise and statistical error metrics, as tensor ops (float64 accumulation).

Names follow Foresight's CBench where they overlap (its Cinema columns in brackets):

=====================  =====================================================================================
``max_abs_error``      ``max |x - x'|``  [``absolute_error``]
``max_rel_error``      ``max |x - x'| / |x|`` over ``x != 0``  [``relative_error``]
``mse``                ``mean (x - x')^2``  [``mse``]
``psnr``               Foresight's (CBench's) PSNR: ``20 log10(max x - min x) - 10 log10(mse)``  [``psnr``];
                       this *is* the value-range PSNR of SZ and Z-checker (checked against Foresight's
                       published rows in the tests)
``psnr_peak``          the peak-amplitude PSNR of image processing: ``20 log10(max |x|) - 10 log10(mse)``
``value_range``        ``max x - min x``  [``minmax``]
``ssim``               mean structural similarity over ``window^d`` windows (2D or 3D), Wang et al. 2004
                       with ``C1 = (0.01 L)^2``, ``C2 = (0.03 L)^2``, ``L`` the value range
``ratio``              original bytes / compressed bytes  [``Compression Ratio``]
=====================  =====================================================================================
"""

from __future__ import annotations

import math

import torch

from torchhpc.ext.core.errors import InputError

METRICS = ("max_abs_error", "max_rel_error", "mse", "psnr", "psnr_peak", "value_range", "ssim", "ratio",
           "throughput", "error_histogram")
"""Every metric a sweep may ask for (``ratio``/``throughput`` come from the compressor's stats)."""


def _pair(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if x.shape != y.shape:
        raise InputError(f"shape mismatch: original {tuple(x.shape)} vs reconstructed {tuple(y.shape)}")
    return x.to(torch.float64), y.to(torch.float64)


def _finite_pair(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """The elements where the original is finite (``x``, ``y`` as float64, flat), and whether the
    reconstruction changed a NaN or inf of the original (an infinite error: the pointwise metrics say so)."""
    x, y = _pair(x, y)
    fin = torch.isfinite(x)
    if bool(fin.all()):
        return x.reshape(-1), y.reshape(-1), False
    kept = (y[~fin] == x[~fin]) | (torch.isnan(x[~fin]) & torch.isnan(y[~fin]))
    return x[fin], y[fin], not bool(kept.all())


def max_abs_error(x: torch.Tensor, y: torch.Tensor) -> float:
    """``max |x - x'|`` over the finite ``x`` (NaN and inf of the input given back are no error; changed, inf)."""
    x, y, changed = _finite_pair(x, y)
    if changed:
        return math.inf
    return float((x - y).abs().max()) if x.numel() else 0.0


def max_rel_error(x: torch.Tensor, y: torch.Tensor) -> float:
    """``max |x - x'| / |x|`` over the finite nonzero ``x`` (0 when there is none)."""
    x, y, changed = _finite_pair(x, y)
    if changed:
        return math.inf
    nz = x != 0
    if not bool(nz.any()):
        return 0.0
    return float(((x - y).abs()[nz] / x.abs()[nz]).max())


def mse(x: torch.Tensor, y: torch.Tensor) -> float:
    """Mean squared error over the finite ``x`` (inf when a NaN or inf of the input was changed)."""
    x, y, changed = _finite_pair(x, y)
    if changed:
        return math.inf
    return float(((x - y) ** 2).mean()) if x.numel() else 0.0


def value_range(x: torch.Tensor) -> float:
    """``max - min`` of the finite values (0 when there is none)."""
    x = x.to(torch.float64)
    x = x[torch.isfinite(x)]
    return float(x.max() - x.min()) if x.numel() else 0.0


def psnr(x: torch.Tensor, y: torch.Tensor) -> float:
    """Foresight's PSNR (value range): ``20 log10(max - min) - 10 log10(mse)``; ``inf`` when exact."""
    m = mse(x, y)
    r = value_range(x)
    if m == 0:
        return math.inf
    return 20 * math.log10(r) - 10 * math.log10(m) if r > 0 else -math.inf


def psnr_peak(x: torch.Tensor, y: torch.Tensor) -> float:
    """Peak-amplitude PSNR: ``20 log10(max |x|) - 10 log10(mse)``."""
    m = mse(x, y)
    xf = x.to(torch.float64)
    xf = xf[torch.isfinite(xf)]
    peak = float(xf.abs().max()) if xf.numel() else 0.0
    if m == 0:
        return math.inf
    return 20 * math.log10(peak) - 10 * math.log10(m) if peak > 0 else -math.inf


def ssim(x: torch.Tensor, y: torch.Tensor, window: int = 7) -> float:
    """Mean SSIM over all ``window^d`` windows (uniform weights) of a 2D or 3D field.

    Raises:
        InputError: a shape mismatch, a field that is not 2D/3D, or a window larger than the field.
    """
    x, y = _pair(x, y)
    if x.dim() not in (2, 3):
        raise InputError(f"ssim needs a 2D or 3D field, got shape {tuple(x.shape)}")
    if min(x.shape) < window:
        raise InputError(f"ssim window {window} is larger than the field {tuple(x.shape)}")
    rng = value_range(x) or 1.0
    c1, c2 = (0.01 * rng) ** 2, (0.03 * rng) ** 2
    pool = torch.nn.functional.avg_pool2d if x.dim() == 2 else torch.nn.functional.avg_pool3d
    mean = lambda t: pool(t[None, None], window, stride=1)[0, 0]  # noqa: E731
    mx, my = mean(x), mean(y)
    vx = mean(x * x) - mx**2
    vy = mean(y * y) - my**2
    cov = mean(x * y) - mx * my
    s = ((2 * mx * my + c1) * (2 * cov + c2)) / ((mx**2 + my**2 + c1) * (vx + vy + c2))
    return float(s.mean())


def error_histogram(x: torch.Tensor, y: torch.Tensor, bins: int = 64, bound: float | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Histogram of ``x' - x``: ``(counts (bins,), edges (bins + 1,))`` over ``[-b, b]`` with ``b`` the
    error bound when given, else the largest error."""
    x, y = _pair(x, y)
    e = (y - x).reshape(-1)
    b = bound or float(e.abs().max()) or 1.0
    counts = torch.histc(e, bins=bins, min=-b, max=b)
    return counts, torch.linspace(-b, b, bins + 1, dtype=torch.float64)


def field_metrics(x: torch.Tensor, y: torch.Tensor, names: list[str] | tuple[str, ...] = METRICS) -> dict[str, float]:
    """The requested pointwise metrics of one field (``ssim`` only for 2D/3D fields)."""
    out: dict[str, float] = {}
    for n in names:
        if n == "max_abs_error":
            out[n] = max_abs_error(x, y)
        elif n == "max_rel_error":
            out[n] = max_rel_error(x, y)
        elif n == "mse":
            out[n] = mse(x, y)
        elif n == "psnr":
            out[n] = psnr(x, y)
        elif n == "psnr_peak":
            out[n] = psnr_peak(x, y)
        elif n == "value_range":
            out[n] = value_range(x)
        elif n == "ssim" and x.dim() in (2, 3) and min(x.shape) >= 7:
            out[n] = ssim(x, y)
    return out


def check_metric_names(names) -> None:
    """InputError for a metric name not in :data:`METRICS`."""
    for n in names:
        if n not in METRICS:
            raise InputError(f"unknown metric {n!r} (known: {', '.join(METRICS)})")


__all__ = ["METRICS", "check_metric_names", "error_histogram", "field_metrics", "max_abs_error", "max_rel_error",
           "mse", "psnr", "psnr_peak", "ssim", "value_range"]
