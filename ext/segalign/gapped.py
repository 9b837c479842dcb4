"""Native gapped extension: Y-drop affine-gap DP from HSP anchors, vectorised across extensions.

From each anchor ``(ta, qa)`` one extension runs forward (cells ``t >= ta, q >= qa``)
and one backward (``t < ta, q < qa``, on the reversed walk); both are the same
dynamic programme and run together as rows of one batch.  With offsets ``I, J``
from the extension's origin (``I = J = 0``: nothing consumed) and Gotoh's states::

    E(I,J) = max(H(I,J-1) - open - ext, E(I,J-1) - ext)     gap in the target row
    F(I,J) = max(H(I-1,J) - open - ext, F(I-1,J) - ext)     gap in the query row
    H(I,J) = max(H(I-1,J-1) + s(t[I-1], q[J-1]), E(I,J), F(I,J))

the cells are swept by anti-diagonals ``D = I + J`` inside a band of ``W`` cells
(``I in [lo_D, lo_D + W)``) that moves one step towards the best cell of the
previous anti-diagonal (an adaptive band), so a step is a handful of ``(B, W)``
array operations.  LASTZ's Y-drop: a cell scoring more than ``ydrop`` below the best
score seen is dead; an extension ends when two consecutive anti-diagonals are
dead.  Each cell keeps 4 traceback bits (H's source, whether E / F extended);
the traceback is vectorised too, one move of every extension per step.

Anchors (the middle of each HSP) are processed one after the other, best HSP first, as
LASTZ does: an anchor lying on an alignment already found is skipped, and the path of
every alignment found is a wall for later extensions (:class:`Walls`: every cell the
path passes through, gap cells included, so a later extension can neither share a
cell with it nor cross it), so a repeat gives its own block instead of running into
the main one and no two blocks share an aligned pair; alignments scoring under
``gappedthresh`` are dropped.  Anchors are extended in batches (side by side on
``--threads``) speculatively: each extension reports the cells it computed, and one
whose computed cells meet a wall added by an earlier anchor of its batch is extended
again, so the alignments are those of the one-by-one order whatever the batch size.
"""

from __future__ import annotations

import numpy as np
import torch

from torchhpc.ext.core.errors import InputError

from .fasta import SEPARATOR, SequenceSet
from .ops import HSPs
from .output import Alignment

NEG = -(1 << 29)

NUMPY_MAX_BATCH = 256
"""Largest batch of anchors of the NumPy kernel (a step of the batch costs about the same for 1 or 256)."""

NUMBA_BATCH_PER_THREAD = 1
"""Anchors of the numba kernel's batches per thread (its extensions run side by side on ``--threads``)."""


