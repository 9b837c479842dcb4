"""The ungapped X-drop filter: seed hits -> HSPs (SegAlign's ``find_hsps``, LASTZ's gap-free extension).

Each hit ``(t_end, q_end)`` is extended along its diagonal to the left from the
end of the seed word (through the word) and to the right from the end, one
substitution score per cell, each side stopping when the running score falls
more than ``xdrop`` below the best it has reached (LASTZ ``xdrop_extend_seed_hit``).
The HSP is the span between the two best points and scores ``left + right``.

:func:`xdrop_extend` is the op: a vectorised torch twin (all hits at once, a tile
of cells per step, the tile doubling as hits finish) and the Triton kernel of
:mod:`torchhpc.triton_kernels.segalign` on CUDA.  :func:`ungapped_hsps` drives it
the way LASTZ's diagonal bookkeeping does, in rounds: per diagonal only the
leftmost not-yet-scanned hit is extended, and hits inside the part of the diagonal
that extension scanned are dropped (on CUDA all rounds are one launch of the
diagonal-owner kernel, a lane per diagonal walking its hits); then low-complexity HSPs lose score by
LASTZ's entropy factor, HSPs below ``hspthresh`` go and HSPs contained in another
on the same diagonal are removed (SegAlign's de-duplication).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from torchhpc.ext.core.budgets import HostBudget
from torchhpc.ext.core.dispatch import resolve_backend
from torchhpc.ext.core.errors import InputError
from torchhpc.ext.core.lazy import lazy_module

from .config import BACKENDS
from .seeds import seed_keys
from .torch_numba import host, is_tensor, like

torch = lazy_module("torch")  # the tensor paths; the compiled CPU path's HSPs are NumPy arrays (no torch)

#: Host work of the CUDA path per strand on the budget test's 4 kbp pair (``tests/test_gpu_budgets.py``),
#: seeding included: the filter is one launch of the diagonal-owner kernel per batch of hits (two syncs: the
#: diagonals, then the extended hits), the HSPs' entropy, threshold and de-duplication take index tensors
#: from one ``nonzero`` each; the rest sizes seeding's tensors (look-ups, hits).  Was 36 syncs and 332
#: launches, with rounds driven from Python and boolean masks.
GPU_BUDGETS = {
    "filter": HostBudget("strand", syncs=13, launches=290, why="each variable-sized tensor is one nonzero"),
    # --gapped-by triton (torchhpc.ext.segalign.gapped_kernels.ydrop_extend_triton): per launch of a window of
    # anchors, the sweep and its buffers (3 zeros, 1 full), then 4 copies back (counted twice: the copy and its
    # NumPy view): the rows, the traceback bytes and the anti-diagonals' starts and first cells
    "gapped": HostBudget("launch", syncs=8, launches=5, why="one sweep per window; 4 device-to-host copies"),
}


def xdrop_extend_torch(
    t_codes: torch.Tensor,
    q_codes: torch.Tensor,
    t_first: torch.Tensor,
    q_first: torch.Tensor,
    direction: int,
    table: torch.Tensor,
    xdrop: int,
    tile: int = 32,
    max_tile: int = 2048,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gap-free X-drop extension of many diagonals (the torch twin of the Triton kernel).

    Args:
        t_codes, q_codes: ``(Nt,)``, ``(Nq,)`` uint8 codes; both start and end with a separator.
        t_first, q_first: ``(H,)`` int64 first cell of each extension.
        direction: ``+1`` (to the right) or ``-1`` (to the left).
        table: ``(11, 11)`` int32 substitution scores (separator: a wall).
        xdrop: stop once the running score is more than this below the best.

    Returns:
        ``best (H,)`` int64 best running score (``>= 0``; 0 = empty extension),
        ``length (H,)`` int64 cells up to and including the best one,
        ``scanned (H,)`` int64 cells looked at (through the one that dropped).
    """
    H = t_first.numel()
    dev = t_first.device
    best = torch.zeros(H, dtype=torch.int64, device=dev)
    length = torch.zeros(H, dtype=torch.int64, device=dev)
    scanned = torch.zeros(H, dtype=torch.int64, device=dev)
    if H == 0:
        return best, length, scanned
    # pad both code arrays with separators so a tile never reads out of bounds (no clamps in the loop)
    pad = max_tile
    sep = torch.full((pad,), 10, dtype=torch.int32, device=dev)
    t_pad = torch.cat([sep * 11, t_codes.to(torch.int32) * 11, sep * 11])
    q_pad = torch.cat([sep, q_codes.to(torch.int32), sep])
    a_t, a_q = t_first + pad, q_first + pad
    if direction < 0:
        # walking left is walking right on the reversed arrays: one contiguous window per hit either way
        t_pad, q_pad = t_pad.flip(0), q_pad.flip(0)
        a_t, a_q = t_pad.numel() - 1 - a_t, q_pad.numel() - 1 - a_q
    # running scores in int64, as LASTZ, the compiled CPU filter and the Triton kernel keep them (int32 wraps
    # past 2^31: ~21 Mbp of identical sequence at HOXD70's match scores)
    flat_table = table.reshape(-1).to(torch.int64)
    neg = torch.iinfo(torch.int64).min
    act = torch.arange(H, device=dev)
    a_best = torch.zeros(H, dtype=torch.int64, device=dev)
    a_len = torch.zeros(H, dtype=torch.int64, device=dev)
    a_run = torch.zeros(H, dtype=torch.int64, device=dev)
    k = 0
    T = tile
    while act.numel():
        j = torch.arange(T, device=dev)
        # (H, T) windows of the two sequences: rows of an unfolded view, copied by index_select
        tw = t_pad.unfold(0, T, 1).index_select(0, a_t + k)
        qw = q_pad.unfold(0, T, 1).index_select(0, a_q + k)
        s = flat_table[tw + qw]
        run = s.cumsum(1, dtype=torch.int64).add_(a_run[:, None])
        peak = torch.maximum(run.cummax(1).values, a_best[:, None])
        drop = run < peak - xdrop
        done = drop.any(1)
        first = torch.where(done, drop.to(torch.uint8).argmax(1), T)
        masked = torch.where(j[None, :] < first[:, None], run, neg)
        t_arg = masked.argmax(1)  # first maximum (torch.argmax returns the first)
        t_best = masked.gather(1, t_arg[:, None]).squeeze(1)
        better = t_best > a_best
        a_len = torch.where(better, k + t_arg + 1, a_len)
        a_best = torch.where(better, t_best, a_best)
        if bool(done.any()):
            idx = act[done]
            best[idx] = a_best[done]
            length[idx] = a_len[done]
            scanned[idx] = k + first[done] + 1
            keep = ~done
            act, a_t, a_q, a_best, a_len = act[keep], a_t[keep], a_q[keep], a_best[keep], a_len[keep]
            a_run = run[keep, -1]
        else:
            a_run = run[:, -1]
        k += T
        T = min(T * 2, max_tile)
    return best, length, scanned


