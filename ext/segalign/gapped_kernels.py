"""Compiled gapped extension (numba): :func:`.gapped.ydrop_extend` one extension at a time, in machine code.

:func:`ydrop_extend_numba` takes the arguments of :func:`.gapped.ydrop_extend` (the NumPy
version, kept as the readable reference) and returns the same scores and paths, cell for cell:
the same adaptive band (``band`` cells of an anti-diagonal, moved one step towards the previous
anti-diagonal's best cell when that cell lies past the band's middle), the same Gotoh
recurrences with LASTZ's Y-drop, the same walls (record separators, sequence ends, the cells of
alignments already found) and the same tie-breaks in the traceback.  Where the NumPy version
sweeps every extension of a batch in lock step (one ``(B, W)`` array step per anti-diagonal),
this one runs each extension alone, cell by cell, with its traceback bits in a growing
``(anti-diagonals, W)`` byte array; ``threads > 1`` runs the extensions of a batch on that many
threads (the kernel releases the GIL), so results do not depend on the thread count.
"""

from __future__ import annotations

import numpy as np

from .cpu_kernels import numba_available
from .fasta import SEPARATOR

if numba_available():
    from numba import njit

    _NEG = -(1 << 29)
    _SEP = SEPARATOR

    @njit(nogil=True, cache=True)
    def _extend_one(t, q, t0, q0, d, flat, oe, ext, ydrop, W, wlo, whi, use_cover):
        n_t, n_q = t.shape[0], q.shape[0]
        NEG = _NEG
        SEP = _SEP
        # padded (W + 2) rows: index p + 1 holds band cell p, indices 0 and W + 1 stay NEG
        H1 = np.full(W + 2, NEG, np.int32)
        E1 = np.full(W + 2, NEG, np.int32)
        F1 = np.full(W + 2, NEG, np.int32)
        H2 = np.full(W + 2, NEG, np.int32)
        Hn = np.full(W + 2, NEG, np.int32)
        En = np.full(W + 2, NEG, np.int32)
        Fn = np.full(W + 2, NEG, np.int32)
        H1[1] = 0
        cap = 64
        tb = np.zeros((cap, W), np.uint8)
        los = np.zeros(cap, np.int64)
        lo1 = 0
        lo2 = 0
        a_best = 0
        a_bd = 0
        a_bp = 0
        D = 0
        half = W // 2
        # live ranges [a, b] of band cells (any of H, E, F above NEG) of anti-diagonals D-1, D-2, D-3;
        # every cell outside a row's range is NEG, so only cells with a live neighbour are computed
        # (a cell without one ends below the cut, i.e. NEG, exactly as in the full sweep)
        r1a, r1b, r2a, r2b, r3a, r3b = 0, 0, W, -1, W, -1
        K = wlo.shape[1]
        # the box of the cells computed: smallest and largest target and query positions
        bt0, bt1, bq0, bq1 = n_t + W, -W - 1, n_q + W, -W - 1
        while True:
            D += 1
            # the previous anti-diagonal's first best cell decides the band's move; it is alive when > NEG
            am = 0
            mv = NEG
            for p in range(r1a, r1b + 1):
                if H1[p + 1] > mv:
                    mv = H1[p + 1]
                    am = p
            prev_alive = mv > NEG
            shift = 1 if am > half else 0
            lo = lo1 + shift
            s2 = lo - lo2
            if D >= cap:
                ncap = cap * 2
                tb2 = np.zeros((ncap, W), np.uint8)
                tb2[:cap] = tb
                los2 = np.zeros(ncap, np.int64)
                los2[:cap] = los
                tb, los, cap = tb2, los2, ncap
            los[D] = lo
            # scratch rows: Hn held anti-diagonal D-3, En / Fn held D-2: clear what was live there
            for p in range(r3a, r3b + 1):
                Hn[p + 1] = NEG
            for p in range(r2a, r2b + 1):
                En[p + 1] = NEG
                Fn[p + 1] = NEG
            pa = W
            pb = -1
            if r1a <= r1b:
                pa = min(pa, r1a - shift)
                pb = max(pb, r1b - shift + 1)
            if r2a <= r2b:
                pa = min(pa, r2a - s2 + 1)
                pb = max(pb, r2b - s2 + 1)
            pa = max(pa, 0)
            pb = min(pb, W - 1)
            top = a_best
            arg = -1
            if pa <= pb:
                ta_ = t0 + d * (lo + pa - 1)
                tb_ = t0 + d * (lo + pb - 1)
                qa_ = q0 + d * (D - lo - pa - 1)
                qb_ = q0 + d * (D - lo - pb - 1)
                bt0 = min(bt0, min(ta_, tb_))
                bt1 = max(bt1, max(ta_, tb_))
                bq0 = min(bq0, min(qa_, qb_))
                bq1 = max(bq1, max(qa_, qb_))
            for p in range(pa, pb + 1):
                I = lo + p
                J = D - I
                up = H1[p + shift + 1]
                left = H1[p + shift]
                upE = E1[p + shift + 1]
                leftF = F1[p + shift]
                diag = H2[p + s2]
                ut = t0 + d * (I - 1)
                uq = q0 + d * (J - 1)
                tin = ut >= 0 and ut < n_t
                qin = uq >= 0 and uq < n_q
                tc = t[ut] if tin else SEP
                qc = q[uq] if qin else SEP
                e_open = up - oe
                e_ext = upE - ext
                f_open = left - oe
                f_ext = leftF - ext
                Ev = max(e_open, e_ext)
                Fv = max(f_open, f_ext)
                Hd = diag + flat[tc * 11 + qc]
                EF = max(Ev, Fv)
                Hv = max(Hd, EF)
                tb[D, p] = ((Hd < EF) * (1 + (Ev < Fv))) | ((e_ext > e_open) << 2) | ((f_ext > f_open) << 3)
                invalid = J < 0 or (I >= 1 and tc == SEP) or (J >= 1 and qc == SEP)
                if use_cover and not invalid and I >= 1 and J >= 1 and tin and qin:
                    for k in range(K):
                        wl = wlo[uq, k]
                        if wl < 0:
                            break
                        if wl <= ut and ut <= whi[uq, k]:
                            invalid = True
                            break
                if invalid:
                    Hv = NEG
                    Ev = NEG
                    Fv = NEG
                if Hv > top:
                    top = Hv
                    arg = p
                Hn[p + 1] = Hv
                En[p + 1] = Ev
                Fn[p + 1] = Fv
            if arg >= 0:
                a_best = top
                a_bd = D
                a_bp = arg
            cut = a_best - ydrop
            alive = prev_alive
            na = W
            nb = -1
            for p in range(pa, pb + 1):
                if Hn[p + 1] < cut:
                    Hn[p + 1] = NEG
                if En[p + 1] < cut:
                    En[p + 1] = NEG
                if Fn[p + 1] < cut:
                    Fn[p + 1] = NEG
                if Hn[p + 1] > NEG or En[p + 1] > NEG or Fn[p + 1] > NEG:
                    if na == W:
                        na = p
                    nb = p
            if nb >= 0:
                alive = True
            # rotate: D-1 -> D-2, D -> D-1 (the padding cells stay NEG)
            H2, H1, Hn = H1, Hn, H2
            E1, En = En, E1
            F1, Fn = Fn, F1
            r3a, r3b = r2a, r2b
            r2a, r2b = r1a, r1b
            r1a, r1b = na, nb
            lo2 = lo1
            lo1 = lo
            if not alive:
                break
        # traceback from the best cell to the origin, columns written from the far end
        pt = np.empty(a_bd, np.int64)
        pq = np.empty(a_bd, np.int64)
        k = a_bd
        dd = a_bd
        I = los[dd] + a_bp
        J = dd - I
        st = 0
        while dd > 0:
            code = tb[dd, I - los[dd]]
            hsrc = code & 3
            if st == 0 and hsrc != 0:
                st = hsrc
            k -= 1
            if st == 1:
                pt[k] = -1
                pq[k] = J - 1
                e_bit = (code >> 2) & 1
                J -= 1
                if e_bit == 0:
                    st = 0
            elif st == 2:
                pt[k] = I - 1
                pq[k] = -1
                f_bit = (code >> 3) & 1
                I -= 1
                if f_bit == 0:
                    st = 0
            else:
                pt[k] = I - 1
                pq[k] = J - 1
                I -= 1
                J -= 1
            dd = I + J
        return a_best, pt[k:].copy(), pq[k:].copy(), D, bt0, bt1, bq0, bq1


