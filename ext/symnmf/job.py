"""The ``torchhpc symnmf run`` job: read A, factorise on one process or a grid, write the run folder.

A run writes ``runs/symnmf/<id>/`` (or ``--output DIR``): ``config.yaml``, ``metrics.jsonl`` (per
iteration: relative residual, projected gradient, seconds per phase), ``summary.json`` (residual,
iterations, time, ARI/NMI when labels are known), ``H.pt``, ``labels.txt`` (``node cluster`` per
line) and ``convergence.png``.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from pathlib import Path

import numpy as np

from torchhpc.ext.core.device import pick_device
from torchhpc.ext.core.errors import InputError
from torchhpc.ext.core.runs import Run, atomic_torch_save, atomic_write_text, open_run

from .api import choose_layout
from .config import SymnmfJob
from .graphs import (
    Graph,
    check_similarity,
    cluster_labels,
    digits_graph,
    knn_similarity,
    normalize_similarity,
    read_features,
    read_graph,
    read_labels,
    stochastic_block_model,
    to_torch,
)
from .solvers import DTYPES, symnmf


def load_graph(cfg: SymnmfJob) -> Graph:
    """The job's graph and ground truth, checked (one-line :class:`InputError` on bad input)."""
    g_opts = cfg.graph
    if g_opts.dataset == "digits":
        g = digits_graph(g_opts.n_neighbors)
    elif g_opts.dataset == "sbm":
        g = stochastic_block_model(g_opts.sbm_n, g_opts.sbm_k, avg_degree=g_opts.sbm_degree,
                                   mixing=g_opts.sbm_mixing, seed=g_opts.sbm_seed)
    elif g_opts.features is not None:
        if not Path(g_opts.features).is_file():
            raise InputError(f"{g_opts.features}: no such feature file")
        X = read_features(g_opts.features)
        g = Graph(knn_similarity(X, g_opts.n_neighbors), np.arange(len(X)), None, g_opts.features)
    else:
        g = read_graph(g_opts.path, symmetrize=g_opts.symmetrize, label_attribute=g_opts.label_attribute)
    if g_opts.labels is not None:
        g.labels = read_labels(g_opts.labels, g.node_ids)
    A, _ = check_similarity(g.A, cfg.solver.k, symmetrize=g_opts.symmetrize, where=g.source or "A")
    g.A = normalize_similarity(A, g_opts.normalize)
    return g


def clustering_scores(truth: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """ARI and NMI (scikit-learn) over the nodes whose ground truth is known (``>= 0``)."""
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    known = truth >= 0
    return {"ari": float(adjusted_rand_score(truth[known], labels[known])),
            "nmi": float(normalized_mutual_info_score(truth[known], labels[known]))}


def run_job(cfg: SymnmfJob) -> dict:
    """Run the job in this process (one rank under torchrun); returns the summary (every rank)."""
    from torchhpc.ext.core.distributed import distributed, launched_by_torchrun

    if launched_by_torchrun():
        with distributed(device=cfg.solver.device, timeout_s=cfg.dist.timeout) as ctx:
            return _run(cfg, ctx)
    return _run(cfg, None)


def _open(cfg: SymnmfJob, ctx) -> Run:
    if cfg.output is None:
        return open_run("symnmf", cfg, cfg.run, ctx)
    out = Path(cfg.output)
    rank = ctx.rank if ctx is not None else 0
    return Run("", cfg, root=out.parent, run_id=out.name, resume=False, rank=rank, progress=cfg.run.progress)


def _run(cfg: SymnmfJob, ctx) -> dict:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        g = load_graph(cfg)
    notes = [str(w.message) for w in caught if issubclass(w.category, UserWarning)
             and "sparse" not in str(w.message).lower()]
    rank = ctx.rank if ctx is not None else 0
    run = _open(cfg, ctx)
    dtype = DTYPES[cfg.solver.dtype]
    dense = choose_layout(g.A, cfg.graph.layout)
    if ctx is not None and ctx.world_size > 1:
        from .distributed import GridSimilarity, gather_rows, grid_shape

        pr, pc = (ctx.world_size, 1) if cfg.dist.grid == "1d" else grid_shape(ctx.world_size, cfg.dist.pr)
        op = GridSimilarity(g.A, pr, pc, dense=dense, dtype=dtype, device=ctx.device)
    else:
        from .ops import LocalSimilarity

        pr, pc = 1, 1
        op = LocalSimilarity(to_torch(g.A, dense=dense, dtype=dtype, device=pick_device(cfg.solver.device)))
    last = {"phase": {}, "t": 0.0, "step": 0}
    bar = run.progress(total=cfg.solver.max_iter * cfg.solver.restarts, desc=f"symnmf {cfg.solver.algo}")

    def log(rec: dict) -> None:
        phases = {k: v for k, v in rec.items() if k.endswith("_s") and k != "time_s"}
        delta = {f"{k}": round(v - last["phase"].get(k, 0.0), 6) for k, v in phases.items()}
        run.log(last["step"], iter=rec["iter"], restart=rec.get("restart", 0), residual=rec["residual"],
                pgrad=rec["pgrad"], iter_s=round(rec["time_s"] - last["t"], 6), **delta)
        last["phase"], last["t"], last["step"] = phases, rec["time_s"], last["step"] + 1
        bar.update(1 if rec["iter"] else 0)
        bar.set_postfix(residual=f"{rec['residual']:.5f}")

    t0 = time.perf_counter()
    res = symnmf(op, cfg.solver, callback=log)
    bar.close()
    H = gather_rows(res.H, op) if (ctx is not None and ctx.world_size > 1) else res.H
    wall = time.perf_counter() - t0
    labels = cluster_labels(H)
    summary = {"graph": g.source, "n": g.n, "nnz": int(g.A.nnz), "k": cfg.solver.k, "algo": cfg.solver.algo,
               "layout": "dense" if dense else "sparse", "processes": pr * pc, "grid": [pr, pc],
               "residual": res.residual, "pgrad": res.pgrad, "iterations": res.iterations,
               "stopped_by": res.converged, "time_s": wall, "seed": cfg.solver.seed,
               "clusters_found": int(len(np.unique(labels[labels >= 0]))), "warnings": notes,
               "run_dir": str(run.dir)}
    if g.labels is not None:
        summary.update(clustering_scores(g.labels, labels))
    if rank == 0:
        if cfg.save_h:
            atomic_torch_save(H.cpu(), run.dir / "H.pt")
            atomic_write_text(run.dir / "labels.txt", "".join(f"{i} {c}\n" for i, c in zip(g.node_ids, labels,
                                                                                       strict=True)))
        run.write_summary(summary)
        if cfg.plot:
            run.plot_metrics(["residual"], "convergence.png", x="step", ylabel="||A - HH^T|| / ||A||",
                             title=f"SymNMF {cfg.solver.algo}, {g.n} nodes, k={cfg.solver.k}")
    return summary


def launch(cfg: SymnmfJob) -> int:
    """``torchhpc symnmf run --dist.nproc N``: torchrun with the resolved config (written to a temp file)."""
    from torchhpc.ext.core.launch import relaunch

    child = dataclasses.replace(cfg, dist=dataclasses.replace(cfg.dist, nproc=1))
    return relaunch(child, "torchhpc.trainers.symnmf", cfg.dist.nproc)
