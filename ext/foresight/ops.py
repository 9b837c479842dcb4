"""The fast path of our error-bounded compressor: prediction/quantisation (Triton on CUDA, torch
elsewhere), integer reconstruction, and the entropy stage (zigzag bytes + zstd).

Pipeline of ``lorenzo_encode`` (SZ's three stages, dual-quantised so the first two are one parallel pass):

1. quantise ``q = round(x / 2e)`` and take the 3D Lorenzo residual ``d`` (``triton_kernels.foresight``);
2. check the reconstruction ``x' = 2 e q`` (cast back to the input dtype) element by element; any value
   with ``|x - x'| > e`` (float rounding at huge ``|x| / e``, NaN, inf) is kept exactly as an outlier,
   so the bound holds on every element by construction;
3. zigzag the residuals to unsigned, split them into byte planes and compress each plane with zstd
   (the kept entropy coder).

``lorenzo_decode`` undoes 3 and recovers ``q`` with three integer prefix sums (Lorenzo) or level by
level (interpolation).
"""

from __future__ import annotations

import io
import math
import struct

import numpy as np
import torch

from torchhpc.ext.core.budgets import HostBudget
from torchhpc.ext.core.dispatch import numba_available, resolve_backend
from torchhpc.ext.core.errors import InputError

#: Host work of the CUDA path per field (``count_host_work`` on CPU tensors, ``tests/test_gpu_budgets.py``).
#: Encoding copies the residuals and the outliers to the host once each (3 ``cpu`` + 3 ``numpy`` + the
#: outlier search); the block codec (``blocks.py``, the default on CUDA) copies the payload once.
GPU_BUDGETS = {
    "lorenzo_encode": HostBudget("field", syncs=8, launches=12, why="residuals and outliers cross to the host"),
    "lorenzo_decode": HostBudget("field", syncs=0, launches=6, why="three prefix sums and the dequantisation"),
}