class Walls:
    """The cells of the alignments found so far, as target intervals per query base.

    ``lo[q, k] <= t <= hi[q, k]`` (``k < count[q]``; ``-1`` past the last) marks the cells
    ``(t, q)`` the ``k``-th alignment through query base ``q`` passes: its aligned pair, or
    for a gap the cells ``(last target consumed, last query consumed)`` of each column, so
    the path is a connected chain of cells that a later extension cannot cross.  The number
    of slots per base grows as repeats stack alignments on one query base.
    """

    def __init__(self, n_q: int):
        self.lo = np.full((n_q, 1), -1, dtype=np.int32)
        self.hi = np.full((n_q, 1), -1, dtype=np.int32)
        self.count = np.zeros(n_q, dtype=np.int32)

    @classmethod
    def from_cover(cls, cover: np.ndarray) -> Walls:
        """One aligned cell ``(cover[q], q)`` per query base (``-1``: none)."""
        w = cls(cover.size)
        w.lo[:, 0] = w.hi[:, 0] = cover
        w.count[:] = cover >= 0
        return w

    def on(self, t: int, q: int) -> bool:
        """Whether cell ``(t, q)`` lies on an alignment found before."""
        k = int(self.count[q])
        lo, hi = self.lo[q, :k], self.hi[q, :k]
        return bool(((lo <= t) & (t <= hi)).any())

    @staticmethod
    def cells(tpos: np.ndarray, qpos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The cells of an alignment's columns (``-1``: gap): the last target and query base consumed."""
        ct = np.maximum.accumulate(tpos)
        cq = np.maximum.accumulate(qpos)
        keep = (ct >= 0) & (cq >= 0)
        return ct[keep], cq[keep]

    def add(self, tpos: np.ndarray, qpos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Add an alignment's path (columns, ``-1`` on the gapped side); returns its cells."""
        ct, cq = self.cells(tpos, qpos)
        if not cq.size:
            return ct, cq
        # cq is nondecreasing: one interval per query base, from its first cell to its last
        first = np.flatnonzero(np.r_[True, cq[1:] != cq[:-1]])
        last = np.r_[first[1:] - 1, cq.size - 1]
        uq = cq[first]
        slot = self.count[uq]
        if slot.max() >= self.lo.shape[1]:
            k = self.lo.shape[1]
            grow = np.full((self.lo.shape[0], k), -1, dtype=np.int32)
            self.lo = np.concatenate([self.lo, grow], axis=1)
            self.hi = np.concatenate([self.hi, grow.copy()], axis=1)
        self.lo[uq, slot] = ct[first]
        self.hi[uq, slot] = ct[last]
        self.count[uq] += 1
        return ct, cq


def ydrop_extend(
    t_codes: np.ndarray, q_codes: np.ndarray, t0: np.ndarray, q0: np.ndarray, dirs: np.ndarray,
    table: np.ndarray, gap_open: int, gap_extend: int, ydrop: int, band: int = 128,
    cover: np.ndarray | Walls | None = None, boxes: bool = False,
) -> tuple:
    """Y-drop gapped extensions from ``(t0, q0)`` in directions ``dirs`` (+1 / -1), all ``(B,)``.

    Extension ``b`` aligns ``t[t0 + d*i]`` with ``q[q0 + d*j]`` (i, j >= 0, d = ``dirs[b]``): the
    first cell is ``(t0, q0)`` either way.  NumPy arrays: one DP step is a few
    ``(B, W)`` operations, so the per-operation overhead decides the speed, and NumPy's is
    several times smaller than torch's on the CPU (SegAlign, too, runs this stage on the CPU).

    ``cover`` (optional): the cells of alignments found before, a :class:`Walls` or a
    ``(len(q_codes),)`` array of the target position each query base is aligned to (-1: none);
    those cells are walls, so an extension cannot run along or across an alignment found
    before (LASTZ, too, keeps alignments from crossing earlier ones).

    Returns:
        ``best (B,)`` int64 scores (0: empty extension) and, per extension, the path as
        two int64 arrays of the same length: target and query offsets ``i``/``j`` of each
        column from the origin outwards, ``-1`` on the gapped side; with ``boxes``, also a
        ``(B, 4)`` int64 array: the smallest and largest target and query positions of the
        cells the extension computed (only walls inside that box can change its result).
    """
    B, W = t0.size, band
    oe, e = gap_open + gap_extend, gap_extend
    p = np.arange(W)
    flat = np.asarray(table, dtype=np.int32).reshape(-1)
    # separators around both arrays (W + 2 each side): band cells past an end read a wall
    pad = W + 2
    t11 = np.pad(t_codes.astype(np.int32) * 11, pad, constant_values=SEPARATOR * 11)
    qc32 = np.pad(q_codes.astype(np.int32), pad, constant_values=SEPARATOR)
    tmax, qmax = t11.size - 1, qc32.size - 1
    # walls in padded coordinates (-1 stays -1: no padded index is negative)
    if isinstance(cover, np.ndarray):
        cover = Walls.from_cover(cover)
    cov_lo = cov_hi = None
    if cover is not None:
        cov_lo = np.pad(np.where(cover.lo >= 0, cover.lo + pad, -1), ((pad, pad), (0, 0)), constant_values=-1)
        cov_hi = np.pad(np.where(cover.hi >= 0, cover.hi + pad, -1), ((pad, pad), (0, 0)), constant_values=-1)
    box = np.empty((B, 4), dtype=np.int64)
    box[:, 0] = box[:, 2] = np.iinfo(np.int64).max
    box[:, 1] = box[:, 3] = np.iinfo(np.int64).min

    # per active extension (rows leave as they finish, so a step costs what is still alive)
    ids = np.arange(B)
    ta = t0.astype(np.int64) + pad
    qa = q0.astype(np.int64) + pad
    da = dirs.astype(np.int64)
    dp = da[:, None] * p[None, :]

    # padded (A, W + 2) buffers: column 0 and W + 1 stay NEG so shifted reads need no bounds checks
    def padded(n):
        return np.full((n, W + 2), NEG, dtype=np.int32)

    H1, E1, F1, H2 = padded(B), padded(B), padded(B), padded(B)
    H1[:, 1] = 0  # anti-diagonal 0: the origin
    lo1 = np.zeros(B, dtype=np.int64)
    lo2 = lo1.copy()
    a_best = np.zeros(B, dtype=np.int32)
    a_bd = np.zeros(B, dtype=np.int64)
    a_bp = np.zeros(B, dtype=np.int64)
    best = np.zeros(B, dtype=np.int64)
    best_d = np.zeros(B, dtype=np.int64)
    best_p = np.zeros(B, dtype=np.int64)
    # traceback store: one row per (step, active extension), keyed step * B + id (ascending)
    keys = [ids.copy()]
    tbs = [np.zeros((B, W), dtype=np.uint8)]
    los = [lo1.copy()]
    D = 0
    while ids.size:
        D += 1
        n = ids.size
        rows = np.arange(n)
        # move the band towards the previous anti-diagonal's best cell (shift 0 or 1 in I)
        shift = H1[:, 1:-1].argmax(1) > W // 2
        lo = lo1 + shift
        s2 = lo - lo2
        sh = shift[:, None]
        # neighbours by shifted slices of the padded buffers: (I, J-1), (I-1, J) on D-1; (I-1, J-1) on D-2
        up = np.where(sh, H1[:, 2:], H1[:, 1:-1])
        left = np.where(sh, H1[:, 1:-1], H1[:, :-2])
        upE = np.where(sh, E1[:, 2:], E1[:, 1:-1])
        leftF = np.where(sh, F1[:, 1:-1], F1[:, :-2])
        s2c = s2[:, None]
        diag = np.where(s2c == 0, H2[:, :-2], np.where(s2c == 1, H2[:, 1:-1], H2[:, 2:]))
        # codes of the band's cells: I = lo + p consumes t[I-1], J = D - I consumes q[J-1]
        tidx = np.minimum(np.maximum((ta + da * (lo - 1))[:, None] + dp, 0), tmax)
        qidx = np.minimum(np.maximum((qa + da * (D - lo - 1))[:, None] - dp, 0), qmax)
        tc, qc = t11[tidx], qc32[qidx]
        s = flat[tc + qc]
        e_open, e_ext = up - oe, upE - e
        f_open, f_ext = left - oe, leftF - e
        E = np.maximum(e_open, e_ext)
        F = np.maximum(f_open, f_ext)
        Hd = diag + s
        EF = np.maximum(E, F)
        H = np.maximum(Hd, EF)
        tb = np.where(Hd >= EF, 0, np.where(E >= F, 1, 2)).astype(np.uint8)
        tb |= (e_ext > e_open).astype(np.uint8) << 2
        tb |= (f_ext > f_open).astype(np.uint8) << 3
        Jm = (D - lo)[:, None] - p[None, :]
        # a cell consumes t[I-1] when I >= 1 and q[J-1] when J >= 1: a wall there (or J < 0) kills it
        i_pos = ~((lo == 0)[:, None] & (p[None, :] == 0))
        invalid = (Jm < 0) | (i_pos & (tc == SEPARATOR * 11)) | ((Jm >= 1) & (qc == SEPARATOR))
        if cov_lo is not None:
            lo_k, hi_k = cov_lo[qidx], cov_hi[qidx]
            tk = tidx[:, :, None]
            wall = ((lo_k >= 0) & (lo_k <= tk) & (tk <= hi_k)).any(2)
            invalid |= i_pos & (Jm >= 1) & wall
        box[ids, 0] = np.minimum(box[ids, 0], tidx.min(1) - pad)
        box[ids, 1] = np.maximum(box[ids, 1], tidx.max(1) - pad)
        box[ids, 2] = np.minimum(box[ids, 2], qidx.min(1) - pad)
        box[ids, 3] = np.maximum(box[ids, 3], qidx.max(1) - pad)
        np.putmask(H, invalid, NEG)
        arg = H.argmax(1)
        top = H[rows, arg]
        better = top > a_best
        a_best = np.where(better, top, a_best)
        a_bd = np.where(better, D, a_bd)
        a_bp = np.where(better, arg, a_bp)
        cut = (a_best - ydrop)[:, None]
        np.putmask(H, H < cut, NEG)
        np.putmask(E, invalid | (E < cut), NEG)
        np.putmask(F, invalid | (F < cut), NEG)
        keys.append(D * B + ids)
        tbs.append(tb)
        los.append(lo)
        # Y-drop end: this anti-diagonal and the previous one are dead
        alive = (np.maximum(np.maximum(H, E), F).max(1) > NEG) | (H1.max(1) > NEG)
        H2, lo2 = H1, lo1
        H1, E1, F1 = padded(n), padded(n), padded(n)
        H1[:, 1:-1], E1[:, 1:-1], F1[:, 1:-1] = H, E, F
        lo1 = lo
        if not alive.all():
            done = ~alive
            best[ids[done]], best_d[ids[done]], best_p[ids[done]] = a_best[done], a_bd[done], a_bp[done]
            ids, ta, qa, da, dp = ids[alive], ta[alive], qa[alive], da[alive], dp[alive]
            H1, E1, F1, H2 = H1[alive], E1[alive], F1[alive], H2[alive]
            lo1, lo2, a_best, a_bd, a_bp = lo1[alive], lo2[alive], a_best[alive], a_bd[alive], a_bp[alive]
    empty = [np.zeros(0, np.int64) for _ in range(B)]
    if not (best_d > 0).any():
        return (best, empty, list(empty), box) if boxes else (best, empty, list(empty))
    key_all = np.concatenate(keys)
    tb_all = np.concatenate(tbs)  # (rows stored, W)
    lo_all = np.concatenate(los)
    rows = np.arange(B)

    # ---- traceback: one move of every extension per step
    d = best_d.copy()
    I = lo_all[np.searchsorted(key_all, d * B + rows)] + best_p
    J = d - I
    state = np.zeros(B, dtype=np.int64)  # 0 H, 1 E, 2 F
    cols_t, cols_q, cols_b = [], [], []
    going = np.flatnonzero(d > 0)
    while going.size:
        b = going
        dd, ii, jj, st = d[b], I[b], J[b], state[b]
        at = np.searchsorted(key_all, dd * B + b)
        code = tb_all[at, ii - lo_all[at]].astype(np.int64)
        hsrc = code & 3
        st = np.where((st == 0) & (hsrc != 0), hsrc, st)  # an H cell from E/F: switch state in place
        is_m, is_e, is_f = st == 0, st == 1, st == 2
        # emit the column: match (I-1, J-1); E: (gap, J-1); F: (I-1, gap)
        cols_b.append(b)
        cols_t.append(np.where(is_e, -1, ii - 1))
        cols_q.append(np.where(is_f, -1, jj - 1))
        ni = np.where(is_e, ii, ii - 1)
        nj = np.where(is_f, jj, jj - 1)
        ext = np.where(is_e, (code >> 2) & 1, np.where(is_f, (code >> 3) & 1, 0))
        I[b], J[b], d[b] = ni, nj, ni + nj
        state[b] = np.where(is_m, 0, np.where(ext == 1, st, 0))
        going = b[d[b] > 0]
    cb, ct, cq = np.concatenate(cols_b), np.concatenate(cols_t), np.concatenate(cols_q)
    order = np.argsort(cb, kind="stable")
    cb, ct, cq = cb[order], ct[order], cq[order]
    bounds = np.searchsorted(cb, np.arange(B + 1))
    paths_t = [ct[bounds[k]:bounds[k + 1]][::-1].copy() for k in range(B)]
    paths_q = [cq[bounds[k]:bounds[k + 1]][::-1].copy() for k in range(B)]
    return (best, paths_t, paths_q, box) if boxes else (best, paths_t, paths_q)


def gapped_kernel(gapped_by: str) -> str:
    """The kernel ``--gapped-by`` runs: ``numba`` for auto/native/numba where numba is installed, else ``numpy``.

    Raises:
        InputError: ``numba`` asked for where numba is not installed.
    """
    from .cpu_kernels import numba_available

    if gapped_by == "numpy":
        return "numpy"
    if numba_available():
        return "numba"
    if gapped_by == "numba":
        raise InputError("--gapped-by numba needs numba (pip install numba); --gapped-by auto runs the NumPy version")
    return "numpy"


def hsp_anchors(h: HSPs) -> tuple[torch.Tensor, torch.Tensor]:
    """The anchor of each HSP: its middle cell ``(t, q)`` (concatenated coordinates)."""
    half = h.length // 2
    return h.t_start + half, h.q_start + half


def _alignment_text(target: SequenceSet, query: SequenceSet, tpos: np.ndarray, qpos: np.ndarray) -> tuple[str, str]:
    tl = np.where(tpos >= 0, target.letters[np.maximum(tpos, 0)], ord("-")).astype(np.uint8)
    ql = np.where(qpos >= 0, query.letters[np.maximum(qpos, 0)], ord("-")).astype(np.uint8)
    return tl.tobytes().decode(), ql.tobytes().decode()


def gapped_alignments(h: HSPs, target: SequenceSet, query: SequenceSet, cfg, band: int = 128,
                      first_batch: int = 1, max_batch: int | None = None, kernel: str = "numpy",
                      threads: int = 1) -> list[Alignment]:
    """Gapped alignments of one strand's HSPs (see the module docstring); ``query`` is that strand's set.

    ``kernel``: ``numpy`` (:func:`ydrop_extend`, every extension of a batch in lock step) or ``numba``
    (:func:`.gapped_kernels.ydrop_extend_numba`, the same cells compiled, ``threads`` extensions of a
    batch side by side).  The result is that of extending the anchors one by one, best HSP first (an
    extension whose computed cells meet a wall added within its batch is run again), so it depends on
    neither the kernel nor the batches nor ``threads``.  Batches double from ``first_batch`` up to
    ``max_batch`` (default: 256 for numpy, whose cost is per step of a batch; ``threads`` for numba,
    whose cost is per extension).
    """
    if max_batch is None:
        max_batch = NUMBA_BATCH_PER_THREAD * max(threads, 1) if kernel == "numba" else NUMPY_MAX_BATCH
    first_batch = min(first_batch, max_batch)
    if len(h) == 0:
        return []
    sc = cfg.scoring_scheme()
    table = sc.table(cfg.xdrop).numpy()
    thresh = cfg.gappedthresh or cfg.hspthresh
    t_codes, q_codes = target.codes.cpu().numpy(), query.codes.cpu().numpy()
    order = torch.argsort(h.score, descending=True, stable=True)
    at, aq = hsp_anchors(h)
    at, aq = at[order].cpu().numpy(), aq[order].cpu().numpy()
    walls = Walls(q_codes.size)
    results: list[tuple[int, np.ndarray, np.ndarray]] = []
    pos, batch, n = 0, first_batch, at.size
    if kernel == "numba":
        from .gapped_kernels import ydrop_extend_numba

        def extend(*args):
            return ydrop_extend_numba(*args, boxes=True, threads=threads)
    else:
        def extend(*args):
            return ydrop_extend(*args, boxes=True)

    def both_ways(ts, qs):
        k = ts.size
        dirs = np.concatenate([np.ones(k, np.int64), -np.ones(k, np.int64)])
        best, pt, pq, box = extend(t_codes, q_codes, np.concatenate([ts, ts - 1]), np.concatenate([qs, qs - 1]),
                                   dirs, table, sc.gap_open, sc.gap_extend, cfg.ydrop, band, walls)
        return [(int(best[m] + best[k + m]), pt[m], pq[m], pt[k + m], pq[k + m], box[[m, k + m]])
                for m in range(k)]

    while pos < n:
        # the next `batch` anchors not lying on an alignment already found (LASTZ skips those too)
        picked = []
        while pos < n and len(picked) < batch:
            if not walls.on(int(at[pos]), int(aq[pos])):
                picked.append(pos)
            pos += 1
        if not picked:
            break
        bt, bq = at[picked], aq[picked]
        ext = both_ways(bt, bq)
        added: list[tuple[np.ndarray, np.ndarray]] = []  # cells of the alignments found in this batch
        for m in range(len(picked)):
            ta, qa = int(bt[m]), int(bq[m])
            if m and walls.on(ta, qa):
                continue
            box = ext[m][5]
            if any(((ct >= bx[0]) & (ct <= bx[1]) & (cq >= bx[2]) & (cq <= bx[3])).any()
                   for ct, cq in added for bx in box):
                ext[m] = both_ways(bt[m:m + 1], bq[m:m + 1])[0]  # a wall of this batch in its way: again
            score, ft, fq, rt, rq, _ = ext[m]
            if score < thresh:
                continue
            rt, rq = rt[::-1], rq[::-1]
            tpos = np.concatenate([np.where(rt >= 0, ta - 1 - rt, -1), np.where(ft >= 0, ta + ft, -1)])
            qpos = np.concatenate([np.where(rq >= 0, qa - 1 - rq, -1), np.where(fq >= 0, qa + fq, -1)])
            added.append(walls.add(tpos, qpos))
            results.append((score, tpos, qpos))
        batch = min(batch * 2, max_batch)
    out = []
    for score, tpos, qpos in sorted(results, key=lambda r: -r[0]):
        t_first = int(tpos[tpos >= 0].min())
        t_last = int(tpos.max())
        q_first = int(qpos[qpos >= 0].min())
        q_last = int(qpos.max())
        tr = int(target.record_of(torch.tensor([t_first]))[0])
        qr = int(query.record_of(torch.tensor([q_first]))[0])
        tt, qt = _alignment_text(target, query, tpos, qpos)
        t_off, q_off = int(target.starts[tr]), int(query.starts[qr])
        out.append(Alignment(target.names[tr], int(target.lengths[tr]), t_first - t_off, t_last + 1 - t_off,
                             query.names[qr], int(query.lengths[qr]), q_first - q_off, q_last + 1 - q_off,
                             h.strand, score, tt, qt))
    # LASTZ's order: by target position (records in file order), then query
    order_keys = {id(a): (target.names.index(a.t_name), a.t_start, a.q_start) for a in out}
    out.sort(key=lambda a: order_keys[id(a)])
    return out
