"""Distributed SymNMF on gloo equals the single-process result: 1D (2 x 1), 1 x 2 and the 2 x 2 grid."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from harness.multiproc import torchrun
from harness.tolerance import assert_same_factorisation

from torchhpc.ext.symnmf.config import SolverOptions
from torchhpc.ext.symnmf.distributed import block_bounds, grid_shape
from torchhpc.ext.symnmf.graphs import to_torch
from torchhpc.ext.symnmf.ops import LocalSimilarity
from torchhpc.ext.symnmf.solvers import symnmf

HERE = Path(__file__).resolve().parent
WORKER = HERE / "symnmf_dist_worker.py"
ALGOS = ["anls", "gn", "hals", "mu"]


def _planted():
    sys.path.insert(0, str(HERE))
    try:
        from symnmf_dist_worker import planted_graph
    finally:
        sys.path.remove(str(HERE))
    return planted_graph()


def _torchrun(nproc: int, out: Path, prs: str) -> dict:
    res = torchrun(nproc, [str(WORKER), str(out), prs, *ALGOS], timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    return torch.load(out)


def _single(A, algo):
    opts = SolverOptions(k=3, algo=algo, seed=7, max_iter=15, tol=0.0)
    return symnmf(LocalSimilarity(to_torch(A, dense=algo != "mu")), opts)


def _assert_equal(got: dict, prs: list[int]):
    """Every grid's result equals the single process's: the same iteration count, and H H^T and the
    residual within the solver's class of the tolerance policy (only the order of float sums differs
    between layouts; Gauss-Newton's CG stops on a tolerance, see ``assert_same_factorisation``)."""
    A = _planted()
    for algo in ALGOS:
        ref = _single(A, algo)
        for pr in prs:
            H, iters, residual = got[(pr, algo)]
            assert iters == ref.iterations == 15
            assert_same_factorisation(SimpleNamespace(H=H, residual=residual), ref, algo,
                                      what=f"{algo} on grid pr={pr}")


def test_grid_helpers():
    """Blocks cover 0..n without overlap; the default grid is the most square one."""
    assert block_bounds(10, 3) == [0, 3, 6, 10]
    assert grid_shape(4) == (2, 2) and grid_shape(6) == (2, 3) and grid_shape(2) == (1, 2)
    assert grid_shape(8, 8) == (8, 1)


@pytest.mark.distributed
def test_two_gloo_ranks_1d_and_1x2_grid_equal_single_process(tmp_path):
    """Every solver on 2 gloo ranks, 1D row partition and 1 x 2 grid, gives the single-process H."""
    _assert_equal(_torchrun(2, tmp_path / "two.pt", "2,1"), [2, 1])


@pytest.mark.distributed
@pytest.mark.slow
def test_four_gloo_ranks_2x2_grid_equals_single_process(tmp_path):
    """Every solver on the paper's 2D 2 x 2 grid (all-gather, reduce-scatter, owner swap) gives the same H."""
    _assert_equal(_torchrun(4, tmp_path / "four.pt", "2"), [2])
