"""Native gapped extension: Y-drop affine-gap DP from HSP anchors (the readable NumPy reference).

From each anchor ``(ta, qa)`` one extension runs forward (cells ``t >= ta, q >= qa``)
and one backward (``t < ta, q < qa``, on the reversed walk); both are the same
dynamic programme.  With offsets ``I, J``
from the extension's origin (``I = J = 0``: nothing consumed) and Gotoh's states::

    E(I,J) = max(H(I,J-1) - open - ext, E(I,J-1) - ext)     gap in the target row
    F(I,J) = max(H(I-1,J) - open - ext, F(I-1,J) - ext)     gap in the query row
    H(I,J) = max(H(I-1,J-1) + s(t[I-1], q[J-1]), E(I,J), F(I,J))

the cells are swept by anti-diagonals ``D = I + J``, as LASTZ's Y-drop sweeps rows: a cell
scoring more than ``ydrop`` below the best score seen (on earlier anti-diagonals and this one)
is dead, and each anti-diagonal computes only the cells with a live neighbour, i.e. the interval
from the first live cell of anti-diagonal ``D-1`` (or one past ``D-2``'s) to one past the last
live cell of ``D-1`` or ``D-2``, clipped at the sequence ends.  There is no band: the interval
grows and shrinks with the Y-drop alone, so an alignment can cross any gap whose cost the Y-drop
allows (a gap of k bases costs ``open + k * extend``: ~300 bases with LASTZ's defaults), and its
width is at most about ``2 * ydrop / gap_extend`` cells.  An extension ends when two consecutive
anti-diagonals are dead.  Each computed cell keeps 4 traceback bits (H's source, whether E / F
extended), stored for the computed interval of each anti-diagonal only (its first cell and its
bytes).

Anchors (the middle of each HSP's best-scoring 31-base window, LASTZ's choice) are processed one after the other, best HSP first, as
LASTZ does: an anchor lying on an alignment already found is skipped, and the path of
every alignment found is a wall for later extensions (:class:`Walls`: every cell the
path passes through, gap cells included, so a later extension can neither share a
cell with it nor cross it), so a repeat gives its own block instead of running into
the main one and no two blocks share an aligned pair; alignments scoring under
``gappedthresh`` are dropped.  With several threads the compiled extensions run ahead of that order
on a pool of workers and are committed in it (:func:`gapped_alignments`): one whose computed cells
meet an alignment committed after it started is extended again, so the alignments are those of the
one-by-one order whatever the threads.
"""

from __future__ import annotations

import itertools
from collections import deque
from concurrent.futures import Future

import numpy as np

from torchhpc.ext.core.dispatch import numba_available
from torchhpc.ext.core.errors import InputError

from .fasta import SEPARATOR, SequenceSet
from .ops import HSPs
from .output import Alignment
from .torch_numba import host
from .walls import Walls

NEG = -(1 << 29)


def _at(vals: np.ndarray, lo: int, I: np.ndarray) -> np.ndarray:
    """Values of a stored anti-diagonal (cells ``lo .. lo + len - 1``) at cells ``I``; NEG outside."""
    k = I - lo
    ok = (k >= 0) & (k < vals.size)
    out = np.full(I.size, NEG, dtype=np.int64)
    out[ok] = vals[k[ok]]
    return out


