"""What a collectives command needs, in memory and time, estimated from its sizes before anything is built.

A command that would not fit is refused in one line with the estimate and the limit, in the process
that reads the command line (before torchrun starts ranks, before a plan is built):

* :func:`check_model_fits`: ``collectives model``, whose plans hold every edge of a machine of
  ``nodes x ranks_per_node`` ranks: memory against :data:`MEMORY_FRACTION` of the memory available now,
  time against ``--max-minutes``;
* :func:`check_bench_fits`: ``collectives bench``, whose ranks hold every message of the graph on
  ``--nproc`` ranks: memory as above, one call's emulated injection against ``--timeout-s`` and all of
  them against ``--max-minutes``.

The per-rank and per-edge figures are measured (peak RSS and seconds of ``predict``; a torch rank's
private memory) and round up; an estimate is good to about a factor of two, so only what is far out of
reach is refused.
"""

from __future__ import annotations

import os

import numpy as np

from torchhpc.ext.core.errors import ConfigError

from .config import BenchOptions, ModelOptions, _check_sizes
from .graphs import parse_graph_spec

MEMORY_FRACTION = 0.5
"""A command refuses to need more than this fraction of the memory available now."""

#: what ``predict`` holds at its peak per rank (node ids, per-phase loads) and per edge (the graph, the
#: plans' routes, LAW-H's pieces): peak RSS measured from 0.9 k to 2 M ranks and 0.4 M to 2 M edges
MODEL_BYTES_PER_RANK = 150
MODEL_BYTES_PER_EDGE = 500
#: its seconds per rank (the generators' per-rank draws) and per edge and plan (direct and LAG-H once,
#: LAW-H once per size), measured on one core of an x86-64 server CPU
MODEL_SECONDS_PER_RANK = 6e-6
MODEL_SECONDS_PER_EDGE = 4e-6

BENCH_BYTES_PER_RANK = 200 << 20
"""A bench rank's own memory before any message: torch, the process group (~150 MB private, measured)."""
BENCH_COPIES_FIXED = 3
"""Copies of every message a bench rank holds whatever the algorithms: sent, direct's reference, received."""
BENCH_COPIES_PER_ALGO = 3
"""... and per timed algorithm: its persistent exchange's send, relay and receive buffers."""


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation now (``MemAvailable`` of /proc/meminfo, else the free
    physical pages); ``None`` when the system says neither."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def model_footprint(opts: ModelOptions) -> dict:
    """What ``collectives model`` would need for ``opts``, from the sizes alone (nothing is built).

    Returns:
        ``{"nranks", "edges", "bytes", "seconds"}``: the ranks, the graph's expected edges, the estimated
        peak memory and run time.
    """
    P = opts.nodes * opts.ranks_per_node
    edges = parse_graph_spec(opts.graph).expected_edges(P)
    plans = 2 + len(_check_sizes(opts.sizes, "--sizes"))
    return {"nranks": P, "edges": edges, "bytes": MODEL_BYTES_PER_RANK * P + MODEL_BYTES_PER_EDGE * edges,
            "seconds": MODEL_SECONDS_PER_RANK * P + MODEL_SECONDS_PER_EDGE * edges * plans}


def check_model_fits(opts: ModelOptions, available: int | None = None) -> dict:
    """Refuse a prediction that would need more than :data:`MEMORY_FRACTION` of the ``available`` bytes
    (default :func:`available_memory`) or longer than ``opts.max_minutes``.

    Returns:
        :func:`model_footprint`.

    Raises:
        ConfigError: one line with the ranks and edges, the estimate and the limit it exceeds.
    """
    need = model_footprint(opts)
    available = available_memory() if available is None else available
    what = (f"{opts.nodes} nodes x {opts.ranks_per_node} ranks = {need['nranks']:,} ranks with --graph {opts.graph} "
            f"make about {need['edges']:.3g} edges")
    fix = "lower --nodes, --ranks-per-node or the graph's degree"
    if available is not None and need["bytes"] > MEMORY_FRACTION * available:
        raise ConfigError(f"{what}: the model needs about {format_bytes(need['bytes'])} of memory, more than "
                          f"{MEMORY_FRACTION:.0%} of the {format_bytes(available)} available; {fix}")
    if need["seconds"] > 60 * opts.max_minutes:
        raise ConfigError(f"{what}: the model would take about {format_seconds(need['seconds'])}, more than "
                          f"--max-minutes {opts.max_minutes:g}; {fix} (or raise --max-minutes)")
    return need


