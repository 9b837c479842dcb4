"""The similarity operator the solvers see: ``A @ H``, Gram matrices and global sums.

Every SymNMF solver here touches ``A`` only through ``A @ H`` and all other work is on ``n x k``
factors whose rows it owns, plus ``k x k`` Gram matrices ``X^T Y`` and scalar sums over all rows.
:class:`LocalSimilarity` is the single-process operator; the distributed operators in
:mod:`torchhpc.ext.symnmf.distributed` implement the same four methods with collectives, so each
solver is written once and runs unchanged on 1 process, a 1D row partition or a 2D grid.

Each operator keeps wall-clock seconds per phase in :attr:`phase_s` (``matmul``: the local
``A @ H`` product, ``gram``: local ``X^T Y``, ``comm``: collectives), which the solvers log per
iteration.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import torch


class PhaseTimer:
    """Accumulated seconds per phase (synchronising CUDA so the split is real)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.phase_s: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.phase_s[name] = self.phase_s.get(name, 0.0) + time.perf_counter() - t0


def _stats(A: torch.Tensor) -> tuple[float, float, float]:
    """``(sum of squares, max, sum)`` of the entries of a dense or sparse CSR block."""
    vals = A.values() if A.layout == torch.sparse_csr else A
    if vals.numel() == 0:
        return 0.0, 0.0, 0.0
    v = vals.double()
    return float((v * v).sum()), float(v.max()), float(v.sum())


def spmm(A: torch.Tensor, H: torch.Tensor) -> torch.Tensor:
    """``A @ H`` for a dense or sparse CSR ``A`` (``(m, n) x (n, k) -> (m, k)``)."""
    if A.layout == torch.sparse_csr:
        if A.shape[0] == 0 or A.values().numel() == 0:
            return H.new_zeros((A.shape[0], H.shape[1]))
        return torch.sparse.mm(A, H)
    return A @ H


class RowBlock:
    """What every similarity operator shares: it owns rows ``[row_start, row_stop)`` of ``H`` and times
    its phases (subclasses set ``row_start``, ``row_stop`` and ``timer``)."""

    row_start: int
    row_stop: int
    timer: PhaseTimer

    @property
    def n_local(self) -> int:
        return self.row_stop - self.row_start

    @property
    def phase_s(self) -> dict[str, float]:
        return self.timer.phase_s

    def owned_rows(self) -> torch.Tensor:
        """Global indices of the rows of ``H`` owned here, in local order (``(n_local,)``)."""
        return torch.arange(self.row_start, self.row_stop)


class LocalSimilarity(RowBlock):
    """``A`` on one process: every row is owned here.

    Args:
        A: ``(n, n)`` dense tensor or torch sparse CSR tensor, already checked symmetric and
            nonnegative (see :func:`~torchhpc.ext.symnmf.graphs.check_similarity`).
    """

    def __init__(self, A: torch.Tensor) -> None:
        self.A = A
        self.n = A.shape[0]
        self.row_start, self.row_stop = 0, self.n
        self.dtype = A.dtype
        self.device = A.device
        self.timer = PhaseTimer(A.device)
        sq, mx, total = _stats(A)
        self.norm_sq, self.max_entry, self.total = sq, mx, total
        self.world_size = 1
        self.isolated = (_row_nnz(A) == 0).cpu()
        """Bool ``(n_local,)``: owned rows with no nonzero entry (their rows of ``H`` stay 0)."""

    def matmul(self, H: torch.Tensor) -> torch.Tensor:
        """``(A @ H)`` on the owned rows."""
        with self.timer.phase("matmul"):
            return spmm(self.A, H)

    def gram(self, X: torch.Tensor, Y: torch.Tensor | None = None) -> torch.Tensor:
        """``X^T Y`` over all rows (``(k, k)``)."""
        with self.timer.phase("gram"):
            return X.T @ (X if Y is None else Y)

    def allsum(self, t: torch.Tensor) -> torch.Tensor:
        """Sum of ``t`` over all ranks (here: ``t``)."""
        return t


def _row_nnz(A: torch.Tensor) -> torch.Tensor:
    if A.layout == torch.sparse_csr:
        crow = A.crow_indices()
        vals_nz = (A.values() != 0).to(torch.int64)
        csum = torch.cat([vals_nz.new_zeros(1), vals_nz.cumsum(0)])
        return csum[crow[1:]] - csum[crow[:-1]]
    return (A != 0).sum(dim=1)
