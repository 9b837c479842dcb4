"""The planes codec's encoder on the CPU, compiled (numba): the bytes of the torch path, in fewer passes.

:func:`torchhpc.ext.foresight.ops.lorenzo_encode` on the torch path makes about twenty passes over a field
(a float64 copy, the quantisation, the reconstruction and its check, the predictor's residuals level by level
and their concatenation, the zigzag, one cast per byte plane), each a full-size temporary: 1.2 s for a 256^3
float32 field on one core, where SZ3 takes ~0.4 s.  Here the same arithmetic runs as three loops that keep
their values in registers:

* :func:`quantize` -- per value: ``q = floor(x / 2e + 1/2)`` in fp64 (0 where ``|x / 2e| >= 2^40`` or ``x``
  is not finite), the decoder's value ``2 e q`` cast to the input's dtype, and the outlier flag where it is
  off the bound (reads 4-8 bytes, writes 9 per value);
* :func:`lorenzo_residuals` / :func:`interp_residuals` -- the predictor's residuals in the payload's order
  (Lorenzo: the 3D mixed difference; interpolation: SZ3's multilevel order, the coarsest grid first, then
  each (stride, axis) step's odd entries; 8 bytes in and out per value);
* :func:`byte_planes` -- zigzag and the little-endian byte planes the largest code needs (8 bytes in,
  one per plane out).

:func:`decode_volume` is the reverse in three loops: the planes to residuals, the predictor's reconstruction
(the same interpolation walk, writing codes), and ``2 e q`` in the output's dtype.

Every operation is the torch path's, in the same order, in fp64 or int64 (no fast-math: LLVM does not fuse
the multiply-adds), so the sections are the same bytes (``tests/ext/foresight/test_planes_kernels.py``
compares them on awkward shapes, both dtypes, NaN, inf and huge values).  Without numba the torch path runs.
"""

from __future__ import annotations

import numpy as np

from torchhpc.ext.core.dispatch import numba_available

