"""A cost model of the distributed (T): per-rank flops, bytes fetched, cache hits and the reduction.

The model replays the run's own plan — the cost-sorted assignment
(:func:`~torchhpc.ext.ccsdt.distributed.assign_work`), the blocks and the cache of every rank
(:func:`~torchhpc.ext.ccsdt.distributed.exchange_plan`) — so flops, fetches and hits per rank are
those the run would have, exactly; only the times are modelled::

    compute_r = flops_r / R                              R: a rank's (T) rate, FLOP/s
    comm_r    = bytes_same_node_r / B_intra + bytes_other_nodes_r / B_inter + messages_r * alpha
    time_r    = max(compute_r, comm_r) + comm_r / rounds # round t+1 is fetched while block t computes;
                                                         # the first round is not hidden
    T(P)      = max_r time_r + 2 alpha ceil(log2 P)      # the all-reduce of E(T)

``R`` is calibrated from a measured one-process run (:func:`calibrate`), ``B`` and ``alpha`` from a
measured point-to-point exchange; :data:`SUMMIT_V100` holds the parameters of a Summit-like node
(6 V100 GPUs, stated below with their sources), with ``R`` scaled from the torch path's measured
efficiency on an H200. Handing the integrals out from rank 0 (``o v^3`` bytes, once) is reported apart
(:attr:`Prediction.distribute_s`): in the paper's setting CCSD leaves them distributed already.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .distributed import assign_work, exchange_plan, owner
from .ops import triples_flops
from .slices import (
    block_slices,
    cached_slice_bytes,
    plan_blocks,
    replicated_bytes,
    slice_bytes,
    sliced_layout,
    triple_bytes,
)


@dataclass(frozen=True)
class Machine:
    """What the model needs to know about the ranks and the network."""

    name: str
    rank_flops: float
    """a rank's effective (T) rate, FLOP/s (of :func:`~torchhpc.ext.ccsdt.ops.triples_flops`)"""
    ranks_per_node: int
    intra_bandwidth: float
    """bytes/s a rank receives from a rank on the same node"""
    inter_bandwidth: float
    """bytes/s a rank receives from another node (the node's injection bandwidth shared by its ranks)"""
    latency_s: float
    """per message"""
    memory_bytes: float
    """device memory per rank (the budget of the slice cache and the buffers)"""
    source: str = ""


#: measured on an H200 (docs/ccsdt/results.md, 2026-11-30): the torch path ran o=20, v=120 (3.87 TFLOP) in
#: 0.77 s = 5.0 TFLOP/s, 0.148 of the H200's 34 TFLOP/s FP64 (non-tensor-core) peak
TORCH_PATH_GPU_EFFICIENCY = 3.871e12 / 0.77 / 34e12

SUMMIT_V100 = Machine(
    name="Summit-like node: 6 x V100-SXM2 16 GB",
    rank_flops=TORCH_PATH_GPU_EFFICIENCY * 7.8e12,
    ranks_per_node=6,
    intra_bandwidth=50e9,
    inter_bandwidth=25e9 / 6,
    latency_s=10e-6,
    memory_bytes=16e9,
    source=("vendor figures, not measured here: V100-SXM2 7.8 TFLOP/s FP64 and 16 GB (NVIDIA datasheet); "
            "NVLink 2 at 50 GB/s between GPUs of a node and 2 x EDR InfiniBand, 25 GB/s per node, shared by "
            "its 6 GPUs (OLCF Summit documentation); 10 us per message (assumed); rank rate = the torch "
            "path's measured H200 efficiency (0.148 of FP64 peak) x 7.8 TFLOP/s"),
)


def calibrate(name: str, one_rank_seconds: float, nocc: int, nvir: int, bandwidth: float, latency_s: float,
              memory_bytes: float = 4e9, ranks_per_node: int = 1 << 30) -> Machine:
    """A :class:`Machine` from measured figures: the one-process (T) time of an ``(o, v)`` problem gives
    ``R``; a measured point-to-point exchange gives the bandwidth and latency (one node: every peer local)."""
    return Machine(name=name, rank_flops=triples_flops(nocc, nvir) / one_rank_seconds, ranks_per_node=ranks_per_node,
                   intra_bandwidth=bandwidth, inter_bandwidth=bandwidth, latency_s=latency_s,
                   memory_bytes=memory_bytes, source="calibrated on measured runs here")


@dataclass
class RankCost:
    """One rank's modelled run."""

    flops: float
    compute_s: float
    bytes_same_node: int
    bytes_other_nodes: int
    messages: int
    comm_s: float
    requests: int
    hits: int
    seconds: float