def xdrop_extend(
    t_codes: torch.Tensor,
    q_codes: torch.Tensor,
    t_first: torch.Tensor,
    q_first: torch.Tensor,
    direction: int,
    table: torch.Tensor,
    xdrop: int,
    backend: Literal["auto", "torch", "triton", "numba"] = "auto",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Dispatch: the Triton kernel for CUDA tensors, the numba kernel for CPU tensors where
    numba is installed (``auto``), the torch twin otherwise
    (:func:`torchhpc.ext.core.dispatch.resolve_backend` decides).

    Shapes and results as :func:`xdrop_extend_torch`.

    Raises:
        InputError: an unknown backend, one that cannot run on the tensors' device, or a
            direction other than +-1.
    """
    if direction not in (1, -1):
        raise InputError(f"direction must be +1 or -1, got {direction}")
    backend = resolve_backend(backend, t_codes.device, choices=BACKENDS)
    if backend == "triton":
        from torchhpc.triton_kernels.segalign import xdrop_extend_triton

        return xdrop_extend_triton(t_codes, q_codes, t_first, q_first, direction, table, xdrop)
    if backend == "numba":
        from .filter_kernels import xdrop_extend_numba

        return xdrop_extend_numba(t_codes, q_codes, t_first, q_first, direction, table, xdrop)
    return xdrop_extend_torch(t_codes, q_codes, t_first, q_first, direction, table, xdrop)


# ----------------------------------------------------------------------------- HSPs


@dataclass
class HSPs:
    """Ungapped segments on one strand, in concatenated code coordinates.

    Attributes:
        t_start, q_start: ``(M,)`` int64 first cell of each HSP (target / query codes).
        length: ``(M,)`` int64 number of aligned cells.
        score: ``(M,)`` int64 score (after the entropy adjustment).
        strand: ``+`` (query as given) or ``-`` (query reverse-complemented).

    The fields are tensors, or NumPy arrays on the compiled CPU path without torch (``device=None``).
    """

    t_start: torch.Tensor
    q_start: torch.Tensor
    length: torch.Tensor
    score: torch.Tensor
    strand: str = "+"

    def __len__(self) -> int:
        return len(self.t_start)

    @staticmethod
    def empty(strand: str = "+", device="cpu") -> HSPs:
        """No HSPs: tensors on ``device``, or NumPy arrays with ``device=None``."""
        if device is None:
            return HSPs(*(np.zeros(0, np.int64) for _ in range(4)), strand)
        z = torch.zeros(0, dtype=torch.int64, device=device)
        return HSPs(z, z.clone(), z.clone(), z.clone(), strand)

    @property
    def fields(self) -> tuple:
        return self.t_start, self.q_start, self.length, self.score

    def select(self, idx) -> HSPs:
        return HSPs(*(x[idx] for x in self.fields), self.strand)

    def to(self, device) -> HSPs:
        """On ``device`` (tensors); arrays stay arrays where ``device`` is ``None`` or the CPU."""
        if not is_tensor(self.t_start) and (device is None or str(device) == "cpu"):
            return self
        return HSPs(*(torch.as_tensor(x).to(device) for x in self.fields), self.strand)

    @staticmethod
    def cat(parts: list[HSPs], strand: str = "+", device="cpu") -> HSPs:
        """The HSPs of ``parts`` one after the other (tensors, or arrays where the parts hold arrays; no parts:
        :meth:`empty` on ``device``)."""
        if not parts:
            return HSPs.empty(strand, device)
        if not is_tensor(parts[0].t_start):
            return HSPs(*(np.concatenate(x) for x in zip(*(p.fields for p in parts), strict=True)), strand)
        return HSPs(*(torch.cat(x) for x in zip(*(p.fields for p in parts), strict=True)), strand)


def extend_hits(
    t_codes: torch.Tensor, q_codes: torch.Tensor, t_end: torch.Tensor, q_end: torch.Tensor,
    table: torch.Tensor, xdrop: int, backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Extend hits both ways: ``(t_start, length, score, right_scanned)`` of each HSP (``(H,)`` each)."""
    lb, ll, _ = xdrop_extend(t_codes, q_codes, t_end - 1, q_end - 1, -1, table, xdrop, backend)
    rb, rl, rs = xdrop_extend(t_codes, q_codes, t_end, q_end, +1, table, xdrop, backend)
    return t_end - ll, ll + rl, lb + rb, rs


def match_entropy(t_codes: torch.Tensor, q_codes: torch.Tensor, t_start: torch.Tensor, q_start: torch.Tensor,
                  length: torch.Tensor) -> torch.Tensor:
    """LASTZ's entropy factor of each segment (its ``entropy()`` of an ungapped alignment).

    Counts uppercase A, C, G, T at the positions where both sequences carry the same
    letter, turns the counts into frequencies over the segment *length* (so mismatches
    lower every term) and returns ``-sum p log p / log 4`` as ``(M,)`` float64; segments
    with fewer than 20 such matches get 1 (no change), as in LASTZ.
    """
    M = t_start.numel()
    if M == 0:
        return torch.zeros(0, dtype=torch.float64, device=t_start.device)
    rep = torch.repeat_interleave(torch.arange(M, device=t_start.device), length)
    off = torch.arange(rep.numel(), device=t_start.device) - (length.cumsum(0) - length)[rep]
    a = t_codes[t_start[rep] + off].to(torch.int64)
    b = q_codes[q_start[rep] + off].to(torch.int64)
    match = (a < 4) & (a == b)  # LASTZ compares the letters themselves: soft-masked matches do not count
    counts = torch.zeros(M * 4, dtype=torch.float64, device=t_start.device)
    # every position adds 1 or 0 (integers: exact in any order), so no mask has to size a tensor on the host
    counts.index_add_(0, rep * 4 + (a & 3), match.to(torch.float64))
    counts = counts.view(M, 4)
    n = counts.sum(1)
    p = counts / length.to(torch.float64).clamp(min=1)[:, None]
    ent = -(torch.where(p > 0, p * torch.log(p), torch.zeros_like(p))).sum(1) / math.log(4.0)
    return torch.where(n >= 20, ent, torch.ones_like(ent))


def remove_contained(h: HSPs) -> HSPs:
    """Drop HSPs lying inside another on the same diagonal (SegAlign's de-duplication), keep order by query."""
    if len(h) <= 1:
        return h
    if not is_tensor(h.t_start):
        return _remove_contained_arrays(h)
    diag = h.t_start - h.q_start
    end = h.q_start + h.length
    # sort by diagonal, start, then longer first: a later HSP is contained iff its end <= max end so far.
    # Three stable sorts, least significant key first: one combined int64 key (diag * big^2 + ...)
    # overflows once the sequences pass ~2 Mbp
    order = _lexsort(-end, h.q_start, diag)
    big = end.max() + 2  # (a tensor: no host sync)
    d, e = diag[order], end[order]
    same = torch.zeros_like(d, dtype=torch.bool)
    same[1:] = d[1:] == d[:-1]
    # running max of ends within each diagonal run: offset each run so cummax never crosses runs
    run_id = torch.cumsum((~same).to(torch.int64), 0)
    shifted = e + run_id * big
    prev_max = torch.cat([shifted.new_full((1,), -1), shifted.cummax(0).values[:-1]])
    contained = same & (shifted <= prev_max)
    kept = order.index_select(0, torch.nonzero(~contained).reshape(-1))
    kept = kept[_lexsort(h.t_start[kept], h.q_start[kept])] if kept.numel() else kept
    return h.select(kept)


def _remove_contained_arrays(h: HSPs) -> HSPs:
    """:func:`remove_contained` of HSPs held as NumPy arrays (the same HSPs kept, in the same order)."""
    diag = h.t_start - h.q_start
    end = h.q_start + h.length
    order = np.lexsort((-end, h.q_start, diag))  # by diagonal, start, then longer first (stable)
    d, e = diag[order], end[order]
    same = np.zeros(d.size, dtype=bool)
    same[1:] = d[1:] == d[:-1]
    run_id = np.cumsum(~same, dtype=np.int64)
    shifted = e + run_id * (e.max() + 2)  # each diagonal's run of ends offset past the previous run's
    prev_max = np.concatenate([[-1], np.maximum.accumulate(shifted)[:-1]])
    kept = order[~(same & (shifted <= prev_max))]
    return h.select(kept[np.lexsort((h.t_start[kept], h.q_start[kept]))])


def _lexsort(*keys: torch.Tensor) -> torch.Tensor:
    """The permutation sorting by ``keys[-1]``, then ``keys[-2]``, ... (numpy's ``lexsort`` order): stable
    sorts from the least significant key, so no key is ever combined with another into one integer."""
    order = torch.argsort(keys[0], stable=True)
    for k in keys[1:]:
        order = order[torch.argsort(k[order], stable=True)]
    return order


def ungapped_hsps(
    t_codes: torch.Tensor, q_codes: torch.Tensor, t_end: torch.Tensor, q_end: torch.Tensor,
    table: torch.Tensor, xdrop: int = 910, hspthresh: int = 3000, entropy: bool = True,
    backend: str = "auto", strand: str = "+", threads: int | None = None,
) -> tuple[HSPs, dict]:
    """HSPs from one batch of seed hits (see the module docstring).

    ``threads=1`` keeps the numba kernel single-threaded (for callers that run batches side by side).

    Returns:
        the HSPs (contained ones removed, sorted by query then target start) and counters
        ``{"hits", "extended", "rounds"}``.
    """
    stats = {"hits": int(t_end.numel()), "extended": 0, "rounds": 0}
    if t_end.numel() == 0:
        return HSPs.empty(strand, t_end.device), stats
    backend = resolve_backend(backend, t_codes.device, choices=BACKENDS)
    parts = []
    if backend == "numba":
        from .filter_kernels import ungapped_scan_hits

        *raw, n_ext = ungapped_scan_hits(t_codes, q_codes, t_end, q_end, table, xdrop, hspthresh, threads)
        parts.append(tuple(raw))
        stats["extended"], stats["rounds"] = n_ext, 1
        diag = t_end[:0]
    else:
        diag = t_end - q_end
        order = _lexsort(q_end, diag)  # by diagonal, then query position (no combined key to overflow)
        diag, q_end_s, t_end_s = diag[order], q_end[order], t_end[order]
    if backend == "triton":  # every round in one launch: a lane per diagonal walks its hits
        from torchhpc.triton_kernels.segalign import diagonal_scan_triton

        lead = torch.ones_like(diag, dtype=torch.bool)
        lead[1:] = diag[1:] != diag[:-1]
        start = torch.nonzero(lead).reshape(-1)  # a sync: the number of diagonals sizes the launch
        stop = torch.cat([start[1:], start.new_full((1,), diag.numel())])
        done, ts, ln, sc = diagonal_scan_triton(t_codes, q_codes, t_end_s, q_end_s, start, stop, table, xdrop)
        hit = torch.nonzero(done).reshape(-1)  # the one sync for the results
        ts, ln, sc = ts[hit], ln[hit], sc[hit]
        parts.append((ts, ts - diag[hit], ln, sc))
        stats["extended"], stats["rounds"] = hit.numel(), 1
        diag = diag[:0]
    while diag.numel():
        stats["rounds"] += 1
        lead = torch.ones_like(diag, dtype=torch.bool)
        lead[1:] = diag[1:] != diag[:-1]
        lt, lq = t_end_s[lead], q_end_s[lead]
        ts, ln, sc, rs = extend_hits(t_codes, q_codes, lt, lq, table, xdrop, backend)
        stats["extended"] += int(lt.numel())
        parts.append((ts, ts - (lt - lq), ln, sc))
        # drop hits whose word ends inside the stretch of the diagonal the leader scanned
        which = torch.cumsum(lead.to(torch.int64), 0) - 1
        reach = (lq + rs)[which]
        keep = (~lead) & (q_end_s > reach)
        diag, q_end_s, t_end_s = diag[keep], q_end_s[keep], t_end_s[keep]
    ts, qs, ln, sc = (torch.cat(x) for x in zip(*parts, strict=True))
    return _finish(t_codes, q_codes, ts, qs, ln, sc, hspthresh, entropy, strand, backend), stats


def ungapped_hsps_fused(t_codes: torch.Tensor, q_codes: torch.Tensor, index, start: int, end: int,
                        transition: bool, max_hits: int, table: torch.Tensor, xdrop: int = 910,
                        hspthresh: int = 3000, entropy: bool = True, strand: str = "+",
                        threads: int | None = None) -> tuple[HSPs, dict]:
    """Seeding and the filter of one query interval in the numba kernel (see
    :func:`.filter_kernels.seed_scan_numba`): the HSPs of all its batches and the summed counters.
    Given the codes and ``index`` as NumPy arrays (and ``table``), the HSPs are arrays too (no torch)."""
    from .filter_kernels import seed_scan_numba

    qkeys = seed_keys(q_codes, index.pattern, start, end, backend="numba")
    ts, qs, ln, sc, st = seed_scan_numba(t_codes, q_codes, index, start, qkeys, transition, max_hits, table, xdrop,
                                         hspthresh, threads)
    st["rounds"] = 1
    return _finish(t_codes, q_codes, ts, qs, ln, sc, hspthresh, entropy, strand), st


def _finish(t_codes, q_codes, ts, qs, ln, sc, hspthresh, entropy, strand, backend: str = "numba") -> HSPs:
    """Entropy adjustment, the score threshold and removal of contained HSPs.  On the CPU one NumPy
    implementation (:func:`_finish_arrays`) serves tensors and arrays alike, so that the entropy's
    floating point is the same whichever way the pipeline ran; the GPU's filter (``triton``), tensor ops."""
    if not is_tensor(ts) or (ts.device.type == "cpu" and backend != "triton"):
        h = _finish_arrays(*(host(x) for x in (t_codes, q_codes, ts, qs, ln, sc)), hspthresh, entropy, strand)
        return h if not is_tensor(ts) else HSPs(*(like(ts, x) for x in h.fields), strand)
    return _finish_tensors(t_codes, q_codes, ts, qs, ln, sc, hspthresh, entropy, strand)


def _finish_tensors(t_codes, q_codes, ts, qs, ln, sc, hspthresh, entropy, strand) -> HSPs:
    """:func:`_finish` as tensor ops (a GPU's; the reference of :func:`_finish_arrays`)."""
    # index tensors from one nonzero each, not boolean masks (each of which would be a host sync)
    if entropy:
        adj = torch.nonzero((sc >= hspthresh) & (sc <= 3 * hspthresh)).reshape(-1)
        if adj.numel():
            q = match_entropy(t_codes, q_codes, ts.index_select(0, adj), qs.index_select(0, adj),
                              ln.index_select(0, adj))
            low = torch.floor(sc.index_select(0, adj).to(torch.float64) * q).to(sc.dtype)
            sc = sc.index_put((adj,), low)
    keep = torch.nonzero(sc >= hspthresh).reshape(-1)
    return remove_contained(HSPs(*(x.index_select(0, keep) for x in (ts, qs, ln, sc)), strand))


def _finish_arrays(t_codes, q_codes, ts, qs, ln, sc, hspthresh, entropy, strand) -> HSPs:
    """:func:`_finish` on NumPy arrays (the same HSPs as :func:`_finish_tensors`)."""
    if entropy:
        adj = np.flatnonzero((sc >= hspthresh) & (sc <= 3 * hspthresh))
        if adj.size:
            q = _entropy_arrays(t_codes, q_codes, ts[adj], qs[adj], ln[adj])
            sc = sc.copy()
            sc[adj] = np.floor(sc[adj].astype(np.float64) * q).astype(sc.dtype)
    keep = np.flatnonzero(sc >= hspthresh)
    return remove_contained(HSPs(ts[keep], qs[keep], ln[keep], sc[keep], strand))


def _entropy_arrays(t_codes: np.ndarray, q_codes: np.ndarray, t_start: np.ndarray, q_start: np.ndarray,
                    length: np.ndarray) -> np.ndarray:
    """:func:`match_entropy` on NumPy arrays."""
    M = t_start.size
    rep = np.repeat(np.arange(M), length)
    off = np.arange(rep.size) - np.repeat(np.cumsum(length) - length, length)
    a = t_codes[t_start[rep] + off].astype(np.int64)
    b = q_codes[q_start[rep] + off].astype(np.int64)
    match = (a < 4) & (a == b)  # the letters themselves: soft-masked matches do not count
    counts = np.bincount(rep * 4 + (a & 3), weights=match, minlength=M * 4).reshape(M, 4)  # whole numbers: exact
    n = counts.sum(1)
    p = counts / np.maximum(length, 1).astype(np.float64)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log(p), 0.0)
    ent = -terms.sum(1) / math.log(4.0)
    return np.where(n >= 20, ent, 1.0)