def as_volume(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """The ``(N0, N1, N2)`` view of a 1-3D shape (leading axes merged for >3D, 1s prepended for <3D)."""
    if len(shape) == 0:
        return (1, 1, 1)
    if len(shape) > 3:
        lead = int(np.prod(shape[:-2]))
        return (lead, int(shape[-2]), int(shape[-1]))
    return tuple([1] * (3 - len(shape)) + [int(s) for s in shape])  # type: ignore[return-value]


def lorenzo_quantize(x: torch.Tensor, eb: float, backend: str = "auto", residual: bool = True
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(q, d)``: codes ``round(x / 2e)`` and their 3D Lorenzo residuals, for any 1-3D float ``x``.

    Args:
        x: float32/float64 tensor of 1 to 3 dimensions (more are merged into 3).
        eb: absolute error bound ``e > 0``.
        backend: ``auto`` (Triton on CUDA, torch elsewhere), ``torch`` or ``triton``.
        residual: also the Lorenzo residual (the Triton kernel always computes it; the torch path
            skips it when False and returns ``d = None``).

    Returns:
        int64 ``q`` and ``d`` of shape :func:`as_volume` ``(x.shape)``.

    Raises:
        InputError: a backend that cannot run on ``x.device``.
    """
    vol = x.reshape(as_volume(tuple(x.shape)))
    name = resolve_backend(backend, x.device, choices=("torch", "triton"))
    if name == "triton":
        from torchhpc.triton_kernels.foresight import lorenzo_quantize_triton

        return lorenzo_quantize_triton(vol, eb)
    from torchhpc.triton_kernels.foresight import lorenzo_quantize_torch, quantize_torch

    if not residual:
        if vol.dim() != 3 or not vol.is_floating_point() or not eb > 0:
            return lorenzo_quantize_torch(vol, eb)  # (raises the same errors)
        return quantize_torch(vol, eb), None
    return lorenzo_quantize_torch(vol, eb)


def lorenzo_reconstruct(d: torch.Tensor) -> torch.Tensor:
    """Invert the Lorenzo residual: ``q`` from ``d`` by integer prefix sums along the three axes."""
    q = d
    for axis in range(3):
        q = torch.cumsum(q, dim=axis)
    return q


# ----------------------------------------------------------------------------- byte framing


def pack_sections(sections: list[bytes]) -> bytes:
    """Concatenate byte blobs, each prefixed with its length (uint64 little-endian)."""
    out = io.BytesIO()
    out.write(struct.pack("<Q", len(sections)))
    for s in sections:
        out.write(struct.pack("<Q", len(s)))
        out.write(s)
    return out.getvalue()


def unpack_sections(blob: bytes) -> list[bytes]:
    """Inverse of :func:`pack_sections`; raises InputError on a truncated blob."""
    try:
        (n,) = struct.unpack_from("<Q", blob, 0)
        pos, out = 8, []
        for _ in range(n):
            (size,) = struct.unpack_from("<Q", blob, pos)
            pos += 8
            if pos + size > len(blob):
                raise struct.error("section runs past the end")
            out.append(bytes(blob[pos:pos + size]))
            pos += size
    except struct.error as exc:
        raise InputError(f"corrupt compressed payload ({exc})") from None
    return out


_ZSTD: dict[object, object] = {}


def _zstd(key: object, make):
    """One zstd (de)compressor per level and thread: high levels cost a context allocation per object."""
    import threading

    k = (key, threading.get_ident())
    if k not in _ZSTD:
        _ZSTD[k] = make()
    return _ZSTD[k]


ZSTD_SETTINGS = {"btopt-s1": {"level": 17, "strategy": "btopt", "min_match": 4, "search_log": 1, "chain_log": 10,
                               "hash_log": 10, "target_length": 999}}
"""Named zstd settings beside the plain levels, every parameter that matters pinned (not left to the level table
of whichever libzstd is installed).  ``btopt-s1``: zstd's optimal parser (btopt) with one search a position in
1 KiB tables.  On small fields' byte planes the parse is what level 15 buys over level 1 (NYX 32^3 at 1e-2 of
the range: 22.6 % smaller than level 1) and the deep search what it pays: this setting writes NYX's planes
within 3 % of level 15 (1.6 % smaller at 1e-3) in 0.4 of its time (``docs/foresight/results.md``).  Its frames
are plain zstd frames: the decoder does not need to know the setting."""

Level = int | str
"""A zstd level (1..22) or a name of :data:`ZSTD_SETTINGS`."""


def zstd_compress(data: bytes, level: Level = 3) -> bytes:
    import zstandard

    if isinstance(level, str):
        def make():
            setting = dict(ZSTD_SETTINGS[level])
            setting["strategy"] = getattr(zstandard, f"STRATEGY_{setting['strategy'].upper()}")
            params = zstandard.ZstdCompressionParameters.from_level(setting.pop("level"), **setting)
            return zstandard.ZstdCompressor(compression_params=params)
    else:
        def make():
            return zstandard.ZstdCompressor(level=level)
    return _zstd(level, make).compress(data)


def zstd_decompress(data: bytes) -> bytes:
    import zstandard

    try:
        return _zstd("d", zstandard.ZstdDecompressor).decompress(data)
    except zstandard.ZstdError as exc:
        raise InputError(f"corrupt zstd stream ({exc})") from None


# ----------------------------------------------------------------------------- entropy stage


def encode_residuals(d: torch.Tensor, level: Level | tuple[Level, ...] = 3) -> list[bytes]:
    """Zigzag ``d`` (int64) to unsigned, split it into as many little-endian byte planes as its largest
    value needs, and zstd each plane: ``[planes header, plane 0, plane 1, ...]``.

    Residuals of a good predictor are small: plane 0 carries nearly everything and the higher planes
    are runs of zeros that zstd reduces to almost nothing (one stray large residual costs a few bytes,
    not a wider code for every value).
    """
    dn = np.ascontiguousarray(d.reshape(-1).cpu().numpy())
    u = ((dn << 1) ^ (dn >> 63)).view(np.uint64)  # zigzag: 0, -1, 1, -2, ... -> 0, 1, 2, 3, ...
    top = int(u.max()) if u.size else 0
    nplanes = max(1, (top.bit_length() + 7) // 8)
    # plane i = byte i of each value (a truncating cast: contiguous and vectorised)
    return plane_sections(((u >> np.uint64(8 * i)).astype(np.uint8) for i in range(nplanes)), nplanes, level)


def plane_sections(planes, nplanes: int, level: Level | tuple[Level, ...]) -> list[bytes]:
    """``[planes header, zstd of plane 0, ...]`` of :func:`encode_residuals` from its ``nplanes`` uint8 byte
    planes (any iterable of arrays); with several levels, each plane's smallest frame (the first on a tie)."""
    levels = (level,) if isinstance(level, (int, str)) else tuple(level)
    out = [struct.pack("<B", nplanes)]
    for p in planes:
        data = np.ascontiguousarray(p).tobytes()
        out.append(min((zstd_compress(data, lv) for lv in levels), key=len))
    return out


def outlier_level(level: Level | tuple[Level, ...]) -> int:
    """The zstd level of the outlier sections: outliers are few, so a fast level is as good there (at most 3;
    a named setting counts as its level)."""
    levels = (level,) if isinstance(level, (int, str)) else level
    return min(max(ZSTD_SETTINGS[lv]["level"] if isinstance(lv, str) else lv for lv in levels), 3)


def exact_values(section: bytes, dtype: np.dtype) -> np.ndarray:
    """The array of ``dtype`` in a zstd section (values or positions kept exactly).

    Raises:
        InputError: a section that does not decode, or whose size is not a whole number of values.
    """
    raw = zstd_decompress(section)
    if len(raw) % dtype.itemsize:
        raise InputError(f"corrupt payload: {len(raw)} bytes are not a whole number of {dtype.name} values")
    return np.frombuffer(raw, dtype=dtype)


def decode_planes(sections: list[bytes], n: int) -> list[np.ndarray]:
    """The ``n``-byte planes of :func:`encode_residuals`' sections, checked against their header.

    Raises:
        InputError: a header that does not match the planes, or a plane of another length.
    """
    if not sections or len(sections[0]) != 1 or sections[0][0] != len(sections) - 1 or len(sections) > 9:
        raise InputError("corrupt payload: bad residual planes header")
    planes = [np.frombuffer(zstd_decompress(blob), dtype=np.uint8) for blob in sections[1:]]
    if any(p.size != n for p in planes):
        raise InputError(f"corrupt payload: residual planes of {[p.size for p in planes]} codes for {n} values")
    return planes


def decode_residuals(sections: list[bytes], n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Inverse of :func:`encode_residuals`: ``n`` int64 residuals."""
    planes = decode_planes(sections, n)
    if len(planes) < 8:  # the common case: the zigzag codes fit int64, so no unsigned arithmetic
        u = planes[0].astype(np.int64)
        for i, p in enumerate(planes[1:], 1):
            u |= p.astype(np.int64) << (8 * i)
        d = (u >> 1) ^ -(u & 1)  # un-zigzag
    else:
        uu = np.zeros(n, dtype=np.uint64)
        for i, p in enumerate(planes):
            uu |= p.astype(np.uint64) << np.uint64(8 * i)
        d = (uu >> np.uint64(1)).view(np.int64) ^ -(uu & np.uint64(1)).view(np.int64)
    return torch.from_numpy(d).to(device)


# ----------------------------------------------------------------------------- the compressor core

PREDICTORS = ("auto", "lorenzo", "interp", "cubic")


def choose_predictor(q: torch.Tensor, sample: int = 64) -> str:
    """SZ3's rule, on a sample: the predictor (lorenzo or interp) whose residuals on a central block of
    at most ``sample^3`` codes have the smaller total ``log2(1 + |r|)`` (a cheap entropy proxy; lorenzo on a
    tie), taken by Mitchell's approximation and summed as :func:`log2_cost` integers, so every device and
    summation order picks the same one."""
    return _choose(q, sample)[0]


LOG2_COST_BITS = 16
"""Fraction bits of :func:`log2_cost`."""


def log2_cost(r: torch.Tensor) -> int:
    """``sum(log2(1 + |r|))`` of integer residuals as an exact integer in units of ``2**-LOG2_COST_BITS``,
    by Mitchell's piecewise-linear ``log2`` (at most 0.086 below the true value, and the fraction truncated to
    ``LOG2_COST_BITS`` bits): ``1 + |r|`` as float64 (rounded to nearest past 2**53, as on every device) is
    ``2**E * (1 + f)``, and ``log2`` is taken as ``E + f``, whose fixed-point value is the float's exponent and
    top mantissa bits, read from its bits by one shift.  A float ``log2`` and a float sum differ in their last
    bits between devices and summation orders, and on a near-tie would pick the other predictor there."""
    bits = (r.to(torch.float64).abs() + 1.0).view(torch.int64) >> (52 - LOG2_COST_BITS)  # (no integer wrap)
    return int(bits.sum()) - 1023 * (1 << LOG2_COST_BITS) * r.numel()


def _choose(q: torch.Tensor, sample: int = 64) -> tuple[str, torch.Tensor | None]:
    """:func:`choose_predictor`, and the chosen predictor's residuals when the sampled block is all of ``q``
    (a field of at most ``sample^3`` codes: they need not be computed again)."""
    sl = tuple(slice(max(0, (n - sample) // 2), max(0, (n - sample) // 2) + min(n, sample)) for n in q.shape)
    block = q[sl].contiguous()
    d = block
    for axis in range(3):
        d = torch.diff(d, dim=axis, prepend=torch.zeros_like(d.narrow(axis, 0, 1)))
    residuals = {"lorenzo": d, "interp": interp_residuals(block, cubic=False)}
    cost = {name: log2_cost(r) for name, r in residuals.items()}
    name = min(cost, key=cost.get)
    return name, (residuals[name].reshape(-1) if block.shape == q.shape else None)


def _residuals(q: torch.Tensor, d: torch.Tensor | None, predictor: str) -> tuple[str, torch.Tensor]:
    """The residuals of ``predictor`` (``auto``: :func:`choose_predictor`)."""
    if predictor == "auto":
        predictor, whole = _choose(q)
        if whole is not None:
            return predictor, whole
    if predictor == "lorenzo":
        if d is None:
            d = q
            for axis in range(3):
                d = torch.diff(d, dim=axis, prepend=torch.zeros_like(d.narrow(axis, 0, 1)))
        return "lorenzo", d.reshape(-1)
    return predictor, interp_residuals(q, cubic=predictor == "cubic")


def lorenzo_encode(x: torch.Tensor, eb: float, *, backend: str = "auto", level: Level | tuple[Level, ...] = 9,
                   predictor: str = "auto") -> tuple[str, list[bytes]]:
    """Compress ``x`` with absolute bound ``eb`` (every element: ``|x - x'| <= eb``).

    Args:
        x: float32/float64 tensor, 1-3D (more dimensions are merged).
        eb: absolute error bound.
        backend: ``auto`` (Triton on CUDA, the compiled encoder of :mod:`.planes_kernels` on the CPU where numba
            is installed, else torch), ``torch``, ``triton`` or ``numba``; each writes the same sections.
        level: zstd level (or :data:`ZSTD_SETTINGS` name) of the entropy stage; several: each byte plane's
            smallest frame of them.
        predictor: ``lorenzo`` (3D Lorenzo), ``interp`` (multilevel linear interpolation), ``cubic``
            (multilevel cubic) or ``auto`` (the better of lorenzo and interp for this input).

    Returns:
        ``(predictor used, sections)``: ``[outlier index, outlier values, residual planes...]``.
    """
    if predictor not in PREDICTORS:
        raise InputError(f"predictor must be one of {', '.join(PREDICTORS)}; got {predictor!r}")
    eb = _positive(eb, "the absolute error bound must be a positive finite number")
    if encode_backend(backend, x) == "numba":
        return _encode_compiled(x, eb, level, predictor)
    q, d = lorenzo_quantize(x, eb, backend, residual=predictor == "lorenzo")
    used, r = _residuals(q, d, predictor)
    del d
    flat = x.reshape(-1)
    # 2. the reconstruction as the decoder will compute it; anything off the bound is an outlier
    recon = q.reshape(-1).to(torch.float64).mul_(2.0 * eb).to(x.dtype).to(torch.float64)
    bad = ~(recon.sub_(flat).abs_() <= eb)  # NaN-safe: a NaN error is an outlier
    del recon
    idx = torch.nonzero(bad).reshape(-1).cpu().numpy().astype("<i8")
    vals = flat[bad].cpu().numpy()
    small = outlier_level(level)
    return used, [zstd_compress(np.diff(idx, prepend=0).tobytes(), small), zstd_compress(vals.tobytes(), small),
                  *encode_residuals(r, level)]


def _positive(eb, message: str) -> float:
    """``eb`` as a positive finite float (a numpy or torch scalar included); InputError with ``message``."""
    try:
        value = float(eb)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0) or isinstance(eb, (bool, str)):
        raise InputError(f"{message}; got {eb!r}")
    return value


def encode_backend(backend: str, x: torch.Tensor) -> str:
    """What encodes ``x`` for ``backend``: ``auto`` is the compiled CPU encoder (:mod:`.planes_kernels`) for a
    float32/float64 tensor on the CPU where numba is installed, Triton on CUDA, else the torch path.

    Raises:
        InputError: an unknown backend, or one that cannot run where ``x`` is.
    """
    name = resolve_backend(backend, x.device, choices=("torch", "triton", "numba"))
    if name == "numba" and x.dtype not in (torch.float32, torch.float64):
        if backend == "numba":
            raise InputError(f"backend 'numba' encodes float32 and float64 fields; this one is {x.dtype}")
        return "torch"
    if name == "numba" and backend == "auto" and not compiled_pays(x.numel()):
        return "torch"
    return name


COMPILED_MIN_VALUES = 1 << 23
"""Below this many values ``auto`` keeps the torch path on the CPU until the compiled kernels are loaded in
the process: loading them (numba's import and its first cached kernel) costs 0.4-0.7 s once, and the compiled
path saves ~60 ns a value encoding and ~40 decoding, so the load pays for itself from ~2^23 values (a 203^3
field). Either writes the same bytes."""


def compiled_pays(n: int) -> bool:
    """Whether ``auto`` runs the compiled CPU codec on a field of ``n`` values: a large one, or any once the
    kernels are loaded in this process."""
    import sys

    kernels = sys.modules.get("torchhpc.ext.foresight.planes_kernels")
    return n >= COMPILED_MIN_VALUES or bool(kernels and kernels.loaded())


def _encode_compiled(x: torch.Tensor, eb: float, level: Level | tuple[Level, ...], predictor: str
                     ) -> tuple[str, list[bytes]]:
    """:func:`lorenzo_encode` by the compiled CPU encoder: the same sections, from three compiled loops
    (quantise and check, the predictor's residuals, the byte planes) instead of about twenty tensor passes."""
    from . import planes_kernels as K

    vol = as_volume(tuple(x.shape))
    flat = np.ascontiguousarray(x.detach().reshape(-1).numpy())
    q, idx = K.quantize(flat, eb)
    q3 = q.reshape(vol)
    r = None
    if predictor == "auto":
        predictor, whole = _choose(torch.from_numpy(q3))
        r = None if whole is None else whole.numpy()
    if r is None:
        if predictor == "lorenzo":
            r = K.lorenzo_residuals(q3)
        else:
            coarse, steps = _interp_plan(vol)
            r = K.interp_residuals(q3, coarse, steps, cubic=predictor == "cubic")
    del q, q3
    planes = K.byte_planes(r)
    small = outlier_level(level)
    idx = idx.astype("<i8")
    return predictor, [zstd_compress(np.diff(idx, prepend=0).tobytes(), small), zstd_compress(flat[idx].tobytes(), small),
                       *plane_sections(planes, planes.shape[0], level)]


def lorenzo_decode(sections: list[bytes], shape: tuple[int, ...], dtype: torch.dtype, eb: float,
                   predictor: str = "lorenzo", device: torch.device | str = "cpu") -> torch.Tensor:
    """Inverse of :func:`lorenzo_encode`: the ``shape``/``dtype`` tensor within ``eb`` of the input."""
    eb = _positive(eb, "corrupt payload: the error bound is not a positive finite number")
    if len(sections) < 4:
        raise InputError(f"corrupt payload: expected at least 4 sections, got {len(sections)}")
    vol = as_volume(tuple(shape))
    n = int(np.prod(vol))
    if predictor not in ("lorenzo", "interp", "cubic"):
        raise InputError(f"corrupt payload: unknown predictor {predictor!r}")
    planes = decode_planes(sections[2:], n)
    if (torch.device(device).type == "cpu" and dtype in (torch.float32, torch.float64) and len(planes) < 8
            and numba_available() and compiled_pays(n)):  # the compiled decoder: the same values in three passes
        from .planes_kernels import decode_volume

        out = torch.from_numpy(decode_volume(np.stack(planes), vol, predictor, eb,
                                             np.dtype(str(dtype).replace("torch.", "")),
                                             None if predictor == "lorenzo" else _interp_plan(vol)))
    else:
        r = decode_residuals(sections[2:], n, device)
        if predictor == "lorenzo":
            q = lorenzo_reconstruct(r.reshape(vol))
        else:
            q = interp_reconstruct(r, vol, cubic=predictor == "cubic")
        out = (q.reshape(-1).to(torch.float64) * (2.0 * eb)).to(dtype)
    idx = np.cumsum(exact_values(sections[0], np.dtype("<i8")))
    vals = exact_values(sections[1], np.dtype(str(dtype).replace("torch.", "")))
    if idx.size != vals.size:
        raise InputError("corrupt payload: outlier index and values differ in length")
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise InputError(f"corrupt payload: an outlier index outside the field's {n} values")
    if idx.size:
        out[torch.from_numpy(idx).to(out.device)] = torch.from_numpy(vals.copy()).to(out.device)
    return out.reshape(shape)



# ----------------------------------------------------------------------------- interpolation predictor


def _interp_axis_residual(a: torch.Tensor, axis: int, cubic: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Predict the odd entries of ``a`` along ``axis`` from its even entries (exact integer arithmetic).

    Returns:
        ``(pred, target)`` for the odd entries: linear ``(l + r + 1) >> 1`` or cubic
        ``(-l3 + 9 l + 9 r - r3 + 8) >> 4`` (SZ3's interpolation weights), falling back to linear
        where the cubic stencil leaves the grid and to the left neighbour at the last odd entry
        without a right neighbour.
    """
    odd = a[(slice(None),) * axis + (slice(1, None, 2),)]
    m = odd.shape[axis]
    even = a[(slice(None),) * axis + (slice(0, None, 2),)]
    left = even.narrow(axis, 0, m)
    n_even = even.shape[axis]
    if n_even > m:  # every odd entry has a right neighbour
        right = even.narrow(axis, 1, m)
    else:  # the last odd entry has none: repeat its left neighbour
        right = torch.cat([even.narrow(axis, 1, m - 1), even.narrow(axis, m - 1, 1)], dim=axis) if m > 1 else left
    pred = (left + right + 1) >> 1
    if cubic and m >= 3:
        # odd entry t (index 2t+1) uses even t-1, t, t+1, t+2; valid for 1 <= t and t+2 < n_even
        lo, hi = 1, min(m, n_even - 2)
        if hi > lo:
            cnt = hi - lo
            l3 = even.narrow(axis, lo - 1, cnt)
            l1 = even.narrow(axis, lo, cnt)
            r1 = even.narrow(axis, lo + 1, cnt)
            r3 = even.narrow(axis, lo + 2, cnt)
            mid = (-l3 + 9 * l1 + 9 * r1 - r3 + 8) >> 4
            pred = torch.cat([pred.narrow(axis, 0, lo), mid, pred.narrow(axis, hi, m - hi)], dim=axis)
    return pred, odd


def _interp_plan(shape: tuple[int, int, int]) -> tuple[int, list[tuple[int, int]]]:
    """The coarsest stride and the (stride, axis) steps from coarse to fine."""
    top = 1
    while top * 2 < max(shape):
        top *= 2
    steps = []
    s = top
    while s >= 1:
        for axis in range(3):
            if shape[axis] > s:
                steps.append((s, axis))
        s //= 2
    return top * 2, steps


def _step_view(q: torch.Tensor, s: int, axis: int) -> torch.Tensor:
    """The sub-grid refined by step (s, axis): stride s on axes before ``axis``, 2s after, s along it."""
    sl = []
    for ax in range(3):
        if ax < axis:
            sl.append(slice(0, None, s))
        elif ax == axis:
            sl.append(slice(0, None, s))
        else:
            sl.append(slice(0, None, 2 * s))
    return q[tuple(sl)]


def interp_residuals(q: torch.Tensor, cubic: bool = True) -> torch.Tensor:
    """Residuals of multilevel interpolation prediction of the int64 volume ``q`` (SZ3's predictor on
    pre-quantised codes): the coarsest grid as is, then each (stride, axis) step's odd entries minus
    their prediction, concatenated flat.  Same length as ``q``."""
    coarse, steps = _interp_plan(tuple(q.shape))
    parts = [q[::coarse, ::coarse, ::coarse].reshape(-1)]
    for s, axis in steps:
        view = _step_view(q, s, axis)
        pred, target = _interp_axis_residual(view, axis, cubic)
        parts.append((target - pred).reshape(-1))
    return torch.cat(parts)


def interp_reconstruct(r: torch.Tensor, shape: tuple[int, int, int], cubic: bool = True) -> torch.Tensor:
    """Inverse of :func:`interp_residuals`: the int64 volume ``q`` from its residuals."""
    q = torch.zeros(shape, dtype=torch.int64, device=r.device)
    coarse, steps = _interp_plan(shape)
    head = q[::coarse, ::coarse, ::coarse]
    pos = head.numel()
    q[::coarse, ::coarse, ::coarse] = r[:pos].reshape(head.shape)
    for s, axis in steps:
        view = _step_view(q, s, axis)
        pred, target = _interp_axis_residual(view, axis, cubic)
        n = target.numel()
        target.copy_(pred + r[pos:pos + n].reshape(target.shape))
        pos += n
    if pos != r.numel():
        raise InputError(f"corrupt payload: {r.numel()} residuals for {pos} values")
    return q


__all__ = ["LOG2_COST_BITS", "PREDICTORS", "as_volume", "choose_predictor", "decode_residuals", "exact_values", "encode_residuals", "interp_reconstruct",
           "interp_residuals", "log2_cost", "lorenzo_decode", "lorenzo_encode", "lorenzo_quantize", "lorenzo_reconstruct",
           "pack_sections", "unpack_sections", "zstd_compress", "zstd_decompress"]
