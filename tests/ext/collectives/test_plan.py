"""Routing plans (direct, LAG-H, LAW-H), graph generators and the cost model, against brute force and hand counts."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from torchhpc.ext.collectives.graphs import grid_dims, moore_graph, parse_size, random_graph
from torchhpc.ext.collectives.plan import (
    ALGORITHMS,
    CostModel,
    build_plan,
    choose_algorithm,
    fit_cost_model,
    node_of_ranks,
    plan_cost,
)
from torchhpc.ext.core.errors import ConfigError

MB = 1 << 20


def _graphs():
    yield "random", *random_graph(16, 0.4, 5), node_of_ranks(16, 4)
    yield "moore", *moore_graph(24, 2, 1), node_of_ranks(24, 6)


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_routes_are_valid_and_pieces_tile_every_message(algo):
    """Each piece starts at its source, ends at its destination, relays only inside the two end nodes
    (direct: never), intra-node edges take one hop (in the hierarchical designs, during the inter-node phase),
    and the pieces of each edge cover its bytes exactly once."""
    rng = np.random.default_rng(0)
    for _, src, dst, node in _graphs():
        nbytes = rng.integers(0, 300_000, size=len(src))
        plan = build_plan(src, dst, nbytes, node, algo, min_split_bytes=4096)
        s, a, b, d = plan.route.T
        assert np.array_equal(s, src[plan.edge]) and np.array_equal(d, dst[plan.edge])
        intra = node[s] == node[d]
        # an edge inside a node is one hop: in phase 0 (direct), or in the inter-node phase (hierarchical)
        assert (a[intra] == (d if algo == "direct" else s)[intra]).all() and (b[intra] == d[intra]).all()
        if algo == "direct":
            assert (a == d).all() and (b == d).all()
        else:
            assert (node[a] == node[s]).all() and (node[b] == node[d]).all()
        for e in range(len(src)):
            ids = plan.pieces_of(e)
            ends = np.r_[plan.offset[ids], nbytes[e]]
            assert plan.offset[ids][0] == 0 and np.array_equal(plan.offset[ids] + plan.nbytes[ids], ends[1:])
        # every inter-node byte crosses exactly once
        cross = node[src] != node[dst]
        assert plan.inter_node_bytes().sum() == nbytes[cross].sum()


def test_lag_h_one_message_per_node_pair_spread_evenly():
    """LAG-H: one inter-node message per communicating node pair, and the flows leaving a node are dealt
    evenly over its ranks (counts differ by at most one)."""
    src, dst = random_graph(16, 0.5, 1)
    node = node_of_ranks(16, 4)
    plan = build_plan(src, dst, np.full(len(src), 1000), node, "lag-h")
    x, y, _ = plan.hops(1)
    between = node[x] != node[y]  # phase 1 also carries the edges inside a node
    pairs = set(zip(x[between].tolist(), y[between].tolist(), strict=True))
    flows = {(int(node[s]), int(node[d])) for s, d in zip(src, dst, strict=True) if node[s] != node[d]}
    assert len(pairs) == len(flows) == len({(int(node[i]), int(node[j])) for i, j in pairs})
    for A in range(4):
        per_rank = np.bincount([i for i, _ in pairs if node[i] == A], minlength=16)[4 * A:4 * A + 4]
        assert per_rank.max() - per_rank.min() <= 1


def test_law_h_spreads_one_ranks_load_over_its_node():
    """One rank sending 4 x 1 MB to the other node (its three node-mates idle): direct injects 4 MB from that
    rank, LAW-H 1 MB from each of the four; capacities 3:1:1:1 give it half."""
    src = np.array([0, 0, 0, 0])
    dst = np.array([4, 5, 6, 7])
    node = node_of_ranks(8, 4)
    nbytes = np.full(4, MB)
    assert build_plan(src, dst, nbytes, node, "direct").inter_node_bytes()[:4].tolist() == [4 * MB, 0, 0, 0]
    assert build_plan(src, dst, nbytes, node, "law-h").inter_node_bytes()[:4].tolist() == [MB] * 4
    cap = np.array([3.0, 1, 1, 1, 1, 1, 1, 1])
    got = build_plan(src, dst, nbytes, node, "law-h", capacity=cap).inter_node_bytes()[:4]
    assert got[0] == 2 * MB and got.sum() == 4 * MB and np.abs(got[1:] - 2 * MB / 3).max() <= 2


def test_law_h_splits_a_single_large_message():
    """A single 4 MB message is cut into four 1 MB pieces injected by the four ranks of its node."""
    plan = build_plan(np.array([1]), np.array([6]), np.array([4 * MB]), node_of_ranks(8, 4), "law-h")
    assert sorted(plan.nbytes.tolist()) == [MB] * 4
    assert sorted(plan.route[:, 1].tolist()) == [0, 1, 2, 3]


def test_cost_model_hand_counts():
    """Direct, one 1 MB edge between nodes: alpha + 1 MB / beta_rank.  LAW-H on the 4 x 1 MB fan-out: gather
    (3 pieces of 1 MB copied to three mates), inject 1 MB each, then scatter (none: receivers own them)."""
    m = CostModel(alpha=1e-5, beta_intra=1e9, beta_rank=1e8, beta_node=1e12)
    one = build_plan(np.array([0]), np.array([1]), np.array([MB]), np.array([0, 1]), "direct")
    assert plan_cost(one, m) == pytest.approx(1e-5 + MB / 1e8)
    fan = build_plan(np.array([0, 0, 0, 0]), np.array([4, 5, 6, 7]), np.full(4, MB), node_of_ranks(8, 4), "law-h")
    gather = 3e-5 + 3 * MB / 1e9  # rank 0 sends three 1 MB messages inside its node
    inject = 1e-5 + MB / 1e8
    assert plan_cost(fan, m) == pytest.approx(gather + inject)
    direct = build_plan(np.array([0, 0, 0, 0]), np.array([4, 5, 6, 7]), np.full(4, MB), node_of_ranks(8, 4), "direct")
    assert plan_cost(direct, m) == pytest.approx(4e-5 + 4 * MB / 1e8)
    node_bound = CostModel(alpha=0, beta_intra=1e12, beta_rank=1e12, beta_node=1e6)
    assert plan_cost(direct, node_bound) == pytest.approx(4 * MB / 1e6)


def test_auto_picks_aggregation_for_small_and_balance_for_large_messages():
    """auto = the cost model's argmin: 64-byte all-to-all over 8 nodes -> LAG-H (one message per node
    pair); one rank's large fan-out -> LAW-H; a single small edge -> direct."""
    m = CostModel(alpha=1e-4, beta_intra=1e9, beta_rank=1e8, beta_node=1e12)
    src, dst = np.array([(s, d) for s, d in itertools.product(range(16), repeat=2) if s != d]).T
    assert choose_algorithm(src, dst, np.full(len(src), 64), node_of_ranks(16, 2), m) == "lag-h"
    assert choose_algorithm(np.zeros(4, int), np.arange(4, 8), np.full(4, MB), node_of_ranks(8, 4), m) == "law-h"
    assert choose_algorithm(np.array([0]), np.array([5]), np.array([64]), node_of_ranks(8, 4), m) == "direct"


