"""kraken: dynamic sparse embeddings for continual recommendation training (SC20 Kraken).

* :class:`DynamicEmbeddingCollection` — KJT of raw 64-bit IDs -> pooled embeddings, like
  torchrec's ``EmbeddingBagCollection`` but collision-free, growing to a memory budget,
  with admission (count / probability) and eviction (LRU, LFU, TTL);
  :class:`ShardedDynamicEmbeddingCollection` shards its rows over ranks (all-to-all).
* :class:`SparseOptimizer` — row-wise AdaGrad, row-wise Adam, Adam, SGD on touched rows
  (fused Triton kernel on CUDA).
* :class:`DLRM`, :class:`ContinualTrainer`, :class:`ServingReplica` — the continual loop
  with progressive validation, delta checkpoints and a replica that follows them.
* :func:`jagged_embedding_bag` — the pooling op with its fused Triton kernels.
* :class:`SyntheticClickStream` (:mod:`.stream`), :func:`read_criteo` (:mod:`.criteo`: TSV, gzip'd TSV,
  Parquet) — the click streams, as :class:`Batch` objects.
* :class:`KrakenConfig` (and its sections, :mod:`.config`) — every option, once;
  :func:`train` / :func:`serve` / :func:`bench` (:mod:`.commands`) — the ``torchhpc kraken`` commands.

Heavy submodules load on first use, so ``import torchhpc.ext.kraken`` stays cheap.
"""

from __future__ import annotations

import logging

from torchhpc.ext.core.lazy import lazy_exports


class _NoFxTracingNotice(logging.Filter):
    """torchrec's ``KeyedJaggedTensor`` asks torch's deprecated ``is_fx_tracing`` on its first use, and torch
    logs a warning about that call on every run's standard error: a notice about torchrec's code that no user of
    kraken can act on.  Only that record is dropped (torch's other warnings pass)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("is_fx_tracing will return true")


logging.getLogger("torch.fx._symbolic_trace").addFilter(_NoFxTracingNotice())  # (no torch import: a name)

_EXPORTS = {
    "DynamicEmbeddingCollection": "embedding",
    "DynamicTableConfig": "embedding",
    "RowStore": "embedding",
    "lookup_all_tables": "batched",
    "ShardedDynamicEmbeddingCollection": "sharded",
    "allreduce_dense_gradients": "sharded",
    "SparseOptimizer": "optim",
    "DLRM": "model",
    "ContinualTrainer": "continual",
    "ServingReplica": "continual",
    "SyntheticClickStream": "stream",
    "build_stream": "stream",
    "Batch": "batch",
    "slice_batch": "batch",
    "KrakenConfig": "config",
    "KrakenDist": "config",
    "StreamOptions": "config",
    "TableOptions": "config",
    "ServeOptions": "config",
    "BenchOptions": "config",
    "KrakenTour": "config",
    "build_model": "model",
    "train": "commands",
    "serve": "commands",
    "bench": "commands",
    "Comparison": "comparison",
    "read_criteo": "criteo",
    "read_criteo_reference": "criteo_reference",
    "reader_speed": "criteo_speed",
    "IdIndex": "hashing",
    "CountMinSketch": "hashing",
    "auc": "metrics",
    "ProgressiveValidation": "metrics",
    "check_bags": "ops",
    "jagged_embedding_bag": "ops",
    "jagged_embedding_bag_reference": "ops",
    "jagged_embedding_bag_torch": "ops",
    "pooled_embeddings": "ops",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