def _extend_one(t_codes, q_codes, t0, q0, d, flat, oe, e, ydrop, walls):
    """One Y-drop extension (see :func:`ydrop_extend`): the score, the path, the box of the computed cells."""
    n_t, n_q = t_codes.size, q_codes.size
    # cells (I, J) exist for I <= nI, J <= nJ (the bases left in direction d; past them: a sequence end)
    nI = max(n_t - t0 if d > 0 else t0 + 1, 0)
    nJ = max(n_q - q0 if d > 0 else q0 + 1, 0)
    empty = np.zeros(0, dtype=np.int64)
    # anti-diagonal D-1 (H, E, F) and D-2 (H): values of the cells lo .. lo + len - 1
    H1, E1, F1, lo1 = np.zeros(1, np.int64), np.full(1, NEG, np.int64), np.full(1, NEG, np.int64), 0
    H2, lo2 = empty, 0
    live1, live2 = (0, 0), (1, 0)  # live intervals [a, b] of D-1 and D-2 (a > b: none)
    best = best_d = best_i = 0
    tbs, los = [np.zeros(1, np.uint8)], [0]
    box = [np.iinfo(np.int64).max, np.iinfo(np.int64).min] * 2
    D = 0
    while live1[0] <= live1[1] or live2[0] <= live2[1]:
        D += 1
        # a cell needs a live neighbour: (I, J-1) or (I-1, J) on D-1, (I-1, J-1) on D-2
        starts = [r[0] + k for r, k in ((live1, 0), (live2, 1)) if r[0] <= r[1]]
        ends = [r[1] + 1 for r in (live1, live2) if r[0] <= r[1]]
        a = max(min(starts), D - nJ, 0)
        b = min(max(ends), D, nI)
        if a > b:  # nothing to compute (a sequence end): this anti-diagonal is dead
            H2, lo2, H1, E1, F1, lo1 = H1, lo1, empty, empty, empty, a
            live2, live1 = live1, (1, 0)
            tbs.append(np.zeros(0, np.uint8))
            los.append(a)
            continue
        I = np.arange(a, b + 1)
        J = D - I
        ut, uq = t0 + d * (I - 1), q0 + d * (J - 1)  # the bases a cell consumes (when I >= 1 / J >= 1)
        tc = np.where(I >= 1, t_codes[np.clip(ut, 0, max(n_t - 1, 0))], 0).astype(np.int64)
        qc = np.where(J >= 1, q_codes[np.clip(uq, 0, max(n_q - 1, 0))], 0).astype(np.int64)
        box = [min(box[0], ut[0], ut[-1]), max(box[1], ut[0], ut[-1]),
               min(box[2], uq[0], uq[-1]), max(box[3], uq[0], uq[-1])]
        up, up_e = _at(H1, lo1, I), _at(E1, lo1, I)  # (I, J-1)
        left, left_f = _at(H1, lo1, I - 1), _at(F1, lo1, I - 1)  # (I-1, J)
        diag = _at(H2, lo2, I - 1)  # (I-1, J-1)
        e_open, e_ext = up - oe, up_e - e
        f_open, f_ext = left - oe, left_f - e
        E, F = np.maximum(e_open, e_ext), np.maximum(f_open, f_ext)
        Hd = diag + flat[tc * 11 + qc]
        EF = np.maximum(E, F)
        H = np.maximum(Hd, EF)
        tb = np.where(Hd >= EF, 0, np.where(E >= F, 1, 2)).astype(np.uint8)
        tb |= (e_ext > e_open).astype(np.uint8) << 2
        tb |= (f_ext > f_open).astype(np.uint8) << 3
        # walls: a base that is a record separator, or a cell of an alignment found before
        invalid = (tc == SEPARATOR) | (qc == SEPARATOR)
        if walls is not None:
            inner = np.flatnonzero((I >= 1) & (J >= 1) & (walls.lo[np.clip(uq, 0, max(n_q - 1, 0)), 0] >= 0))
            if inner.size:
                wl, wh = walls.intervals(uq[inner])
                tk = ut[inner, None]
                invalid[inner] |= ((wl >= 0) & (wl <= tk) & (tk <= wh)).any(1)
        H[invalid], E[invalid], F[invalid] = NEG, NEG, NEG
        k = int(H.argmax())
        if H[k] > best:
            best, best_d, best_i = int(H[k]), D, a + k
        # Y-drop: a cell more than ydrop below the best score seen is dead
        cut = best - ydrop
        H[H < cut], E[E < cut], F[F < cut] = NEG, NEG, NEG
        alive = np.flatnonzero(H > NEG)
        H2, lo2, H1, E1, F1, lo1 = H1, lo1, H, E, F, a
        live2, live1 = live1, ((a + alive[0], a + alive[-1]) if alive.size else (1, 0))
        tbs.append(tb)
        los.append(a)
    if best_d == 0:
        return 0, empty, empty.copy(), box
    # traceback from the best cell to the origin (H state: the source; E / F: extend or open)
    cols_t, cols_q = [], []
    Ic, Jc, st = best_i, best_d - best_i, 0  # state 0 H, 1 E, 2 F
    while Ic + Jc > 0:
        code = int(tbs[Ic + Jc][Ic - los[Ic + Jc]])
        if st == 0 and code & 3:
            st = code & 3  # an H cell from E / F: switch state in place
        if st == 1:
            cols_t.append(-1)
            cols_q.append(Jc - 1)
            st = 1 if (code >> 2) & 1 else 0
            Jc -= 1
        elif st == 2:
            cols_t.append(Ic - 1)
            cols_q.append(-1)
            st = 2 if (code >> 3) & 1 else 0
            Ic -= 1
        else:
            cols_t.append(Ic - 1)
            cols_q.append(Jc - 1)
            Ic, Jc = Ic - 1, Jc - 1
    return best, np.array(cols_t[::-1], dtype=np.int64), np.array(cols_q[::-1], dtype=np.int64), box