def ydrop_extend_numba(
    t_codes: np.ndarray, q_codes: np.ndarray, t0: np.ndarray, q0: np.ndarray, dirs: np.ndarray,
    table: np.ndarray, gap_open: int, gap_extend: int, ydrop: int, band: int = 128,
    cover=None, boxes: bool = False, threads: int = 1,
) -> tuple:
    """:func:`.gapped.ydrop_extend` compiled (same arguments and results); ``threads``: extensions side by side.

    The boxes (``boxes=True``) are those of the cells this kernel computed (it skips cells with no
    live neighbour, so they may be smaller than the NumPy version's); either is exact for its kernel.

    Raises:
        RuntimeError: numba is not installed (check :func:`.cpu_kernels.numba_available` first).
    """
    if not numba_available():  # pragma: no cover
        raise RuntimeError("the compiled gapped extension needs numba (pip install numba)")
    t = np.ascontiguousarray(t_codes, dtype=np.uint8)
    q = np.ascontiguousarray(q_codes, dtype=np.uint8)
    flat = np.ascontiguousarray(np.asarray(table, dtype=np.int64).reshape(-1))
    from .gapped import Walls

    if isinstance(cover, np.ndarray):
        cover = Walls.from_cover(cover)
    use = cover is not None
    wlo = np.full((1, 1), -1, np.int32) if cover is None else cover.lo
    whi = wlo if cover is None else cover.hi
    B = int(np.asarray(t0).size)
    t0 = np.asarray(t0, dtype=np.int64)
    q0 = np.asarray(q0, dtype=np.int64)
    dirs = np.asarray(dirs, dtype=np.int64)

    def one(b):
        return _extend_one(t, q, int(t0[b]), int(q0[b]), int(dirs[b]), flat, gap_open + gap_extend, gap_extend,
                           ydrop, band, wlo, whi, use)

    if threads > 1 and B > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(threads, B)) as pool:
            res = list(pool.map(one, range(B)))
    else:
        res = [one(b) for b in range(B)]
    best = np.array([r[0] for r in res], dtype=np.int64)
    if boxes:
        box = np.array([r[4:8] for r in res], dtype=np.int64).reshape(B, 4)
        return best, [r[1] for r in res], [r[2] for r in res], box
    return best, [r[1] for r in res], [r[2] for r in res]


__all__ = ["ydrop_extend_numba"]
