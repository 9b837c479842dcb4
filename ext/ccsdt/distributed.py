"""The (T) over torch.distributed ranks: cost-sorted work, owned integral slices, fetch + cache, one reduction.

The SC20 paper executes the (T) across nodes with the integrals distributed, each task fetching
the tiles it needs and caching the ones it reuses. Here, on ``P`` ranks (torchrun; gloo on CPU,
NCCL on CUDA):

* **ownership.** The integrals ``(xa|bc)`` are split by their occupied index: rank ``x mod P``
  owns slice ``x`` (``v^3`` doubles), so each rank holds ``~o/P`` of the ``o v^3`` array; the
  ``O(o^2 v^2)`` inputs (``t2``, ``(ia|jk)``, ``(ia|jb)``, ``t1``, ``f``, energies) are replicated.
* **work and load balance** (:func:`assign_work`). A work item is an occupied pair ``(i, j)``
  with all its triples ``i >= j >= k``; its cost is the GEMM flops of those triples
  (:func:`~torchhpc.ext.ccsdt.slices.triple_flops`). Items are assigned cost-sorted, largest
  first, each to the least-loaded rank (LPT: within 4/3 of the optimum); a rank runs its items in
  ``i >= j >= k`` order so that consecutive triples share slices.
* **fetch + cache** (:class:`RemoteSlices` with :func:`~torchhpc.ext.ccsdt.slices.run_sliced`).
  A rank's blocks need slices it may not own. The cache of each rank is an LRU over slice indices,
  so every rank can predict every rank's misses (:func:`~torchhpc.ext.ccsdt.slices.cache_misses`)
  and the exchange is planned: in round ``t`` each owner sends the slices its peers miss in their
  block ``t`` (point-to-point ``isend``/``irecv``), and round ``t + 1`` is posted before block ``t``
  computes, so the transfer overlaps compute. Only slices that miss the cache move.
* **reduction.** Each rank sums its weighted triple energies; one ``all_reduce`` gives E(T) to all
  ranks, one ``all_gather_object`` the per-rank statistics (time, flops, bytes, hit rate).

A peer that dies makes the others fail with :class:`~torchhpc.ext.core.errors.DistributedError`
within ``timeout_s`` (under torchrun its agent also stops the job when a rank exits).
"""

from __future__ import annotations

import datetime
import heapq
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist

from torchhpc.ext.core.device import cuda_free_bytes
from torchhpc.ext.core.errors import DistributedError, InputError

from .blocks import INPUT_NAMES, check_inputs
from .config import DEFAULT_MAX_MEMORY_MB
from .slices import (
    PairOperands,
    SliceStats,
    block_slices,
    cache_misses,
    plan_blocks,
    run_sliced,
    slice_bytes,
    sliced_epilogue,
    sliced_layout,
    triple_flops,
)


def owner(x: int, world: int) -> int:
    """The rank that owns integral slice ``x``: ``x mod world``."""
    return x % world


@dataclass
class WorkAssignment:
    """Each rank's triples, in processing order, with their weights and the predicted cost."""

    triples: list[list[tuple[int, int, int]]]
    weights: list[list[float]]
    flops: list[float]
    """GEMM flops per rank (the cost the assignment balanced)"""

    @property
    def predicted_imbalance(self) -> float:
        """max / mean of the per-rank flops."""
        mean = sum(self.flops) / len(self.flops)
        return max(self.flops) / mean if mean > 0 else 1.0


