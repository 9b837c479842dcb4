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

import math
from dataclasses import dataclass

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
    (a small periodic grid wrapping onto itself) and self-loops are dropped.  Offsets are taken per
    dimension modulo its length first (:func:`moore_offsets`), so a radius or a dimension count far
    beyond the grid costs no more than the whole grid.

    Returns:
        ``(src, dst)``, int64 arrays sorted by ``(src, dst)``.
    """
    dims = tuple(dims) if dims is not None else grid_dims(nranks, ndim)
    if math.prod(dims) != nranks:
        raise ConfigError(f"grid {dims} does not hold {nranks} ranks")
    if radius < 1:
        raise ConfigError(f"Moore radius must be >= 1, got {radius}")
    kept = [i for i, n in enumerate(dims) if n > 1]  # a dimension of length 1 only maps a rank onto itself
    if not kept:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    sub = tuple(dims[i] for i in kept)
    coords = np.stack(np.unravel_index(np.arange(nranks), sub), axis=1)  # (P, D'): row-major over dims
    offsets = moore_offsets(sub, radius)  # (K, D'), distinct modulo the grid, the zero offset left out
    nbr = (coords[:, None, :] + offsets[None, :, :]) % np.array(sub)  # (P, K, D')
    dst = np.ravel_multi_index(tuple(nbr.reshape(-1, len(sub)).T), sub).reshape(nranks, -1)
    src = np.repeat(np.arange(nranks, dtype=np.int64), dst.shape[1]).reshape(nranks, -1)
    # distinct offsets modulo the grid give distinct neighbours, none of them the rank itself: sort per rank
    dst = np.sort(dst, axis=1)
    return src.ravel().astype(np.int64), dst.ravel().astype(np.int64)


def moore_offsets(dims: tuple[int, ...], radius: int) -> np.ndarray:
    """The offsets of a Moore neighbourhood of ``radius`` on a periodic grid of ``dims``, distinct modulo
    the grid and without the zero offset: ``(K, D)`` int64, ``K = prod(min(2 radius + 1, n)) - 1``."""
    per_dim = [np.arange(n) if 2 * radius + 1 >= n else np.arange(-radius, radius + 1) % n for n in dims]
    grid = np.stack(np.meshgrid(*per_dim, indexing="ij"), axis=-1).reshape(-1, len(dims))
    return grid[grid.any(axis=1)].astype(np.int64)


def moore_degree(dims: tuple[int, ...], radius: int) -> int:
    """Neighbours of each rank in :func:`moore_graph` on ``dims`` (without building it)."""
    return math.prod(min(2 * radius + 1, n) for n in dims) - 1


GRAPH_FORMS = "random:DENSITY, powerlaw:MEAN_DEGREE:EXPONENT or moore:D:R"
"""The ``--graph`` values :func:`parse_graph_spec` accepts (trailing numbers may be left out: their defaults)."""

MAX_MOORE_DIMS = 64
"""More grid dimensions than any rank count has prime factors (< 2**64) only add dimensions of length 1."""


@dataclass(frozen=True)
class GraphSpec:
    """A checked ``--graph`` value: which generator, with which numbers (see :func:`parse_graph_spec`)."""

    kind: str
    """``random``, ``powerlaw`` or ``moore``"""
    numbers: tuple[float, ...]
    """``(density,)``, ``(mean_degree, exponent)`` or ``(ndim, radius)``"""

    @property
    def seeded(self) -> bool:
        """Whether the graph depends on the seed (``moore`` grids do not)."""
        return self.kind != "moore"

    def expected_edges(self, nranks: int) -> int:
        """About how many edges the graph has on ``nranks`` ranks, from the numbers alone (nothing is built):
        exact for ``moore``, the mean for ``random``, an upper bound for ``powerlaw``."""
        P = int(nranks)
        if self.kind == "random":
            return round(self.numbers[0] * P * max(P - 1, 0))
        if self.kind == "powerlaw":
            return min(P * max(P - 1, 0), math.ceil(self.numbers[0] * P) + P)
        ndim, radius = (int(x) for x in self.numbers)
        return P * moore_degree(grid_dims(P, ndim), radius) if P > 1 else 0

    def build(self, nranks: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """The graph's ``(src, dst)`` on ``nranks`` ranks (see the generators)."""
        if self.kind == "random":
            return random_graph(nranks, self.numbers[0], seed)
        if self.kind == "powerlaw":
            return powerlaw_graph(nranks, self.numbers[0], self.numbers[1], seed)
        return moore_graph(nranks, int(self.numbers[0]), int(self.numbers[1]))


