"""torchrun worker of the distributed-equality tests: solves one planted problem on a process grid.

    torchrun --standalone --nproc-per-node P symnmf_dist_worker.py OUT.pt PR[,PR...] ALGO [ALGO ...]

For each grid ``PR x (P / PR)`` and each algorithm, rank 0 saves
``{(pr, algo): (H gathered in global row order, iterations, residual)}`` to ``OUT.pt``.
"""

from __future__ import annotations

import sys

import torch

from torchhpc.ext.core.distributed import distributed
from torchhpc.ext.symnmf.config import SolverOptions
from torchhpc.ext.symnmf.distributed import GridSimilarity, gather_rows
from torchhpc.ext.symnmf.graphs import stochastic_block_model
from torchhpc.ext.symnmf.solvers import symnmf


def planted_graph():
    """The graph both the workers and the single-process reference solve (with one isolated node)."""
    g = stochastic_block_model(61, 3, avg_degree=12, mixing=0.1, seed=3)
    A = g.A.tolil()
    A[5, :] = 0
    A[:, 5] = 0
    return A.tocsr()


def main() -> int:
    out, prs, algos = sys.argv[1], [int(x) for x in sys.argv[2].split(",")], sys.argv[3:]
    A = planted_graph()
    results = {}
    with distributed(device="cpu", timeout_s=60) as ctx:
        for pr in prs:
            pc = ctx.world_size // pr
            for algo in algos:
                dense = algo != "mu"                        # one sparse run, the rest dense
                op = GridSimilarity(A, pr, pc, dense=dense, dtype=torch.float64)
                res = symnmf(op, SolverOptions(k=3, algo=algo, seed=7, max_iter=15, tol=0.0))
                results[(pr, algo)] = (gather_rows(res.H, op), res.iterations, res.residual)
        if ctx.rank == 0:
            torch.save(results, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
