"""Compiled gapped extension (numba): :func:`.gapped.ydrop_extend` one extension at a time, in machine code.

:func:`ydrop_extend_numba` takes the arguments of :func:`.gapped.ydrop_extend` (the NumPy
version, kept as the readable reference) and returns the same scores, paths and boxes, cell for
cell: the same anti-diagonal sweep over the live interval of each anti-diagonal (no band: the
Y-drop alone bounds it), the same Gotoh recurrences with LASTZ's Y-drop, the same walls (record
separators, sequence ends, the cells of alignments already found) and the same tie-breaks in the
traceback.  How it is fast:

* the anti-diagonals live in the rows of one ``int32`` array, indexed by ``I`` (the target offset)
  from a common base that moves on as the interval does, so a cell reads its three neighbours at
  fixed offsets and the cell loop has no branch (LLVM turns it into SIMD code, with the scores in
  32-bit lanes: numba widens int32 arithmetic to int64, so each result is narrowed back to int32 in
  the source); the rows rotate by index from one anti-diagonal to the next (rotating array variables
  costs numba a reference count update at every step);
* the codes the extension consumes are copied, in its direction, into buffers indexed by ``I``
  and (reversed) ``J`` as the sweep reaches them, so an anti-diagonal reads both forwards; the
  score is picked from the 16 nucleotide scores by a tree of 15 selects on the two codes' bits
  (a table lookup would keep LLVM from vectorising; a chain of 15 compares costs a fifth more of
  the stage), lowercase scoring as uppercase and N / IUPAC codes alike, as
  :meth:`.scoring.Scoring.table` makes them;
* the walls of alignments found before: each query base's first wall interval is copied beside its
  code, as target offsets ``I``, and the cell loop compares each cell's ``I`` with it (two loads, two
  compares); the further intervals of bases stacked with several alignments (overflow rows) are looked
  up cell by cell, only on anti-diagonals whose query bases have one (a running count tells in O(1));
* traceback bits are stored for the computed interval of each anti-diagonal only, in one byte
  array (its start per anti-diagonal) that each thread reuses from one extension to the next.

``threads > 1`` runs the extensions of a batch on that many threads (the kernel releases the
GIL), so results do not depend on the thread count.
"""

from __future__ import annotations

import threading

import numpy as np

from torchhpc.ext.core.dispatch import numba_available

from .fasta import SEPARATOR
from .torch_numba import KERNELS
from .walls import Walls

