"""Triton kernel for segalign: gap-free X-drop extension of many seed hits (SegAlign's ``find_hsps``).

SegAlign gives each seed hit one CUDA warp that walks its diagonal 32 cells a
step (lane = offset): per-lane substitution score, a prefix sum, a running
maximum and an X-drop test.  Here one program takes ``BLOCK_H`` hits and walks
them together a ``TILE`` of cells per step, so a step works on a
``(BLOCK_H, TILE)`` tile::

    hit h   cells k .. k+TILE-1 along its diagonal (direction +1 right, -1 left)
    s[h,j]  = table[t[t0+d(k+j)], q[q0+d(k+j)]]
    run     = run_before + cumsum_j s              score after each cell
    peak    = max(best_before, cummax_j run)
    drop    = run < peak - xdrop                   first True: the extension ends there
    best    = max of run before the drop           (first maximum -> length)

A hit leaves the loop at its first drop; the program ends when all its hits have.
Cells outside the arrays read as the separator code (a wall), as in the torch twin
:func:`torchhpc.ext.segalign.ops.xdrop_extend_torch`, which this kernel equals.

``_diagonal_scan_kernel`` is the whole filter of a batch in one launch, SegAlign's diagonal-owner design:
one lane per diagonal walks that diagonal's hits in query order, skips the hits whose words end inside the
stretch its last extension scanned (a binary search), and extends the next one both ways with the same walk.  It equals the
rounds of :func:`torchhpc.ext.segalign.ops.ungapped_hsps` (each round: every diagonal's next hit), which
drove two launches and a dozen host syncs per round from Python.  Work: the cells walked (each extended
hit's two X-drop walks) plus ~log2(hits of the diagonal) query-position loads per extension; lanes of one
program wait for their longest walk.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# a global read inside @triton.jit must be a constexpr (compiled Triton refuses plain globals)
SEPARATOR = tl.constexpr(10)


@triton.jit
def _max_combine(a, b):
    return tl.maximum(a, b)


@triton.jit
def _xdrop_walk(t_ptr, q_ptr, table_ptr, t0, q0, live, nt, nq, xdrop, DIRECTION: tl.constexpr,
                BLOCK: tl.constexpr, TILE: tl.constexpr):
    """``(best, length, scanned)`` of the ``BLOCK`` extensions from ``(t0, q0)`` whose ``live`` is set, walked
    ``TILE`` cells a step until each has dropped (the others: zeros)."""
    j = tl.arange(0, TILE)
    # scores in int64, as the torch twin and the compiled CPU filter keep them: a long identical stretch
    # (a self-alignment, a duplicated chromosome) passes 2^31 after ~2e7 cells at 100 a match
    best = tl.zeros((BLOCK,), dtype=tl.int64)
    run = tl.zeros((BLOCK,), dtype=tl.int64)
    length = tl.zeros((BLOCK,), dtype=tl.int64)
    scanned = tl.zeros((BLOCK,), dtype=tl.int64)
    active = live
    k = tl.zeros((), dtype=tl.int64)  # cells walked: 64-bit, as the positions it offsets
    while tl.max(active.to(tl.int32), axis=0) > 0:
        off = DIRECTION * (k + j[None, :])
        ti = t0[:, None] + off
        qi = q0[:, None] + off
        inb = (ti >= 0) & (ti < nt) & (qi >= 0) & (qi < nq) & active[:, None]
        tc = tl.load(t_ptr + ti, mask=inb, other=SEPARATOR).to(tl.int32)
        qc = tl.load(q_ptr + qi, mask=inb, other=SEPARATOR).to(tl.int32)
        s = tl.load(table_ptr + tc * 11 + qc).to(tl.int64)
        # running score, running peak, the first X-drop
        r = run[:, None] + tl.cumsum(s, axis=1)
        peak = tl.maximum(tl.associative_scan(r, 1, _max_combine), best[:, None])
        drop = r < peak - xdrop
        first = tl.min(tl.where(drop, j[None, :], TILE), axis=1)
        # best cell before the drop (the first of equal maxima, as LASTZ's strict '>')
        masked = tl.where(j[None, :] < first[:, None], r, -9223372036854775807)
        t_best = tl.max(masked, axis=1)
        t_arg = tl.min(tl.where(masked == t_best[:, None], j[None, :], TILE), axis=1)
        better = active & (first > 0) & (t_best > best)
        length = tl.where(better, (k + t_arg + 1).to(tl.int64), length)
        best = tl.where(better, t_best, best)
        ended = active & (first < TILE)
        scanned = tl.where(ended, (k + first + 1).to(tl.int64), scanned)
        active = active & (first >= TILE)
        run = tl.sum(tl.where(j[None, :] == TILE - 1, r, 0), axis=1)
        k += TILE
    return best, length, scanned


# H, nt and nq change with every batch and genome: runtime values, so that one compiled kernel per
# direction serves the whole run (specialised on H == 1 or H % 16 == 0 it would compile again mid-run).
@triton.jit(do_not_specialize=["H", "nt", "nq", "xdrop"])
def _xdrop_extend_kernel(
    t_ptr,  # (Nt,) uint8 target codes
    q_ptr,  # (Nq,) uint8 query codes
    table_ptr,  # (11 * 11,) int32 substitution scores
    t_first_ptr,  # (H,) int64 first cell of each hit in the target
    q_first_ptr,  # (H,) int64 first cell in the query
    best_ptr,  # (H,) int64 out: best score
    len_ptr,  # (H,) int64 out: cells up to the best one
    scan_ptr,  # (H,) int64 out: cells scanned
    H,
    nt,
    nq,
    xdrop,
    DIRECTION: tl.constexpr,
    BLOCK_H: tl.constexpr,
    TILE: tl.constexpr,
):
    # 1. program id -> this program's hits
    pid = tl.program_id(0).to(tl.int64)
    rows = pid * BLOCK_H + tl.arange(0, BLOCK_H)
    rmask = rows < H
    t0 = tl.load(t_first_ptr + rows, mask=rmask, other=0)
    q0 = tl.load(q_first_ptr + rows, mask=rmask, other=0)
    # 2. walk TILE cells a step until every hit has dropped
    best, length, scanned = _xdrop_walk(t_ptr, q_ptr, table_ptr, t0, q0, rmask, nt, nq, xdrop, DIRECTION, BLOCK_H,
                                        TILE)
    # 3. store
    tl.store(best_ptr + rows, best, mask=rmask)
    tl.store(len_ptr + rows, length, mask=rmask)
    tl.store(scan_ptr + rows, scanned, mask=rmask)


@triton.jit(do_not_specialize=["D", "nt", "nq", "xdrop"])
def _diagonal_scan_kernel(
    t_ptr,  # (Nt,) uint8 target codes
    q_ptr,  # (Nq,) uint8 query codes
    table_ptr,  # (11 * 11,) int32 substitution scores
    t_end_ptr,  # (N,) int64 hits' word ends in the target, sorted by diagonal, then query position
    q_end_ptr,  # (N,) int64 the same hits' word ends in the query
    start_ptr,  # (D,) int64 first hit of each diagonal
    stop_ptr,  # (D,) int64 one past its last hit
    done_ptr,  # (N,) int8 out: 1 where the hit was extended
    ts_ptr,  # (N,) int64 out: HSP target start (extended hits)
    len_ptr,  # (N,) int64 out: HSP length
    score_ptr,  # (N,) int64 out: HSP score
    D,
    nt,
    nq,
    xdrop,
    BLOCK_D: tl.constexpr,
    TILE: tl.constexpr,
):
    # one lane per diagonal, walking its hits in query order (LASTZ's diagonal table, SegAlign's
    # diagonal-owner filter): a hit whose word ends inside the stretch the diagonal's last extension
    # scanned is skipped, any other is extended both ways; the whole filter of a batch in one launch.
    lanes = tl.program_id(0).to(tl.int64) * BLOCK_D + tl.arange(0, BLOCK_D)
    own = lanes < D
    cur = tl.load(start_ptr + lanes, mask=own, other=0)
    stop = tl.load(stop_ptr + lanes, mask=own, other=0)
    reach = tl.full((BLOCK_D,), -1, dtype=tl.int64)
    active = own & (cur < stop)
    while tl.max(active.to(tl.int32), axis=0) > 0:
        # 1. skip the hits inside the reach of the diagonal's last extension: a binary search for the first
        #    query end past it (hits are sorted by query end within a diagonal), so a dense diagonal (a
        #    tandem repeat, a self-alignment's main diagonal) costs log2 of its hits, not one step each
        q = tl.load(q_end_ptr + cur, mask=active, other=0)
        need = active & (q <= reach)
        lo = tl.where(need, cur + 1, cur)
        hi = tl.where(need, stop, cur)
        while tl.max((lo < hi).to(tl.int32), axis=0) > 0:
            go = lo < hi
            mid = (lo + hi) // 2
            inside = tl.load(q_end_ptr + mid, mask=go, other=0) <= reach
            lo = tl.where(go & inside, mid + 1, lo)
            hi = tl.where(go & (inside == 0), mid, hi)
        cur = lo
        active = active & (cur < stop)
        q = tl.load(q_end_ptr + cur, mask=active, other=0)
        # 2. extend the next hit of each diagonal both ways, as ops.extend_hits does
        t = tl.load(t_end_ptr + cur, mask=active, other=0)
        lb, ll, _ = _xdrop_walk(t_ptr, q_ptr, table_ptr, t - 1, q - 1, active, nt, nq, xdrop, -1, BLOCK_D, TILE)
        rb, rl, rs = _xdrop_walk(t_ptr, q_ptr, table_ptr, t, q, active, nt, nq, xdrop, 1, BLOCK_D, TILE)
        tl.store(done_ptr + cur, tl.full((BLOCK_D,), 1, dtype=tl.int8), mask=active)
        tl.store(ts_ptr + cur, t - ll, mask=active)
        tl.store(len_ptr + cur, ll + rl, mask=active)
        tl.store(score_ptr + cur, lb + rb, mask=active)
        # 3. its reach, and on to the diagonal's next hit
        reach = tl.where(active, q + rs, reach)
        cur += active.to(tl.int64)
        active = active & (cur < stop)


def xdrop_extend_triton(
    t_codes: torch.Tensor,
    q_codes: torch.Tensor,
    t_first: torch.Tensor,
    q_first: torch.Tensor,
    direction: int,
    table: torch.Tensor,
    xdrop: int,
    block_h: int = 32,
    tile: int = 32,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launch :func:`_xdrop_extend_kernel`; arguments and results as ``ops.xdrop_extend_torch``."""
    if t_codes.dtype != torch.uint8 or q_codes.dtype != torch.uint8:
        raise ValueError("t_codes and q_codes must be uint8 codes")
    if t_first.shape != q_first.shape or t_first.dim() != 1:
        raise ValueError("t_first and q_first must be 1-D of one length")
    if direction not in (1, -1):
        raise ValueError(f"direction must be +1 or -1, got {direction}")
    if table.shape != (11, 11):
        raise ValueError(f"table must be (11, 11), got {tuple(table.shape)}")
    H = t_first.numel()
    dev = t_first.device
    best = torch.zeros(H, dtype=torch.int64, device=dev)
    length = torch.zeros(H, dtype=torch.int64, device=dev)
    scanned = torch.zeros(H, dtype=torch.int64, device=dev)
    if H == 0:
        return best, length, scanned
    grid = (triton.cdiv(H, block_h),)
    _xdrop_extend_kernel[grid](
        t_codes.contiguous(), q_codes.contiguous(), table.to(torch.int32).contiguous().reshape(-1),
        t_first.to(torch.int64).contiguous(), q_first.to(torch.int64).contiguous(), best, length, scanned,
        H, t_codes.numel(), q_codes.numel(), int(xdrop),
        DIRECTION=direction, BLOCK_H=block_h, TILE=tile,
    )
    return best, length, scanned


