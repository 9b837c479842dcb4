"""The Kraken comparison (``torchhpc kraken bench``): one click stream, four ways to hold the embeddings.

Same DLRM, same stream, same dense optimizer (Adam); only the sparse part differs:

* ``ebc_full``  — torchrec ``EmbeddingBagCollection`` with a row for every ID the
  stream will ever show (the vocabulary known in advance), trained with Adam;
* ``ebc_hashed`` — the same with IDs hashed into ``fraction`` of those rows;
* ``mc_ebc``    — torchrec ``ManagedCollisionEmbeddingBagCollection`` (MCH, LRU
  eviction) in the same memory, Adam;
* ``kraken``    — ours: dynamic collision-free tables with row-wise AdaGrad and LRU
  eviction, each table given ``fraction`` of ``ebc_full``'s bytes.

The stream is the synthetic one (a known click model, so the Bayes-optimal AUC is reported too)
or the user's own Criteo-format log (``--stream criteo --path FILE``: its first ``steps`` batches).
On a log, ``ebc_full`` is given each feature's vocabulary from a first pass over those batches
(each raw ID mapped to its row), and every variant's memory is sized per feature from it.

Reported per variant: progressive-validation AUC and log-loss (each batch scored
before training on it) over the second half of the stream and over the last
window, the peak bytes of the embedding part (weights + gradients + optimizer
state + index/buffers, measured from the tensors after each step), and training
throughput (samples/s; IDs/s = samples/s × features).

:class:`Comparison` builds the stream and runs the variants; the command
(:func:`~torchhpc.ext.kraken.commands.bench`) prints the table and writes the results.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

import torch

from torchhpc.ext.core.errors import InputError

from .baselines import HashedEBC, ManagedCollisionEBC
from .batch import Batch
from .config import BenchOptions, StreamOptions
from .criteo import read_criteo
from .criteo_reference import CRITEO_FEATURES
from .embedding import DynamicEmbeddingCollection, DynamicTableConfig
from .metrics import auc, log_loss
from .model import DLRM
from .optim import SparseOptimizer
from .stream import SyntheticClickStream

VARIANTS = ("ebc_full", "ebc_hashed", "mc_ebc", "kraken")


def _torch_sparse_bytes(sparse: torch.nn.Module, opt: torch.optim.Optimizer) -> int:
    params = list(sparse.parameters())
    ids = {id(p) for p in params}
    total = sum(p.numel() * p.element_size() for p in params)
    total += sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
    total += sum(b.numel() * b.element_size() for b in sparse.buffers())
    for p, st in opt.state.items():
        if id(p) in ids:
            total += sum(v.numel() * v.element_size() for v in st.values() if torch.is_tensor(v))
    return total


def _kraken_bytes(sparse: DynamicEmbeddingCollection) -> int:
    return sparse.memory()["all"]["total"] + sparse.pending_bytes()  # + touched rows and their grads


class SyntheticSource:
    """The synthetic stream for the comparison: batch ``t`` is ``stream.batch(t)``; ``ebc_full``'s row of
    an ID is the stream's dense key; the vocabulary is known from the drift rate."""

    def __init__(self, stream: SyntheticClickStream, steps: int):
        self.stream = stream
        self.feature_names = stream.feature_names
        self.batch_size = stream.cfg.batch_size
        self.steps = steps
        self.vocab_sizes = [stream.cfg.vocab + stream.shift(steps) + 1] * len(self.feature_names)

    def batches(self) -> Iterator[Batch]:
        return (self.stream.batch(t) for t in range(self.steps))

    def full_values(self, batch: Batch) -> torch.Tensor:
        return batch.keys.t().reshape(-1)


class CriteoSource:
    """A Criteo-format log for the comparison: its first ``steps`` batches, read again for each variant.

    A first pass collects each feature's distinct raw IDs (sorted): ``ebc_full`` gets one row per
    distinct ID (the vocabulary known in advance) and finds an ID's row by binary search.

    Raises:
        InputError: a missing or malformed file (from :func:`~torchhpc.ext.kraken.criteo.read_criteo`).
    """

    def __init__(self, path: str, batch_size: int, steps: int):
        self.path, self.batch_size = path, batch_size
        self.feature_names = list(CRITEO_FEATURES)
        seen: list[list[torch.Tensor]] = [[] for _ in self.feature_names]
        self.steps = 0
        for b in self._read(steps):
            for f, jt in enumerate(b.sparse.to_dict().values()):
                seen[f].append(jt.values())
            self.steps += 1
        self.vocab = [torch.unique(torch.cat(v)) if v else torch.zeros(0, dtype=torch.int64) for v in seen]
        self.vocab_sizes = [max(1, v.numel()) for v in self.vocab]

    def _read(self, steps: int) -> Iterator[Batch]:
        for t, b in enumerate(read_criteo(self.path, self.batch_size)):
            if t >= steps:
                return
            yield b

    def batches(self) -> Iterator[Batch]:
        return self._read(self.steps)

    def full_values(self, batch: Batch) -> torch.Tensor:
        jts = batch.sparse.to_dict().values()
        return torch.cat([torch.searchsorted(v, jt.values()) for v, jt in zip(self.vocab, jts, strict=True)])