if numba_available():
    kernel = KERNELS.kernel

    _NEG = -(1 << 29)
    _SEP = SEPARATOR
    _PAD = 64  # cells of LLVM's vectorised loop step (16 int32 lanes, 4 interleaved) or a multiple of it
    _NO_WALL = 1 << 30  # the first offset of an empty wall interval (past any I)

    # the codes of the sweep: 0-3 a nucleotide (either case), 4 ambiguous (N, IUPAC), 8 a record separator
    _EFF = np.array([0, 1, 2, 3, 0, 1, 2, 3, 4, 4, 8], np.int32)

    @kernel(nogil=True, cache=True)
    def _fill(dst, dst0, step, src, start, d, lo, hi, eff):
        """``dst[dst0 + k*step] = eff[src[start + d*(k-1)]]`` for ``k`` in ``[lo, hi)`` (the code consumed at offset k)."""
        for k in range(lo, hi):
            dst[dst0 + k * step] = eff[src[start + d * (k - 1)]]

    @kernel(nogil=True, cache=True)
    def _fill_walls(Wlo, Whi, nI, nJ, wlo, whi, t0, q0, d, lo, hi, use):
        """The first wall interval of the query base consumed at each offset ``J`` in ``[lo, hi)``, as an
        interval of target offsets ``I`` at ``Wlo[nJ - J]``, ``Whi[nJ - J]`` (reversed, as the query codes
        are); an empty one (:data:`_NO_WALL`, -1) where the base has none or ``use`` is false.  Offsets are
        clamped to ``[-1, nI + 1]`` (the same cells: the sweep's ``I`` lies in ``[1, nI]``), so that they fit
        the int32 rows however far apart a target of 2^31 bases or more puts a wall and the extension."""
        top = min(nI + 1, _NO_WALL)  # (the sweep's I stays below _NO_WALL: its 32-bit lanes)
        for j in range(lo, hi):
            w0, w1 = -1, -1
            if use:
                uq = q0 + d * (j - 1)
                w0, w1 = wlo[uq, 0], whi[uq, 0]
            if w0 < 0:
                Wlo[nJ - j] = _NO_WALL
                Whi[nJ - j] = -1
            elif d > 0:  # target base t is consumed at offset I = t - t0 + 1 (forwards), t0 - t + 1 (backwards);
                Wlo[nJ - j] = min(max(w0 - t0 + 1, 1), top)  # I = 0 (no target base consumed) is never a wall
                Whi[nJ - j] = max(min(w1 - t0 + 1, top), -1)
            else:
                Wlo[nJ - j] = min(max(t0 - w1 + 1, 1), top)
                Whi[nJ - j] = max(min(t0 - w0 + 1, top), -1)

    @kernel(nogil=True, cache=True)
    def _cells(S, h1, e1, f1, h2, hn, en, fn, tb, Tb, Qr, Wlo, Whi, k0, toff, a, j0, n, sc16, amb, oe, ext, cut):
        """One anti-diagonal's ``n`` cells ``I = a ..`` (index ``k0 + p`` of the rows ``h1 .. fn`` of ``S``,
        query codes ``Qr[j0 + p]``, traceback bytes ``tb[toff + p]``); returns the best H (walls excepted), stores the cells with the
        Y-drop ``cut`` applied; a cell whose ``I`` lies in its query base's first wall interval
        ``[Wlo[j0 + p], Whi[j0 + p]]`` (as :func:`_fill_walls` writes them) is a wall.  Branch-free with
        unsigned indices, so LLVM vectorises it; the score is
        picked from the 16 nucleotide scores by selects (a table lookup would stop the vectorisation),
        ``amb`` where either base is ambiguous; a separator makes the cell a wall.  The loop runs over
        ``n`` rounded up to :data:`_PAD` cells, the ones past ``n`` dead, so that no cell runs in LLVM's
        scalar remainder loop (the arrays have that much room past the anti-diagonal's end)."""
        i32 = np.int32  # numba widens int32 arithmetic to int64: narrowed back, LLVM keeps 32-bit lanes
        NEG = i32(_NEG)
        s0, s1, s2, s3 = i32(sc16[0]), i32(sc16[1]), i32(sc16[2]), i32(sc16[3])
        s4, s5, s6, s7 = i32(sc16[4]), i32(sc16[5]), i32(sc16[6]), i32(sc16[7])
        s8, s9, s10, s11 = i32(sc16[8]), i32(sc16[9]), i32(sc16[10]), i32(sc16[11])
        s12, s13, s14, s15 = i32(sc16[12]), i32(sc16[13]), i32(sc16[14]), i32(sc16[15])
        amb, oe, ext, cut = i32(amb), i32(oe), i32(ext), i32(cut)
        uk = np.uint64(k0)
        rh1, re1, rf1, rh2 = np.uint64(h1), np.uint64(e1), np.uint64(f1), np.uint64(h2)
        rhn, ren, rfn = np.uint64(hn), np.uint64(en), np.uint64(fn)
        ul = np.uint64(k0 - 1)
        ut = np.uint64(toff)
        ua = np.uint64(a)
        uj = np.uint64(j0)
        top = NEG
        n32 = i32(n)
        a32 = i32(a)
        for p in range(np.uint64((n + _PAD - 1) & ~(_PAD - 1))):
            up = S[rh1, uk + p]
            left = S[rh1, ul + p]
            e_open = i32(up - oe)
            e_ext = i32(S[re1, uk + p] - ext)
            f_open = i32(left - oe)
            f_ext = i32(S[rf1, ul + p] - ext)
            Ev = max(e_open, e_ext)
            Fv = max(f_open, f_ext)
            tc = Tb[ua + p]
            qc = Qr[uj + p]
            # the score of key = 4 * (tc & 3) + (qc & 3): a tree of selects on its four bits
            q0 = i32(qc & 1) != 0
            v01 = s1 if q0 else s0
            v23 = s3 if q0 else s2
            v45 = s5 if q0 else s4
            v67 = s7 if q0 else s6
            v89 = s9 if q0 else s8
            vab = s11 if q0 else s10
            vcd = s13 if q0 else s12
            vef = s15 if q0 else s14
            q1 = i32(qc & 2) != 0
            v03 = v23 if q1 else v01
            v47 = v67 if q1 else v45
            v8b = vab if q1 else v89
            vcf = vef if q1 else vcd
            t0_ = i32(tc & 1) != 0
            v07 = v47 if t0_ else v03
            v8f = vcf if t0_ else v8b
            sc = v8f if i32(tc & 2) != 0 else v07
            tq = i32(tc | qc)
            sc = amb if i32(tq & 4) != 0 else sc
            Hd = i32(S[rh2, ul + p] + sc)
            EF = max(Ev, Fv)
            Hv = max(Hd, EF)
            tb[ut + p] = np.uint8(((Hd < EF) * (1 + (Ev < Fv))) | ((e_ext > e_open) << 2) | ((f_ext > f_open) << 3))
            I = i32(a32 + i32(p))
            bad = (i32(tq & 8) != 0) | (i32(p) >= n32) | ((Wlo[uj + p] <= I) & (I <= Whi[uj + p]))
            Hv = NEG if bad else Hv
            top = max(top, Hv)
            S[rhn, uk + p] = NEG if Hv < cut else Hv
            S[ren, uk + p] = NEG if (bad or Ev < cut) else Ev
            S[rfn, uk + p] = NEG if (bad or Fv < cut) else Fv
        return top

    @kernel(nogil=True, cache=True, inline="always")  # a call per anti-diagonal: inlined, ~4 % of the sweep
    def _clear(S, x, y, k0, n, k1, m):
        """Rows ``x`` and ``y`` of ``S`` back to NEG from ``k0`` on, for ``n`` cells rounded up as in
        :func:`_cells`, except the ``m`` cells from ``k1`` on (rounded up alike), which :func:`_cells` is
        about to write."""
        NEG = np.int32(_NEG)
        end = k0 + ((n + _PAD - 1) & ~(_PAD - 1))
        keep0 = k1 if m > 0 else end
        keep1 = k1 + ((m + _PAD - 1) & ~(_PAD - 1)) if m > 0 else end
        for i in range(k0, min(end, keep0)):
            S[x, i] = NEG
            S[y, i] = NEG
        for i in range(max(keep1, k0), end):
            S[x, i] = NEG
            S[y, i] = NEG

    @kernel(nogil=True, cache=True, inline="always")  # a call per anti-diagonal: inlined, ~4 % of the sweep
    def _cut(S, hn, en, fn, k0, n, cut, top):
        """Y-drop with a raised cut: cells below ``cut`` are dead (NEG); returns the first cell scoring ``top``
        (over the padded cells too, which are dead already: see :func:`_cells`)."""
        i32 = np.int32  # 32-bit lanes, as in _cells
        NEG = i32(_NEG)
        cut, top, n32 = i32(cut), i32(top), i32(n)
        uk = np.uint64(k0)
        rhn, ren, rfn = np.uint64(hn), np.uint64(en), np.uint64(fn)
        first = n32
        for p in range((n + _PAD - 1) & ~(_PAD - 1)):
            up = np.uint64(p)
            h = S[rhn, uk + up]
            e = S[ren, uk + up]
            f = S[rfn, uk + up]
            first = min(first, i32(p) if h == top else n32)
            S[rhn, uk + up] = NEG if h < cut else h
            S[ren, uk + up] = NEG if e < cut else e
            S[rfn, uk + up] = NEG if f < cut else f
        return first

    @kernel(nogil=True, cache=True)
    def _on_wall(lo, hi, row, ut):
        """Whether target base ``ut`` lies in one of the intervals of ``lo[row], hi[row]`` (-1 ends the list)."""
        for kk in range(min(lo.shape[1], hi.shape[1])):  # (a pair taken while Walls grew: the shorter)
            wl = lo[row, kk]
            if wl < 0:
                return False
            if wl <= ut and ut <= hi[row, kk]:
                return True
        return False

    @kernel(nogil=True, cache=True, aot=["i8[::1], i8[::1], i8[::1], u1[::1], u1[::1], i8[::1], i8, i8[::1]"])
    def _anchor_peaks(ts, qs, ln, t, q, table, w, peak):
        """``peak[i]`` of each HSP longer than ``w``: the middle of its first best-scoring ``w``-base
        window (:func:`.gapped.hsp_anchors`' rule, one rolling sum per HSP)."""
        for i in range(ts.shape[0]):
            n = ln[i]
            if n <= w:
                continue
            a, b = ts[i], qs[i]
            s = 0
            for k in range(w):
                s += table[t[a + k] * 11 + q[b + k]]
            best = s
            at = 0
            for k in range(1, n - w + 1):
                s += table[t[a + k + w - 1] * 11 + q[b + k + w - 1]] - table[t[a + k - 1] * 11 + q[b + k - 1]]
                if s > best:
                    best = s
                    at = k
            peak[i] = at + w // 2

    @kernel(nogil=True, cache=True)
    def _trace(tb, offs, los, a_bi, a_bd):
        """The path from the best cell ``(a_bi, a_bd - a_bi)`` back to the origin: target and query offsets of
        each column from the origin outwards (``-1`` on the gapped side), read from the traceback bytes of
        each anti-diagonal ``D`` (``tb[offs[D] + I - los[D]]``); LASTZ's tie-breaks."""
        pt = np.empty(a_bd, np.int64)
        pq = np.empty(a_bd, np.int64)
        k = a_bd
        I = a_bi
        J = a_bd - a_bi
        st = 0
        while I + J > 0:
            dd = I + J
            code = tb[offs[dd] + I - los[dd]]
            hsrc = code & 3
            if st == 0 and hsrc != 0:
                st = hsrc
            k -= 1
            if st == 1:
                pt[k] = -1
                pq[k] = J - 1
                if (code >> 2) & 1 == 0:
                    st = 0
                J -= 1
            elif st == 2:
                pt[k] = I - 1
                pq[k] = -1
                if (code >> 3) & 1 == 0:
                    st = 0
                I -= 1
            else:
                pt[k] = I - 1
                pq[k] = J - 1
                I -= 1
                J -= 1
        return pt[k:].copy(), pq[k:].copy()

    @kernel(nogil=True, cache=True, aot=["u1[::1], u1[::1], i8, i8, i8, i4[::1], i8, i4[::1], i8, i8, i8, i4[:, ::1], "
                                         "i4[:, ::1], i4[::1], b1, i4[:, ::1], i4[:, ::1], b1, u1[::1]"])
    def _extend_one(t, q, t0, q0, d, sc16, amb, eff, oe, ext, ydrop, wlo, whi, wrow, use_rows, olo, ohi, use_cover, tb):
        n_t, n_q = t.shape[0], q.shape[0]
        NEG = _NEG
        # cells (I, J) exist for I <= nI, J <= nJ (the bases left in direction d)
        nI = max(n_t - t0 if d > 0 else t0 + 1, 0)
        nJ = max(n_q - q0 if d > 0 else q0 + 1, 0)
        # codes consumed by offset I (target: Tb[I]) and J (query, reversed so that an anti-diagonal's
        # cells read it forwards: Qr[nJ - J]), filled as the sweep reaches them; offset 0 (nothing
        # consumed) is a valid dummy; the first wall interval of the query base at J (Wlo, Whi), in
        # offsets I and reversed as Qr (empty at J = 0 and past the end); Wo[J]: the query bases up to J
        # that carry further walls in an overflow row
        Tb = np.empty(nI + 1 + _PAD, np.int32)
        Qr = np.empty(nJ + 1 + _PAD, np.int32)
        Wlo = np.empty(nJ + 1 + _PAD, np.int32)
        Whi = np.empty(nJ + 1 + _PAD, np.int32)
        Wo = np.empty(nJ + 1, np.int32)
        Tb[0] = 0
        Qr[nJ] = 0
        Wlo[nJ:] = _NO_WALL
        Whi[nJ:] = -1
        Wo[0] = 0
        t_fill = 1
        q_fill = 1
        # anti-diagonal buffers indexed by I - base, the rows of S: H of D-1, D-2 and the one being computed
        # (h1, h2, hn); E, F of D-1 and the one being computed (e1, f1, en, fn); every cell outside a
        # stored interval is NEG.  The rows rotate by their indices: rotating array variables would cost
        # numba a reference count update per array per anti-diagonal (~14 % of a long extension's sweep)
        cap = 512
        base = -2
        S = np.full((7, cap), NEG, np.int32)
        h1, h2, hn, e1, f1, en, fn = 0, 1, 2, 3, 4, 5, 6
        S[h1, 0 - base] = 0
        # computed intervals [a, b] of D-1, D-2, D-3 (what each buffer holds) and live ones of D-1, D-2
        c1a, c1b, c2a, c2b, c3a, c3b = 0, 0, 1, 0, 1, 0
        r1a, r1b, r2a, r2b = 0, 0, 1, 0
        # traceback bytes: anti-diagonal D's computed interval at tb[offs[D]:], its first cell los[D]
        # (tb: the caller's buffer, reused from one extension to the next; grown here when too small)
        tcap = tb.shape[0]
        dcap = 256
        offs = np.zeros(dcap, np.int64)
        los = np.zeros(dcap, np.int64)
        offs[0] = 0
        used = 1
        a_best = 0
        a_bd = 0
        a_bi = 0
        big = 1 << 62
        bt0, bt1, bq0, bq1 = big, -big, big, -big
        D = 0
        while r1a <= r1b or r2a <= r2b:
            D += 1
            a = big
            b = -big
            if r1a <= r1b:
                a = min(a, r1a)
                b = max(b, r1b + 1)
            if r2a <= r2b:
                a = min(a, r2a + 1)
                b = max(b, r2b + 1)
            a = max(a, D - nJ, 0)
            b = min(b, D, nI)
            if D >= dcap:
                offs2 = np.zeros(dcap * 2, np.int64)
                los2 = np.zeros(dcap * 2, np.int64)
                offs2[:dcap] = offs
                los2[:dcap] = los
                offs, los, dcap = offs2, los2, dcap * 2
            offs[D] = used
            los[D] = a
            # the scratch rows: hn held D-3, en / fn held D-2: back to NEG where this anti-diagonal's
            # cells (all of them written) do not overwrite them
            new0, new_n = (a - base, b + 1 - a) if a <= b else (0, 0)
            if c3a <= c3b:
                _clear(S, hn, hn, c3a - base, c3b + 1 - c3a, new0, new_n)
            if c2a <= c2b:
                _clear(S, en, fn, c2a - base, c2b + 1 - c2a, new0, new_n)
            if a > b:  # nothing to compute (a sequence end): a dead anti-diagonal
                h2, h1, hn = h1, hn, h2
                e1, en = en, e1
                f1, fn = fn, f1
                c3a, c3b, c2a, c2b, c1a, c1b = c2a, c2b, c1a, c1b, 1, 0
                r2a, r2b, r1a, r1b = r1a, r1b, 1, 0
                continue
            # the buffers must hold I = a-1 .. b: move the base (and grow) when they do not
            if a - 1 - base < 0 or b + _PAD - base >= cap:
                lo_need = a - 1
                hi_need = b + 1
                if c1a <= c1b:
                    lo_need = min(lo_need, c1a - 1)
                    hi_need = max(hi_need, c1b + 1)
                if c2a <= c2b:
                    lo_need = min(lo_need, c2a - 1)
                    hi_need = max(hi_need, c2b + 1)
                ncap = cap
                while hi_need - lo_need + 2 + _PAD > ncap // 2:
                    ncap *= 2
                nbase = lo_need - 1
                nS = np.full((7, ncap), NEG, np.int32)
                for i in range(c1a, c1b + 1):
                    nS[h1, i - nbase] = S[h1, i - base]
                    nS[e1, i - nbase] = S[e1, i - base]
                    nS[f1, i - nbase] = S[f1, i - base]
                for i in range(c2a, c2b + 1):
                    nS[h2, i - nbase] = S[h2, i - base]
                S = nS
                cap = ncap
                base = nbase
            # codes up to I = b and J = D - a
            if b >= t_fill:
                hi = min(nI + 1, max(b + 1, 2 * t_fill + 256))
                _fill(Tb, 0, 1, t, t0, d, t_fill, hi, eff)
                t_fill = hi
            if D - a >= q_fill:
                hi = min(nJ + 1, max(D - a + 1, 2 * q_fill + 256))
                _fill(Qr, nJ, -1, q, q0, d, q_fill, hi, eff)
                _fill_walls(Wlo, Whi, nI, nJ, wlo, whi, t0, q0, d, q_fill, hi, use_cover)
                if use_rows:
                    for j in range(q_fill, hi):
                        Wo[j] = Wo[j - 1] + (wrow[q0 + d * (j - 1)] >= 0)
                q_fill = hi
            if used + (b - a + 1) + _PAD > tcap:
                ncap = tcap * 2
                while used + (b - a + 1) + _PAD > ncap:
                    ncap *= 2
                tb2 = np.empty(ncap, np.uint8)
                tb2[:used] = tb[:used]
                tb, tcap = tb2, ncap
            ta_ = t0 + d * (a - 1)
            tb_ = t0 + d * (b - 1)
            qa_ = q0 + d * (D - a - 1)
            qb_ = q0 + d * (D - b - 1)
            bt0 = min(bt0, min(ta_, tb_))
            bt1 = max(bt1, max(ta_, tb_))
            bq0 = min(bq0, min(qa_, qb_))
            bq1 = max(bq1, max(qa_, qb_))
            n = b - a + 1
            k0 = a - base
            cut0 = a_best - ydrop
            # the walls of alignments found before: each query base's first interval in the cell loop
            top = _cells(S, h1, e1, f1, h2, hn, en, fn, tb, Tb, Qr, Wlo, Whi, k0, used, a, nJ - D + a, n, sc16, amb, oe,
                         ext, cut0)
            # the further intervals of query bases that carry several (a repeat stacking alignments on them)
            if use_rows:
                ja = max(D - b, 1)
                jb = D - a
                if ja <= jb and Wo[jb] - Wo[ja - 1] > 0:
                    hit = False
                    for I in range(max(a, 1), D - ja + 1):
                        J = D - I
                        if Wo[J] == Wo[J - 1]:
                            continue
                        ut = t0 + d * (I - 1)
                        r = wrow[q0 + d * (J - 1)]
                        # (a row added after this extension took the table, by a commit running beside
                        # it, is not in it)
                        on = r >= 0 and r < olo.shape[0] and r < ohi.shape[0] and _on_wall(olo, ohi, r, ut)
                        if on:
                            S[hn, I - base] = NEG
                            S[en, I - base] = NEG
                            S[fn, I - base] = NEG
                            hit = True
                    if hit:  # the best cell, walls excepted (a cell over the best is never cut)
                        top = NEG
                        for i in range(k0, k0 + n):
                            top = max(top, S[hn, i])
            used += n
            # the first best cell of this anti-diagonal; a new best raises the cut
            if top > a_best:
                a_bi = a + _cut(S, hn, en, fn, k0, n, top - ydrop, top)
                a_best = top
                a_bd = D
            na = a
            while na <= b and S[hn, na - base] == NEG:
                na += 1
            nb = b
            while nb >= na and S[hn, nb - base] == NEG:
                nb -= 1
            # rotate: D-1 -> D-2, D -> D-1 (the scratch buffers are cleared at the next step)
            h2, h1, hn = h1, hn, h2
            e1, en = en, e1
            f1, fn = fn, f1
            c3a, c3b, c2a, c2b, c1a, c1b = c2a, c2b, c1a, c1b, a, b
            r2a, r2b = r1a, r1b
            r1a, r1b = na, nb
        pt, pq = _trace(tb, offs, los, a_bi, a_bd)
        return a_best, pt, pq, used, bt0, bt1, bq0, bq1, tb