def test_fit_recovers_latency_and_bandwidth():
    """Least squares on exact samples t = alpha * msgs + bytes / beta returns alpha and beta."""
    samples = [{"msgs": k, "bytes": b, "seconds": 3e-4 * k + b / 5e8} for k in (1, 3) for b in (4096, MB, 4 * MB)]
    m = fit_cost_model(samples)
    assert m.alpha == pytest.approx(3e-4) and m.beta_intra == pytest.approx(5e8)


def test_moore_graph_matches_brute_force():
    """Moore radius-1 neighbours on a periodic 4 x 3 grid equal a brute-force Chebyshev-distance search."""
    src, dst = moore_graph(12, 2, 1, dims=(4, 3))
    got = set(zip(src.tolist(), dst.tolist(), strict=True))
    want = set()
    for a, b in itertools.product(range(12), repeat=2):
        (ai, aj), (bi, bj) = divmod(a, 3), divmod(b, 3)
        di, dj = min((ai - bi) % 4, (bi - ai) % 4), min((aj - bj) % 3, (bj - aj) % 3)
        if a != b and max(di, dj) <= 1:
            want.add((a, b))
    assert got == want
    assert grid_dims(28672, 3) == (32, 32, 28) and len(moore_graph(27, 3, 1)[0]) == 27 * 26


def test_random_graph_density_and_no_self_loops():
    """The random graph has no self-loops or repeated edges and its density matches the requested one."""
    src, dst = random_graph(400, 0.05, 2)
    assert not (src == dst).any()
    assert len(set(zip(src.tolist(), dst.tolist(), strict=True))) == len(src)
    assert abs(len(src) / (400 * 399) - 0.05) < 0.003


