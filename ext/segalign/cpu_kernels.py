"""Compiled CPU kernels of the ungapped filter (numba), beside the torch twin of :mod:`.ops`.

On a GPU the X-drop filter is the Triton kernel; on the CPU the vectorised torch twin
pays a dozen full tensor passes per tile of cells, several times LASTZ's cost per cell.
These kernels do the same arithmetic one cell at a time in machine code:

* :func:`xdrop_extend_numba` — the op of :func:`.ops.xdrop_extend` (one direction,
  many diagonals), result-identical to :func:`.ops.xdrop_extend_torch`;
* :func:`ungapped_scan_numba` — the whole diagonal bookkeeping of :func:`.ops.ungapped_hsps`
  in one pass: hits are visited in query order, a hit whose word ends inside the part
  of its diagonal that an earlier extension scanned is skipped (LASTZ's diagonal
  table), every other hit is extended both ways.  Threads split the diagonals
  (``diagonal % threads``), so no two threads touch the same diagonal and the result
  is the same for any thread count.  It extends exactly the hits the torch path
  extends in its rounds (per diagonal, the leftmost hit not yet scanned).

numba is optional (``pip install torchhpc[align]``); :func:`numba_available` tells.
"""

from __future__ import annotations

import numpy as np
import torch

try:  # pragma: no cover - exercised where numba is installed (make setup installs it)
    import numba
    from numba import njit, prange

    _HAVE_NUMBA = True
except ImportError:  # pragma: no cover
    _HAVE_NUMBA = False


def numba_available() -> bool:
    return _HAVE_NUMBA


if _HAVE_NUMBA:

    @njit(nogil=True, cache=True, inline="always")
    def _extend(t, q, ti, qi, step, table, xdrop):
        # running score; best = highest running score reached (>= 0); stop at the first cell
        # that falls more than xdrop below it.  The separator scores a wall, so a walk never
        # leaves its record (both arrays start and end with one).
        run = 0
        best = 0
        length = 0
        k = 0
        while True:
            run += table[t[ti] * 11 + q[qi]]
            k += 1
            if run > best:
                best = run
                length = k
            elif run < best - xdrop:
                return best, length, k
            ti += step
            qi += step

    @njit(nogil=True, cache=True, parallel=True)
    def _extend_many(t, q, t_first, q_first, step, table, xdrop, best, length, scanned):
        for i in prange(t_first.shape[0]):
            b, ln, sc = _extend(t, q, t_first[i], q_first[i], step, table, xdrop)
            best[i] = b
            length[i] = ln
            scanned[i] = sc

    @njit(nogil=True, cache=True, parallel=True)
    def _scan(t, q, t_end, q_end, table, xdrop, diag_min, n_diag, parts, ts, ln, sc, extended):
        reach = np.full(n_diag, -1, dtype=np.int64)
        for p in prange(parts):
            for i in range(t_end.shape[0]):
                d = t_end[i] - q_end[i] - diag_min
                if d % parts != p or q_end[i] <= reach[d]:
                    continue
                lb, ll, _ = _extend(t, q, t_end[i] - 1, q_end[i] - 1, -1, table, xdrop)
                rb, rl, rs = _extend(t, q, t_end[i], q_end[i], 1, table, xdrop)
                ts[i] = t_end[i] - ll
                ln[i] = ll + rl
                sc[i] = lb + rb
                extended[i] = True
                reach[d] = q_end[i] + rs


def _np(x: torch.Tensor, dtype) -> np.ndarray:
    return x.detach().to("cpu", dtype).contiguous().numpy()


def _threads() -> int:
    n = max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(n)
    return n


def xdrop_extend_numba(t_codes, q_codes, t_first, q_first, direction, table, xdrop):
    """Same contract and results as :func:`.ops.xdrop_extend_torch` (CPU tensors)."""
    H = t_first.numel()
    best = np.zeros(H, np.int64)
    length = np.zeros(H, np.int64)
    scanned = np.zeros(H, np.int64)
    if H:
        _threads()
        _extend_many(_np(t_codes, torch.uint8), _np(q_codes, torch.uint8), _np(t_first, torch.int64),
                     _np(q_first, torch.int64), int(direction), _np(table.reshape(-1), torch.int64), int(xdrop),
                     best, length, scanned)
    return torch.from_numpy(best), torch.from_numpy(length), torch.from_numpy(scanned)


def ungapped_scan_numba(t_codes, q_codes, t_end, q_end, table, xdrop):
    """Extend the hits LASTZ's diagonal table lets through: ``(t_start, q_start, length, score)``.

    ``t_end``/``q_end`` are the exclusive word ends of one batch of hits (any order; they
    are visited by query end, as LASTZ visits them).  Returns the raw HSPs (before the
    entropy adjustment and the score threshold) and the number extended.
    """
    te, qe = _np(t_end, torch.int64), _np(q_end, torch.int64)
    if qe.size > 1 and bool((qe[1:] < qe[:-1]).any()):
        order = np.argsort(qe, kind="stable")
        te, qe = te[order], qe[order]
    H = te.size
    diag = te - qe
    diag_min = int(diag.min())
    n_diag = int(diag.max()) - diag_min + 1
    ts = np.zeros(H, np.int64)
    ln = np.zeros(H, np.int64)
    sc = np.zeros(H, np.int64)
    ext = np.zeros(H, np.bool_)
    _scan(_np(t_codes, torch.uint8), _np(q_codes, torch.uint8), te, qe, _np(table.reshape(-1), torch.int64),
          int(xdrop), diag_min, n_diag, _threads(), ts, ln, sc, ext)
    ts, ln, sc = ts[ext], ln[ext], sc[ext]
    qs = ts - diag[ext]
    return torch.from_numpy(ts), torch.from_numpy(qs), torch.from_numpy(ln), torch.from_numpy(sc), int(ext.sum())
