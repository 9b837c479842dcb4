"""The ``torchhpc demo`` step of collectives: route a random graph on 2 nodes with each algorithm, check that
every message arrives intact (hop-by-hop walk of the plan against direct delivery), and compare the
bytes each rank injects between nodes and the cost model's time per call."""

from __future__ import annotations

import numpy as np

from .config import CollectivesTour
from .graphs import parse_size, random_graph
from .plan import ALGORITHMS, CostModel, build_plan, node_of_ranks, plan_cost
from .reference import deliver_direct, walk_plan


def demo(tour: CollectivesTour, run, device, seed: int) -> dict:
    """Plans of direct, LAG-H and LAW-H on ``tour.nranks`` ranks (``tour.ranks_per_node`` per node).

    Args:
        tour: the step's options.
        run: the demo's :class:`~torchhpc.ext.core.runs.Run` (one metrics row per algorithm).
        device: unused (the step runs no collective: it walks the plans in one process).
        seed: seed of the graph and the message contents.

    Returns:
        ``{"ok", "inter_node_bytes_max": {algo: B}, "predicted_ms": {algo: ms}, ...}``; ``ok`` when every
        algorithm delivers every message byte-identically to direct delivery.
    """
    size = parse_size(tour.size)
    src, dst = random_graph(tour.nranks, tour.density, seed)
    node = node_of_ranks(tour.nranks, tour.ranks_per_node)
    rng = np.random.default_rng(seed)
    messages = [rng.integers(0, 256, size=size, dtype=np.uint8).tobytes() for _ in src]
    want = deliver_direct(src, dst, messages)
    model = CostModel(alpha=20e-6, beta_intra=2e9, beta_rank=3e9, beta_node=12.5e9)
    ok, inter, predicted = True, {}, {}
    for i, algo in enumerate(ALGORITHMS):
        plan = build_plan(src, dst, np.full(len(src), size), node, algo)
        ok &= walk_plan(plan, src, dst, messages) == want
        inter[algo] = int(plan.inter_node_bytes().max())
        predicted[algo] = 1e3 * plan_cost(plan, model)
        if run is not None:
            run.log(i, step_name=f"collectives/{algo}", inter_node_bytes_max=inter[algo],
                    predicted_ms=predicted[algo])
    return {"what": f"{algo_list()} on a random graph of {tour.nranks} ranks, {tour.ranks_per_node} per node",
            "edges": len(src), "inter_node_bytes_max": inter, "predicted_ms": predicted, "ok": bool(ok)}


def algo_list() -> str:
    return ", ".join(ALGORITHMS)