@dataclass
class Prediction:
    """The modelled run on ``ranks`` ranks."""

    nocc: int
    nvir: int
    ranks: int
    seconds: float
    """(T) time: the slowest rank plus the reduction"""
    reduction_s: float
    distribute_s: float
    """handing every slice out from rank 0, once (not in ``seconds``)"""
    capacity: int
    per_rank: list[RankCost] = field(default_factory=list)

    @property
    def imbalance(self) -> float:
        """max / mean of the ranks' modelled times."""
        times = [r.seconds for r in self.per_rank]
        mean = sum(times) / len(times)
        return max(times) / mean if mean > 0 else 1.0

    @property
    def bytes_fetched(self) -> int:
        return sum(r.bytes_same_node + r.bytes_other_nodes for r in self.per_rank)

    @property
    def hit_rate(self) -> float:
        req = sum(r.requests for r in self.per_rank)
        return sum(r.hits for r in self.per_rank) / req if req else float("nan")

    @property
    def busy_ranks(self) -> int:
        return sum(1 for r in self.per_rank if r.flops > 0)


def predict(nocc: int, nvir: int, ranks: int, machine: Machine, *, granularity: str = "pair",
            max_memory_mb: float | None = None) -> Prediction:
    """Model the distributed (T) of an ``(o, v)`` problem on ``ranks`` ranks of ``machine``.

    ``max_memory_mb`` (default: 90 % of the machine's memory per rank) sets the cache as the run would.

    Raises:
        InputError: the memory cannot hold three slices and one triple's buffers (as the run would).
    """
    work = assign_work(nocc, nvir, ranks, granularity)
    budget = max_memory_mb if max_memory_mb is not None else 0.9 * machine.memory_bytes / 2**20
    ntri = max(1, max(len(ts) for ts in work.triples))
    layout = sliced_layout(nocc, nvir, ntri, budget)
    misses, rounds = exchange_plan(work, nocc, layout.capacity, layout.block_triples)
    sb = slice_bytes(nvir)
    per_rank = []
    for r, (ts, m) in enumerate(zip(work.triples, misses, strict=True)):
        same = other = messages = 0
        for miss in m:
            for x in miss:
                o_r = owner(x, ranks)
                if o_r == r:
                    continue
                messages += 1
                if o_r // machine.ranks_per_node == r // machine.ranks_per_node:
                    same += sb
                else:
                    other += sb
        blocks = plan_blocks(ts, layout.capacity, layout.block_triples)
        requests = sum(len(block_slices(ts, b)) for b in blocks)
        hits = requests - sum(len(x) for x in m)
        flops = work.flops[r]
        compute = flops / machine.rank_flops
        comm = same / machine.intra_bandwidth + other / machine.inter_bandwidth + messages * machine.latency_s
        seconds = max(compute, comm) + (comm / len(m) if m else 0.0)
        per_rank.append(RankCost(flops, compute, same, other, messages, comm, requests, hits, seconds))
    reduction = 2 * machine.latency_s * math.ceil(math.log2(ranks)) if ranks > 1 else 0.0
    distribute = (nocc - math.ceil(nocc / ranks)) * sb / machine.inter_bandwidth if ranks > 1 else 0.0
    return Prediction(nocc, nvir, ranks, max(r.seconds for r in per_rank) + reduction, reduction, distribute,
                      layout.capacity, per_rank)


def fits(nocc: int, nvir: int, machine: Machine) -> bool:
    """True when one rank of ``machine`` holds three slices and one triple's buffers (the least a run needs)."""
    least = replicated_bytes(nocc, nvir) + 3 * cached_slice_bytes(nocc, nvir) + triple_bytes(nocc, nvir)
    return least <= 0.9 * machine.memory_bytes


def scaling_table(nocc: int, nvir: int, machine: Machine, ranks=(1, 6, 24, 96, 384, 1024),
                  granularity: str = "pair") -> list[dict]:
    """Strong scaling rows ``{ranks, seconds, speedup, efficiency, imbalance, busy_ranks, fetched_gb, hit_rate}``."""
    rows, base = [], None
    for p in ranks:
        pred = predict(nocc, nvir, p, machine, granularity=granularity)
        base = base or pred.seconds * p
        rows.append({"ranks": p, "nodes": math.ceil(p / machine.ranks_per_node), "seconds": pred.seconds,
                     "speedup": base / pred.seconds, "efficiency": base / (p * pred.seconds),
                     "imbalance": pred.imbalance, "busy_ranks": pred.busy_ranks,
                     "fetched_gb": pred.bytes_fetched / 1e9, "hit_rate": pred.hit_rate,
                     "distribute_s": pred.distribute_s, "capacity": pred.capacity})
    return rows


__all__ = ["Machine", "Prediction", "RankCost", "SUMMIT_V100", "TORCH_PATH_GPU_EFFICIENCY", "calibrate", "fits",
           "predict", "scaling_table"]