if numba_available():
    from numba import njit

    @njit(cache=True)
    def _quantize(x, inv2e, twoe, e, limit, single, q, flags):
        """``q`` (int64) and the outlier ``flags`` (uint8) of the flat float ``x``; returns the outlier count."""
        count = 0
        for i in range(x.size):
            xv = np.float64(x[i])
            xf = xv * inv2e
            qf = np.floor(xf + 0.5) if abs(xf) < limit else 0.0
            q[i] = np.int64(qf)
            back = qf * twoe
            if single:
                back = np.float64(np.float32(back))
            bad = not (abs(back - xv) <= e)  # NaN-safe: a NaN error is an outlier
            flags[i] = bad
            count += bad
        return count

    @njit(cache=True)
    def _flagged(flags, count):
        """The ``count`` indices where ``flags`` is set, in order."""
        idx = np.empty(count, np.int64)
        k = 0
        if count:
            for i in range(flags.size):
                if flags[i]:
                    idx[k] = i
                    k += 1
        return idx

    @njit(cache=True)
    def _lorenzo(q, d):
        """The 3D Lorenzo residual (mixed finite difference, 0 outside the grid) of ``q`` into ``d``."""
        n0, n1, n2 = q.shape
        for i in range(n0):
            for j in range(n1):
                for k in range(n2):
                    v = q[i, j, k]
                    if k > 0:
                        v -= q[i, j, k - 1]
                    if j > 0:
                        v -= q[i, j - 1, k]
                        if k > 0:
                            v += q[i, j - 1, k - 1]
                    if i > 0:
                        v -= q[i - 1, j, k]
                        if k > 0:
                            v += q[i - 1, j, k - 1]
                        if j > 0:
                            v += q[i - 1, j - 1, k]
                            if k > 0:
                                v -= q[i - 1, j - 1, k - 1]
                    d[i, j, k] = v

    @njit(cache=True)
    def _interp(q, r, coarse, strides, axes, cubic, decode):
        """Multilevel interpolation over the volume ``q`` in the payload's order (that of
        :func:`torchhpc.ext.foresight.ops.interp_residuals`): the coarsest grid, then each (stride, axis) step's
        odd entries predicted from its even ones.  Encoding writes the residuals into the flat ``r``; decoding
        (``decode``) writes each code from its prediction and ``r`` (the step's even entries are known by then).
        Returns the residuals written or read."""
        n = q.shape
        flat = q.reshape(-1)
        elem = np.array([n[1] * n[2], n[2], 1], np.int64)  # elements per step along each axis
        pos = 0
        for i in range(0, n[0], coarse):
            for j in range(0, n[1], coarse):
                for k in range(0, n[2], coarse):
                    if decode:
                        q[i, j, k] = r[pos]
                    else:
                        r[pos] = q[i, j, k]
                    pos += 1
        step = np.empty(3, np.int64)
        size = np.empty(3, np.int64)
        jump = np.empty(3, np.int64)  # elements per view index along each axis (two entries along `axis`)
        for st in range(strides.size):
            s, axis = strides[st], axes[st]
            # the step's view: stride s on the axes up to `axis`, 2s after it; its odd entries along `axis`
            for ax in range(3):
                step[ax] = s if ax <= axis else 2 * s
                size[ax] = (n[ax] + step[ax] - 1) // step[ax]
            n_even = (size[axis] + 1) // 2
            m = size[axis] // 2
            hi = min(m, n_even - 2)
            size[axis] = m
            gap = step[axis] * elem[axis]  # elements from one entry of the view to the next along `axis`
            for ax in range(3):
                jump[ax] = step[ax] * elem[ax] if ax != axis else 2 * gap
            for b0 in range(size[0]):
                for b1 in range(size[1]):
                    base = b0 * jump[0] + b1 * jump[1]
                    for b2 in range(size[2]):
                        left_at = base + b2 * jump[2]  # the even entry 2t before the odd one
                        t = b0 if axis == 0 else (b1 if axis == 1 else b2)
                        left = flat[left_at]
                        right = flat[left_at + 2 * gap] if t + 1 < n_even else left
                        pred = (left + right + 1) >> 1
                        if cubic and m >= 3 and 1 <= t < hi:
                            pred = (-flat[left_at - 2 * gap] + 9 * left + 9 * right - flat[left_at + 4 * gap] + 8) >> 4
                        if decode:
                            flat[left_at + gap] = pred + r[pos]
                        else:
                            r[pos] = flat[left_at + gap] - pred
                        pos += 1
        return pos

    @njit(cache=True)
    def _top(d):
        """The largest zigzag code of ``d`` (int64): ``(v << 1) ^ (v >> 63)`` as unsigned."""
        top = np.uint64(0)
        for i in range(d.size):
            v = d[i]
            top = max(top, np.uint64((v << 1) ^ (v >> 63)))
        return top

    @njit(cache=True)
    def _planes(d, out):
        """Byte ``p`` of each zigzag code of ``d`` into row ``p`` of ``out`` (``(nplanes, n)`` uint8): one
        vectorised pass over ``d`` for up to three planes, else a plane at a time."""
        k = out.shape[0]
        if k <= 3:
            p0, p1, p2 = out[0], out[min(1, k - 1)], out[min(2, k - 1)]
            for i in range(d.size):
                v = d[i]
                u = np.uint64((v << 1) ^ (v >> 63))
                if k >= 3:  # (k is the same for every i: the compiler hoists these tests out of the loop)
                    p2[i] = np.uint8((u >> np.uint64(16)) & np.uint64(255))
                if k >= 2:
                    p1[i] = np.uint8((u >> np.uint64(8)) & np.uint64(255))
                p0[i] = np.uint8(u & np.uint64(255))
            return
        for p in range(k):
            shift = np.uint64(8 * p)
            row = out[p]
            for i in range(d.size):
                v = d[i]
                row[i] = np.uint8((np.uint64((v << 1) ^ (v >> 63)) >> shift) & np.uint64(255))


    @njit(cache=True)
    def _unplanes(planes, d):
        """Inverse of :func:`_planes`: the int64 residuals ``d`` from the ``(nplanes, n)`` uint8 planes (fewer
        than eight: the zigzag codes fit int64). One vectorised pass for up to three planes (nearly every
        field: 15 / 16 / 17 ms at 256^3 where a pass per plane and one for the zigzag took 25 / 38 / 51)."""
        n = d.size
        k = planes.shape[0]
        if k == 1:
            p0 = planes[0]
            for i in range(n):
                u = np.int64(p0[i])
                d[i] = (u >> 1) ^ -(u & 1)
        elif k == 2:
            p0, p1 = planes[0], planes[1]
            for i in range(n):
                u = np.int64(p0[i]) | (np.int64(p1[i]) << 8)
                d[i] = (u >> 1) ^ -(u & 1)
        elif k == 3:
            p0, p1, p2 = planes[0], planes[1], planes[2]
            for i in range(n):
                u = np.int64(p0[i]) | (np.int64(p1[i]) << 8) | (np.int64(p2[i]) << 16)
                d[i] = (u >> 1) ^ -(u & 1)
        else:
            for i in range(n):
                d[i] = np.int64(planes[0, i])
            for p in range(1, k):  # a plane at a time: each a vectorised pass
                row = planes[p]
                for i in range(n):
                    d[i] |= np.int64(row[i]) << (8 * p)
            for i in range(n):
                u = d[i]
                d[i] = (u >> 1) ^ -(u & 1)

    @njit(cache=True)
    def _unlorenzo(q):
        """Inverse of :func:`_lorenzo` in place: integer prefix sums along the three axes."""
        n0, n1, n2 = q.shape
        for i in range(n0):
            for j in range(n1):
                for k in range(1, n2):
                    q[i, j, k] += q[i, j, k - 1]
        for i in range(n0):
            for j in range(1, n1):
                for k in range(n2):
                    q[i, j, k] += q[i, j - 1, k]
        for i in range(1, n0):
            for j in range(n1):
                for k in range(n2):
                    q[i, j, k] += q[i - 1, j, k]

    @njit(cache=True)
    def _dequantize(q, twoe, out):
        """``out = 2 e q`` in fp64, stored in ``out``'s dtype (the torch path's product and cast)."""
        for i in range(q.size):
            out[i] = np.float64(q[i]) * twoe