def test_bad_options_are_config_errors():
    """An unknown algorithm, a bad size or a bad density is a ConfigError naming it."""
    with pytest.raises(ConfigError, match="algorithm"):
        build_plan(np.array([0]), np.array([1]), np.array([1]), np.array([0, 1]), "ring")
    with pytest.raises(ConfigError, match="12Q"):
        parse_size("12Q")
    with pytest.raises(ConfigError, match="density"):
        random_graph(4, 1.5)
    assert parse_size("4K") == 4096 and parse_size("1M") == MB and parse_size("300") == 300
    assert parse_size("1.5K") == 1536
    with pytest.raises(ConfigError, match="'1.5' is not a whole number of bytes"):  # it ran as 1 byte
        parse_size("1.5")


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_walking_each_plan_delivers_every_message_intact(algo):
    """Moving each piece hop by hop along its route reassembles exactly the bytes direct delivery gives,
    on random and Moore graphs with random sizes (zero included) and LAW-H splitting."""
    from torchhpc.ext.collectives.reference import deliver_direct, walk_plan

    rng = np.random.default_rng(1)
    for _, src, dst, node in _graphs():
        sizes = rng.integers(0, 5000, size=len(src))
        sizes[::7] = 0
        messages = [rng.integers(0, 256, size=n, dtype=np.uint8).tobytes() for n in sizes]
        plan = build_plan(src, dst, sizes, node, algo, min_split_bytes=500)
        assert walk_plan(plan, src, dst, messages) == deliver_direct(src, dst, messages)


def test_demo_step_is_ok():
    """The demo step's plans all deliver intact and LAW-H never injects more per rank than direct."""
    from torchhpc.ext.collectives.config import CollectivesTour
    from torchhpc.ext.collectives.demo import demo

    res = demo(CollectivesTour(), None, None, 0)
    assert res["ok"] and res["inter_node_bytes_max"]["law-h"] <= res["inter_node_bytes_max"]["direct"]


def test_cost_model_charges_node_mates_their_own_latency():
    """With alpha_intra set, LAW-H's fan-out costs 3 intra-node latencies in the gather and one alpha per
    injection (hand count); without it, every message costs alpha as before."""
    fan = build_plan(np.array([0, 0, 0, 0]), np.array([4, 5, 6, 7]), np.full(4, MB), node_of_ranks(8, 4), "law-h")
    shm = CostModel(alpha=1e-3, alpha_intra=1e-5, beta_intra=1e9, beta_rank=1e8, beta_node=1e12)
    assert plan_cost(fan, shm) == pytest.approx(3e-5 + 3 * MB / 1e9 + 1e-3 + MB / 1e8)
    same = CostModel(alpha=1e-3, beta_intra=1e9, beta_rank=1e8, beta_node=1e12)
    assert plan_cost(fan, same) == pytest.approx(3e-3 + 3 * MB / 1e9 + 1e-3 + MB / 1e8)


def test_fit_recovers_both_latencies_from_several_graphs():
    """Non-negative least squares on exact samples of three message mixes returns alpha, alpha_intra and beta_intra."""
    samples = [{"msgs": g, "msgs_intra": i, "bytes": g * b, "bytes_intra": i * b,
                "seconds": 2e-3 * g + 1e-4 * i + g * b / 4e8 + i * b / 3e9}
               for g, i in ((2, 5), (6, 3), (9, 9)) for b in (4096, MB, 4 * MB)]
    m = fit_cost_model(samples)
    assert m.alpha == pytest.approx(2e-3, rel=1e-6) and m.alpha_intra == pytest.approx(1e-4, rel=1e-6)
    assert m.beta_intra == pytest.approx(3e9, rel=1e-6)


def test_stats_column_names_direct_one_phase_and_the_hierarchical_three():
    """The bench table's --stats column gives direct's single phase as such (not under "gather") and the
    three phases of a hierarchical algorithm in order."""
    from torchhpc.ext.collectives.timing import format_table

    row = dict(size=4096, median_s=0.01, inter_node_bytes_max=8192, inter_node_bytes_mean=5120.0, messages_max=3,
               identical=True)
    result = {"rows": [dict(row, algo="direct", routed_as="direct", phase_s=[0.004, 0.0, 0.0]),
                       dict(row, algo="law-h", routed_as="law-h", phase_s=[0.001, 0.002, 0.003])],
              "nranks": 4, "nnodes": 2, "graph": "powerlaw:3:1", "seed": 0, "edges": 9, "cross_edges": 5,
              "inter_node_mbps": 20.0, "intra_node_transport": "shm"}
    lines = format_table(result).splitlines()
    assert lines[-2].endswith("one phase ms: 4.0")
    assert lines[-1].endswith("phases ms (gather/inter-node/scatter): 1.0 / 2.0 / 3.0")