def ydrop_extend(
    t_codes: np.ndarray, q_codes: np.ndarray, t0: np.ndarray, q0: np.ndarray, dirs: np.ndarray,
    table: np.ndarray, gap_open: int, gap_extend: int, ydrop: int,
    cover: np.ndarray | Walls | None = None, boxes: bool = False,
) -> tuple:
    """Y-drop gapped extensions from ``(t0, q0)`` in directions ``dirs`` (+1 / -1), all ``(B,)``.

    Extension ``b`` aligns ``t[t0 + d*i]`` with ``q[q0 + d*j]`` (i, j >= 0, d = ``dirs[b]``): the
    first cell is ``(t0, q0)`` either way.  The readable reference: one extension after the other,
    each anti-diagonal's live interval as a few NumPy array operations (see the module docstring).

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
    if isinstance(cover, np.ndarray):
        cover = Walls.from_cover(cover)
    flat = np.asarray(table, dtype=np.int64).reshape(-1)
    t_codes, q_codes = np.asarray(t_codes), np.asarray(q_codes)
    res = [_extend_one(t_codes, q_codes, int(a), int(b), int(d), flat, gap_open + gap_extend, gap_extend, ydrop,
                       cover) for a, b, d in zip(np.asarray(t0), np.asarray(q0), np.asarray(dirs), strict=True)]
    best = np.array([r[0] for r in res], dtype=np.int64)
    paths_t, paths_q = [r[1] for r in res], [r[2] for r in res]
    if boxes:
        return best, paths_t, paths_q, np.array([r[3] for r in res], dtype=np.int64).reshape(-1, 4)
    return best, paths_t, paths_q


def gapped_kernel(gapped_by: str, device=None) -> str:
    """The kernel ``--gapped-by`` runs: ``numba`` for auto/native/numba where numba is installed, else ``numpy``;
    ``triton`` only where asked for (on CUDA, or the CPU under ``TRITON_INTERPRET=1``; not yet measured on a GPU,
    so never the default).

    Raises:
        InputError: ``numba`` or ``triton`` asked for where it cannot run (the message says why).
    """
    if gapped_by == "numpy":
        return "numpy"
    if gapped_by == "triton":
        from torchhpc.ext.core.dispatch import resolve_backend

        try:
            resolve_backend("triton", device if device is not None else "cpu", what="--gapped-by")
        except InputError as exc:
            raise InputError(f"--gapped-by triton: {exc}") from None
        if not numba_available():
            raise InputError("--gapped-by triton walks its traceback with numba (pip install numba)")
        return "triton"
    if numba_available():
        return "numba"
    if gapped_by == "numba":
        raise InputError("--gapped-by numba needs numba (pip install numba); --gapped-by auto runs the NumPy version")
    return "numpy"


ANCHOR_WINDOW = 31
"""Bases of the window whose best-scoring position anchors an HSP (LASTZ's ``anchorPeakLen``)."""


def hsp_anchors(h: HSPs, t_codes: np.ndarray | None = None, q_codes: np.ndarray | None = None,
                table: np.ndarray | None = None, compiled: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The anchor cell ``(t, q)`` of each HSP (concatenated coordinates), as LASTZ picks it.

    With the codes and the score table: the middle of the HSP's first best-scoring window of
    :data:`ANCHOR_WINDOW` bases (an HSP no longer than that: its middle cell); without them, the
    middle cell of every HSP.  ``compiled``: one rolling sum per HSP in numba where installed
    (else, and with ``compiled=False``, the NumPy version below, its reference).
    """
    ts, qs, ln = host(h.t_start), host(h.q_start), host(h.length)
    peak = ln // 2
    long = np.flatnonzero(ln > ANCHOR_WINDOW)
    if table is not None and long.size and compiled and numba_available():
        from .gapped_kernels import anchor_peaks_numba

        anchor_peaks_numba(ts, qs, ln, t_codes, q_codes, table, ANCHOR_WINDOW, peak)
    elif table is not None and long.size:
        w = ANCHOR_WINDOW
        n = ln[long]
        seg = np.repeat(np.arange(long.size), n)
        k = np.arange(seg.size) - np.repeat(np.cumsum(n) - n, n)  # offset inside its HSP
        flat = np.asarray(table, dtype=np.int64).reshape(-1)
        sc = flat[t_codes[np.repeat(ts[long], n) + k].astype(np.int64) * 11 + q_codes[np.repeat(qs[long], n) + k]]
        csum = np.concatenate([[0], np.cumsum(sc)])
        first = np.cumsum(n) - n  # each HSP's first cell in the flat arrays
        nwin = n - w + 1
        wseg = np.repeat(np.arange(long.size), nwin)
        wk = np.arange(wseg.size) - np.repeat(np.cumsum(nwin) - nwin, nwin)  # window start inside its HSP
        wsum = csum[first[wseg] + wk + w] - csum[first[wseg] + wk]
        # first best window of each HSP: sort by (HSP, -sum, start) and take each HSP's first
        order = np.lexsort((wk, -wsum, wseg))
        starts = np.searchsorted(wseg[order], np.arange(long.size))
        peak[long] = wk[order][starts] + w // 2
    return ts + peak, qs + peak


def _alignment(target: SequenceSet, query: SequenceSet, tpos: np.ndarray, qpos: np.ndarray, strand: str,
               score: int) -> Alignment:
    """The alignment of columns ``tpos`` / ``qpos`` (``-1``: a gap), in its records' coordinates."""
    t_first, t_last = int(tpos[tpos >= 0].min()), int(tpos.max())
    q_first, q_last = int(qpos[qpos >= 0].min()), int(qpos.max())
    tr = int(np.searchsorted(host(target.starts), t_first, side="right")) - 1  # SequenceSet.record_of, one
    qr = int(np.searchsorted(host(query.starts), q_first, side="right")) - 1  # position (no tensor made)
    tt = np.where(tpos >= 0, target.letters[np.maximum(tpos, 0)], ord("-")).astype(np.uint8).tobytes().decode()
    qt = np.where(qpos >= 0, query.letters[np.maximum(qpos, 0)], ord("-")).astype(np.uint8).tobytes().decode()
    t_off, q_off = int(target.starts[tr]), int(query.starts[qr])
    return Alignment(target.names[tr], int(target.lengths[tr]), t_first - t_off, t_last + 1 - t_off,
                     query.names[qr], int(query.lengths[qr]), q_first - q_off, q_last + 1 - q_off,
                     strand, score, tt, qt)


LOOKAHEAD_PER_THREAD = 4
"""Anchors ahead of the commit point the compiled kernel's extensions may run on (per thread)."""

NEAR_DIAGONALS = 4096
"""An anchor within this many diagonals of an earlier uncommitted one waits for it: it most likely lies
on that anchor's alignment (a long one: the pair's backbone), where extending it would be wasted."""


def _meets(log: list, version: int, box: np.ndarray) -> bool:
    """Whether an alignment committed since ``version`` (``log[version:]``) has a cell inside ``box``'s rows."""
    for ct, cq, bb in log[version:]:
        for bx in box:
            if bb[0] > bx[1] or bb[1] < bx[0] or bb[2] > bx[3] or bb[3] < bx[2]:
                continue
            if ((ct >= bx[0]) & (ct <= bx[1]) & (cq >= bx[2]) & (cq <= bx[3])).any():
                return True
    return False


TRITON_LOOKAHEAD = 64
"""Anchors ahead of the commit point whose extensions the GPU kernel sweeps in one launch."""


def gapped_alignments(h: HSPs, target: SequenceSet, query: SequenceSet, cfg, kernel: str = "numpy",
                      threads: int = 1, pool=None, lookahead: int | None = None,
                      counters: dict | None = None, device=None) -> list[Alignment]:
    """Gapped alignments of one strand's HSPs (see the module docstring); ``query`` is that strand's set.

    ``kernel``: ``numpy`` (:func:`ydrop_extend`, the readable reference, one anchor after the other) or
    ``numba`` (:func:`.gapped_kernels.ydrop_extend_numba`, the same cells compiled).  With ``threads > 1``
    the compiled extensions run on a pool of worker threads (``pool``, shared with other strands; default:
    one made for the call) while this thread commits the results in anchor order: the anchors within
    ``lookahead`` (default :data:`LOOKAHEAD_PER_THREAD` per thread) of the commit point are extended
    ahead with the walls known when each started, except those near an earlier uncommitted anchor
    (:data:`NEAR_DIAGONALS`); at its turn an anchor now lying on an alignment is skipped, and one whose
    computed cells meet an alignment committed since it started is extended again.  No barrier: a long
    extension holds up only the commits behind it, never the other threads.  The result is that of
    extending the anchors one by one, best HSP first, so it depends on neither the kernel nor ``threads``.
    ``counters`` (optional dict): ``speculated``, ``redone`` and ``wasted`` (extended ahead, then skipped)
    are added to it.  ``kernel="triton"`` (:func:`.gapped_kernels.ydrop_extend_triton` on ``device``) extends
    the startable anchors of a window of :data:`TRITON_LOOKAHEAD` in one launch, under the same commit rule,
    launching when the next anchor to commit has not started (``counters["launches"]``).
    """
    if len(h) == 0:
        return []
    sc = cfg.scoring_scheme()
    table = sc.table(cfg.xdrop, None)
    thresh = cfg.gappedthresh or cfg.hspthresh
    t_codes, q_codes = host(target.codes), host(query.codes)
    order = np.argsort(-host(h.score), kind="stable")  # best first; ties in HSP order
    at, aq = hsp_anchors(h, t_codes, q_codes, table)
    at, aq = at[order], aq[order]
    diag = (at - aq).tolist()  # Python ints: the commit loop below reads them one at a time
    at_l, aq_l = at.tolist(), aq.tolist()
    walls = Walls(q_codes.size, t_codes.size)
    log: list[tuple[np.ndarray, np.ndarray, tuple[int, int, int, int]]] = []  # committed: cells, their box
    results: list[tuple[int, Alignment]] = []
    if kernel == "numba":
        from .gapped_kernels import ydrop_extend_numba as extend_many
    elif kernel == "triton":
        import functools

        import torch

        from .gapped_kernels import ydrop_extend_triton

        dev = torch.device(device if device is not None else "cuda")
        # the sequences cross to the device once for the strand, not once per launch
        on_device = (torch.from_numpy(t_codes).to(dev), torch.from_numpy(q_codes).to(dev))
        extend_many = functools.partial(ydrop_extend_triton, device=dev, codes_on_device=on_device)
    else:
        extend_many = ydrop_extend

    def many_ways(ts: list[int], qs: list[int]) -> list[tuple]:
        # per anchor (version, score, forward path t/q, backward path t/q, boxes (2, 4)), both ways of every
        # anchor in one call; version: the alignments committed when it started (read before the walls: it
        # sees at least those)
        version = len(log)
        k = len(ts)
        t0 = np.array(ts + [x - 1 for x in ts], np.int64)
        q0 = np.array(qs + [x - 1 for x in qs], np.int64)
        dirs = np.repeat(np.array([1, -1], np.int64), k)
        best, pt, pq, box = extend_many(t_codes, q_codes, t0, q0, dirs, table, sc.gap_open, sc.gap_extend,
                                        cfg.ydrop, walls, boxes=True)
        return [(version, int(best[m] + best[k + m]), pt[m], pq[m], pt[k + m], pq[k + m], box[[m, k + m]])
                for m in range(k)]

    def both_ways(ta: int, qa: int):
        return many_ways([ta], [qa])[0]

    batched = kernel == "triton"
    ahead = (threads > 1 and kernel == "numba") or batched
    window = 0
    if ahead:
        window = lookahead if lookahead is not None else TRITON_LOOKAHEAD if batched else LOOKAHEAD_PER_THREAD * threads
    own = None
    if ahead and not batched and pool is None:
        from concurrent.futures import ThreadPoolExecutor

        own = pool = ThreadPoolExecutor(threads, thread_name_prefix="gapped")
    tally = {"speculated": 0, "redone": 0, "wasted": 0}
    pending: deque[list] = deque()  # [anchor, future or None], in anchor order
    pos, n = 0, at.size
    try:
        while True:
            while pos < n and len(pending) <= window:  # the anchors ahead of the commit point
                if not walls.on(at_l[pos], aq_l[pos]):
                    pending.append([pos, None])
                pos += 1
            if not pending:
                break
            # start those not near an earlier pending anchor: on threads as soon as they enter the window; on
            # the GPU when the next anchor to commit has not started, so that a launch sweeps the whole window
            # (not the one anchor that entered it with each commit)
            if ahead and (not batched or pending[0][1] is None):
                starting = []
                for k, entry in enumerate(pending):
                    i = entry[0]
                    if entry[1] is None:
                        d = diag[i]
                        if all(abs(d - diag[e[0]]) > NEAR_DIAGONALS for e in itertools.islice(pending, k)):
                            if not walls.on(at_l[i], aq_l[i]):
                                starting.append(entry)
                tally["speculated"] += len(starting)
                if batched and starting:  # one launch for all of them
                    tally["launches"] = tally.get("launches", 0) + 1
                    exts = many_ways([at_l[e[0]] for e in starting], [aq_l[e[0]] for e in starting])
                    for entry, ext in zip(starting, exts, strict=True):
                        entry[1] = Future()
                        entry[1].set_result(ext)
                else:
                    for entry in starting:
                        entry[1] = pool.submit(both_ways, at_l[entry[0]], aq_l[entry[0]])
            i, fut = pending.popleft()
            ta, qa = at_l[i], aq_l[i]
            if walls.on(ta, qa):  # on an alignment committed since it was picked: LASTZ skips it
                if fut is not None and not fut.cancel():
                    tally["wasted"] += 1
                continue
            if fut is not None and not batched and fut.cancel():
                fut = None  # still queued (behind the other strand's work in a shared pool): run it here
            ext = fut.result() if fut is not None else both_ways(ta, qa)
            if fut is not None and _meets(log, ext[0], ext[6]):
                ext = both_ways(ta, qa)  # an alignment committed since it started is in its way: again
                tally["redone"] += 1
            _, score, ft, fq, rt, rq, _ = ext
            if score < thresh:
                continue
            rt, rq = rt[::-1], rq[::-1]
            tpos = np.concatenate([np.where(rt >= 0, ta - 1 - rt, -1), np.where(ft >= 0, ta + ft, -1)])
            qpos = np.concatenate([np.where(rq >= 0, qa - 1 - rq, -1), np.where(fq >= 0, qa + fq, -1)])
            ct, cq = walls.add(tpos, qpos)
            if ct.size:
                log.append((ct, cq, (int(ct.min()), int(ct.max()), int(cq[0]), int(cq[-1]))))
            # kept as text at once (2 bytes a column, not the 16 of the positions)
            results.append((score, _alignment(target, query, tpos, qpos, h.strand, score)))
    finally:
        for _, fut in pending:
            if fut is not None:
                fut.cancel()
        if own is not None:
            own.shutdown(wait=True, cancel_futures=True)
    if counters is not None:
        for k, v in tally.items():
            counters[k] = counters.get(k, 0) + v
    out = [a for _, a in sorted(results, key=lambda r: -r[0])]
    # LASTZ's order: by target position (records in file order), then query
    order_keys = {id(a): (target.names.index(a.t_name), a.t_start, a.q_start) for a in out}
    out.sort(key=lambda a: order_keys[id(a)])
    return out


