"""The Kraken comparison: one click stream, four ways to hold the embeddings.

Same DLRM, same stream, same dense optimizer (Adam); only the sparse part differs:

* ``ebc_full``  — torchrec ``EmbeddingBagCollection`` with a row for every ID the
  stream will ever show (the vocabulary known in advance), trained with Adam;
* ``ebc_hashed`` — the same with IDs hashed into ``fraction`` of those rows;
* ``mc_ebc``    — torchrec ``ManagedCollisionEmbeddingBagCollection`` (MCH, LRU
  eviction) in the same memory, Adam;
* ``kraken``    — ours: dynamic collision-free tables with row-wise AdaGrad and LRU
  eviction, each table given ``fraction`` of ``ebc_full``'s bytes.

Reported per variant: progressive-validation AUC and log-loss (each batch scored
before training on it) over the second half of the stream and over the last
window, the peak bytes of the embedding part (weights + gradients + optimizer
state + index/buffers, measured from the tensors after each step), and training
throughput (samples/s; IDs/s = samples/s × features).
"""

from __future__ import annotations

import time

import torch

from torchhpc.ext.core.bench import bar_plot, write_results
from torchhpc.ext.core.errors import InputError

from .baselines import HashedEBC, ManagedCollisionEBC
from .config import BenchOptions, StreamOptions
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
    pending = sum(e.numel() * e.element_size() * 2 for _, _, e in sparse._pending)  # touched rows + their grads
    return sparse.memory()["all"]["total"] + pending


