"""Applications of the neighbourhood all-to-all: a distributed SpMM and a Moore-neighbourhood halo exchange.

**SpMM** (``Y = A @ X``, the paper's application kernel).  Rows of ``A`` (sparse ``n x n``) and of
``X`` (dense ``n x k``) are split into contiguous blocks, one per rank.  Rank ``r`` needs the rows of
``X`` named by the columns of its block of ``A``; the ranks owning them are its *sources*.  Set-up
(once) finds who needs what; each product is one :func:`neighbor_alltoallv` of those rows (the halo)
and a local sparse product::

    rank r:   A[rows_r, :]  ->  columns  c in owner q  ->  X[c] from q   (halo, one message per q)
              Y[rows_r] = A[rows_r, own cols] @ X_own  +  A[rows_r, halo cols] @ X_halo

**Halo exchange**: a ``D``-dimensional array split into blocks over a periodic process grid, each
block with ``radius`` ghost cells per side; the ghosts are filled from the (up to ``3^D - 1``) Moore
neighbours in one call.  Where one neighbour sits at several offsets (small periodic grids), its
regions travel as one message in a fixed order of offsets.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist

from torchhpc.ext.core.errors import InputError

from .ops import ProcessGraph, neighbor_alltoallv


def block_bounds(n: int, parts: int) -> list[int]:
    """``parts + 1`` boundaries of contiguous blocks of ``n`` rows, sizes differing by at most one."""
    return [n * p // parts for p in range(parts + 1)]


class HaloSpMM:
    """``Y_r = (A @ X)_r`` for this rank's row block, with the halo rows of ``X`` from a neighbourhood all-to-all.

    Args:
        a_rows: this rank's rows of ``A``, a sparse (COO/CSR) or dense tensor ``(n_r, n)``, on any device; ``X``
            and the product live on the graph's device (CUDA under NCCL, the CPU under gloo).
        bounds: ``P + 1`` row boundaries (:func:`block_bounds`), the same on every rank.
        group, **graph_options: passed to :class:`ProcessGraph` (``ranks_per_node``, ``algo``, ...).

    Raises:
        InputError: ``a_rows`` does not have ``bounds[r+1] - bounds[r]`` rows and ``bounds[-1]`` columns.
    """

    def __init__(self, a_rows: torch.Tensor, bounds: Sequence[int], group=None, **graph_options):
        rank, size = dist.get_rank(group), dist.get_world_size(group)
        n = int(bounds[-1])
        lo, hi = int(bounds[rank]), int(bounds[rank + 1])
        if len(bounds) != size + 1 or tuple(a_rows.shape) != (hi - lo, n):
            raise InputError(f"HaloSpMM: rank {rank} holds A rows of shape {tuple(a_rows.shape)}, expected "
                             f"({hi - lo}, {n}) from bounds of {size} blocks")
        coo = (a_rows.to_sparse() if not a_rows.is_sparse and a_rows.layout == torch.strided else a_rows)
        coo = coo.to_sparse_coo().coalesce() if coo.layout != torch.sparse_coo else coo.coalesce()
        coo = coo.cpu()  # the set-up's index work on the host; the matrix and the row lists then go to the graph's device
        rows, cols = coo.indices()
        owner = np.searchsorted(np.asarray(bounds[1:]), cols.numpy(), side="right")
        # the halo: columns outside my block, grouped by owning rank, ascending
        halo = np.unique(cols.numpy()[(owner != rank)])
        halo_owner = np.searchsorted(np.asarray(bounds[1:]), halo, side="right")
        sources = sorted(set(halo_owner.tolist()))
        need = {q: halo[halo_owner == q] for q in sources}
        # set-up: every rank learns who needs which of its rows (once, with the graph's own check)
        everyone: list = [None] * size
        dist.all_gather_object(everyone, {q: v.tolist() for q, v in need.items()}, group=group)
        destinations = [d for d in range(size) if rank in everyone[d]]
        self.send_rows = [torch.as_tensor(everyone[d][rank], dtype=torch.int64) - lo for d in destinations]
        self.graph = ProcessGraph(sources, destinations, group, **graph_options)
        # local columns: own block first (0 .. n_r-1), then the halo in (owner, column) order
        remap = np.empty(n, dtype=np.int64)
        remap[lo:hi] = np.arange(hi - lo)
        ordered_halo = np.concatenate([need[q] for q in sources]) if sources else np.zeros(0, np.int64)
        remap[ordered_halo] = np.arange(hi - lo, hi - lo + len(ordered_halo))
        local_cols = torch.from_numpy(remap[cols.numpy()])
        local = torch.sparse_coo_tensor(torch.stack([rows, local_cols]), coo.values(),
                                        (hi - lo, hi - lo + len(ordered_halo)), check_invariants=True)
        with warnings.catch_warnings():  # (torch says on every CSR tensor that its support is in beta)
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)
            self.a_local = local.coalesce().to_sparse_csr().to(self.graph.device)
        self.send_rows = [idx.to(self.graph.device) for idx in self.send_rows]
        self.n_local = hi - lo
        self.halo_size = len(ordered_halo)

    def __call__(self, x_rows: torch.Tensor, algo: str | None = None) -> torch.Tensor:
        """``x_rows`` ``(n_r, k)``: this rank's rows of ``X``; returns this rank's rows of ``A @ X``."""
        if x_rows.shape[0] != self.n_local:
            raise InputError(f"HaloSpMM: X block has {x_rows.shape[0]} rows, this rank owns {self.n_local}")
        send = [x_rows.index_select(0, idx) for idx in self.send_rows]
        halo = neighbor_alltoallv(send, self.graph, algo=algo)
        x_ext = torch.cat([x_rows, *halo]) if halo else x_rows
        return self.a_local @ x_ext


def halo_offsets(ndim: int) -> list[tuple[int, ...]]:
    """The ``3^D - 1`` Moore offsets in a fixed (lexicographic) order."""
    return [o for o in itertools.product((-1, 0, 1), repeat=ndim) if any(o)]


def _region(o: tuple[int, ...], radius: int, ghost: bool) -> tuple[slice, ...]:
    """The interior slab next to side ``o`` (``ghost=False``) or the ghost slab on side ``o``."""
    r = radius
    if ghost:
        table = {-1: slice(0, r), 0: slice(r, -r), 1: slice(-r, None)}
    else:
        table = {-1: slice(r, 2 * r), 0: slice(r, -r), 1: slice(-2 * r, -r)}
    return tuple(table[x] for x in o)


class MooreHalo:
    """Fill the ghost cells of a block on a periodic ``D``-D process grid from its Moore neighbours.

    Args:
        proc_dims: the process grid (its product is the group size), row-major rank order.
        radius: ghost width per side (each block must be at least ``radius`` wide inside).
        group, **graph_options: passed to :class:`ProcessGraph`.
    """

    def __init__(self, proc_dims: Sequence[int], radius: int = 1, group=None, **graph_options):
        self.dims = tuple(int(d) for d in proc_dims)
        self.radius = int(radius)
        rank, size = dist.get_rank(group), dist.get_world_size(group)
        if int(np.prod(self.dims)) != size:
            raise InputError(f"MooreHalo: process grid {self.dims} does not hold {size} ranks")
        me = np.unravel_index(rank, self.dims)
        self.offsets = halo_offsets(len(self.dims))
        self.peer = {o: int(np.ravel_multi_index(tuple((np.add(me, o)) % self.dims), self.dims)) for o in self.offsets}
        peers = sorted(set(self.peer.values()))
        # one message per peer: to d, the slabs of the offsets o with peer(o) = d, in offset order;
        # from q, the slabs it sent in ITS offset order: o' = -o, so sorted by -o here
        self.send_plan = {d: [o for o in self.offsets if self.peer[o] == d] for d in peers}
        self.recv_plan = {q: sorted((o for o in self.offsets if self.peer[o] == q), key=lambda o: tuple(-x for x in o))
                          for q in peers}
        self.graph = ProcessGraph(peers, peers, group, **graph_options)

    def __call__(self, block: torch.Tensor, algo: str | None = None) -> torch.Tensor:
        """Fill ``block``'s ghosts in place and return it; ``block`` is ``(n_1 + 2r, ..., n_D + 2r, *F)``."""
        r = self.radius
        if block.dim() < len(self.dims) or any(s < 3 * r for s in block.shape[:len(self.dims)]):
            raise InputError(f"MooreHalo: block of shape {tuple(block.shape)} has no room for radius {r} ghosts")
        send = [torch.cat([block[_region(o, r, ghost=False)].reshape(-1) for o in self.send_plan[d]])
                for d in self.graph.destinations]
        got = neighbor_alltoallv(send, self.graph, algo=algo)
        for q, flat in zip(self.graph.sources, got, strict=True):
            pos = 0
            for o in self.recv_plan[q]:
                target = block[_region(o, r, ghost=True)]
                target.copy_(flat[pos:pos + target.numel()].reshape(target.shape))
                pos += target.numel()
        return block


__all__ = ["HaloSpMM", "MooreHalo", "block_bounds", "halo_offsets"]
