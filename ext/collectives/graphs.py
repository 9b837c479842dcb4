"""Process-graph generators and the deterministic payloads the tests and benchmarks exchange.

A process graph on ``P`` ranks is given as two arrays of directed edges ``(src, dst)``: rank
``src`` sends one message to rank ``dst``.  Rank ``r``'s view, as ``MPI_Dist_graph_create_adjacent``
takes it, is ``sources = src[dst == r]`` (in edge order) and ``destinations = dst[src == r]``.

* :func:`random_graph`: every ordered pair ``s != d`` is an edge with probability ``density``
  (the paper's "random sparse graph" with a density parameter).
* :func:`powerlaw_graph`: out-degrees from a power law (a few hub ranks with many neighbours).
* :func:`moore_graph`: ranks on a periodic ``D``-dimensional grid, each sending to every rank
  within Chebyshev distance ``radius`` (the Moore neighbourhood of stencil codes).

Everything here is numpy, so that the Open MPI reference (mpi4py) builds the identical graph.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from torchhpc.ext.core.errors import ConfigError


def random_graph(nranks: int, density: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Directed Erdos-Renyi process graph without self-loops.

    Returns:
        ``(src, dst)``, int64 arrays of shape ``(E,)``, sorted by ``(src, dst)``.
    """
    if not 0.0 <= density <= 1.0:
        raise ConfigError(f"graph density must be in [0, 1], got {density}")
    rng = np.random.default_rng(seed)
    # per rank: how many destinations (binomial), then which ones (without replacement, never itself);
    # O(edges), so 28,672 ranks are as cheap as their edges
    counts = rng.binomial(max(nranks - 1, 0), density, size=nranks)
    srcs, dsts = [], []
    for s, k in enumerate(counts):
        if k:
            d = rng.choice(nranks - 1, size=int(k), replace=False)
            d = np.sort(d + (d >= s))
            srcs.append(np.full(len(d), s, dtype=np.int64))
            dsts.append(d.astype(np.int64))
    if not srcs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(srcs), np.concatenate(dsts)


def powerlaw_graph(nranks: int, mean_degree: float, exponent: float = 1.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Irregular process graph: out-degrees follow a power law, destinations are uniform.

    Rank weights ``(i + 1) ** -exponent`` are dealt to ranks in a random order (hubs land on random
    nodes); rank ``s`` gets ``round(mean_degree * P * w_s / sum(w))`` destinations (at most ``P - 1``,
    at least 1), chosen uniformly without replacement.  The skewed halos of graph partitions
    (GNNs, power-law sparse matrices) look like this.

    Returns:
        ``(src, dst)``, int64 arrays sorted by ``(src, dst)``.
    """
    if mean_degree <= 0 or exponent < 0:
        raise ConfigError(f"powerlaw graph needs mean_degree > 0 and exponent >= 0, got {mean_degree}, {exponent}")
    rng = np.random.default_rng(seed)
    w = (np.arange(nranks) + 1.0) ** -exponent
    w = w[rng.permutation(nranks)]
    deg = np.clip(np.rint(mean_degree * nranks * w / w.sum()), 1, max(nranks - 1, 0)).astype(np.int64)
    srcs, dsts = [], []
    for s, k in enumerate(deg):
        if k and nranks > 1:
            d = rng.choice(nranks - 1, size=int(k), replace=False)
            dsts.append(np.sort(d + (d >= s)).astype(np.int64))
            srcs.append(np.full(int(k), s, dtype=np.int64))
    if not srcs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(srcs), np.concatenate(dsts)


def grid_dims(nranks: int, ndim: int) -> tuple[int, ...]:
    """The most cubic ``ndim``-D grid with ``nranks`` points (like ``MPI_Dims_create``), largest first."""
    dims = [1] * ndim
    n = nranks
    for p in _prime_factors(n)[::-1]:  # largest factors first onto the smallest dimension
        i = int(np.argmin(dims))
        dims[i] *= p
    return tuple(sorted(dims, reverse=True))


def _prime_factors(n: int) -> list[int]:
    out, f = [], 2
    while f * f <= n:
        while n % f == 0:
            out.append(f)
            n //= f
        f += 1
    if n > 1:
        out.append(n)
    return out


def moore_graph(nranks: int, ndim: int = 2, radius: int = 1,
                dims: tuple[int, ...] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Moore neighbourhood on a periodic grid: each rank sends to all ranks within Chebyshev ``radius``.

    Ranks are laid out row-major over ``dims`` (default :func:`grid_dims`).  Duplicate neighbours
    (a small periodic grid wrapping onto itself) and self-loops are dropped.

    Returns:
        ``(src, dst)``, int64 arrays sorted by ``(src, dst)``.
    """
    dims = tuple(dims) if dims is not None else grid_dims(nranks, ndim)
    if math.prod(dims) != nranks:
        raise ConfigError(f"grid {dims} does not hold {nranks} ranks")
    if radius < 1:
        raise ConfigError(f"Moore radius must be >= 1, got {radius}")
    coords = np.stack(np.unravel_index(np.arange(nranks), dims), axis=1)  # (P, D)
    offsets = np.array([o for o in itertools.product(range(-radius, radius + 1), repeat=len(dims)) if any(o)])
    nbr = (coords[:, None, :] + offsets[None, :, :]) % np.array(dims)  # (P, K, D)
    dst = np.ravel_multi_index(tuple(nbr.reshape(-1, len(dims)).T), dims).reshape(nranks, -1)
    src = np.repeat(np.arange(nranks), dst.shape[1]).reshape(nranks, -1)
    pairs = np.unique(np.stack([src.ravel(), dst.ravel()], axis=1), axis=0)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    return pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64)