QUANT_LIMIT = float(2**40)

_LOADED = []


def loaded() -> bool:
    """Whether a kernel of this module has run in this process (numba and its compiled code are loaded)."""
    return bool(_LOADED)


def _ran() -> None:
    if not _LOADED:
        _LOADED.append(True)


def quantize(x: np.ndarray, eb: float) -> tuple[np.ndarray, np.ndarray]:
    """``(q, outlier indices)`` of the flat float32/float64 ``x`` for the absolute bound ``eb``: the codes of
    :func:`torchhpc.triton_kernels.foresight.quantize_torch` and the values whose decoded ``2 e q`` (in ``x``'s
    dtype) is off the bound, NaN and inf included."""
    q = np.empty(x.size, np.int64)
    flags = np.empty(x.size, np.uint8)
    count = _quantize(x, 1.0 / (2.0 * eb), 2.0 * eb, float(eb), QUANT_LIMIT, x.dtype == np.float32, q, flags)
    _ran()
    return q, _flagged(flags, count)


def lorenzo_residuals(q: np.ndarray) -> np.ndarray:
    """The flat 3D Lorenzo residuals of the int64 volume ``q``."""
    d = np.empty_like(q)
    _lorenzo(q, d)
    return d.reshape(-1)


def interp_residuals(q: np.ndarray, coarse: int, steps: list[tuple[int, int]], cubic: bool) -> np.ndarray:
    """The flat multilevel interpolation residuals of the int64 volume ``q`` for the plan ``(coarse, steps)`` of
    :func:`torchhpc.ext.foresight.ops._interp_plan`."""
    out = np.empty(q.size, np.int64)
    strides = np.array([s for s, _ in steps], np.int64)
    axes = np.array([a for _, a in steps], np.int64)
    written = _interp(q, out, coarse, strides, axes, cubic, False)
    if written != q.size:
        raise AssertionError(f"interpolation wrote {written} residuals for {q.size} values")
    return out


def byte_planes(d: np.ndarray) -> np.ndarray:
    """``(nplanes, n)`` uint8: the zigzag codes of ``d`` split into as many little-endian byte planes as the
    largest needs (at least one)."""
    top = int(_top(d)) if d.size else 0
    nplanes = max(1, (top.bit_length() + 7) // 8)
    out = np.empty((nplanes, d.size), np.uint8)
    _planes(d, out)
    return out


def decode_volume(planes: np.ndarray, vol: tuple[int, int, int], predictor: str, eb: float, dtype: np.dtype,
                  plan: tuple[int, list[tuple[int, int]]] | None = None) -> np.ndarray:
    """The flat decoded values (``dtype``, before the outliers are put back) of a volume from its byte planes:
    the residuals, the codes by ``predictor`` (``lorenzo``; ``interp`` or ``cubic`` with their ``plan``, the
    ``(coarse, steps)`` of :func:`torchhpc.ext.foresight.ops._interp_plan`), then ``2 e q``."""
    n = int(np.prod(vol))
    r = np.empty(n, np.int64)
    _unplanes(planes, r)
    _ran()
    if predictor == "lorenzo":
        q = r.reshape(vol)
        _unlorenzo(q)
    else:
        coarse, steps = plan
        q = np.empty(vol, np.int64)
        read = _interp(q, r, coarse, np.array([s for s, _ in steps], np.int64),
                       np.array([a for _, a in steps], np.int64), predictor == "cubic", True)
        if read != n:
            raise AssertionError(f"interpolation read {read} residuals for {n} values")
    out = np.empty(n, dtype)
    _dequantize(q.reshape(-1), 2.0 * eb, out)
    return out


__all__ = ["byte_planes", "decode_volume", "interp_residuals", "lorenzo_residuals", "quantize"]
