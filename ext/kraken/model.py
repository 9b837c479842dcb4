"""A DLRM-style click model over any sparse module that maps a KJT to a ``KeyedTensor``.

``DLRM(sparse, num_sparse, dim)``: the dense features go through the bottom MLP to
one ``dim`` vector; the sparse module pools one ``dim`` vector per categorical
feature; the interaction layer takes the dot product of every pair of those
``K + 1`` vectors; the top MLP maps ``[bottom output, dot products]`` to a logit.

The sparse module is ours (:class:`~torchhpc.ext.kraken.embedding.DynamicEmbeddingCollection`)
or a torchrec one (see :mod:`torchhpc.ext.kraken.baselines`), so the benchmark
compares embeddings with everything else equal.  :func:`build_model` is the DLRM of a
:class:`~torchhpc.ext.kraken.config.KrakenConfig`: one dynamic table per feature.
"""

from __future__ import annotations

import torch
from torch import nn

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.core.nn import mlp

from .config import KrakenConfig
from .criteo_reference import CRITEO_DENSE, CRITEO_SPARSE


class DLRM(nn.Module):
    def __init__(self, sparse: nn.Module, num_sparse: int, dim: int, num_dense: int = 13,
                 bottom: tuple[int, ...] = (64,), top: tuple[int, ...] = (64,), seed: int = 0):
        super().__init__()
        self.sparse = sparse
        self.num_sparse, self.dim, self.num_dense = num_sparse, dim, num_dense
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.bottom = mlp([num_dense, *bottom, dim], last_activation=True)
            n = num_sparse + 1
            self.top = mlp([dim + n * (n - 1) // 2, *top, 1])
        iu = torch.triu_indices(n, n, offset=1)
        self.register_buffer("_iu", iu, persistent=False)

    def dense_parameters(self):
        """The MLP parameters (the sparse module's rows are updated by its own optimizer)."""
        return [p for n, p in self.named_parameters() if not n.startswith("sparse.")]

    def forward(self, dense: torch.Tensor, kjt) -> torch.Tensor:
        if dense.dim() != 2 or dense.shape[1] != self.num_dense:
            raise InputError(f"dense features must be (B, {self.num_dense}), got {tuple(dense.shape)}")
        x = self.bottom(dense)
        kt = self.sparse(kjt)
        if kt.values().shape != (x.shape[0], self.num_sparse * self.dim):
            raise InputError(
                f"sparse features pool to {tuple(kt.values().shape)}, expected ({x.shape[0]}, "
                f"{self.num_sparse} x {self.dim}): the KJT's batch size or feature count differs from the dense input"
            )
        emb = kt.values().view(x.shape[0], self.num_sparse, self.dim)
        z = torch.cat([x.unsqueeze(1), emb], 1)  # (B, K+1, D)
        dots = torch.bmm(z, z.transpose(1, 2))[:, self._iu[0], self._iu[1]]
        return self.top(torch.cat([x, dots], 1)).squeeze(1)



def feature_names(cfg: KrakenConfig) -> list[str]:
    """The KJT keys of the configured stream: ``C1 .. CK`` (K = 26 for Criteo)."""
    n = CRITEO_SPARSE if cfg.stream.source == "criteo" else cfg.stream.num_sparse
    return [f"C{i + 1}" for i in range(n)]


def build_model(cfg: KrakenConfig, device, sharded: bool = False, optimizer_kind: str | None = None):
    """The DLRM of a config: one dynamic table per feature (rows sharded over the world when asked).

    Args:
        cfg: the config (``model``, ``tables``, ``optim``, ``seed``).
        device: where the tables and MLPs live.
        sharded: a :class:`~torchhpc.ext.kraken.sharded.ShardedDynamicEmbeddingCollection` (needs an
            initialised process group).
        optimizer_kind: the sparse optimizer instead of ``optim.sparse``.

    Raises:
        InputError: a memory budget too small for one row.
    """
    from .embedding import DynamicEmbeddingCollection, DynamicTableConfig
    from .optim import SparseOptimizer

    names = feature_names(cfg)
    tables = [DynamicTableConfig.of(cfg.tables, f"t_{f}", cfg.model.dim, [f]) for f in names]
    opt = SparseOptimizer(optimizer_kind or cfg.optim.sparse, lr=cfg.optim.sparse_lr)
    if sharded:
        from .sharded import ShardedDynamicEmbeddingCollection

        sparse = ShardedDynamicEmbeddingCollection(tables, opt, device=device, seed=cfg.seed)
    else:
        sparse = DynamicEmbeddingCollection(tables, opt, device=device, seed=cfg.seed)
    num_dense = CRITEO_DENSE if cfg.stream.source == "criteo" else cfg.stream.num_dense
    return DLRM(sparse, len(names), cfg.model.dim, num_dense=num_dense, bottom=tuple(cfg.model.bottom),
                top=tuple(cfg.model.top), seed=cfg.seed).to(device)


__all__ = ["DLRM", "build_model", "feature_names"]
