"""Time per call of each neighbourhood algorithm per message size on one process graph (what
``torchhpc collectives bench`` measures on every rank), and the table it prints.

Every rank sends ``size`` bytes to each of its destinations; each algorithm is called ``repeats``
times in turns (direct, LAG-H, LAW-H, direct, ...) as a persistent exchange (sizes fixed once, as
Open MPI's ``Neighbor_alltoallv`` is given its counts), each call closed by a barrier, and the reported
time per call is the largest median over ranks.  Every algorithm's received bytes are compared with
the direct algorithm's before timing (``identical`` in the results).  The plan gives the bytes each
rank injects between nodes.
"""

from __future__ import annotations

import numpy as np
import torch

from torchhpc.ext.core.bench import time_interleaved
from torchhpc.ext.core.distributed import DistContext
from torchhpc.ext.core.errors import DistributedError

from .config import BenchOptions
from .graphs import neighbours, parse_graph
from .ops import EmulatedNetwork, PersistentNeighborAlltoallv, ProcessGraph, neighbor_alltoallv


def _phase_medians(graph: ProcessGraph, algos: list[str], ctx: DistContext, nbytes: int) -> dict[str, list[float]]:
    """Per algorithm: each phase's median seconds over the recorded calls, the largest over ranks."""
    out = {}
    for algo in algos:
        routed = graph.plan(np.full(len(graph.src), nbytes, dtype=np.int64), algo).algo if algo == "auto" else algo
        calls = np.array([s for a, s in graph.phase_log if a == routed] or [[0.0, 0.0, 0.0]])
        out[algo] = [ctx.max(float(m)) for m in np.median(calls, axis=0)]
    return out


def time_algorithms(opts: BenchOptions, ctx: DistContext) -> dict:
    """Time ``opts.algo_list`` at each of ``opts.size_list`` on ``opts.graph``: this rank's part (every rank
    of the process group calls it, and every rank gets the same results).

    Args:
        opts: the bench's options (graph, sizes, algorithms, repeats, emulation, ``dist.timeout_s``).
        ctx: the job's initialised process group (:func:`~torchhpc.ext.core.distributed.distributed`).

    Returns:
        ``{"nranks", "nnodes", "graph", "edges", "cross_edges", "inter_node_mbps", "rows": [one per
        (size, algo): {"size", "algo", "median_s", "min_s", "inter_node_bytes_max", "inter_node_bytes_mean",
        "inter_node_bytes_per_rank", "messages_max", "identical"}]}``.

    Raises:
        DistributedError: ``ctx`` has no process group.
    """
    if not ctx.initialized:
        raise DistributedError("timing the collectives needs a process group (run under torchrun)")
    rank, size, dev = ctx.rank, ctx.world_size, ctx.device
    src, dst = parse_graph(opts.graph, size, opts.seed)
    sources, destinations = neighbours(src, dst, rank)
    emulate = EmulatedNetwork(opts.inter_node_mbps * 1e6) if opts.inter_node_mbps > 0 else None
    graph = ProcessGraph(sources, destinations, ranks_per_node=opts.ranks_per_node or None, emulate=emulate,
                         device=dev, intra_node=opts.intra_node, shm_timeout_s=opts.dist.timeout_s)
    rows = []
    for nbytes in opts.size_list:
        gen = torch.Generator().manual_seed(1000 * rank + nbytes % 997)
        send = [torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=gen).to(dev) for _ in destinations]
        ref = neighbor_alltoallv(send, graph, algo="direct")
        identical = {}
        for algo in opts.algo_list:
            got = neighbor_alltoallv(send, graph, algo=algo)
            identical[algo] = ctx.all(all(torch.equal(a, b) for a, b in zip(got, ref, strict=True)))

        def call(algo, send=send):
            exchange = PersistentNeighborAlltoallv([t.shape for t in send], torch.uint8, graph, algo=algo)

            def fn():
                exchange(send)
                ctx.barrier()
            return fn

        graph.phase_log = [] if opts.stats else None
        timings = time_interleaved({a: call(a) for a in opts.algo_list}, repeats=opts.repeats, warmup=1)
        phases = _phase_medians(graph, opts.algo_list, ctx, nbytes) if opts.stats else {}
        graph.phase_log = None
        edge_bytes = np.full(len(graph.src), nbytes, dtype=np.int64)
        for algo in opts.algo_list:
            plan = graph.plan(edge_bytes, algo)
            inter = plan.inter_node_bytes()
            rows.append({
                "size": nbytes, "algo": algo, "routed_as": plan.algo,
                "median_s": ctx.max(timings[algo].median),
                "min_s": ctx.max(timings[algo].min),
                "inter_node_bytes_max": int(inter.max()), "inter_node_bytes_mean": float(inter.mean()),
                "inter_node_bytes_per_rank": inter.tolist(), "messages_max": int(plan.messages().max()),
                "identical": identical[algo], **({"phase_s": phases[algo]} if algo in phases else {}),
            })
    cross = int((graph.node[graph.src] != graph.node[graph.dst]).sum())
    result = {"nranks": size, "nnodes": graph.nnodes, "ranks_per_node": opts.ranks_per_node, "graph": opts.graph,
              "seed": opts.seed, "edges": len(graph.src), "cross_edges": cross,
              "inter_node_mbps": opts.inter_node_mbps, "backend": ctx.backend,
              "intra_node_transport": graph.intra_node_transport, "rows": rows}
    graph.close()
    return result


def format_table(result: dict) -> str:
    """The results as a plain table: one line per (size, algorithm), the speed-up over direct."""
    lines = [f"{result['nranks']} ranks on {result['nnodes']} nodes, graph {result['graph']} (seed {result['seed']}): "
             f"{result['edges']} edges, {result['cross_edges']} between nodes; emulated injection "
             f"{result['inter_node_mbps']:g} MB/s per rank" if result["inter_node_mbps"] else
             f"{result['nranks']} ranks on {result['nnodes']} nodes, graph {result['graph']}: real transport only "
             f"(no software emulation)"]
    lines[0] += f"; intra-node transport {result.get('intra_node_transport', result.get('backend', '?'))}"
    lines.append(f"{'size':>8} {'algo':>12} {'ms/call':>9} {'vs direct':>9} {'inter-node B/rank max':>22} "
                 f"{'mean':>10} {'msgs':>5} {'same bytes':>10}")
    direct = {r["size"]: r["median_s"] for r in result["rows"] if r["algo"] == "direct"}
    for r in result["rows"]:
        ratio = f"{direct[r['size']] / r['median_s']:.2f}x" if r["size"] in direct else "-"
        name = r["algo"] if r["routed_as"] == r["algo"] else f"{r['algo']}:{r['routed_as']}"
        lines.append(f"{_size(r['size']):>8} {name:>12} {1e3 * r['median_s']:9.2f} {ratio:>9} "
                     f"{r['inter_node_bytes_max']:22d} {r['inter_node_bytes_mean']:10.0f} {r['messages_max']:5d} "
                     f"{str(r['identical']):>10}" + _phases(r))
    return "\n".join(lines)


def _phases(r: dict) -> str:
    """The ``--stats`` column: direct sends in one phase, the hierarchical algorithms in three."""
    if "phase_s" not in r:
        return ""
    if r["routed_as"] == "direct":
        return f"   one phase ms: {1e3 * sum(r['phase_s']):.1f}"
    return "   phases ms (gather/inter-node/scatter): " + " / ".join(f"{1e3 * t:.1f}" for t in r["phase_s"])


def _size(n: int) -> str:
    for unit, div in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


__all__ = ["format_table", "time_algorithms"]
