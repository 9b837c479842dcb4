"""Neighbourhood collectives (MPI-3 ``Neighbor_alltoallv``/``Neighbor_allgather``) for torch.distributed,
with the node-aware designs of "A Hierarchical and Load-Aware Design for Large Message Neighborhood
Collectives" (SC20): direct, LAG-H and LAW-H routing, a cost model, SpMM and stencil halo exchanges.

    from torchhpc.ext.collectives import ProcessGraph, neighbor_alltoallv

Names are imported lazily, so that the Open MPI reference (``mpi_reference``) runs without torch.
"""

from __future__ import annotations

from torchhpc.ext.core.lazy import lazy_exports

_EXPORTS = {
    "HaloSpMM": "apps", "MooreHalo": "apps",
    "moore_graph": "graphs", "parse_graph": "graphs", "random_graph": "graphs",
    "EmulatedNetwork": "ops", "NeighborWork": "ops", "PersistentNeighborAlltoallv": "ops", "ProcessGraph": "ops", "neighbor_allgather": "ops",
    "neighbor_alltoallv": "ops",
    "ALGORITHMS": "plan", "CostModel": "plan", "Plan": "plan", "build_plan": "plan", "choose_algorithm": "plan",
    "plan_cost": "plan",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
