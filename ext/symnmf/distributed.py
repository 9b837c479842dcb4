"""SymNMF on a torch.distributed process grid: the paper's 1D and 2D algorithms (Sec. 4).

``p = pr x pc`` ranks form a grid; rank ``r = i * pc + j`` is grid row ``i``, grid column ``j``.
``A`` is cut into ``pr`` row blocks ``R_i`` and ``pc`` column blocks ``C_j``; rank ``(i, j)`` keeps
``A[R_i, C_j]``.  The factor ``H`` (``n x k``) is owned in row pieces: rank ``(i, j)`` owns piece
``i`` of ``C_j`` (``C_j`` cut into ``pr`` pieces), so the ranks of grid column ``j`` together own
``H[C_j]``::

              C_0        C_1                 owned rows of H
          +----------+----------+            (0,0): C_0 piece 0   (0,1): C_1 piece 0
    R_0   | A(0,0)   | A(0,1)   |            (1,0): C_0 piece 1   (1,1): C_1 piece 1
          +----------+----------+
    R_1   | A(1,0)   | A(1,1)   |
          +----------+----------+

``A @ H`` is then (the paper's Algorithm 3 with its collectives over grid rows and columns):

1. all-gather ``H[C_j]`` over grid column ``j``           (``|C_j| k`` words in)
2. local product ``Y = A(i, j) @ H[C_j]``                 (``|R_i| x k``)
3. reduce-scatter ``Y`` over grid row ``i``               -> piece ``j`` of ``(A H)[R_i]``
4. move each row to the rank that owns it (all-to-all; with ``pr = pc`` a swap with rank ``(j, i)``;
   nothing to move on a 1D grid)

and ``H^T H`` is a local ``k x k`` product all-reduced over all ranks.  A 1D row partition is the
grid ``p x 1``: step 1 is an all-gather of ``H`` over every rank and steps 3-4 vanish.  The solvers
of :mod:`.solvers` run on :class:`GridSimilarity` unchanged, and with the same seed they produce the
same ``H`` as one process (rows in the same places; only the order of floating-point sums differs).

Every rank builds its block from the whole matrix (read replicated); the solve itself keeps
``n k / p + |C_j| k`` factor words and one block of ``A`` per rank.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
import torch
import torch.distributed as dist

from torchhpc.ext.core.errors import DistributedError

from .graphs import to_torch
from .ops import PhaseTimer, RowBlock, _stats, spmm


def block_bounds(n: int, parts: int) -> list[int]:
    """``parts + 1`` boundaries cutting ``0..n`` into nearly equal contiguous blocks."""
    return [n * i // parts for i in range(parts + 1)]


def grid_shape(world: int, pr: int = 0) -> tuple[int, int]:
    """``(pr, pc)`` with ``pr * pc = world``; ``pr = 0`` picks the most square grid (``pr <= pc``).

    Raises:
        DistributedError: ``pr`` does not divide the world size.
    """
    if pr == 0:
        pr = max(d for d in range(1, int(math.isqrt(world)) + 1) if world % d == 0)
    if world % pr:
        raise DistributedError(f"grid rows pr = {pr} do not divide the world size {world}")
    return pr, world // pr


class GridSimilarity(RowBlock):
    """The similarity operator of one rank of a ``pr x pc`` grid (see the module docstring).

    Args:
        A: the whole ``(n, n)`` matrix as scipy CSR (checked symmetric and nonnegative).
        pr, pc: grid shape, ``pr * pc`` = world size (``pc = 1``: the 1D row partition).
        dense: keep the local block dense (else torch sparse CSR).
        dtype, device: of the local block and the factors.

    Raises:
        DistributedError: no process group, or ``pr * pc`` is not the world size.
    """

    def __init__(self, A: sp.csr_matrix, pr: int, pc: int, *, dense: bool, dtype: torch.dtype = torch.float64,
                 device: torch.device | str = "cpu") -> None:
        if not dist.is_initialized():
            raise DistributedError("GridSimilarity needs an initialised process group (launch with torchrun)")
        world, rank = dist.get_world_size(), dist.get_rank()
        if pr * pc != world:
            raise DistributedError(f"grid {pr} x {pc} needs {pr * pc} processes, the job has {world}")
        self.pr, self.pc, self.world_size, self.rank = pr, pc, world, rank
        self.i, self.j = divmod(rank, pc)
        n = A.shape[0]
        self.n = n
        self.rb = block_bounds(n, pr)                       # row blocks R_i
        self.cb = block_bounds(n, pc)                       # column blocks C_j
        # owned rows of every rank: piece i of C_j
        self.owned = {}
        for r in range(world):
            i, j = divmod(r, pc)
            lo, hi = self.cb[j], self.cb[j + 1]
            pb = block_bounds(hi - lo, pr)
            self.owned[r] = (lo + pb[i], lo + pb[i + 1])
        # rows of (A H) each rank holds after the reduce-scatter: piece j of R_i
        self.scattered = {}
        for r in range(world):
            i, j = divmod(r, pc)
            lo, hi = self.rb[i], self.rb[i + 1]
            pb = block_bounds(hi - lo, pc)
            self.scattered[r] = (lo + pb[j], lo + pb[j + 1])
        self.row_start, self.row_stop = self.owned[rank]
        self.dtype = dtype
        self.device = torch.device(device)
        self.timer = PhaseTimer(self.device)
        block = A[self.rb[self.i]:self.rb[self.i + 1], self.cb[self.j]:self.cb[self.j + 1]].tocsr()
        self.A = to_torch(block, dense=dense, dtype=dtype, device=self.device)
        # groups: every rank creates every group in the same order (torch.distributed's rule)
        self.row_group = self.col_group = None
        for i in range(pr):
            g = dist.new_group([i * pc + j for j in range(pc)]) if pc > 1 else None
            if i == self.i:
                self.row_group = g
        for j in range(pc):
            g = dist.new_group([i * pc + j for i in range(pr)]) if pr > 1 else None
            if j == self.j:
                self.col_group = g
        sq, mx, total = _stats(self.A)
        stats = torch.tensor([sq, total], dtype=torch.float64, device=self.device)
        dist.all_reduce(stats)
        m = torch.tensor([mx], dtype=torch.float64, device=self.device)
        dist.all_reduce(m, op=dist.ReduceOp.MAX)
        self.norm_sq, self.total, self.max_entry = float(stats[0]), float(stats[1]), float(m[0])
        deg = np.asarray(A.getnnz(axis=1))[self.row_start:self.row_stop]
        self.isolated = torch.as_tensor(deg == 0)

    # -- the operator interface ---------------------------------------------------------------------

    def matmul(self, H: torch.Tensor) -> torch.Tensor:
        """``(A @ H)`` on the owned rows: all-gather over the grid column, local product,
        reduce-scatter over the grid row, rows to their owners."""
        k = H.shape[1]
        with self.timer.phase("comm"):
            Hc = self._gather_column(H)                                     # (|C_j|, k)
        with self.timer.phase("matmul"):
            Y = spmm(self.A, Hc)                                            # (|R_i|, k)
        with self.timer.phase("comm"):
            piece = self._reduce_scatter_row(Y)                              # piece j of R_i
            out = self._to_owners(piece, k)
        return out

    def gram(self, X: torch.Tensor, Y: torch.Tensor | None = None) -> torch.Tensor:
        with self.timer.phase("gram"):
            G = X.T @ (X if Y is None else Y)
        with self.timer.phase("comm"):
            G = G.contiguous()
            dist.all_reduce(G)
        return G

    def allsum(self, t: torch.Tensor) -> torch.Tensor:
        with self.timer.phase("comm"):
            t = t.to(self.device).contiguous()
            dist.all_reduce(t)
        return t.cpu() if t.numel() == 1 else t

    # -- collectives --------------------------------------------------------------------------------

    def _gather_column(self, H: torch.Tensor) -> torch.Tensor:
        if self.pr == 1:
            return H
        ranks = [i * self.pc + self.j for i in range(self.pr)]
        sizes = [self.owned[r][1] - self.owned[r][0] for r in ranks]
        m = max(sizes)
        buf = H.new_zeros((m, H.shape[1]))
        buf[: H.shape[0]] = H
        parts = [torch.empty_like(buf) for _ in ranks]
        dist.all_gather(parts, buf, group=self.col_group)
        return torch.cat([p[:s] for p, s in zip(parts, sizes, strict=True)])

    def _reduce_scatter_row(self, Y: torch.Tensor) -> torch.Tensor:
        lo, hi = self.scattered[self.rank]
        if self.pc == 1:
            return Y
        base = self.rb[self.i]
        ranks = [self.i * self.pc + j for j in range(self.pc)]
        sizes = [self.scattered[r][1] - self.scattered[r][0] for r in ranks]
        m = max(sizes)
        if self.device.type == "cuda":  # NCCL: a real reduce-scatter on equal (padded) pieces
            padded = Y.new_zeros((self.pc * m, Y.shape[1]))
            for t, r in enumerate(ranks):
                a, b = self.scattered[r]
                padded[t * m: t * m + (b - a)] = Y[a - base: b - base]
            out = Y.new_empty((m, Y.shape[1]))
            dist.reduce_scatter_tensor(out, padded, group=self.row_group)
            return out[: hi - lo]
        # gloo has no reduce-scatter: all-reduce over the grid row, keep this rank's piece
        Y = Y.contiguous()
        dist.all_reduce(Y, group=self.row_group)
        return Y[lo - base: hi - base]

    def _to_owners(self, piece: torch.Tensor, k: int) -> torch.Tensor:
        """Move rows from the reduce-scatter layout (piece j of R_i) to the owner layout (piece i of C_j)."""
        if self.pc == 1 or self.pr == 1:  # 1D grids: the two layouts coincide
            return piece
        lo, hi = self.scattered[self.rank]
        send_sizes, recv_sizes, recv_starts = [], [], []
        chunks = []
        olo, ohi = self.owned[self.rank]
        for r in range(self.world_size):
            a, b = self.owned[r]
            s, e = max(a, lo), min(b, hi)
            send_sizes.append(max(e - s, 0) * k)
            if e > s:
                chunks.append(piece[s - lo: e - lo].reshape(-1))
            a, b = self.scattered[r]
            s, e = max(a, olo), min(b, ohi)
            recv_sizes.append(max(e - s, 0) * k)
            recv_starts.append(s)
        send = torch.cat(chunks) if chunks else piece.new_zeros(0)
        recv = piece.new_empty(sum(recv_sizes))
        dist.all_to_all_single(recv, send, output_split_sizes=recv_sizes, input_split_sizes=send_sizes)
        out = piece.new_empty((ohi - olo, k))
        off = 0
        for size, start in zip(recv_sizes, recv_starts, strict=True):
            if size:
                rows = size // k
                out[start - olo: start - olo + rows] = recv[off: off + size].reshape(rows, k)
                off += size
        return out


def gather_rows(H: torch.Tensor, op: GridSimilarity) -> torch.Tensor:
    """The whole ``(n, k)`` factor on every rank, rows in global order (for output and tests)."""
    sizes = [op.owned[r][1] - op.owned[r][0] for r in range(op.world_size)]
    m = max(sizes)
    buf = H.new_zeros((m, H.shape[1]))
    buf[: H.shape[0]] = H
    parts = [torch.empty_like(buf) for _ in range(op.world_size)]
    dist.all_gather(parts, buf)
    out = H.new_empty((op.n, H.shape[1]))
    for r, p in enumerate(parts):
        a, b = op.owned[r]
        out[a:b] = p[: b - a]
    return out
