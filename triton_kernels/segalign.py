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
    k = 0
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