_GRAPH_DEFAULTS = {"random": (0.1,), "powerlaw": (4.0, 1.0), "moore": (2, 1)}


def parse_graph_spec(spec: str, key: str = "--graph") -> GraphSpec:
    """Check a ``--graph`` value without building the graph: ``random:DENSITY`` (0 < DENSITY <= 1),
    ``powerlaw:MEAN_DEGREE:EXPONENT`` (MEAN_DEGREE > 0, EXPONENT >= 0) or ``moore:D:R`` (integers,
    1 <= D <= 64, R >= 1); numbers left out take their defaults (0.1; 4, 1; 2, 1).

    Raises:
        ConfigError: naming ``key``: an unknown kind, too many numbers, a number that is not one (or not
            finite, or not an integer for ``moore``), or one out of its range.
    """
    kind, colon, rest = str(spec).partition(":")
    if kind not in _GRAPH_DEFAULTS:
        raise ConfigError(f"{key}: expected {GRAPH_FORMS}, got {spec!r}")
    form = {"random": "random:DENSITY", "powerlaw": "powerlaw:MEAN_DEGREE:EXPONENT", "moore": "moore:D:R"}[kind]
    defaults = _GRAPH_DEFAULTS[kind]
    fields = rest.split(":") if colon else []  # "random:" is a number left empty, not the default
    if len(fields) > len(defaults):
        raise ConfigError(f"{key}: {form} takes at most {len(defaults)} number(s), got {spec!r}")
    numbers: list[float] = []
    for text in fields:
        try:
            value = int(text) if kind == "moore" else float(text)
        except ValueError:
            what = "an integer" if kind == "moore" else "a number"
            raise ConfigError(f"{key}: {form}: {text.strip()!r} is not {what} (in {spec!r})") from None
        if not math.isfinite(value):
            raise ConfigError(f"{key}: {form}: {text.strip()!r} is not a finite number (in {spec!r})")
        numbers.append(value)
    numbers += defaults[len(numbers):]
    if kind == "random" and not 0 < numbers[0] <= 1:
        raise ConfigError(f"{key}: random:DENSITY needs 0 < DENSITY <= 1 (each ordered pair of ranks an edge "
                          f"with that probability), got {spec!r}")
    if kind == "powerlaw" and not (numbers[0] > 0 and numbers[1] >= 0):
        raise ConfigError(f"{key}: powerlaw:MEAN_DEGREE:EXPONENT needs MEAN_DEGREE > 0 and EXPONENT >= 0, "
                          f"got {spec!r}")
    if kind == "moore" and not (1 <= numbers[0] <= MAX_MOORE_DIMS and numbers[1] >= 1):
        raise ConfigError(f"{key}: moore:D:R needs 1 <= D <= {MAX_MOORE_DIMS} dimensions and a radius R >= 1, "
                          f"got {spec!r}")
    return GraphSpec(kind, tuple(numbers))


def parse_graph(spec: str, nranks: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``random:DENSITY``, ``powerlaw:MEAN_DEGREE:EXPONENT`` or ``moore:D:R`` (D-dimensional periodic grid,
    radius R) on ``nranks`` ranks (checked by :func:`parse_graph_spec`)."""
    return parse_graph_spec(spec).build(nranks, seed)


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


MAX_MESSAGE_BYTES = 1 << 40
"""The largest message per edge :func:`parse_size` accepts (1024G): byte counts of a call stay exact in int64."""


def parse_size(text: str) -> int:
    """``4K`` -> 4096, ``1M`` -> 1048576, ``300`` -> 300 (bytes)."""
    t = text.strip().upper().removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    try:
        number = float(t[:-1] if mult > 1 else t)
    except ValueError:
        raise ConfigError(f"message size {text!r} is not a number with an optional K/M/G suffix") from None
    if not math.isfinite(number):
        raise ConfigError(f"message size {text!r} is not a finite number")
    if number < 0:
        raise ConfigError(f"message size {text!r} is negative")
    if number * mult > MAX_MESSAGE_BYTES:
        raise ConfigError(f"message size {text!r} is over the largest, {MAX_MESSAGE_BYTES >> 30}G per edge")
    if number * mult != int(number * mult):  # 1.5 bytes is no size (1.5K is 1536)
        raise ConfigError(f"message size {text!r} is not a whole number of bytes")
    return int(number * mult)


__all__ = ["GRAPH_FORMS", "GraphSpec", "edge_rows", "grid_dims", "moore_degree", "moore_graph", "moore_offsets",
           "neighbours", "parse_graph", "parse_graph_spec", "parse_size", "payload", "powerlaw_graph", "random_graph"]
