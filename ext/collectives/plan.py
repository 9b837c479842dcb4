"""Routing plans of a neighbourhood all-to-all: direct, LAG-H and LAW-H (pure numpy, no communication).

Every edge ``e`` (rank ``s`` -> rank ``d``, ``b_e`` bytes) gets a *route* of four ranks
``[s, a, b, d]`` walked in three phases::

    phase 0 (intra-node gather)   s -> a      a: the rank of node(s) that injects e into the network
    phase 1 (inter-node)          a -> b      b: the rank of node(d) that takes e off the network
    phase 2 (intra-node scatter)  b -> d

A hop whose two ends are the same rank costs nothing.  In one phase all edges with the same hop
``x -> y`` travel as ONE message (their payloads concatenated in edge order), which is the
aggregation of node-aware designs: many small messages between two nodes become a few large ones.

* ``direct``: route ``[s, d, d, d]`` (one send per edge, like Open MPI's ``Neighbor_alltoallv``).
* In both hierarchical designs an edge inside a node is one hop in phase 1, route ``[s, s, d, d]``: the
  node's copies then overlap the slow inter-node injection instead of delaying the gather before it.
* ``lag-h`` (load-agnostic hierarchical, the paper's LAG-H): the edges of each node pair
  ``(A, B)`` form one *flow*; the flows leaving A are dealt round-robin over A's ranks (each rank
  injects the same number of flows: equal load assumed), and the flows entering B round-robin over
  B's ranks.  Edges inside a node go direct.
* ``law-h`` (load-aware hierarchical, the paper's LAW-H): each rank ``r`` of node A gets a share
  of A's inter-node bytes proportional to its capacity ``c_r``; a message stays with its own
  source while that source is within its share (no relay copy), the rest is cut into pieces
  (at least ``min_split_bytes``) that fill the spare capacity of the node's other ranks, most spare
  first.  So no rank injects far more than its share.  Pieces go from the injecting rank straight to
  their destination (receiving costs no injection capacity), so LAW-H has no scatter phase.

:func:`plan_cost` is the cost model (per-message latency, per-rank and per-node injection
bandwidth, intra-node copy bandwidth) evaluated on a plan; it needs no communication, so it
predicts any process count (28,672 ranks = 512 nodes x 56 take about a second).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from torchhpc.ext.core.errors import ConfigError

ALGORITHMS = ("direct", "lag-h", "law-h")
NPHASES = 3


@dataclass
class Plan:
    """Routes of every *piece*; see the module docstring.

    A piece is a byte range of one edge's message: one piece per edge, except where LAW-H splits a
    large message over several injecting ranks.

    Attributes:
        algo: ``direct``, ``lag-h`` or ``law-h``.
        route: ``(K, 4)`` int64 ranks ``[s, a, b, d]`` of each piece.
        nbytes: ``(K,)`` int64 bytes of each piece.
        node: ``(P,)`` int64 node of each rank.
        edge: ``(K,)`` the edge each piece belongs to (default: piece k is edge k).
        offset: ``(K,)`` the piece's first byte within its edge's message (default: 0).
    """

    algo: str
    route: np.ndarray
    nbytes: np.ndarray
    node: np.ndarray
    edge: np.ndarray | None = None
    offset: np.ndarray | None = None
    _rank_cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if self.edge is None:
            self.edge = np.arange(len(self.route), dtype=np.int64)
        if self.offset is None:
            self.offset = np.zeros(len(self.route), dtype=np.int64)

    def pieces_of(self, edge: int) -> np.ndarray:
        """Piece ids of ``edge`` in byte order."""
        if "pieces" not in self._rank_cache:  # one sort for all edges, on first use
            order = np.lexsort((self.offset, self.edge))
            starts = np.searchsorted(self.edge[order], np.arange(int(self.edge.max(initial=-1)) + 2))
            self._rank_cache["pieces"] = (order, starts)
        order, starts = self._rank_cache["pieces"]
        return order[starts[edge]:starts[edge + 1]]

    @property
    def nranks(self) -> int:
        return len(self.node)

    def hops(self, phase: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(x, y, edge_ids)`` of the real hops (x != y) of ``phase``, in edge order."""
        x, y = self.route[:, phase], self.route[:, phase + 1]
        ids = np.nonzero(x != y)[0]
        return x[ids], y[ids], ids

    def rank_schedule(self, rank: int) -> list[tuple[dict[int, np.ndarray], dict[int, np.ndarray]]]:
        """Per phase: ``({peer: edge ids this rank sends to peer}, {peer: edge ids it receives from peer})``."""
        if rank not in self._rank_cache:
            phases = []
            for p in range(NPHASES):
                x, y, ids = self.hops(p)
                sends = _group(y[x == rank], ids[x == rank])
                recvs = _group(x[y == rank], ids[y == rank])
                phases.append((sends, recvs))
            self._rank_cache[rank] = phases
        return self._rank_cache[rank]

    def inter_node_bytes(self) -> np.ndarray:
        """``(P,)`` bytes each rank injects into the network (hops between different nodes)."""
        out = np.zeros(self.nranks, dtype=np.int64)
        for p in range(NPHASES):
            x, y, ids = self.hops(p)
            cross = self.node[x] != self.node[y]
            out += np.bincount(x[cross], weights=self.nbytes[ids][cross], minlength=self.nranks).astype(np.int64)
        return out

    def messages(self) -> np.ndarray:
        """``(P,)`` messages each rank sends over all phases (one per distinct peer per phase)."""
        out = np.zeros(self.nranks, dtype=np.int64)
        for p in range(NPHASES):
            x, y, _ = self.hops(p)
            if len(x):
                pairs = distinct(x * self.nranks + y)
                out += np.bincount(pairs // self.nranks, minlength=self.nranks)
        return out


def _group(peers: np.ndarray, ids: np.ndarray) -> dict[int, np.ndarray]:
    order = np.argsort(peers, kind="stable")  # keeps edge order inside a peer
    peers, ids = peers[order], ids[order]
    out: dict[int, np.ndarray] = {}
    if len(peers):
        cuts = np.nonzero(np.diff(peers))[0] + 1
        for chunk_p, chunk_i in zip(np.split(peers, cuts), np.split(ids, cuts), strict=True):
            out[int(chunk_p[0])] = chunk_i
    return out


def distinct(keys: np.ndarray) -> np.ndarray:
    """The distinct values of the 1-D integer array ``keys``, sorted: ``np.unique(keys)`` by a sort and a
    neighbour compare (numpy 2's hash-based ``np.unique`` is ~100x slower on millions of int64 keys)."""
    s = np.sort(keys)
    if len(s) < 2:
        return s
    return s[np.concatenate(([True], s[1:] != s[:-1]))]


def node_of_ranks(nranks: int, ranks_per_node: int) -> np.ndarray:
    """Consecutive blocks of ``ranks_per_node`` ranks form a node (the usual block placement)."""
    if ranks_per_node < 1:
        raise ConfigError(f"ranks_per_node must be >= 1, got {ranks_per_node}")
    return np.arange(nranks, dtype=np.int64) // ranks_per_node


def build_plan(src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, node: np.ndarray, algo: str,
               capacity: np.ndarray | None = None, min_split_bytes: int = 64 << 10) -> Plan:
    """Route every edge with ``algo`` (see the module docstring).

    Args:
        src, dst, nbytes: ``(E,)`` edges and their bytes.
        node: ``(P,)`` node of each rank.
        algo: ``direct``, ``lag-h`` or ``law-h``.
        capacity: ``(P,)`` relative injection capacity of each rank (LAW-H; default all equal).
        min_split_bytes: LAW-H splits a message only into pieces of at least this many bytes.
    """
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    nbytes, node = np.asarray(nbytes, np.int64), np.asarray(node, np.int64)
    route = np.stack([src, dst, dst, dst], axis=1)
    if algo not in ALGORITHMS:
        raise ConfigError(f"algorithm must be one of {', '.join(ALGORITHMS)}; got {algo!r}")
    cross = node[src] != node[dst]
    if algo == "direct" or not cross.any():
        return Plan(algo, route, nbytes, node)
    ranks_of = _ranks_of_nodes(node)
    if algo == "lag-h":
        a, b = _lag_assign(src, dst, node, ranks_of, cross)
    else:
        cap = np.ones(len(node)) if capacity is None else np.asarray(capacity, dtype=np.float64)
        if cap.shape != node.shape or not (cap > 0).all():
            raise ConfigError("capacity: one positive value per rank is required")
        # sending side: split large messages over the node's ranks by spare capacity
        edge, offset, length, a = _law_split(src, node[src], nbytes, ranks_of, cap, cross, min_split_bytes)
        ps, pd = src[edge], dst[edge]
        pcross = cross[edge]
        # receiving side: straight to the destination (receiving costs a rank no injection capacity,
        # and a scatter phase would add a step and a copy)
        proute = np.stack([ps, np.where(pcross, a, ps), pd, pd], axis=1)
        return Plan(algo, proute, length, node, edge, offset)
    route[cross, 1] = a[cross]
    route[cross, 2] = b[cross]
    route[~cross, 1] = src[~cross]  # intra-node edges: one hop in the inter-node phase (see the docstring)
    return Plan(algo, route, nbytes, node)


def _ranks_of_nodes(node: np.ndarray) -> list[np.ndarray]:
    order = np.argsort(node, kind="stable")
    counts = np.bincount(node)
    return np.split(order, np.cumsum(counts)[:-1])


def _lag_assign(src, dst, node, ranks_of, cross):
    """Flows (node pairs) dealt round-robin over the ranks of the sending and of the receiving node."""
    ns, nd = node[src], node[dst]
    a = src.copy()
    b = dst.copy()
    nn = int(node.max()) + 1
    fkeys = distinct(ns[cross] * nn + nd[cross])
    flows = np.stack([fkeys // nn, fkeys % nn], axis=1)  # the node pairs (A, B), sorted by (A, B)
    # the j-th flow out of A goes to A's rank (j + A) mod n_A; the i-th flow into B to B's rank (i + B) mod n_B
    out_index = _index_within(flows[:, 0])
    by_dest = np.lexsort((flows[:, 0], flows[:, 1]))
    in_index = np.empty(len(flows), dtype=np.int64)
    in_index[by_dest] = _index_within(flows[by_dest, 1])
    sender = np.array([ranks_of[A][(j + A) % len(ranks_of[A])] for (A, _), j in zip(flows, out_index, strict=True)])
    receiver = np.array([ranks_of[B][(i + B) % len(ranks_of[B])] for (_, B), i in zip(flows, in_index, strict=True)])
    pos = np.searchsorted(fkeys, ns[cross] * nn + nd[cross])
    a[cross] = sender[pos]
    b[cross] = receiver[pos]
    return a, b


def _index_within(groups: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... restarting at each new value of a sorted ``groups``."""
    starts = np.r_[0, np.nonzero(np.diff(groups))[0] + 1]
    idx = np.arange(len(groups))
    return idx - np.repeat(starts, np.diff(np.r_[starts, len(groups)]))


def _law_split(src, src_node, nbytes, ranks_of, cap, cross, min_split_bytes):
    """LAW-H on the sending side, splitting messages: each rank of node A injects at most its share
    ``T_A * c_r / sum(c)`` of A's inter-node bytes (up to pieces of ``min_split_bytes``).

    An edge's source first keeps as much of its own message as fits its share (no relay copy); the
    rest is cut into pieces that fill the spare capacity of the other ranks, most spare first.

    Returns:
        ``(edge, offset, length, injector)`` per piece; edges inside a node are one piece each.
    """
    pieces: list[tuple[int, int, int, int]] = [(int(e), 0, int(nbytes[e]), int(src[e]))
                                               for e in np.nonzero(~cross)[0]]
    cross_ids = np.nonzero(cross)[0]
    # the cross edges grouped by sending node, in edge order within a node (one sort, not a scan per node)
    by_node = cross_ids[np.argsort(src_node[cross_ids], kind="stable")]
    starts = np.searchsorted(src_node[by_node], np.arange(len(ranks_of) + 1))
    for A in distinct(src_node[cross_ids]):
        ids = by_node[starts[A]:starts[A + 1]]
        ranks = ranks_of[A]
        c = cap[ranks]
        share = float(nbytes[ids].sum()) * c / c.sum()
        local = {int(r): i for i, r in enumerate(ranks)}
        load = np.zeros(len(ranks))
        rest = []
        for e in ids[np.argsort(-nbytes[ids], kind="stable")]:
            i, b = local[int(src[e])], int(nbytes[e])
            if b == 0:  # an empty message still travels (its receiver expects it): directly
                pieces.append((int(e), 0, 0, int(src[e])))
                continue
            keep = b if load[i] + b <= share[i] + 1e-9 else int(max(0.0, share[i] - load[i]))
            if b - keep < min_split_bytes and load[i] + b <= share[i] + min_split_bytes:
                keep = b  # not worth a piece
            if keep < min(min_split_bytes, b):
                keep = 0
            if keep:
                pieces.append((int(e), 0, keep, int(ranks[i])))
                load[i] += keep
            if keep < b:
                rest.append((int(e), keep, b - keep))
        for e, off, b in rest:
            while b > 0:
                spare = share - load
                i = int(np.argmax(spare / c))
                take = b if spare[i] >= b - min_split_bytes or spare[i] < min_split_bytes else int(spare[i])
                pieces.append((e, off, take, int(ranks[i])))
                load[i] += take
                off, b = off + take, b - take
    pieces.sort()
    arr = np.array(pieces, dtype=np.int64).reshape(-1, 4)
    return arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3]


# ----------------------------------------------------------------------------- the cost model


@dataclass
class CostModel:
    """Time of one phase = max over ranks of ``alpha * messages + max(intra_bytes / beta_intra,
    inter_bytes_injected / beta_rank)`` (a rank's copies inside its node overlap its injection) and over
    nodes of ``inter_bytes_injected_by_node / beta_node`` (messages and intra-node bytes: the larger of
    sent and received); a call is the sum of its phases.  Bandwidths in bytes per second.  With
    ``alpha_intra`` set (a separate intra-node transport, e.g. shared memory), a rank's messages cost
    ``alpha * inter-node messages + alpha_intra * intra-node messages`` instead."""

    alpha: float = 20e-6
    """per-message latency (s)"""
    alpha_intra: float | None = None
    """per-message latency between ranks of one node (s); None: ``alpha`` (one transport for both)"""
    beta_intra: float = 2e9
    """intra-node copy bandwidth of one rank (B/s)"""
    beta_rank: float = 3e9
    """injection bandwidth one rank reaches alone (B/s)"""
    beta_node: float = 12.5e9
    """injection bandwidth of a whole node, its NIC (B/s)"""

    def as_dict(self) -> dict[str, float]:
        out = {"alpha_s": self.alpha, "beta_intra_Bps": self.beta_intra, "beta_rank_Bps": self.beta_rank,
               "beta_node_Bps": self.beta_node}
        if self.alpha_intra is not None:
            out["alpha_intra_s"] = self.alpha_intra
        return out


def phase_loads(plan: Plan, phase: int) -> dict[str, np.ndarray]:
    """Per rank: messages sent/received, intra- and inter-node bytes sent/received in ``phase``."""
    P = plan.nranks
    x, y, ids = plan.hops(phase)
    b = plan.nbytes[ids].astype(np.float64)
    cross = plan.node[x] != plan.node[y]
    pairs = distinct(x * P + y) if len(x) else np.zeros(0, np.int64)
    local = plan.node[pairs // P] == plan.node[pairs % P]

    def count(idx, w=None):
        return np.bincount(idx, weights=w, minlength=P).astype(np.float64)

    return {
        "msgs_out": count(pairs // P), "msgs_in": count(pairs % P),
        "msgs_intra_out": count(pairs[local] // P), "msgs_intra_in": count(pairs[local] % P),
        "intra_out": count(x[~cross], b[~cross]), "intra_in": count(y[~cross], b[~cross]),
        "inter_out": count(x[cross], b[cross]), "inter_in": count(y[cross], b[cross]),
    }


def plan_cost(plan: Plan, model: CostModel) -> float:
    """Predicted seconds of one call of ``plan`` under ``model`` (see :class:`CostModel`)."""
    total = 0.0
    nnodes = int(plan.node.max()) + 1
    for p in range(NPHASES):
        ld = phase_loads(plan, p)
        if not ld["msgs_out"].any():
            continue
        if model.alpha_intra is None:
            latency = model.alpha * np.maximum(ld["msgs_out"], ld["msgs_in"])
        else:
            intra_out, intra_in = ld["msgs_intra_out"], ld["msgs_intra_in"]
            latency = (model.alpha * np.maximum(ld["msgs_out"] - intra_out, ld["msgs_in"] - intra_in)
                       + model.alpha_intra * np.maximum(intra_out, intra_in))
        per_rank = (latency
                    + np.maximum(np.maximum(ld["intra_out"], ld["intra_in"]) / model.beta_intra,
                                 ld["inter_out"] / model.beta_rank))
        node_out = np.bincount(plan.node, weights=ld["inter_out"], minlength=nnodes)
        total += max(float(per_rank.max()), float(node_out.max()) / model.beta_node)
    return total


def choose_algorithm(src, dst, nbytes, node, model: CostModel | None = None) -> str:
    """``auto``: the algorithm the cost model predicts fastest for this graph and these sizes."""
    model = model or CostModel()
    costs = {a: plan_cost(build_plan(src, dst, nbytes, node, a), model) for a in ALGORITHMS}
    return min(costs, key=lambda a: (costs[a], ALGORITHMS.index(a)))


def fit_cost_model(samples: list[dict], base: CostModel | None = None) -> CostModel:
    """Calibrate ``alpha`` and ``beta_intra`` from measured single-machine calls by least squares.

    Args:
        samples: ``{"msgs": max messages of a rank, "bytes": max bytes of a rank, "seconds": measured}``
            per measured (graph, size) of the ``direct`` algorithm with every rank on one machine.  With
            ``"msgs_intra"`` and ``"bytes_intra"`` too (node-mates' messages on their own transport, the
            others' in ``msgs``/``bytes``), a non-negative fit of ``alpha``, ``alpha_intra``, ``beta_intra``
            and the other transport's bandwidth (used only to fit; samples of several graphs are needed).
    """
    base = base or CostModel()
    t = np.array([s["seconds"] for s in samples], dtype=np.float64)
    if all("msgs_intra" in s for s in samples):
        from scipy.optimize import nnls

        A = np.array([[s["msgs"], s["msgs_intra"], s["bytes"], s["bytes_intra"]] for s in samples], dtype=np.float64)
        scale = np.maximum(A.max(axis=0), 1.0)  # columns of like size, for a well-conditioned fit
        coef = nnls(A / scale, t)[0] / scale
        return CostModel(alpha=float(max(coef[0], 1e-7)), alpha_intra=float(max(coef[1], 1e-7)),
                         beta_intra=1.0 / float(max(coef[3], 1e-12)), beta_rank=base.beta_rank,
                         beta_node=base.beta_node)
    A = np.array([[s["msgs"], s["bytes"]] for s in samples], dtype=np.float64)
    coef, *_ = np.linalg.lstsq(A, t, rcond=None)
    alpha = float(max(coef[0], 1e-7))
    inv_beta = float(max(coef[1], 1e-12))
    return CostModel(alpha=alpha, beta_intra=1.0 / inv_beta, beta_rank=base.beta_rank, beta_node=base.beta_node)


__all__ = ["ALGORITHMS", "CostModel", "Plan", "build_plan", "choose_algorithm", "fit_cost_model",
           "node_of_ranks", "phase_loads", "plan_cost"]