def assign_work(nocc: int, nvir: int, world: int, granularity: str = "pair") -> WorkAssignment:
    """Cost-sorted static assignment of the work items to ``world`` ranks.

    A work item is an occupied pair ``(i, j)`` with all its triples (``granularity="pair"``, what the
    distributed (T) runs: consecutive triples share two slices) or one triple (``"triple"``: finer, for
    more ranks than pairs, as the cost model explores). LPT: the items sorted by cost, largest first
    (ties: larger index first), each to the rank with the least assigned cost (ties: the lower rank);
    deterministic, so every rank computes the same plan.
    """
    if world < 1:
        raise InputError(f"world size must be >= 1, got {world}")
    if granularity not in ("pair", "triple"):
        raise InputError(f"granularity must be 'pair' or 'triple', got {granularity!r}")
    items: dict[tuple, list[tuple[int, int, int]]] = {}
    for i in range(nocc):
        for j in range(i + 1):
            ks = [(i, j, k) for k in range(j + 1) if not i == j == k]
            if granularity == "triple":
                items.update({t: [t] for t in ks})
            elif ks:
                items[(i, j)] = ks
    cost = {key: sum(triple_flops(*t, nocc, nvir) for t in ts) for key, ts in items.items()}
    heap = [(0.0, r) for r in range(world)]
    mine: list[list[tuple[int, int]]] = [[] for _ in range(world)]
    loads = [0.0] * world
    for key in sorted(items, key=lambda k: (-cost[k], *(-x for x in k))):
        load, r = heapq.heappop(heap)
        mine[r].append(key)
        loads[r] = load + cost[key]
        heapq.heappush(heap, (loads[r], r))
    triples, weights = [], []
    for keys in mine:
        ts = [t for key in sorted(keys) for t in items[key]]
        triples.append(ts)
        weights.append([2.0 if (i != j and j != k) else 1.0 for i, j, k in ts])
    return WorkAssignment(triples, weights, loads)


def exchange_plan(work: WorkAssignment, nocc: int, capacity: int, block_triples: int
                  ) -> tuple[list[list[list[int]]], int]:
    """Every rank's misses per round (``[rank][round] -> slices``) and the number of rounds."""
    misses = []
    for ts in work.triples:
        blocks = plan_blocks(ts, capacity, block_triples)
        misses.append(cache_misses([block_slices(ts, b) for b in blocks], capacity))
    return misses, max((len(m) for m in misses), default=0)


def wire_device(backend: str, device: torch.device) -> torch.device:
    """Where tensors cross between ranks: gloo on the CPU; NCCL moves CUDA tensors only, so on this rank's GPU
    (the current one) even where the (T) itself runs on the CPU."""
    if backend != "nccl":
        return torch.device("cpu")
    return device if device.type == "cuda" else torch.device("cuda", torch.cuda.current_device())


class RemoteSlices:
    """The provider of one rank: its own slices in place, the others received from their owners.

    Round ``t``: this rank sends every owned slice a peer misses in that peer's block ``t`` and
    receives the slices it misses from their owners. ``prefetch(t)`` posts the round (non-blocking);
    ``fetch(t)`` waits for it (at most ``timeout_s``).
    """

    def __init__(self, owned: Mapping[int, torch.Tensor], misses: list[list[list[int]]], nocc: int, nvir: int,
                 group, timeout_s: float, comm_device: torch.device, device: torch.device | None = None):
        self.owned = owned
        self.misses = misses
        self.nocc, self.nvir = nocc, nvir
        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.timeout_s = timeout_s
        self.comm_device = comm_device
        self.device = device if device is not None else comm_device  # where the (T) reads the slices
        self._pending: dict[int, tuple[list, dict[int, torch.Tensor], int]] = {}

    def _peer(self, r: int) -> int:
        return dist.get_global_rank(self.group, r) if self.group is not None else r

    def _round(self, t: int, r: int) -> list[int]:
        return self.misses[r][t] if t < len(self.misses[r]) else []

    def _post(self, t: int):
        # one batch for the round's sends and receives: NCCL runs a rank's traffic with a peer in posting order
        # and ignores tags, so two ranks that each sent before receiving would both wait (slices of v^3 doubles
        # do not fit its buffers); a pair's slices go in the order of the receiver's list on both sides
        ops, bufs, sent = [], {}, 0
        tag0 = t * self.nocc
        for s in range(self.world):
            if s == self.rank:
                continue
            for x in self._round(t, s):
                if owner(x, self.world) == self.rank:
                    src = self.owned[x].to(self.comm_device).contiguous()
                    ops.append(dist.P2POp(dist.isend, src, self._peer(s), self.group, tag0 + x))
                    sent += src.numel() * 8
        for x in self._round(t, self.rank):
            r = owner(x, self.world)
            if r != self.rank:
                buf = torch.empty((self.nvir,) * 3, dtype=torch.float64, device=self.comm_device)
                ops.append(dist.P2POp(dist.irecv, buf, self._peer(r), self.group, tag0 + x))
                bufs[x] = buf
        return (dist.batch_isend_irecv(ops) if ops else []), bufs, sent

    def prefetch(self, t: int, misses: Sequence[int]) -> None:
        self._pending[t] = self._wrap(lambda: self._post(t))

    def _wrap(self, fn):
        try:
            return fn()
        except RuntimeError as exc:
            raise self._error(exc) from exc

    def _error(self, exc: BaseException) -> DistributedError:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return DistributedError(f"rank {self.rank}: a peer rank died or did not answer within {self.timeout_s:g} s "
                                f"while exchanging integral slices ({first})")

    def fetch(self, t: int, misses: Sequence[int], stats: SliceStats) -> dict[int, torch.Tensor]:
        works, bufs, sent = self._pending.pop(t, None) or self._wrap(lambda: self._post(t))
        for w in works:
            try:
                w.wait(self.timeout)
            except RuntimeError as exc:
                raise self._error(exc) from exc
        got = {}
        for x in misses:
            if x in bufs:
                got[x] = bufs[x].to(self.device)
                stats.remote_fetches += 1
                stats.bytes_fetched += slice_bytes(self.nvir)
            else:
                got[x] = self.owned[x]
                stats.local_loads += 1
                stats.bytes_loaded += slice_bytes(self.nvir)
        stats.bytes_sent += sent
        return got