def diagonal_scan_triton(
    t_codes: torch.Tensor,
    q_codes: torch.Tensor,
    t_end: torch.Tensor,
    q_end: torch.Tensor,
    start: torch.Tensor,
    stop: torch.Tensor,
    table: torch.Tensor,
    xdrop: int,
    block_d: int = 32,
    tile: int = 32,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launch :func:`_diagonal_scan_kernel` over hits sorted by diagonal then query end, each diagonal's run
    ``start[d] .. stop[d]``: ``(extended, t_start, length, score)`` per hit (``(N,)``; the last three are
    meaningful where ``extended``).  Equals the rounds of :func:`torchhpc.ext.segalign.ops.ungapped_hsps`."""
    if t_codes.dtype != torch.uint8 or q_codes.dtype != torch.uint8:
        raise ValueError("t_codes and q_codes must be uint8 codes")
    if t_end.shape != q_end.shape or t_end.dim() != 1 or start.shape != stop.shape or start.dim() != 1:
        raise ValueError("t_end/q_end and start/stop must be 1-D pairs of one length each")
    if table.shape != (11, 11):
        raise ValueError(f"table must be (11, 11), got {tuple(table.shape)}")
    n, d = t_end.numel(), start.numel()
    dev = t_end.device
    done = torch.zeros(n, dtype=torch.int8, device=dev)
    ts, length, score = (torch.zeros(n, dtype=torch.int64, device=dev) for _ in range(3))
    if d:
        _diagonal_scan_kernel[(triton.cdiv(d, block_d),)](
            t_codes.contiguous(), q_codes.contiguous(), table.to(torch.int32).contiguous().reshape(-1),
            t_end.to(torch.int64).contiguous(), q_end.to(torch.int64).contiguous(), start.to(torch.int64).contiguous(),
            stop.to(torch.int64).contiguous(), done, ts, length, score, d, t_codes.numel(), q_codes.numel(),
            int(xdrop), BLOCK_D=block_d, TILE=tile,
        )
    return done, ts, length, score


# ----------------------------------------------------------------------------- gapped: LASTZ's Y-drop DP

NEG = tl.constexpr(-(1 << 29))
"""A dead cell (as :data:`torchhpc.ext.segalign.gapped.NEG`): far below any score, no int32 overflow."""

#: the fields of each extension's row of ``out``
YDROP_FIELDS = ("best", "best_d", "best_i", "used", "t_lo", "t_hi", "q_lo", "q_hi", "status")


@triton.jit
def _sweep_code(c):
    # the sweep's code of a sequence code: 0-3 a nucleotide (either case), 4 ambiguous (N, IUPAC), 8 a separator
    return tl.where(c < 8, c & 3, tl.where(c < SEPARATOR, 4, 8))


@triton.jit
def _on_walls(wlo_ptr, whi_ptr, wrow_ptr, olo_ptr, ohi_ptr, n_ocols, uq, ut, check, USE_ROWS: tl.constexpr):
    # whether cell (ut, uq) lies on an alignment found before: the query base's first interval, then its
    # overflow row (Walls of torchhpc.ext.segalign.walls; an empty slot is -1, which no target base is in)
    lo = tl.load(wlo_ptr + uq, mask=check, other=-1)
    hi = tl.load(whi_ptr + uq, mask=check, other=-1)
    on = check & (lo >= 0) & (lo <= ut) & (ut <= hi)
    if USE_ROWS:
        r = tl.load(wrow_ptr + uq, mask=check, other=-1).to(tl.int64)
        has = check & (r >= 0)
        for kk in range(0, n_ocols):
            lo2 = tl.load(olo_ptr + r * n_ocols + kk, mask=has, other=-1)
            hi2 = tl.load(ohi_ptr + r * n_ocols + kk, mask=has, other=-1)
            on = on | (has & (lo2 >= 0) & (lo2 <= ut) & (ut <= hi2))
    return on


@triton.jit(do_not_specialize=["n_t", "n_q", "amb", "oe", "ext", "ydrop", "n_ocols", "tb_cap", "d_cap"])
def _ydrop_kernel(
    t_ptr, q_ptr, n_t, n_q,  # uint8 sequence codes (torchhpc.ext.segalign.fasta)
    t0_ptr, q0_ptr, dir_ptr,  # (B,) int64: each extension's first cell and direction (+1 / -1)
    sc_ptr, amb, oe, ext, ydrop,  # (16,) int32 nucleotide scores 4 t + q; ambiguous score; gap open+extend, extend
    wlo_ptr, whi_ptr, wrow_ptr, olo_ptr, ohi_ptr, n_ocols,  # the walls (int32; int64 past 2^31 target bases)
    h_ptr, e_ptr, f_ptr,  # (B, 3 | 2 | 2, CAP) int32 scratch: anti-diagonals D-2, D-1, D of H; D-1, D of E, F
    tb_ptr, tb_cap, offs_ptr, los_ptr, d_cap,  # (B, tb_cap) uint8 traceback; (B, d_cap) int64 start, first cell
    out_ptr,  # (B, 9) int64: YDROP_FIELDS
    USE_COVER: tl.constexpr, USE_ROWS: tl.constexpr, CAP: tl.constexpr, BLOCK: tl.constexpr,
):
    # One program sweeps one extension's anti-diagonals D = I + J (torchhpc.ext.segalign.gapped_kernels'
    # _extend_one, cell for cell): each anti-diagonal's live interval in chunks of BLOCK cells, Gotoh's H / E /
    # F with LASTZ's Y-drop, 4 traceback bits a cell into device memory.  The anti-diagonal buffers are
    # circular over I (I mod CAP), each read masked to the interval it holds, so nothing is ever cleared.
    # Per cell: 5 int32 neighbour loads, 2 code loads, 3 int32 stores and 1 traceback byte (about 30 bytes,
    # mostly from L1/L2), ~40 integer ops; the walls add 2 loads (plus 2 per overflow column).  status: 0 done,
    # 1 out of room (interval > CAP, traceback > tb_cap or anti-diagonals > d_cap): the caller redoes it.
    pid = tl.program_id(0).to(tl.int64)
    t0 = tl.load(t0_ptr + pid)
    q0 = tl.load(q0_ptr + pid)
    d = tl.load(dir_ptr + pid)
    zero = t0 - t0
    n_i = tl.maximum(tl.where(d > 0, n_t - t0, t0 + 1), 0)  # cells exist for I <= n_i, J <= n_j
    n_j = tl.maximum(tl.where(d > 0, n_q - q0, q0 + 1), 0)
    hb = h_ptr + pid * 3 * CAP
    eb = e_ptr + pid * 2 * CAP
    fb = f_ptr + pid * 2 * CAP
    tbb = tb_ptr + pid * tb_cap
    ob = offs_ptr + pid * d_cap
    lb = los_ptr + pid * d_cap
    lanes = tl.arange(0, BLOCK).to(tl.int64)
    # anti-diagonal 0: the origin, H = 0 (slot 0)
    origin = lanes == 0
    tl.store(hb + lanes, tl.where(origin, 0, NEG).to(tl.int32), mask=origin)
    tl.store(eb + lanes, tl.full((BLOCK,), NEG, tl.int32), mask=origin)
    tl.store(fb + lanes, tl.full((BLOCK,), NEG, tl.int32), mask=origin)
    tl.store(ob, zero)
    tl.store(lb, zero)
    tl.store(tbb, zero.to(tl.uint8))
    big = zero + (1 << 62)
    used = zero + 1
    best = zero
    best_d = zero
    best_i = zero
    bt0, bt1, bq0, bq1 = big, -big, big, -big
    c1a, c1b, c2a, c2b = zero, zero, zero + 1, zero  # intervals held by D-1 and D-2 (a > b: none)
    r1a, r1b, r2a, r2b = zero, zero, zero + 1, zero  # their live intervals
    D = zero
    status = zero
    while ((r1a <= r1b) | (r2a <= r2b)) & (status == 0):
        D += 1
        a = tl.minimum(tl.where(r1a <= r1b, r1a, big), tl.where(r2a <= r2b, r2a + 1, big))
        b = tl.maximum(tl.where(r1a <= r1b, r1b + 1, -big), tl.where(r2a <= r2b, r2b + 1, -big))
        a = tl.maximum(tl.maximum(a, D - n_j), 0)
        b = tl.minimum(tl.minimum(b, D), n_i)
        n = b - a + 1
        if (D >= d_cap) | (n > CAP) | (used + tl.maximum(n, 0) > tb_cap):
            status = zero + 1
        else:
            tl.store(ob + D, used)
            tl.store(lb + D, a)
            na = big
            nb = -big
            if a <= b:
                bt0 = tl.minimum(bt0, tl.minimum(t0 + d * (a - 1), t0 + d * (b - 1)))
                bt1 = tl.maximum(bt1, tl.maximum(t0 + d * (a - 1), t0 + d * (b - 1)))
                bq0 = tl.minimum(bq0, tl.minimum(q0 + d * (D - a - 1), q0 + d * (D - b - 1)))
                bq1 = tl.maximum(bq1, tl.maximum(q0 + d * (D - a - 1), q0 + d * (D - b - 1)))
                h1 = hb + ((D - 1) % 3) * CAP
                h2 = hb + ((D - 2 + 3) % 3) * CAP
                hn = hb + (D % 3) * CAP
                e1 = eb + ((D - 1) % 2) * CAP
                en = eb + (D % 2) * CAP
                f1 = fb + ((D - 1) % 2) * CAP
                fn = fb + (D % 2) * CAP
                cut = best - ydrop
                top = zero + NEG
                for s in range(0, n, BLOCK):
                    I = a + s + lanes
                    J = D - I
                    ok = I <= b
                    ci = (I & (CAP - 1))
                    cl = ((I - 1) & (CAP - 1))
                    in1 = ok & (I >= c1a) & (I <= c1b)
                    in1l = ok & (I - 1 >= c1a) & (I - 1 <= c1b)
                    in2l = ok & (I - 1 >= c2a) & (I - 1 <= c2b)
                    up = tl.load(h1 + ci, mask=in1, other=NEG)
                    left = tl.load(h1 + cl, mask=in1l, other=NEG)
                    e_up = tl.load(e1 + ci, mask=in1, other=NEG)
                    f_left = tl.load(f1 + cl, mask=in1l, other=NEG)
                    diag = tl.load(h2 + cl, mask=in2l, other=NEG)
                    ut = t0 + d * (I - 1)
                    uq = q0 + d * (J - 1)
                    tc = _sweep_code(tl.load(t_ptr + ut, mask=ok & (I >= 1), other=0).to(tl.int32))
                    qc = _sweep_code(tl.load(q_ptr + uq, mask=ok & (J >= 1), other=0).to(tl.int32))
                    e_open = up - oe
                    e_ext = e_up - ext
                    f_open = left - oe
                    f_ext = f_left - ext
                    ev = tl.maximum(e_open, e_ext)
                    fv = tl.maximum(f_open, f_ext)
                    sc = tl.load(sc_ptr + (tc & 3) * 4 + (qc & 3), mask=ok, other=0)
                    sc = tl.where(((tc | qc) & 4) != 0, amb, sc)
                    hd = diag + sc
                    ef = tl.maximum(ev, fv)
                    hv = tl.maximum(hd, ef)
                    code = ((hd < ef).to(tl.int32) * (1 + (ev < fv).to(tl.int32))) \
                        | ((e_ext > e_open).to(tl.int32) << 2) | ((f_ext > f_open).to(tl.int32) << 3)
                    tl.store(tbb + used + (I - a), code.to(tl.uint8), mask=ok)
                    bad = ((tc | qc) & 8) != 0
                    if USE_COVER:
                        bad = bad | _on_walls(wlo_ptr, whi_ptr, wrow_ptr, olo_ptr, ohi_ptr, n_ocols, uq, ut,
                                              ok & (I >= 1) & (J >= 1), USE_ROWS)
                    hv = tl.where(bad | (~ok), NEG, hv)
                    top = tl.maximum(top, tl.max(hv, axis=0))
                    hkeep = tl.where(hv < cut, NEG, hv)
                    tl.store(hn + ci, hkeep, mask=ok)
                    tl.store(en + ci, tl.where(bad | (ev < cut), NEG, ev), mask=ok)
                    tl.store(fn + ci, tl.where(bad | (fv < cut), NEG, fv), mask=ok)
                    live = ok & (hkeep != NEG)
                    na = tl.minimum(na, tl.min(tl.where(live, I, big), axis=0))
                    nb = tl.maximum(nb, tl.max(tl.where(live, I, -big), axis=0))
                if top > best:  # a new best raises the cut: the cells of this anti-diagonal below it die
                    tl.debug_barrier()
                    cut = top - ydrop
                    first = big
                    na = big
                    nb = -big
                    for s in range(0, n, BLOCK):
                        I = a + s + lanes
                        ok = I <= b
                        ci = (I & (CAP - 1))
                        hv = tl.load(hn + ci, mask=ok, other=NEG)
                        ev = tl.load(en + ci, mask=ok, other=NEG)
                        fv = tl.load(fn + ci, mask=ok, other=NEG)
                        first = tl.minimum(first, tl.min(tl.where(ok & (hv == top), I, big), axis=0))
                        hkeep = tl.where(hv < cut, NEG, hv)
                        tl.store(hn + ci, hkeep, mask=ok)
                        tl.store(en + ci, tl.where(ev < cut, NEG, ev), mask=ok)
                        tl.store(fn + ci, tl.where(fv < cut, NEG, fv), mask=ok)
                        live = ok & (hkeep != NEG)
                        na = tl.minimum(na, tl.min(tl.where(live, I, big), axis=0))
                        nb = tl.maximum(nb, tl.max(tl.where(live, I, -big), axis=0))
                    best = top
                    best_d = D
                    best_i = first
                used += n
                tl.debug_barrier()  # this anti-diagonal's cells are read by the next two
            c2a, c2b = c1a, c1b
            c1a = tl.where(a <= b, a, zero + 1)
            c1b = tl.where(a <= b, b, zero)
            r2a, r2b = r1a, r1b
            r1a = tl.where(na <= nb, na, zero + 1)
            r1b = tl.where(na <= nb, nb, zero)
    row = out_ptr + pid * 9
    tl.store(row + 0, best)
    tl.store(row + 1, best_d)
    tl.store(row + 2, best_i)
    tl.store(row + 3, used)
    tl.store(row + 4, bt0)
    tl.store(row + 5, bt1)
    tl.store(row + 6, bq0)
    tl.store(row + 7, bq1)
    tl.store(row + 8, status)


def ydrop_sweep_triton(t: torch.Tensor, q: torch.Tensor, t0: torch.Tensor, q0: torch.Tensor, dirs: torch.Tensor,
                       scores16: torch.Tensor, amb: int, gap_open: int, gap_extend: int, ydrop: int,
                       walls: tuple | None = None, *, cap: int = 1024, tb_cap: int = 1 << 20, d_cap: int = 1 << 14,
                       block: int = 128) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sweep ``B`` Y-drop extensions, one program each (:func:`_ydrop_kernel`); one launch, no host sync.

    ``t``, ``q`` uint8 codes and ``t0``, ``q0``, ``dirs`` ``(B,)`` int64 on one device; ``scores16`` the 16
    nucleotide scores (int32, ``4 t + q``); ``walls``: ``(lo, hi, row, olo, ohi)`` tensors of
    :class:`torchhpc.ext.segalign.walls.Walls` (int32; the positions int64 for a target of 2^31 bases or more;
    ``lo``/``hi`` one column; ``row`` ``None`` without overflow
    rows) or ``None``.  ``cap``: the widest anti-diagonal (a power of two >= ``block``); ``tb_cap`` traceback
    bytes and ``d_cap`` anti-diagonals per extension: an extension needing more ends with status 1.

    Returns:
        ``out (B, 9)`` int64 (:data:`YDROP_FIELDS`), ``tb (B, tb_cap)`` uint8, ``offs`` and ``los``
        ``(B, d_cap)`` int64: anti-diagonal ``D``'s traceback bytes start at ``offs[D]``, its first cell is
        ``I = los[D]``.
    """
    if cap < block or cap & (cap - 1) or block & (block - 1):
        raise ValueError(f"cap ({cap}) and block ({block}) must be powers of two, cap >= block")
    dev = t.device
    B = int(t0.numel())
    out = torch.zeros((B, len(YDROP_FIELDS)), dtype=torch.int64, device=dev)
    tb = torch.empty((B, tb_cap), dtype=torch.uint8, device=dev)
    offs = torch.zeros((B, d_cap), dtype=torch.int64, device=dev)
    los = torch.zeros((B, d_cap), dtype=torch.int64, device=dev)
    if B == 0:
        return out, tb, offs, los
    h = torch.empty((B, 3, cap), dtype=torch.int32, device=dev)
    e = torch.empty((B, 2, cap), dtype=torch.int32, device=dev)
    f = torch.empty((B, 2, cap), dtype=torch.int32, device=dev)
    none = torch.full((1,), -1, dtype=torch.int32, device=dev)
    lo, hi, row, olo, ohi = walls if walls is not None else (none, none, None, none, none)
    use_rows = walls is not None and row is not None and olo.numel() > 0
    n_ocols = int(olo.shape[1]) if use_rows else 0
    _ydrop_kernel[(B,)](
        t, q, t.numel(), q.numel(), t0, q0, dirs, scores16, amb, gap_open + gap_extend, gap_extend, ydrop,
        lo, hi, row if use_rows else none, olo if use_rows else none, ohi if use_rows else none, n_ocols,
        h, e, f, tb, tb_cap, offs, los, d_cap, out,
        USE_COVER=walls is not None, USE_ROWS=use_rows, CAP=cap, BLOCK=block,
    )
    return out, tb, offs, los
