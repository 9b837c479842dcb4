"""The kraken step of ``torchhpc demo``: our pooling against torchrec, then a short continual run.

1. A synthetic ``KeyedJaggedTensor`` (Zipf-like IDs, Poisson bag lengths) is pooled through
   :func:`~torchhpc.ext.kraken.ops.pooled_embeddings` and through torchrec's
   ``EmbeddingBagCollection`` with the same weights: outputs and weight gradients are compared,
   then both are timed (forward + backward) and drawn in ``kraken_pooling.png``.
2. Unless ``continual_steps`` is 0, a small continual run on a drifting synthetic stream with
   dynamic tables under a row budget (:func:`~torchhpc.ext.kraken.commands.train`), written under
   the demo's run folder as ``kraken/continual``.
"""

from __future__ import annotations

import json

from torchhpc.ext.core.bench import bar_plot, time_interleaved

from .config import KrakenConfig, KrakenTour


def continual_config(tour: KrakenTour, root, seed: int) -> KrakenConfig:
    """The continual run of the demo: 4 features of 5000 ranks, 2000 rows per table, admission after 2 sightings."""
    from .config import CheckpointOptions, RunOptions, StreamOptions, TableOptions, TrainOptions

    return KrakenConfig(
        stream=StreamOptions(batch_size=256, vocab=5000, num_sparse=4),
        tables=TableOptions(max_rows=2000, memory_budget_mb=0, admit_count=2),
        train=TrainOptions(steps=tour.continual_steps, log_every=50),
        checkpoint=CheckpointOptions(delta_every=50, full_every=100),
        seed=seed, run=RunOptions(root=str(root), run_id="continual", progress=False),
    )


def demo(tour: KrakenTour, run, device, seed: int) -> dict:
    """Run the kraken step; figures go to ``run`` (a :class:`~torchhpc.ext.core.runs.Run`).

    Args:
        tour: the step's options.
        run: the demo's run folder (``kraken_pooling.png`` and two ``metrics.jsonl`` rows are added).
        device: a ``torch.device`` for the pooling comparison (the continual run is on the CPU).
        seed: seed of the generated input and of the continual run's weights.

    Returns:
        ``matches_torchrec`` (forward and gradients within 1e-5), ``speedup_vs_torchrec``, the
        continual run's AUC, rows, evictions and folder, the max differences and the times (ms).
    """
    import torch
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor

    from .ops import pooled_embeddings

    k = tour
    g = torch.Generator().manual_seed(seed)
    keys = [f"f{i}" for i in range(k.features)]
    lengths = torch.poisson(torch.full((k.features * k.batch,), k.mean_bag), generator=g).long()
    # Zipf-like ids: a few hot rows, a long tail (what recommendation traffic looks like)
    u = torch.rand(int(lengths.sum()), generator=g)
    values = (k.rows * u.pow(3.0)).long().clamp_(max=k.rows - 1)
    kjt = KeyedJaggedTensor.from_lengths_sync(keys=keys, values=values, lengths=lengths).to(device)
    ebc = EmbeddingBagCollection(
        tables=[EmbeddingBagConfig(name=f"t_{f}", embedding_dim=k.dim, num_embeddings=k.rows, feature_names=[f])
                for f in keys],
        device=device,
    )
    tables = {f"t_{f}": ebc.embedding_bags[f"t_{f}"].weight for f in keys}
    feat2table = {f: f"t_{f}" for f in keys}

    def ours():
        return pooled_embeddings(kjt, tables, feat2table, "sum", validate=False)

    def theirs():
        return ebc(kjt).to_dict()

    # ---- the same outputs and the same weight gradients of one loss through both paths
    a, b = ours(), theirs()
    max_diff = max(float((a[f] - b[f]).detach().abs().max()) for f in keys)
    loss_a = sum((a[f] * (i + 1)).sum() for i, f in enumerate(keys))
    ga = torch.autograd.grad(loss_a, list(tables.values()))
    b = theirs()
    loss_b = sum((b[f] * (i + 1)).sum() for i, f in enumerate(keys))
    gb = torch.autograd.grad(loss_b, list(tables.values()))
    grad_diff = max(float((x - y).abs().max()) for x, y in zip(ga, gb, strict=True))

    # ---- forward + backward times, interleaved
    def fwd_bwd(fn):
        return lambda: sum(v.sum() for v in fn().values()).backward()

    sync = torch.cuda.synchronize if device.type == "cuda" else None
    timings = time_interleaved({"ours": fwd_bwd(ours), "torchrec_ebc": fwd_bwd(theirs)}, repeats=k.repeats,
                               sync=sync)
    ms_ours, ms_torchrec = timings["ours"].median * 1e3, timings["torchrec_ebc"].median * 1e3
    for step, (name, ms) in enumerate([("ours", ms_ours), ("torchrec_ebc", ms_torchrec)]):
        run.log(step, step_name="kraken", impl=name, fwd_bwd_ms=ms)
    bar_plot(run.dir / "kraken_pooling.png", ["forward+backward"],
             {"torchhpc jagged_embedding_bag": [ms_ours], "torchrec EBC": [ms_torchrec]},
             ylabel="ms per forward+backward (median)", highlight="torchhpc jagged_embedding_bag",
             title=f"{k.features}x{k.batch} bags, {int(values.numel())} ids, D={k.dim} ({device.type})")

    # ---- continual training on a drifting synthetic stream: dynamic tables under a row budget
    continual = {}
    if k.continual_steps:
        from .commands import train

        cfg = continual_config(k, run.dir, seed)
        train(cfg, verbose=False)
        folder = run.dir / "kraken" / cfg.run.run_id
        s = json.loads((folder / "summary.json").read_text())
        continual = {"continual_auc": round(s["auc"], 4), "continual_rows": sum(t["rows"] for t in s["tables"].values()),
                     "continual_evictions": sum(t["evictions"] for t in s["tables"].values()),
                     "continual_run": str(folder)}
    return {
        "matches_torchrec": max_diff < 1e-5 and grad_diff < 1e-5,
        "speedup_vs_torchrec": round(ms_torchrec / ms_ours, 3),
        **continual,
        "what": "jagged embedding-bag pooling of a KeyedJaggedTensor vs torchrec EmbeddingBagCollection",
        "ids": int(values.numel()),
        "max_abs_diff_forward": max_diff,
        "max_abs_diff_grad": grad_diff,
        "ms_ours": round(ms_ours, 3),
        "ms_torchrec": round(ms_torchrec, 3),
        "device": device.type,
    }


__all__ = ["continual_config", "demo"]
