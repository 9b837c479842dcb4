"""Graph specs checked without building the graph, the edge counts the size estimates use, and the Moore grid
built from offsets taken modulo the grid (so an absurd radius or dimension count costs no more than the grid)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from torchhpc.ext.collectives.config import BenchOptions, ModelOptions
from torchhpc.ext.collectives.graphs import grid_dims, moore_graph, parse_graph_spec
from torchhpc.ext.collectives.plan import distinct
from torchhpc.ext.collectives.sizing import check_bench_fits, check_model_fits, model_footprint
from torchhpc.ext.core.errors import ConfigError

GB = 10**9


@pytest.mark.parametrize("spec, kind, numbers", [
    ("random", "random", (0.1,)), ("random:1", "random", (1.0,)), ("powerlaw:3", "powerlaw", (3.0, 1.0)),
    ("powerlaw:3:0", "powerlaw", (3.0, 0.0)), ("moore", "moore", (2, 1)), ("moore:3:2", "moore", (3, 2)),
])
def test_good_specs_parse_with_their_defaults(spec, kind, numbers):
    """Each kind, with numbers left out taking their defaults."""
    g = parse_graph_spec(spec)
    assert (g.kind, g.numbers) == (kind, numbers)


@pytest.mark.parametrize("spec", ["ring", "random:0", "random:1.5", "random:-0.1", "random:inf", "random:0.5:2",
                                  "random:", "powerlaw:0:1", "powerlaw:2:-1", "powerlaw:2:nan", "powerlaw:1:2:3",
                                  "moore:0:1", "moore:65:1", "moore:2:0", "moore:2.0:1", "moore:2:1:1"])
def test_bad_specs_are_config_errors_naming_the_key(spec):
    """An unknown kind, a number out of range, not finite, not an integer (moore) or one too many."""
    with pytest.raises(ConfigError, match=r"^--graph: "):
        parse_graph_spec(spec)


@pytest.mark.parametrize("nranks, ndim, radius", [(12, 2, 1), (27, 3, 1), (30, 2, 5), (16, 7, 1), (64, 3, 100),
                                                  (1, 2, 1), (2, 1, 1)])
def test_moore_graph_equals_brute_force_and_its_edge_count(nranks, ndim, radius):
    """Every rank within Chebyshev distance `radius` on the periodic grid (wrap-arounds counted once, no
    self-loops), sorted by (src, dst); expected_edges gives that count without building it."""
    dims = grid_dims(nranks, ndim)
    coords = list(itertools.product(*[range(n) for n in dims]))  # row-major: rank r is coords[r]
    want = sorted((a, b) for a, b in itertools.permutations(range(nranks), 2)
                  if all(min((x - y) % n, (y - x) % n) <= radius
                         for x, y, n in zip(coords[a], coords[b], dims, strict=True)))
    src, dst = moore_graph(nranks, ndim, radius)
    assert list(zip(src.tolist(), dst.tolist(), strict=True)) == want
    assert parse_graph_spec(f"moore:{ndim}:{radius}").expected_edges(nranks) == len(want)


def test_random_and_powerlaw_edge_estimates():
    """random: the expected count (within 5 standard deviations); powerlaw: an upper bound."""
    for seed in range(3):
        g = parse_graph_spec("random:0.05")
        n = len(g.build(400, seed)[0])
        mean = g.expected_edges(400)
        assert abs(n - mean) < 5 * np.sqrt(mean)
        for spec in ("powerlaw:4:1", "powerlaw:50:2", "powerlaw:1:0"):
            g = parse_graph_spec(spec)
            assert len(g.build(300, seed)[0]) <= g.expected_edges(300)


def test_distinct_is_numpy_unique():
    """The sort-based distinct values equal np.unique's, empty and single-element inputs included."""
    rng = np.random.default_rng(0)
    for n in (0, 1, 2, 1000):
        x = rng.integers(0, 50, size=n)
        assert np.array_equal(distinct(x), np.unique(x))


def test_model_and_bench_fit_checks_take_the_available_memory():
    """The shipped model scale fits 16 GB and its dense variant does not; a bench's messages are held by every
    rank, so --nproc and --sizes decide."""
    assert check_model_fits(ModelOptions(), available=16 * GB)["edges"] == model_footprint(ModelOptions())["edges"]
    with pytest.raises(ConfigError, match=r"about 206 GB of memory, more than 50% of the 16 GB available"):
        check_model_fits(ModelOptions(graph="random:0.5"), available=16 * GB)
    assert check_bench_fits(BenchOptions(), 4, available=16 * GB)["edges"] == 3
    with pytest.raises(ConfigError, match=r"--nproc 8 ranks exchanging --sizes up to 1.07 GB"):
        check_bench_fits(BenchOptions(sizes="1G", graph="random:1"), 8, available=16 * GB)