@dataclass
class DistributedRun:
    """E(T) of a distributed run and what each rank did."""

    energy: float
    stats: SliceStats
    """this rank's"""
    ranks: list[dict] = field(default_factory=list)
    """every rank's :meth:`SliceStats.as_dict` plus ``seconds`` (its compute + wait time)"""
    predicted_imbalance: float = 1.0
    seconds: float = 0.0
    """wall time of this rank's (T), including the reduction"""

    @property
    def imbalance(self) -> float:
        """Load imbalance: max / mean of the ranks' (T) time (compute + waiting for slices)."""
        times = [r["seconds"] for r in self.ranks]
        mean = sum(times) / len(times) if times else 0.0
        return max(times) / mean if mean > 0 else 1.0

    def summary(self) -> dict:
        """Totals over the ranks: ``ranks, imbalance, predicted_imbalance, bytes_fetched, hit_rate, ...``."""
        req = sum(r["requests"] for r in self.ranks)
        hits = sum(r["hits"] for r in self.ranks)
        return {"ranks": len(self.ranks), "imbalance": self.imbalance, "predicted_imbalance": self.predicted_imbalance,
                "bytes_fetched": sum(r["bytes_fetched"] for r in self.ranks),
                "bytes_loaded": sum(r["bytes_loaded"] for r in self.ranks),
                "hit_rate": hits / req if req else float("nan"),
                "rank_seconds": [r["seconds"] for r in self.ranks],
                "rank_flops": [r["flops"] for r in self.ranks]}


def _owned_slices(ovvv, nocc: int, nvir: int, rank: int, world: int, device: torch.device) -> dict[int, torch.Tensor]:
    """This rank's slices ``{x: (xa|bc)}`` from the full array or from a mapping of the owned slices."""
    want = [x for x in range(nocc) if owner(x, world) == rank]
    if isinstance(ovvv, Mapping):
        if sorted(ovvv) != want:
            raise InputError(f"ovvv: rank {rank} of {world} owns slices {want} (x mod {world} == {rank}), "
                             f"got {sorted(ovvv)}")
        source = ovvv
    else:
        source = ovvv
        if tuple(getattr(source, "shape", ())) != (nocc, nvir, nvir, nvir):
            raise InputError(f"ovvv: expected shape (o, v, v, v) = {(nocc, nvir, nvir, nvir)}, "
                             f"got {tuple(getattr(source, 'shape', ()))}")
    out = {}
    for x in want:
        s = source[x]
        s = torch.as_tensor(s).to(device=device, dtype=torch.float64).contiguous()
        if tuple(s.shape) != (nvir,) * 3:
            raise InputError(f"ovvv[{x}]: expected shape {(nvir,) * 3}, got {tuple(s.shape)}")
        if not bool(torch.isfinite(s).all()):
            raise InputError(f"ovvv[{x}] contains NaN or Inf")
        out[x] = s
    return out