def run_variant(name: str, stream: SyntheticClickStream, steps: int, dim: int, fraction: float,
                total_keys: int, seed: int = 0, kraken_lr: float = 0.1, dense_lr: float = 1e-3,
                init_scale: float = 0.01, admit_count: int = 1) -> dict:
    from torchrec import KeyedJaggedTensor

    K = stream.cfg.num_sparse
    names = stream.feature_names
    # ebc_full's peak per feature: weights, their dense gradient and Adam's two moments (fp32)
    full_table_bytes = total_keys * dim * 4 * 4
    if name == "ebc_full":
        sparse = HashedEBC(names, dim, total_keys, seed=seed)
    elif name == "ebc_hashed":
        sparse = HashedEBC(names, dim, max(1, int(total_keys * fraction)), seed=seed)
    elif name == "mc_ebc":
        rows = max(2, int(fraction * full_table_bytes / (dim * 4 * 4 + 24)))  # MCH keeps ~24 B per slot
        sparse = ManagedCollisionEBC(names, dim, rows, eviction="lru", eviction_interval=1, seed=seed)
    elif name == "kraken":
        tables = [DynamicTableConfig(f"t_{f}", dim, [f], memory_budget_mb=int(fraction * full_table_bytes) / 2**20,
                                     eviction="lru", init_scale=init_scale, admit_count=admit_count)
                  for f in names]
        sparse = DynamicEmbeddingCollection(tables, SparseOptimizer("rowwise_adagrad", lr=kraken_lr), seed=seed)
    else:
        raise ValueError(f"unknown variant {name!r}")
    model = DLRM(sparse, K, dim, seed=seed)
    ours = isinstance(sparse, DynamicEmbeddingCollection)
    opt = torch.optim.Adam(model.dense_parameters() if ours else model.parameters(), lr=dense_lr)

    def kjt_of(batch):
        if name == "ebc_full":  # the full-vocabulary table is indexed by the stream's dense keys
            return KeyedJaggedTensor(keys=names, values=batch.keys.t().reshape(-1), lengths=batch.sparse.lengths())
        return batch.sparse

    probs, labels = [], []
    peak = 0
    t_train = 0.0
    for t in range(steps):
        batch = stream.batch(t)
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
    half = steps // 2
    P2, Y2 = torch.cat(probs[half:]), torch.cat(labels[half:])
    last = max(1, steps // 10)
    PL, YL = torch.cat(probs[-last:]), torch.cat(labels[-last:])
    samples = steps * stream.cfg.batch_size
    out = {"variant": name, "auc": auc(P2, Y2), "logloss": log_loss(P2, Y2), "auc_last": auc(PL, YL),
           "peak_bytes": peak, "samples_per_s": samples / t_train, "ids_per_s": samples * K / t_train,
           "seconds": t_train}
    if ours:
        out["rows"] = sum(s["rows"] for s in sparse.stats().values())
        out["evictions"] = sum(s["evictions"] for s in sparse.stats().values())
    return out


def run_comparison(options: BenchOptions | None = None, variants=VARIANTS, verbose: bool | None = None) -> dict:
    """All variants on one stream; writes ``<out>/kraken/stream.json`` (the suite's results schema) and
    ``stream.png`` unless ``options.out`` is empty.

    Args:
        options: steps, vocabulary, batch size, dim, memory fraction, seed, output folder.
        variants: which of :data:`VARIANTS` to run.
        verbose: print one line per variant (default: unless ``options.json``).

    Returns:
        ``steps``, ``vocab``, ``total_keys_per_feature``, ``batch_size``, ``dim``, ``fraction``,
        ``bayes_auc``, ``threads``, ``results`` (one dict per variant) and ``kraken_vs_full``.

    Raises:
        InputError: an unknown variant.
    """
    o = options or BenchOptions()
    verbose = not o.json if verbose is None else verbose
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise InputError(f"unknown variant {unknown[0]!r} (choose from {', '.join(VARIANTS)})")
    torch.manual_seed(o.seed)
    stream = SyntheticClickStream(StreamOptions(vocab=o.vocab, batch_size=o.batch_size, seed=o.seed))
    steps = o.steps
    total_keys = o.vocab + stream.shift(steps) + 1
    half = steps // 2
    bayes = auc(torch.cat([stream.click_probability(stream.batch(t)) for t in range(half, steps)]),
                torch.cat([stream.batch(t).labels for t in range(half, steps)]))
    results = []
    for v in variants:
        r = run_variant(v, stream, steps, o.dim, o.fraction, total_keys, seed=o.seed)
        results.append(r)
        if verbose:
            print(f"{v:11s} AUC {r['auc']:.4f} (last 10%: {r['auc_last']:.4f})  log-loss {r['logloss']:.4f}  "
                  f"peak {r['peak_bytes'] / 2**20:7.2f} MB  {r['samples_per_s']:8.0f} samples/s", flush=True)
    by = {r["variant"]: r for r in results}
    params = {"steps": steps, "vocab": o.vocab, "total_keys_per_feature": total_keys, "batch_size": o.batch_size,
              "dim": o.dim, "fraction": o.fraction, "seed": o.seed}
    summary = {**params, "bayes_auc": bayes, "threads": torch.get_num_threads(), "results": results}
    if "ebc_full" in by and "kraken" in by:
        a, d = by["ebc_full"], by["kraken"]
        summary["kraken_vs_full"] = {"auc_gap": a["auc"] - d["auc"], "memory_ratio": d["peak_bytes"] / a["peak_bytes"],
                                     "speed_ratio": d["samples_per_s"] / a["samples_per_s"]}
    if verbose:
        print(f"Bayes-optimal AUC (true click model) {bayes:.4f}")
        if "kraken_vs_full" in summary:
            k = summary["kraken_vs_full"]
            print(f"kraken vs ebc_full: AUC gap {k['auc_gap']:+.4f}, memory {k['memory_ratio']:.3f}x, "
                  f"speed {k['speed_ratio']:.2f}x")
    if o.out:
        rows = [{"name": r["variant"], **r} for r in results]
        rows.append({"name": "bayes_optimal", "auc": bayes, "what": "the true click model's probabilities"})
        if "kraken_vs_full" in summary:
            rows.append({"name": "kraken_vs_ebc_full", **summary["kraken_vs_full"]})
        path = write_results("kraken", "stream", rows, out=o.out, params=params, quiet=not verbose)
        bar_plot(path.with_suffix(".png"), [f"{r['variant']}\n{r['peak_bytes'] / 2**20:.1f} MB" for r in results],
                 {"AUC, 2nd half": [r["auc"] for r in results], "AUC, last 10%": [r["auc_last"] for r in results]},
                 ylabel="progressive AUC", highlight="AUC, 2nd half",
                 title=f"same stream, same DLRM; peak embedding MB under each (Bayes AUC {bayes:.3f})")
    return summary