_buffers = threading.local()
"""Each thread's traceback byte buffer, reused across extensions (grown, never shrunk)."""


def compact_table(table: np.ndarray) -> tuple[np.ndarray, int]:
    """The 16 nucleotide scores (``4 * t + q``) and the ambiguous score of an ``(11, 11)`` code table.

    Raises:
        ValueError: the table scores lowercase unlike uppercase, or N / IUPAC codes unlike each other
            (:meth:`.scoring.Scoring.table` never does).
    """
    t = np.asarray(table, dtype=np.int64)
    amb = int(t[8, 0])
    nuc = t[:4, :4]
    ok = (t[4:8, :8] == np.tile(nuc, (1, 2))).all() and (t[:8, 4:8] == np.tile(nuc, (2, 1))).all()
    ok = ok and (t[8:10, :10] == amb).all() and (t[:10, 8:10] == amb).all()
    if not ok:
        raise ValueError("the compiled gapped extension needs lowercase to score as uppercase and one ambiguous score")
    return np.ascontiguousarray(nuc.reshape(-1).astype(np.int32)), amb


def ydrop_extend_numba(
    t_codes: np.ndarray, q_codes: np.ndarray, t0: np.ndarray, q0: np.ndarray, dirs: np.ndarray,
    table: np.ndarray, gap_open: int, gap_extend: int, ydrop: int,
    cover=None, boxes: bool = False, threads: int = 1,
) -> tuple:
    """:func:`.gapped.ydrop_extend` compiled (same arguments and results); ``threads``: extensions side by side.

    Raises:
        RuntimeError: numba is not installed (check :func:`torchhpc.ext.core.dispatch.numba_available` first).
    """
    if not numba_available():  # pragma: no cover
        raise RuntimeError("the compiled gapped extension needs numba (pip install numba)")
    t = np.ascontiguousarray(t_codes, dtype=np.uint8)
    q = np.ascontiguousarray(q_codes, dtype=np.uint8)
    tab = np.asarray(table, dtype=np.int64).reshape(11, 11)
    sc16, amb = compact_table(tab)
    if isinstance(cover, np.ndarray):
        cover = Walls.from_cover(cover)
    use = cover is not None
    wt = np.int32 if cover is None else cover.dtype  # int64 for targets of 2^31 bases or more
    wlo = np.full((1, 1), -1, wt) if cover is None else cover.lo
    whi = wlo if cover is None else cover.hi
    use_rows = cover is not None and cover.row is not None
    wrow = cover.row if use_rows else np.full(1, -1, np.int32)
    olo = np.full((1, 1), -1, wt) if cover is None or not cover.rows else cover.olo
    ohi = olo if cover is None or not cover.rows else cover.ohi
    B = int(np.asarray(t0).size)
    t0 = np.asarray(t0, dtype=np.int64)
    q0 = np.asarray(q0, dtype=np.int64)
    dirs = np.asarray(dirs, dtype=np.int64)

    def one(b):
        buf = _buffers.__dict__.setdefault("tb", np.empty(1 << 16, np.uint8))
        r = _extend_one(t, q, int(t0[b]), int(q0[b]), int(dirs[b]), sc16, amb, _EFF, gap_open + gap_extend,
                        gap_extend, ydrop, wlo, whi, wrow, use_rows, olo, ohi, use, buf)
        _buffers.tb = r[8]  # keep the (possibly grown) traceback buffer for this thread's next extension
        return r

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