def triples_energy_distributed(
    t1, t2, ovvv, ovoo, ovov, fock_ov, mo_energy, *, group=None, device: str | torch.device | None = None,
    max_memory: float | None = None, block_triples: int | None = None, timeout_s: float = 300.0,
    progress: bool = False,
) -> DistributedRun:
    """E(T) shared out over the ranks of ``group`` (default: the initialised default group).

    Every rank calls it with the same replicated inputs; ``ovvv`` is either the full ``(o, v, v, v)``
    array (each rank keeps only the slices it owns) or a mapping ``{x: (v, v, v)}`` of exactly the
    slices this rank owns (``x mod world == rank``), so the integrals need never be whole on one rank.

    Args:
        max_memory: MB per rank for the replicated operands, the slice cache and the block buffers
            (the owned slices are held besides); default 80 % of the free device memory on CUDA, 4000 MB on
            the CPU.
        timeout_s: how long a rank waits for a peer's slices before failing.

    Returns:
        :class:`DistributedRun`: the energy (the same on every rank), this rank's statistics and all ranks'.

    Raises:
        InputError: inputs as :func:`~torchhpc.ext.ccsdt.blocks.check_inputs`; ``max_memory`` too small.
        DistributedError: no initialised process group, or a peer that died or did not answer in time.
    """
    if not (dist.is_available() and dist.is_initialized()):
        raise DistributedError("triples_energy_distributed needs an initialised process group (launch with torchrun)")
    start = time.perf_counter()
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    o, v = tuple(t1.shape) if hasattr(t1, "shape") else np.shape(t1)
    where = torch.device(device) if device is not None else (t1.device if isinstance(t1, torch.Tensor)
                                                             else torch.device("cpu"))
    # a zero-stride stand-in for ovvv (checked per owned slice below), made where check_inputs keeps it
    placeholder = torch.zeros((), dtype=torch.float64, device=where).expand(o, v, v, v)
    arrays = check_inputs(t1, t2, placeholder, ovoo, ovov, fock_ov, mo_energy, device=device)
    dev = arrays[0].device
    owned = _owned_slices(ovvv, o, v, rank, world, dev)
    t1, t2, _, ovoo, ovov, fock_ov, mo_energy = arrays
    work = assign_work(o, v, world)
    ntri = max((len(ts) for ts in work.triples), default=0)
    budget = max_memory if max_memory is not None else (
        0.8 * cuda_free_bytes(dev) / 2**20 if dev.type == "cuda" else DEFAULT_MAX_MEMORY_MB)
    layout = sliced_layout(o, v, max(1, ntri), budget, block_triples, dev.type)
    misses, rounds = exchange_plan(work, o, layout.capacity, layout.block_triples)
    backend = dist.get_backend(group)
    comm_device = wire_device(backend, dev)
    provider = RemoteSlices(owned, misses, o, v, group, timeout_s, comm_device, dev)
    X = PairOperands(t1, t2, ovoo, ovov, fock_ov)
    run = run_sliced(X, t2, work.triples[rank], work.weights[rank], mo_energy, layout, provider, rounds=rounds,
                     progress=progress, fused=sliced_epilogue("auto", t1, t2, ovov, fock_ov, mo_energy))
    seconds = run.stats.compute_s + run.stats.wait_s
    total = torch.tensor([run.energy], dtype=torch.float64, device=comm_device)
    try:
        dist.all_reduce(total, group=group)
        ranks: list = [None] * world
        dist.all_gather_object(ranks, {**run.stats.as_dict(), "seconds": seconds}, group=group)
    except RuntimeError as exc:
        raise provider._error(exc) from exc
    return DistributedRun(float(total.item()), run.stats, ranks, work.predicted_imbalance,
                          time.perf_counter() - start)


__all__ = ["DistributedRun", "INPUT_NAMES", "RemoteSlices", "WorkAssignment", "assign_work", "exchange_plan",
           "owner", "triples_energy_distributed"]
