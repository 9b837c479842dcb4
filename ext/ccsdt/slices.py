"""Occupied slices of the integrals, streamed through a cache: the out-of-core and distributed (T).

The in-core torch path (:func:`~torchhpc.ext.ccsdt.ops.triples_energy_torch`) keeps the GEMM
operands ``AT[x], BT[x]`` of every occupied ``x`` resident: ``2 o (v + o) v^2`` doubles, built from
the ``o v^3`` integrals ``(xa|bc)``. A triple ``(i, j, k)`` needs only the slices ``x in {i, j, k}``.
This module runs the same blocks of triples with only a bounded set of slices resident — the SC20
paper's data caching (its Sec. on GPU memory being much smaller than host memory):

* :func:`plan_blocks` cuts an ordered list of triples into blocks whose slices fit ``capacity``;
  consecutive triples in ``i >= j >= k`` order share ``i`` and ``j``, so most slices are reused;
* :class:`SliceCache` keeps at most ``capacity`` slices (least recently used out first; a block's
  own slices are never evicted while it runs) and :func:`cache_misses` predicts its misses from the
  indices alone, so that every rank of a distributed run knows what every other rank will fetch;
* :func:`run_sliced` computes the blocks: each block's missing slices come from a *provider* — the
  host arrays (:class:`HostSlices`: out-of-core on one device, host-to-device copies on a side CUDA
  stream overlapped with the previous block) or the owning rank
  (:class:`torchhpc.ext.ccsdt.distributed.RemoteSlices`) — and are turned into ``AT[x], BT[x]``.

What the (T) builds on the device: ``capacity`` slices of ``2 (v + o) v^2`` doubles and the block
buffers (4 ``v^3`` per triple); the pair operands ``TT, TT2, H`` (``O(o^2 v (v + o))`` in core) are
built per use from the ``O(o^2 v^2)`` inputs (:class:`PairOperands`), which stay resident and, as in
core, are not counted. :func:`sliced_layout` picks ``capacity`` and the block size from ``max_memory``;
the least it needs is three slices and one triple's buffers, ``6 (v + o) v^2 + 4 v^3`` doubles.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from torchhpc.ext.core.errors import InputError

from .blocks import (
    BUFFERS_PER_TRIPLE,
    CACHE_BLOCK_BYTES,
    FusedEpilogue,
    block_energy,
    fill_slice_operands,
    occupied_triples,
)

#: fewest slices a block can need (a triple of three distinct occupied indices)
MIN_CAPACITY = 3


@dataclass
class SliceStats:
    """What a sliced run moved and reused (one process / rank)."""

    blocks: int = 0
    triples: int = 0
    requests: int = 0
    """slices the blocks asked for (each block's distinct occupied indices)"""
    hits: int = 0
    """requests served from the cache"""
    local_loads: int = 0
    """misses served from this process's own memory (host arrays, or the slices this rank owns)"""
    remote_fetches: int = 0
    """misses received from another rank"""
    bytes_loaded: int = 0
    """bytes of ``(xa|bc)`` slices brought into the cache from this process's memory (host to device)"""
    bytes_fetched: int = 0
    """bytes of slices received from other ranks"""
    bytes_sent: int = 0
    """bytes of owned slices sent to other ranks"""
    capacity: int = 0
    """slices the cache holds"""
    compute_s: float = 0.0
    wait_s: float = 0.0
    """time waiting for slices (communication or copies not hidden behind compute)"""
    flops: float = 0.0
    """GEMM flops of this process's triples (see :func:`triple_flops`)"""
    block_triples: int = 0

    @property
    def misses(self) -> int:
        return self.requests - self.hits

    @property
    def hit_rate(self) -> float:
        return self.hits / self.requests if self.requests else float("nan")

    def as_dict(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["hit_rate"] = self.hit_rate
        return out


def triple_flops(i: int, j: int, k: int, nocc: int, nvir: int) -> float:
    """GEMM flops of one occupied triple in the blocked path: ``2 R (v + o) v^2`` for ``R`` output rows.

    Distinct ``i > j > k`` run ``6 v`` rows (two stacked ``2v``-row GEMMs and two ``v``-row ones);
    with two equal indices one layout is a copy, ``4 v`` rows (see :func:`~torchhpc.ext.ccsdt.blocks.block_energy`).
    """
    rows = 6 * nvir if (i != j and j != k) else 4 * nvir
    return 2.0 * rows * (nvir + nocc) * nvir**2


def slice_bytes(nvir: int) -> int:
    """Bytes of one integral slice ``(xa|bc)``, ``(v, v, v)`` float64: what a fetch moves."""
    return 8 * nvir**3


def cached_slice_bytes(nocc: int, nvir: int) -> int:
    """Bytes one cached slice occupies: ``AT[x]`` and ``BT[x]``, each ``(v + o, v^2)`` float64."""
    return 2 * 8 * (nvir + nocc) * nvir**2


def replicated_bytes(nocc: int, nvir: int) -> int:
    """Bytes the sliced path builds besides the cache and the block buffers: ``u`` and the ``v^3``
    orbital-energy sums. The pair operands ``TT, TT2, H`` are built per use from the inputs
    (:class:`PairOperands`); like the in-core path, the inputs themselves are not counted."""
    return 8 * (nvir**3 + 2 * nocc * nvir)


def triple_bytes(nocc: int, nvir: int) -> int:
    """Bytes per triple of a block: four ``(v, v, v)`` buffers and the block's ``H`` pairs (3 x ``2 v^2``)."""
    return 8 * (BUFFERS_PER_TRIPLE * nvir**3 + 6 * nvir * nvir)


class _PerUse:
    """``obj[p, q]`` calls ``build(p, q)``: an operand built where it is used instead of held whole."""

    def __init__(self, build):
        self.build = build

    def __getitem__(self, key):
        return self.build(*key)


class PairOperands:
    """The pair operands of :class:`~torchhpc.ext.ccsdt.blocks.InCoreOperands` (``TT``, ``TT2``, ``H``; same
    layouts) built per use from ``t2, (ia|jk), (ia|jb)``, so that none of them is held whole; ``AT, BT``
    are set per block by :func:`run_sliced` to the cached slices. A ``TT[p, q]`` is ``v (v + o)``
    copies for a GEMM of ``2 v^2 (v + o) v`` flops: a negligible cost."""

    def __init__(self, t1, t2, ovoo, ovov, fock_ov):
        self.nocc, self.nvir = t1.shape
        self.t2, self.ovov = t2, ovov
        self.ovoo_pq = ovoo.permute(0, 2, 1, 3)  # [p, q, x, m] = (px|qm)
        self.u = torch.stack([t1, fock_ov], dim=1).contiguous()  # (o, 2, v)
        self.TT = _PerUse(self._tt)
        self.TT2 = _PerUse(lambda p, q: torch.cat([self._tt(p, q), self._tt(q, p)], dim=0))
        self.H = _PerUse(self._h)
        self.AT = self.BT = None

    def _tt(self, p: int, q: int) -> torch.Tensor:
        return torch.cat([self.t2[p, q], -self.ovoo_pq[p, q]], dim=1)  # (v, v + o): [t2[p,q,x,f] | -(px|qm)]

    def _h(self, I: torch.Tensor, J: torch.Tensor) -> torch.Tensor:
        nb, v = I.shape[0], self.nvir
        G = self.ovov[I, :, J, :] + self.ovov[J, :, I, :].transpose(1, 2)  # (px|qy) + (qy|px)
        S = self.t2[I, J] + self.t2[J, I].transpose(1, 2)  # t2[p,q,x,y] + t2[q,p,y,x]
        return torch.stack([G, S], dim=-1).reshape(nb, v * v, 2)


@dataclass
class SlicedLayout:
    """How a sliced run uses its memory budget."""

    capacity: int
    """slices kept in the cache"""
    block_triples: int
    """triples per block (work buffers)"""
    bytes: int
    """replicated + cache + buffers"""


def sliced_layout(nocc: int, nvir: int, ntriples: int, max_memory_mb: float,
                  block_triples: int | None = None, device_type: str = "cpu") -> SlicedLayout:
    """Cache capacity and block size that fit ``max_memory`` (MB): every slice if they fit beside one
    triple's buffers, else 3/4 of that room (at least :data:`MIN_CAPACITY` slices); the block buffers
    take what is left, on the CPU at most a block that stays in the last-level cache
    (:data:`~torchhpc.ext.ccsdt.blocks.CACHE_BLOCK_BYTES`), on a GPU as many triples as the memory holds.

    Raises:
        InputError: ``max_memory`` cannot hold the replicated operands, three slices and one triple's
            buffers (the message says how much is needed).
    """
    budget = max_memory_mb * 2**20
    fixed = replicated_bytes(nocc, nvir)
    per_slice = cached_slice_bytes(nocc, nvir)
    per_triple = triple_bytes(nocc, nvir)
    least = fixed + min(MIN_CAPACITY, nocc) * per_slice + per_triple
    if budget < least:
        raise InputError(
            f"max_memory={max_memory_mb:g} MB is too small for nocc={nocc}, nvir={nvir} even out of core: "
            f"the (T) needs at least {math.ceil(least / 2**20 * 100) / 100:g} MB (three integral slices and one triple's "
            "buffers)"
        )
    if block_triples is not None and block_triples < 1:
        raise InputError(f"block_triples must be >= 1, got {block_triples}")
    # the cache first (reuse saves transfers), up to every slice or 3/4 of what one triple's buffers leave;
    # the block buffers take the rest, at most a cache-sized block (or block_triples)
    room = budget - fixed - per_triple
    capacity = int(max(min(MIN_CAPACITY, nocc), min(nocc, room // per_slice if room // per_slice >= nocc
                                                         else 0.75 * room // per_slice)))
    if block_triples is not None:
        nb = block_triples
    else:
        nb = max(1, CACHE_BLOCK_BYTES // per_triple) if device_type == "cpu" else ntriples
    nb = max(1, min(nb, ntriples, int((budget - fixed - capacity * per_slice) // per_triple)))
    return SlicedLayout(capacity=capacity, block_triples=nb, bytes=fixed + capacity * per_slice + nb * per_triple)


def plan_blocks(triples: Sequence[tuple[int, int, int]], capacity: int, block_triples: int) -> list[list[int]]:
    """Cut ``triples`` (in processing order) into consecutive blocks of at most ``block_triples``
    triples whose distinct occupied indices number at most ``capacity``; returns positions into
    ``triples`` per block."""
    blocks: list[list[int]] = []
    current: list[int] = []
    need: set[int] = set()
    for n, t in enumerate(triples):
        grown = need | set(t)
        if current and (len(current) >= block_triples or len(grown) > capacity):
            blocks.append(current)
            current, grown = [], set(t)
        current.append(n)
        need = grown
    if current:
        blocks.append(current)
    return blocks


def block_slices(triples: Sequence[tuple[int, int, int]], block: Sequence[int]) -> list[int]:
    """The occupied indices block ``block`` needs, sorted."""
    return sorted({x for n in block for x in triples[n]})


def cache_misses(needs: Sequence[Sequence[int]], capacity: int) -> list[list[int]]:
    """The slices each block must bring in, for an LRU cache of ``capacity`` slices that evicts only
    slices the current block does not need (what :class:`SliceCache` does, from indices alone)."""
    order: OrderedDict[int, None] = OrderedDict()
    out = []
    for need in needs:
        miss = [x for x in need if x not in order]
        for x in need:
            if x in order:
                order.move_to_end(x)
        keep = set(need)
        for x in miss:
            while len(order) >= capacity:
                victim = next(y for y in order if y not in keep)
                del order[victim]
            order[x] = None
        out.append(miss)
    return out


class SliceCache:
    """At most ``capacity`` occupied slices ``x -> (AT[x], BT[x])`` on ``device``, least recently used
    out first (never one the current block needs); storage is allocated once."""

    def __init__(self, capacity: int, nocc: int, nvir: int, device: torch.device):
        self.capacity = capacity
        self.AT = torch.empty((capacity, nvir + nocc, nvir * nvir), dtype=torch.float64, device=device)
        self.BT = torch.empty_like(self.AT)
        self.where: OrderedDict[int, int] = OrderedDict()  # slice -> row of AT/BT, in LRU order
        self.free = list(range(capacity - 1, -1, -1))

    def admit(self, need: Sequence[int]) -> list[tuple[int, int]]:
        """Make room for ``need``: returns ``(x, row)`` for the missing slices (to be filled by the caller)."""
        keep = set(need)
        for x in need:
            if x in self.where:
                self.where.move_to_end(x)
        rows = []
        for x in need:
            if x in self.where:
                continue
            if not self.free:
                victim = next(y for y in self.where if y not in keep)
                self.free.append(self.where.pop(victim))
            row = self.free.pop()
            self.where[x] = row
            rows.append((x, row))
        return rows

    def views(self, need: Sequence[int]) -> tuple[dict[int, torch.Tensor], dict[int, torch.Tensor]]:
        """``{x: AT[x]}, {x: BT[x]}`` for the block's slices."""
        return ({x: self.AT[self.where[x]] for x in need}, {x: self.BT[self.where[x]] for x in need})


class HostSlices:
    """The provider of one process: slices ``(xa|bc)`` copied from the host array ``ovvv (o, v, v, v)``.

    On CUDA the copies of block ``t + 1`` are issued on a side stream (from pinned memory) while block
    ``t`` computes, and the compute stream waits on an event before using them.
    """

    def __init__(self, ovvv: torch.Tensor, device: torch.device):
        self.ovvv = ovvv
        self.device = device
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device=device) if self.cuda else None
        self._pending: dict[int, tuple[dict[int, torch.Tensor], object]] = {}
        self._pinned: dict[int, torch.Tensor] = {}  # page-locked copies, made once per slice

    def _copy(self, xs: Sequence[int]) -> tuple[dict[int, torch.Tensor], object]:
        if not self.cuda:
            return {x: self.ovvv[x] for x in xs}, None
        out = {}
        for x in xs:
            if x not in self._pinned:
                src = self.ovvv[x]
                self._pinned[x] = src.pin_memory() if src.device.type == "cpu" and not src.is_pinned() else src
        with torch.cuda.stream(self.stream):
            for x in xs:
                out[x] = self._pinned[x].to(self.device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        return out, event

    def prefetch(self, t: int, misses: Sequence[int]) -> None:
        """Start bringing block ``t``'s missing slices (a no-op on the CPU, where they are read in place)."""
        if self.cuda and misses:
            self._pending[t] = self._copy(misses)

    def fetch(self, t: int, misses: Sequence[int], stats: SliceStats) -> dict[int, torch.Tensor]:
        """Block ``t``'s missing slices, ready to use on the compute stream."""
        got, event = self._pending.pop(t, None) or self._copy(misses)
        if event is not None:
            torch.cuda.current_stream(self.device).wait_event(event)
            for x in got.values():
                x.record_stream(torch.cuda.current_stream(self.device))
        stats.local_loads += len(misses)
        stats.bytes_loaded += sum(x.numel() * 8 for x in got.values())
        return got


@dataclass
class SlicedRun:
    """The energy of a sliced run and what it did."""

    energy: float
    stats: SliceStats = field(default_factory=SliceStats)


def run_sliced(X: PairOperands, t2: torch.Tensor, triples: Sequence[tuple[int, int, int]],
               weights: Sequence[float], mo_energy: torch.Tensor, layout: SlicedLayout, provider,
               rounds: int | None = None, progress: bool = False, fused: FusedEpilogue | None = None) -> SlicedRun:
    """E(T) of ``triples`` (in processing order, with their ``weights``) through a slice cache.

    ``X`` builds the pair operands (:class:`PairOperands`); ``provider`` has
    ``prefetch(t, misses)`` and ``fetch(t, misses, stats) -> {x: (xa|bc) slice}`` and is called for
    ``rounds`` rounds (default: this process's blocks) — a distributed run passes the largest block
    count of all ranks, because a rank also serves its peers' fetches after its own blocks are done.
    ``fused``: each block's epilogue as one Triton kernel (:func:`sliced_epilogue` picks it on CUDA).
    """
    o, v = X.nocc, X.nvir
    dev = t2.device
    stats = SliceStats(capacity=layout.capacity, block_triples=layout.block_triples)
    blocks = plan_blocks(triples, layout.capacity, layout.block_triples)
    needs = [block_slices(triples, b) for b in blocks]
    misses = cache_misses(needs, layout.capacity)
    rounds = len(blocks) if rounds is None else rounds
    cache = SliceCache(layout.capacity, o, v, dev)
    nb = layout.block_triples
    L = torch.empty((nb, 3, v, v, v), dtype=torch.float64, device=dev)
    Y = None if fused is not None else torch.empty((nb, v, v, v), dtype=torch.float64, device=dev)
    e_occ, e_vir = mo_energy[:o], mo_energy[o:]
    e_vvv = (e_vir[:, None, None] + e_vir[None, :, None] + e_vir[None, None, :]).contiguous()
    energy = torch.zeros((), dtype=torch.float64, device=dev)
    # every triple and weight crosses to the device once; a block is a run of them (plan_blocks), so its
    # rows are views, and its GEMM loop reads the host's ints: no host sync inside the block loop on CUDA
    idx_all = torch.tensor(list(triples), dtype=torch.int64, device=dev).reshape(-1, 3)
    wts_all = torch.tensor(list(weights), dtype=torch.float64, device=dev)
    bar = None
    if progress:
        from torchhpc.ext.core.runs import progress_bar as tqdm

        bar = tqdm(total=rounds, desc="(T) blocks", unit="block")
    try:
        for t in range(rounds):
            mine = t < len(blocks)
            t0 = time.perf_counter()
            got = provider.fetch(t, misses[t] if mine else [], stats)
            if t + 1 < rounds:
                provider.prefetch(t + 1, misses[t + 1] if t + 1 < len(blocks) else [])
            t1 = time.perf_counter()
            stats.wait_s += t1 - t0
            if mine:
                block = blocks[t]
                rows = cache.admit(needs[t])
                for x, row in rows:
                    fill_slice_operands(cache.AT[row: row + 1], cache.BT[row: row + 1], got[x].unsqueeze(0), t2,
                                        slice(x, x + 1))
                stats.requests += len(needs[t])
                stats.hits += len(needs[t]) - len(rows)
                X.AT, X.BT = cache.views(needs[t])
                s, n = block[0], len(block)
                energy += block_energy(X, idx_all[s:s + n], wts_all[s:s + n], e_occ, e_vvv, L[:n], None if Y is None else Y[:n],
                                       triples=[triples[m] for m in block], fused=fused)
                stats.blocks += 1
                stats.triples += len(block)
                stats.flops += sum(triple_flops(*triples[n], o, v) for n in block)
            stats.compute_s += time.perf_counter() - t1
            if bar is not None:
                bar.update(1)
    finally:
        X.AT = X.BT = None
        if bar is not None:
            bar.close()
    return SlicedRun(float(energy), stats)


def sliced_epilogue(epilogue: str, t1, t2, ovov, fock_ov, mo_energy) -> FusedEpilogue | None:
    """The epilogue the sliced path runs: ``auto`` the fused Triton kernel on CUDA (one read of each
    layout against ~31 tensor passes: the part of a GPU's block time that was memory-bound), the tensor
    ops elsewhere; ``triton`` or ``torch`` as named.

    Raises:
        InputError: an unknown name, or ``triton`` where it cannot run.
    """
    from torchhpc.ext.core.dispatch import resolve_backend

    if resolve_backend(epilogue, t1.device, choices=("torch", "triton"), what="epilogue") == "triton":
        return FusedEpilogue(t1, t2, ovov, fock_ov, mo_energy)
    return None


def triples_energy_out_of_core(t1, t2, ovvv, ovoo, ovov, fock_ov, mo_energy, *, max_memory: float,
                               block_triples: int | None = None, progress: bool = False,
                               epilogue: str = "auto") -> SlicedRun:
    """E(T) on ``t1``'s device with at most ``max_memory`` MB there: the integral slices stay where
    ``ovvv`` is (host memory) and stream through a cache (tensors already checked, float64).

    ``ovvv`` may live on the CPU while the other inputs are on the device (the out-of-core case).

    Raises:
        InputError: ``max_memory`` below what :func:`sliced_layout` needs.
    """
    o, v = t1.shape
    idx, wts = occupied_triples(o)
    triples = [tuple(r) for r in idx.tolist()]
    layout = sliced_layout(o, v, len(triples), max_memory, block_triples, t1.device.type)
    X = PairOperands(t1, t2, ovoo, ovov, fock_ov)
    return run_sliced(X, t2, triples, wts.tolist(), mo_energy, layout, HostSlices(ovvv, t1.device),
                      progress=progress, fused=sliced_epilogue(epilogue, t1, t2, ovov, fock_ov, mo_energy))


__all__ = ["HostSlices", "MIN_CAPACITY", "SliceCache", "SliceStats", "SlicedLayout", "SlicedRun",
           "PairOperands", "block_slices", "cache_misses", "cached_slice_bytes", "plan_blocks", "replicated_bytes",
           "run_sliced", "slice_bytes", "sliced_epilogue", "sliced_layout", "triple_bytes", "triple_flops", "triples_energy_out_of_core"]