def anchor_peaks_numba(ts: np.ndarray, qs: np.ndarray, ln: np.ndarray, t_codes: np.ndarray, q_codes: np.ndarray,
                       table: np.ndarray, window: int, peak: np.ndarray) -> None:
    """:func:`.gapped.hsp_anchors`' best-window search compiled: sets ``peak`` of the HSPs longer than ``window``."""
    _anchor_peaks(np.ascontiguousarray(ts, np.int64), np.ascontiguousarray(qs, np.int64),
                  np.ascontiguousarray(ln, np.int64), np.ascontiguousarray(t_codes, np.uint8),
                  np.ascontiguousarray(q_codes, np.uint8), np.ascontiguousarray(table, np.int64).reshape(-1),
                  int(window), peak)




def ydrop_extend_triton(
    t_codes: np.ndarray, q_codes: np.ndarray, t0: np.ndarray, q0: np.ndarray, dirs: np.ndarray,
    table: np.ndarray, gap_open: int, gap_extend: int, ydrop: int,
    cover=None, boxes: bool = False, device: str = "cuda", codes_on_device: tuple | None = None, **sizes,
) -> tuple:
    """:func:`.gapped.ydrop_extend` with the anti-diagonal sweep on the GPU (one program per extension,
    :func:`torchhpc.triton_kernels.segalign.ydrop_sweep_triton`; the CPU under ``TRITON_INTERPRET=1``) and the
    traceback walked here from its bytes (:func:`_trace`); same arguments and results, cell for cell.  An
    extension that outgrows the kernel's buffers (``sizes``: ``cap``, ``tb_cap``, ``d_cap``) is redone by the
    compiled CPU kernel.  ``codes_on_device``: ``(t_codes, q_codes)`` already on ``device`` (a caller that
    launches many times uploads them once); the host arrays are still given (the CPU redo reads them).  Only the
    traceback bytes and anti-diagonal offsets the extensions wrote come back to the host.

    Raises:
        RuntimeError: numba is not installed (the traceback and the fallback are its kernels).
    """
    import torch

    from torchhpc.triton_kernels.segalign import ydrop_sweep_triton

    if not numba_available():  # pragma: no cover
        raise RuntimeError("the GPU gapped extension walks its traceback with numba (pip install numba)")
    tab = np.asarray(table, dtype=np.int64).reshape(11, 11)
    sc16, amb = compact_table(tab)
    if isinstance(cover, np.ndarray):
        cover = Walls.from_cover(cover)
    dev = torch.device(device)

    def on(x, dtype):
        return torch.as_tensor(np.ascontiguousarray(x), dtype=dtype).to(dev)

    walls = None
    if cover is not None:
        if cover.lo.shape[1] != 1:  # pragma: no cover - Walls.PRIMARY
            raise ValueError("the GPU kernel reads one primary interval per query base")
        rows = cover.row is not None and cover.rows > 0
        wt = torch.int64 if cover.dtype == np.int64 else torch.int32  # positions past 2^31: int64
        walls = (on(cover.lo, wt), on(cover.hi, wt), on(cover.row, torch.int32) if rows else None,
                 on(cover.olo, wt), on(cover.ohi, wt))
    t0 = np.asarray(t0, dtype=np.int64)
    q0 = np.asarray(q0, dtype=np.int64)
    dirs = np.asarray(dirs, dtype=np.int64)
    t_dev, q_dev = codes_on_device if codes_on_device is not None else (on(t_codes, torch.uint8),
                                                                       on(q_codes, torch.uint8))
    out, tb, offs, los = ydrop_sweep_triton(
        t_dev, q_dev, on(t0, torch.int64), on(q0, torch.int64),
        on(dirs, torch.int64), on(sc16, torch.int32), amb, gap_open, gap_extend, ydrop, walls, **sizes)
    out = out.cpu().numpy()
    B = t0.size
    best = out[:, 0].copy()
    box = out[:, 4:8].copy()
    paths_t, paths_q = [], []
    redo = np.flatnonzero(out[:, 8] != 0)
    if redo.size:
        again = ydrop_extend_numba(t_codes, q_codes, t0[redo], q0[redo], dirs[redo], table, gap_open, gap_extend,
                                   ydrop, cover, boxes=True)
        best[redo] = again[0]
        box[redo] = again[3]
    # what the extensions wrote: traceback bytes below the largest "used", anti-diagonals up to the deepest best
    nb = int(out[:, 3].max(initial=1))
    nd = int(out[:, 1].max(initial=0)) + 1
    tb_h, offs_h, los_h = tb[:, :nb].cpu().numpy(), offs[:, :nd].cpu().numpy(), los[:, :nd].cpu().numpy()
    for b in range(B):
        if out[b, 8] != 0:
            k = int(np.searchsorted(redo, b))
            paths_t.append(again[1][k])
            paths_q.append(again[2][k])
            continue
        pt, pq = _trace(tb_h[b], offs_h[b], los_h[b], int(out[b, 2]), int(out[b, 1]))
        paths_t.append(pt)
        paths_q.append(pq)
    if boxes:
        return best, paths_t, paths_q, box.reshape(B, 4)
    return best, paths_t, paths_q


__all__ = ["anchor_peaks_numba", "compact_table", "ydrop_extend_numba", "ydrop_extend_triton"]