def bench_footprint(opts: BenchOptions, nranks: int) -> dict:
    """What ``collectives bench`` would need on ``nranks`` ranks: the graph is built (a few hundred ranks'
    worth, cheap), nothing else.

    Returns:
        ``{"edges", "bytes", "call_s", "seconds"}``: the graph's edges; the memory of all ranks together at
        the largest size; at least how long the busiest rank's emulated injection takes in one call at that
        size, and in all the calls of the run (0 without emulation, or when nodes come from the launcher:
        ``ranks_per_node`` 0).
    """
    src, dst = parse_graph_spec(opts.graph).build(nranks, opts.seed)
    sizes, algos = opts.size_list, opts.algo_list
    copies = BENCH_COPIES_FIXED + BENCH_COPIES_PER_ALGO * len(algos)
    per_rank_edges = 0.0
    if opts.inter_node_mbps > 0 and opts.ranks_per_node > 0 and len(src):
        # every algorithm injects all of a node's inter-node bytes from the node's own ranks: its busiest
        # rank injects at least the node's share per rank, whatever the routes
        node = np.arange(nranks) // opts.ranks_per_node
        cross = node[src] != node[dst]
        per_rank_edges = float((np.bincount(node[src[cross]], minlength=node[-1] + 1) / np.bincount(node)).max())
    rate = opts.inter_node_mbps * 1e6 or 1.0
    calls = 1 + len(algos) * (opts.repeats + 2)  # direct's reference, each algorithm's check, warm-up, repeats
    return {"edges": len(src), "bytes": BENCH_BYTES_PER_RANK * nranks + copies * len(src) * max(sizes),
            "call_s": per_rank_edges * max(sizes) / rate, "seconds": calls * per_rank_edges * sum(sizes) / rate}


def check_bench_fits(opts: BenchOptions, nranks: int, available: int | None = None) -> dict:
    """Refuse a bench whose ranks would need more than :data:`MEMORY_FRACTION` of the ``available`` bytes
    (default :func:`available_memory`), whose one emulated call would outlast a rank's wait for its peers
    (``dist.timeout_s``), or whose emulated calls would take longer than ``max_minutes``.

    Returns:
        :func:`bench_footprint`.

    Raises:
        ConfigError: a graph without an edge on ``nranks`` ranks; else one line with the estimate and the limit
            it exceeds.
    """
    need = bench_footprint(opts, nranks)
    if need["edges"] == 0:
        raise ConfigError(f"--graph {opts.graph} on --nproc {nranks} ranks has no edge: there is nothing to exchange "
                          f"(raise the density or the number of ranks)")
    available = available_memory() if available is None else available
    largest = format_bytes(max(opts.size_list))
    if available is not None and need["bytes"] > MEMORY_FRACTION * available:
        raise ConfigError(f"--nproc {nranks} ranks exchanging --sizes up to {largest} on {need['edges']} edges of "
                          f"--graph {opts.graph} need about {format_bytes(need['bytes'])} of memory, more than "
                          f"{MEMORY_FRACTION:.0%} of the {format_bytes(available)} available; lower --sizes, --nproc "
                          f"or the graph's density")
    if need["call_s"] > opts.dist.timeout_s:
        raise ConfigError(f"--sizes up to {largest} at --inter-node-mbps {opts.inter_node_mbps:g}: one call takes "
                          f"the busiest rank at least {format_seconds(need['call_s'])}, longer than --timeout-s "
                          f"{opts.dist.timeout_s:g} (how long its peers wait); raise --timeout-s or "
                          f"--inter-node-mbps, or lower --sizes")
    if need["seconds"] > 60 * opts.max_minutes:
        raise ConfigError(f"--sizes {opts.sizes} x --repeats {opts.repeats} at --inter-node-mbps "
                          f"{opts.inter_node_mbps:g}: the emulated transfers alone take at least "
                          f"{format_seconds(need['seconds'])}, more than --max-minutes {opts.max_minutes:g}; lower "
                          f"--sizes or --repeats, raise --inter-node-mbps (or --max-minutes)")
    return need


def format_bytes(n: float) -> str:
    """``1.5 GB``-style (powers of 1000)."""
    for unit, div in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= div:
            return f"{n / div:.3g} {unit}"
    return f"{n:.0f} B"


def format_seconds(s: float) -> str:
    """``40 s``, ``12 min``, ``3.2 h`` or ``5.1 days``."""
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.3g} days"


__all__ = ["MEMORY_FRACTION", "available_memory", "bench_footprint", "check_bench_fits", "check_model_fits",
           "format_bytes", "format_seconds", "model_footprint"]