class PerFeature(torch.nn.Module):
    """One single-feature sparse module per feature (each with its own row count), KJT -> KeyedTensor."""

    def __init__(self, modules: list[torch.nn.Module], feature_names: list[str]):
        super().__init__()
        self.parts = torch.nn.ModuleList(modules)
        self.feature_names = feature_names

    def forward(self, kjt):
        from torchrec import KeyedTensor

        outs = [m(part) for m, part in zip(self.parts, kjt.split([1] * len(self.parts)), strict=True)]
        return KeyedTensor.from_tensor_list(self.feature_names, [o.values() for o in outs])


def _per_feature(make, names: list[str], rows: list[int]) -> torch.nn.Module:
    """``make(names, rows)`` for all features when every feature has the same row count (the synthetic
    stream), else one ``make([f], rows_f)`` per feature."""
    if len(set(rows)) == 1:
        return make(names, rows[0])
    return PerFeature([make([f], r) for f, r in zip(names, rows, strict=True)], names)


def run_variant(name: str, source: SyntheticSource | CriteoSource, dim: int, fraction: float, seed: int = 0,
                kraken_lr: float = 0.1, dense_lr: float = 1e-3, init_scale: float = 0.01,
                admit_count: int = 1) -> dict:
    """One variant trained on ``source``'s batches (each scored before it is learnt from)."""
    from torchrec import KeyedJaggedTensor

    names = source.feature_names
    K = len(names)
    vocab = source.vocab_sizes
    # ebc_full's peak per feature: weights, their dense gradient and Adam's two moments (fp32)
    full_table_bytes = [v * dim * 4 * 4 for v in vocab]
    if name == "ebc_full":
        sparse = _per_feature(lambda fs, r: HashedEBC(fs, dim, r, seed=seed), names, vocab)
    elif name == "ebc_hashed":
        sparse = _per_feature(lambda fs, r: HashedEBC(fs, dim, r, seed=seed), names,
                              [max(1, int(v * fraction)) for v in vocab])
    elif name == "mc_ebc":
        rows = [max(2, int(fraction * b / (dim * 4 * 4 + 24))) for b in full_table_bytes]  # MCH keeps ~24 B per slot
        sparse = _per_feature(lambda fs, r: ManagedCollisionEBC(fs, dim, r, eviction="lru", eviction_interval=1,
                                                                seed=seed), names, rows)
    elif name == "kraken":
        optimizer = SparseOptimizer("rowwise_adagrad", lr=kraken_lr)

        def table(f: str, budget: int) -> DynamicTableConfig:
            return DynamicTableConfig(f"t_{f}", dim, [f], memory_budget_mb=budget / 2**20, eviction="lru",
                                      init_scale=init_scale, admit_count=admit_count)

        # each table gets `fraction` of ebc_full's bytes for its feature, and at least one row (a log's
        # features with a handful of values; the hashed and MC variants get at least 1 and 2 rows too)
        tables = [table(f, max(int(fraction * b), table(f, 0).table_bytes(1, optimizer)))
                  for f, b in zip(names, full_table_bytes, strict=True)]
        sparse = DynamicEmbeddingCollection(tables, optimizer, seed=seed)
    else:
        raise ValueError(f"unknown variant {name!r}")
    model = DLRM(sparse, K, dim, seed=seed)
    ours = isinstance(sparse, DynamicEmbeddingCollection)
    opt = torch.optim.Adam(model.dense_parameters() if ours else model.parameters(), lr=dense_lr)

    def kjt_of(batch):
        if name == "ebc_full":  # the full-vocabulary table is indexed by each ID's row in the known vocabulary
            return KeyedJaggedTensor(keys=names, values=source.full_values(batch), lengths=batch.sparse.lengths())
        return batch.sparse

    probs, labels = [], []
    peak = 0
    t_train = 0.0
    samples = 0
    for batch in source.batches():
        kjt = kjt_of(batch)
        t0 = time.perf_counter()
        logits = model(batch.dense, kjt)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, batch.labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        peak = max(peak, _kraken_bytes(sparse) if ours else _torch_sparse_bytes(sparse, opt))
        if ours:
            sparse.apply_gradients()
        t_train += time.perf_counter() - t0
        probs.append(torch.sigmoid(logits.detach()))
        labels.append(batch.labels)
        samples += batch.labels.numel()
    steps = len(probs)
    half = steps // 2
    P2, Y2 = torch.cat(probs[half:]), torch.cat(labels[half:])
    last = max(1, steps // 10)
    PL, YL = torch.cat(probs[-last:]), torch.cat(labels[-last:])
    out = {"variant": name, "auc": auc(P2, Y2), "logloss": log_loss(P2, Y2), "auc_last": auc(PL, YL),
           "peak_bytes": peak, "samples_per_s": samples / t_train, "ids_per_s": samples * K / t_train,
           "seconds": t_train}
    if ours:
        out["rows"] = sum(s["rows"] for s in sparse.stats().values())
        out["evictions"] = sum(s["evictions"] for s in sparse.stats().values())
    return out



class Comparison:
    """The stream of ``options`` and the variants to run on it.

    Args:
        options: the stream (synthetic, or a Criteo-format log and its path), steps, vocabulary, batch
            size, dim, memory fraction, seed.
        variants: which of :data:`VARIANTS` to run, in order.

    Attributes:
        source: the :class:`SyntheticSource` or :class:`CriteoSource` every variant trains on.
        steps: its batches (a log may have fewer than ``options.steps``).
        params: the stream's figures, as written with the results.
        bayes: the Bayes-optimal AUC over the second half of a synthetic stream (``None`` on a log).

    Raises:
        InputError: an unknown variant; a missing, malformed or too short log.
    """

    def __init__(self, options: BenchOptions | None = None, variants: Sequence[str] = VARIANTS):
        o = self.options = options or BenchOptions()
        unknown = [v for v in variants if v not in VARIANTS]
        if unknown:
            raise InputError(f"unknown variant {unknown[0]!r} (choose from {', '.join(VARIANTS)})")
        self.variants = tuple(variants)
        torch.manual_seed(o.seed)
        self.bayes = None
        if o.stream == "criteo":
            self.source = CriteoSource(o.path, o.batch_size, o.steps)
            self.steps = self.source.steps
            if self.steps < 2:
                raise InputError(f"{o.path}: {self.steps} batch of {o.batch_size} samples; the comparison needs "
                                 "at least 2")
            self.params = {"stream": "criteo", "path": str(o.path), "steps": self.steps,
                           "vocab_per_feature": self.source.vocab_sizes, "batch_size": o.batch_size, "dim": o.dim,
                           "fraction": o.fraction, "seed": o.seed}
        else:
            stream = SyntheticClickStream(StreamOptions(vocab=o.vocab, batch_size=o.batch_size, seed=o.seed))
            self.steps = o.steps
            self.source = SyntheticSource(stream, self.steps)
            half = self.steps // 2
            self.bayes = auc(torch.cat([stream.click_probability(stream.batch(t)) for t in range(half, self.steps)]),
                             torch.cat([stream.batch(t).labels for t in range(half, self.steps)]))
            self.params = {"steps": self.steps, "vocab": o.vocab, "total_keys_per_feature": self.source.vocab_sizes[0],
                           "batch_size": o.batch_size, "dim": o.dim, "fraction": o.fraction, "seed": o.seed}

    def run(self, on_result: Callable[[dict], None] | None = None) -> dict:
        """Every variant on the stream, one after another; ``on_result(result)`` after each.

        Returns:
            ``steps``, ``vocab``, ``total_keys_per_feature``, ``batch_size``, ``dim``, ``fraction``,
            ``bayes_auc``, ``threads``, ``results`` (one dict per variant: ``auc``, ``logloss``, ``auc_last``,
            ``peak_bytes``, ``samples_per_s``, ...) and ``kraken_vs_full``; on a log ``stream``, ``path`` and
            ``vocab_per_feature`` instead of the vocabulary, and ``bayes_auc`` None (the true click model is
            unknown).
        """
        o = self.options
        results = []
        for v in self.variants:
            r = run_variant(v, self.source, o.dim, o.fraction, seed=o.seed)
            results.append(r)
            if on_result is not None:
                on_result(r)
        by = {r["variant"]: r for r in results}
        summary = {**self.params, "bayes_auc": self.bayes, "threads": torch.get_num_threads(), "results": results}
        if "ebc_full" in by and "kraken" in by:
            a, d = by["ebc_full"], by["kraken"]
            summary["kraken_vs_full"] = {"auc_gap": a["auc"] - d["auc"],
                                         "memory_ratio": d["peak_bytes"] / a["peak_bytes"],
                                         "speed_ratio": d["samples_per_s"] / a["samples_per_s"]}
        return summary


__all__ = ["VARIANTS", "Comparison", "CriteoSource", "PerFeature", "SyntheticSource", "run_variant"]