def parse_graph(spec: str, nranks: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``random:DENSITY``, ``powerlaw:MEAN_DEGREE:EXPONENT`` or ``moore:D:R`` (D-dimensional periodic grid,
    radius R) on ``nranks`` ranks."""
    kind, _, rest = spec.partition(":")
    try:
        if kind == "random":
            return random_graph(nranks, float(rest or 0.1), seed)
        if kind == "powerlaw":
            parts = [float(x) for x in rest.split(":")] if rest else []
            return powerlaw_graph(nranks, parts[0] if parts else 4.0, parts[1] if len(parts) > 1 else 1.0, seed)
        if kind == "moore":
            parts = [int(x) for x in rest.split(":")] if rest else []
            ndim = parts[0] if parts else 2
            radius = parts[1] if len(parts) > 1 else 1
            return moore_graph(nranks, ndim, radius)
    except ValueError:
        pass
    raise ConfigError(f"--graph: expected random:DENSITY, powerlaw:MEAN_DEGREE:EXPONENT or moore:D:R, got {spec!r}")


def neighbours(src: np.ndarray, dst: np.ndarray, rank: int) -> tuple[list[int], list[int]]:
    """Rank ``rank``'s ``(sources, destinations)`` in edge order."""
    return src[dst == rank].tolist(), dst[src == rank].tolist()


def edge_rows(src: np.ndarray, dst: np.ndarray, max_rows: int, seed: int = 0) -> np.ndarray:
    """Random rows per edge in ``[0, max_rows]`` (zero-length messages included), shape ``(E,)``."""
    rng = np.random.default_rng([seed, 1])
    return rng.integers(0, max_rows + 1, size=len(src)).astype(np.int64)


def payload(s: int, d: int, rows: int, width: int = 1) -> np.ndarray:
    """The message rank ``s`` sends to rank ``d``: int32 ``(rows, width)`` that names its sender,
    receiver and position, so a receiver can tell exactly what arrived where."""
    k = np.arange(rows * width, dtype=np.int64)
    return ((s * 1_000_003 + d * 7919 + k * 31) % 2_147_483_647).astype(np.int32).reshape(rows, width)


def parse_size(text: str) -> int:
    """``4K`` -> 4096, ``1M`` -> 1048576, ``300`` -> 300 (bytes)."""
    t = text.strip().upper().removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    try:
        value = int(float(t[:-1] if mult > 1 else t) * mult)
    except ValueError:
        raise ConfigError(f"message size {text!r} is not a number with an optional K/M/G suffix") from None
    if value < 0:
        raise ConfigError(f"message size {text!r} is negative")
    return value


__all__ = ["edge_rows", "grid_dims", "moore_graph", "neighbours", "parse_graph", "parse_size", "payload",
           "powerlaw_graph", "random_graph"]
