"""A sharded parameter server for dynamic embeddings: rows partitioned by ID hash over ranks.

:class:`ShardedDynamicEmbeddingCollection` has the interface of
:class:`~torchhpc.ext.kraken.embedding.DynamicEmbeddingCollection`; each rank
holds the rows of the IDs it owns (``owner(id) = hash(id) % world``) and trains
on its own slice of the batch (data parallel):

1. *lookup*: every rank deduplicates its IDs, sends each to its owner with its
   count (``all_to_all``); owners admit/evict/record use exactly as an unsharded
   table would for the union of the ranks' IDs, and send the rows back
   (``all_to_all``); each rank pools its own bags locally.
2. *push*: after ``backward`` each rank sends the gradient of every row it read
   back to the owner (``all_to_all``); the owner sums the contributions and
   divides by the world size (the gradient of the global mean loss) and applies
   the sparse optimizer once per row.

Dense parameters are averaged with :func:`allreduce_dense_gradients` (call it
before the dense optimizer step).  With gloo on CPU and NCCL on GPU.

Equality with one process: probability admission, TTL expiry, initialisation
and updates depend only on the ID and the global batch, so the sharded tables
hold exactly the rows one process would hold for the concatenated global batch
(to float summation order) — as long as no table is full and no count-min
collision changes a count-admission decision (each shard counts only the IDs it
owns).  Capacity eviction (LRU/LFU at ``max_rows``) is decided per shard, and
each shard gets the whole per-table budget (``world x max_rows`` rows in all).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .embedding import DynamicEmbeddingCollection, pool_features
from .hashing import check_ids, mix64

_OWNER_SALT = 4242


def owner_of(ids: torch.Tensor, world: int) -> torch.Tensor:
    """The rank that owns each ID: a hash of the ID modulo the world size."""
    return (mix64(ids, _OWNER_SALT) & ((1 << 62) - 1)) % world


def _exchange(send: torch.Tensor, send_splits: list[int], recv_splits: list[int], group) -> torch.Tensor:
    out = send.new_empty((sum(recv_splits), *send.shape[1:]))
    dist.all_to_all_single(out, send.contiguous(), recv_splits, send_splits, group=group)
    return out


class ShardedDynamicEmbeddingCollection(DynamicEmbeddingCollection):
    """Dynamic tables sharded by ID over the ranks of ``process_group`` (default: the world)."""

    def __init__(self, *args, process_group=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.group = process_group
        self.world = dist.get_world_size(process_group)
        self.rank = dist.get_rank(process_group)
        self._push: list = []

    def _splits(self, counts_per_rank: torch.Tensor) -> list[int]:
        recv = torch.empty_like(counts_per_rank)
        dist.all_to_all_single(recv, counts_per_rank, group=self.group)
        return recv.tolist()

    def forward(self, kjt):
        from torchrec.sparse.jagged_tensor import KeyedTensor

        jts, training, step = self._start_forward(kjt)
        pooled: dict[str, torch.Tensor] = {}
        for name, table in self.tables.items():
            cfg = table.cfg
            feats, values = self._table_values(jts, cfg)
            uniq, inv, counts = torch.unique(values, return_inverse=True, return_counts=True)
            # 1. route unique IDs (with counts) to their owners
            owner = owner_of(uniq, self.world)
            order = torch.argsort(owner, stable=True)
            send_ids, send_counts = uniq[order], counts[order]
            send_splits_t = torch.bincount(owner, minlength=self.world)
            send_splits = send_splits_t.tolist()
            recv_splits = self._splits(send_splits_t)
            recv_ids = _exchange(send_ids, send_splits, recv_splits, self.group)
            recv_counts = _exchange(send_counts, send_splits, recv_splits, self.group)
            check_ids(recv_ids)
            # 2. the owner merges requests from every rank and looks up (admits, evicts) once
            if training:
                table.expire(step)
            own_ids, own_inv = torch.unique(recv_ids, return_inverse=True)
            own_counts = torch.zeros_like(own_ids).index_add_(0, own_inv, recv_counts)
            own_rows = table.lookup(own_ids, own_counts, step)
            req_rows = own_rows[own_inv]  # the row of each received request
            hit = req_rows >= 0
            rows_out = table.weight[req_rows.clamp(min=0)] * hit.unsqueeze(1)
            # 3. rows back to the requesters, in the order they asked
            got = _exchange(rows_out, recv_splits, send_splits, self.group)
            emb = torch.empty_like(got)
            emb[order] = got
            emb = emb.detach()
            if training:
                emb.requires_grad_(True)
                self._push.append((name, emb, order, send_splits, recv_splits, own_rows, own_inv, hit))
            pooled.update(pool_features(cfg, feats, emb, inv, self.device_, self.backend))
        return KeyedTensor.from_tensor_list(self.feature_names, [pooled[f] for f in self.feature_names])

    @torch.no_grad()
    def apply_gradients(self, scale: float = 1.0) -> int:
        """Push row gradients to their owners, which sum them, divide by the world size and update."""
        n = 0
        for name, emb, order, send_splits, recv_splits, own_rows, own_inv, hit in self._push:
            table = self.tables[name]
            g = emb.grad if emb.grad is not None else torch.zeros_like(emb)
            recv = _exchange(g[order], send_splits, recv_splits, self.group)
            acc = torch.zeros((own_rows.numel(), recv.shape[1]), dtype=recv.dtype, device=recv.device)
            acc.index_add_(0, own_inv[hit], recv[hit])
            live = own_rows >= 0
            rows = own_rows[live]
            table.update(rows, acc[live] * (scale / self.world), backend=self.backend)
            n += rows.numel()
        self._push = []
        return n


@torch.no_grad()
def allreduce_dense_gradients(params, group=None) -> None:
    """Average the gradients of replicated (dense) parameters over the ranks, in one flat all-reduce."""
    params = [p for p in params if p.grad is not None]
    if not params or not dist.is_initialized():
        return
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat, group=group)
    flat /= dist.get_world_size(group)
    i = 0
    for p in params:
        n = p.grad.numel()
        p.grad.copy_(flat[i:i + n].view_as(p.grad))
        i += n


class RoutedEmbeddingCollection(torch.nn.Module):
    """A read-only view over the shards of a sharded run, in one process (for serving).

    Each ID is looked up in the shard that owns it (:func:`owner_of`); IDs without a
    row read zeros.  The shards are plain :class:`DynamicEmbeddingCollection` objects
    (e.g. each following its rank's checkpoints).
    """

    def __init__(self, shards: list[DynamicEmbeddingCollection]):
        super().__init__()
        self.shards = list(shards)  # not submodules: each is loaded from its own rank's files
        self.feature_names = self.shards[0].feature_names

    @torch.no_grad()
    def forward(self, kjt):
        from torchrec.sparse.jagged_tensor import KeyedTensor

        first = self.shards[0]
        first._check_kjt(kjt)
        jts = kjt.to_dict()
        pooled = {}
        W = len(self.shards)
        for name, table in first.tables.items():
            cfg = table.cfg
            feats = [jts[f] for f in cfg.features]
            values = torch.cat([jt.values() for jt in feats]).long()
            uniq, inv = torch.unique(values, return_inverse=True)
            owner = owner_of(uniq, W)
            emb = torch.zeros((uniq.numel(), cfg.dim), dtype=table.weight.dtype)
            for r, shard in enumerate(self.shards):
                m = owner == r
                t = shard.tables[name]
                rows = t.index.lookup(uniq[m].to(t.device)).cpu()
                emb[m] = t.weight[rows.clamp(min=0)].cpu() * (rows >= 0).unsqueeze(1)
            pooled.update(pool_features(cfg, feats, emb, inv, torch.device("cpu")))
        return KeyedTensor.from_tensor_list(self.feature_names, [pooled[f] for f in self.feature_names])
