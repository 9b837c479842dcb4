"""The ``torchhpc symnmf`` commands, one function each: :func:`run` and :func:`segment`.

``run`` reads A, factorises it on one process or a torchrun process grid, and writes
``runs/symnmf/<id>/`` (or ``--output DIR``): ``config.yaml``, ``metrics.jsonl`` (per iteration:
relative residual, projected gradient, seconds per phase), ``summary.json`` (residual, iterations,
time, ARI/NMI when labels are known), ``H.pt``, ``labels.txt`` (``node cluster`` per line) and
``convergence.png``; rank 0 prints one line, or the summary as JSON.  The summary and the line name
the choices that shape the result: ``k`` (and where the largest gap of the leading eigenvalues of the
factorised matrix lies, a hint for ``k``), ``normalize``, ``init``, ``restarts`` and which start was
kept.  The same function is each rank's job under torchrun (``torchrun -m torchhpc.trainers.symnmf``),
and outside torchrun with ``--nproc N > 1`` it relaunches itself on N local ranks.

``segment`` cuts an image into segments and writes ``segmentation.png`` and ``summary.json``.

Heavy imports (torch, numpy, scipy) stay inside the functions: ``torchhpc --help`` builds every
command's flags from :mod:`.config` without them.
"""

from __future__ import annotations

import dataclasses
import json
import time
import warnings
from pathlib import Path

from .config import SegmentOptions, SymnmfJob

ENTRY = "torchhpc.trainers.symnmf"
"""The module torchrun runs on each rank of ``run`` (``main()`` of the trainer)."""


def run(cfg: SymnmfJob) -> int:
    """``torchhpc symnmf run``: cluster the graph ``cfg.graph`` and write the run folder.

    In one process, or as one rank under torchrun; outside torchrun with ``cfg.dist.nproc > 1`` it
    launches torchrun on that many local ranks with the resolved config.

    Returns:
        0 (the exit status).

    Raises:
        InputError: bad input (a malformed or missing file, a matrix SymNMF refuses, ``k > n``).
        JobError: a torchrun rank failed (its one line).
    """
    from torchhpc.ext.core.distributed import distributed, launched_by_torchrun

    if cfg.dist.nproc > 1 and not launched_by_torchrun():
        from torchhpc.ext.core.launch import relaunch

        child = dataclasses.replace(cfg, dist=dataclasses.replace(cfg.dist, nproc=1))
        return relaunch(child, ENTRY, cfg.dist.nproc)
    if cfg.dist.threads:
        import torch

        torch.set_num_threads(cfg.dist.threads)
    with distributed(device=cfg.dist.device, timeout_s=cfg.dist.timeout_s) as ctx:
        summary = _cluster_graph(cfg, ctx)
    if ctx.is_main:
        _report(summary, cfg.json)
    return 0


def _cluster_graph(cfg: SymnmfJob, ctx) -> dict:
    """This rank's part of ``run``: solve, log per iteration, write the run folder (rank 0); the summary."""
    import numpy as np

    from torchhpc.ext.core.runs import atomic_torch_save, atomic_write_text

    from .clustering import assign_clusters, choose_layout, clustering_scores
    from .graphs import load_graph, to_torch
    from .solvers import DTYPES, eigengap_k, symnmf

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        g = load_graph(cfg.graph, cfg.solver.k)
    notes = [str(w.message) for w in caught if issubclass(w.category, UserWarning)
             and "sparse" not in str(w.message).lower()]
    run = _open_run(cfg, ctx)
    dtype = DTYPES[cfg.solver.dtype]
    dense = choose_layout(g.A, cfg.graph.layout)
    if ctx.world_size > 1:
        from .distributed import GridSimilarity, gather_rows, grid_shape

        pr, pc = (ctx.world_size, 1) if cfg.dist.grid == "1d" else grid_shape(ctx.world_size, cfg.dist.pr)
        op = GridSimilarity(g.A, pr, pc, dense=dense, dtype=dtype, device=ctx.device)
    else:
        from .ops import LocalSimilarity

        pr, pc = 1, 1
        op = LocalSimilarity(to_torch(g.A, dense=dense, dtype=dtype, device=ctx.device))
    last = {"phase": {}, "t": 0.0, "step": 0}
    bar = run.progress(total=cfg.solver.max_iter * cfg.solver.restarts, desc=f"symnmf {cfg.solver.algo}")

    def log(rec: dict) -> None:
        phases = {k: v for k, v in rec.items() if k.endswith("_s") and k != "time_s"}
        delta = {f"{k}": round(v - last["phase"].get(k, 0.0), 6) for k, v in phases.items()}
        since = 0.0 if rec["iter"] == 0 else last["t"]            # each start's clock begins at 0
        run.log(last["step"], iter=rec["iter"], restart=rec.get("restart", 0), residual=rec["residual"],
                pgrad=rec["pgrad"], iter_s=round(rec["time_s"] - since, 6), **delta)
        last["phase"], last["t"], last["step"] = phases, rec["time_s"], last["step"] + 1
        bar.update(1 if rec["iter"] else 0)
        bar.set_postfix(residual=f"{rec['residual']:.5f}")

    if cfg.solver.assign != "argmax":
        import sklearn.cluster  # noqa: F401 - imported before the clock starts (~1.4 s the first time)
    t0 = time.perf_counter()
    res = symnmf(op, cfg.solver, callback=log)
    bar.close()
    H = gather_rows(res.H, op) if ctx.world_size > 1 else res.H
    t_assign = time.perf_counter()
    labels, assigned_by = assign_clusters(H, g.A, cfg.solver.assign, seed=cfg.solver.seed,
                                          degrees=g.degrees if cfg.graph.normalize == "sym" else None)
    wall = time.perf_counter() - t0
    assign_s = time.perf_counter() - t_assign
    summary = {"graph": g.source, "n": g.n, "nnz": int(g.A.nnz), "k": cfg.solver.k,
               "eigengap_k": eigengap_k(res.eigenvalues), "normalize": cfg.graph.normalize,
               "init": cfg.solver.init, "restarts": cfg.solver.restarts, "kept_start": res.restart,
               "assign": cfg.solver.assign, "assigned_by": assigned_by, "assign_s": assign_s,
               "start_residuals": res.restart_residuals, "algo": cfg.solver.algo,
               "layout": "dense" if dense else "sparse", "processes": pr * pc, "grid": [pr, pc],
               "residual": res.residual, "pgrad": res.pgrad, "iterations": res.iterations,
               "stopped_by": res.converged, "time_s": wall, "seed": cfg.solver.seed,
               "clusters_found": int(len(np.unique(labels[labels >= 0]))), "warnings": notes,
               "run_dir": str(run.dir)}
    if g.labels is not None:
        summary.update(clustering_scores(g.labels, labels))
    if ctx.is_main:
        if cfg.save_h:
            atomic_torch_save(H.cpu(), run.dir / "H.pt")
            atomic_write_text(run.dir / "labels.txt", "".join(f"{i} {c}\n" for i, c in zip(g.node_ids, labels,
                                                                                       strict=True)))
        run.write_summary(summary)
        if cfg.plot:
            run.plot_metrics(["residual"], "convergence.png", x="step", ylabel="||A - HH^T|| / ||A||",
                             title=f"SymNMF {cfg.solver.algo}, {g.n} nodes, k={cfg.solver.k}")
    return summary


def _open_run(cfg: SymnmfJob, ctx):
    """``runs/symnmf/<id>/`` (one id agreed by all ranks), or exactly ``cfg.output`` when given."""
    from torchhpc.ext.core.errors import InputError
    from torchhpc.ext.core.runs import Run, holds_a_run, open_run

    if cfg.output is None:
        return open_run("symnmf", cfg, cfg.run, ctx)
    out = Path(cfg.output)
    if holds_a_run(out):  # a clustering is not continued from a checkpoint: --run.resume would not help
        raise InputError(f"--output {out}: the folder already holds a run; choose another folder or remove it")
    if out.exists() and not out.is_dir():
        raise InputError(f"--output {out}: a file is there; give a folder")
    from torchhpc.ext.core.paths import check_output

    try:  # a folder that can be created and written, checked before anything is
        check_output(out / "summary.json", what="")
    except InputError as exc:
        raise InputError(f"--output {out}: cannot write the run there ({str(exc).split(': ', 1)[-1]})") from None
    return Run("", cfg, root=out.parent, run_id=out.name, resume=False, rank=ctx.rank, progress=cfg.run.progress)


def _report(summary: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary, allow_nan=False, default=str), flush=True)
        return
    scores = f"  ARI {summary['ari']:.3f}  NMI {summary['nmi']:.3f}" if "ari" in summary else ""
    gap = f" (largest eigengap at {summary['eigengap_k']})" if summary.get("eigengap_k") else ""
    kept = f", kept start {summary['kept_start']}" if summary["restarts"] > 1 else ""
    print(f"symnmf {summary['algo']}: n={summary['n']} k={summary['k']}{gap}, normalize {summary['normalize']}, "
          f"init {summary['init']}, restarts {summary['restarts']}{kept}, labels by {summary['assigned_by']}: residual {summary['residual']:.6f} "
          f"after {summary['iterations']} iterations ({summary['stopped_by']}), {summary['time_s']:.2f} s"
          f"{scores}\n  -> {summary['run_dir']}", flush=True)
    from torchhpc.ext.core.errors import warn

    for note in summary.get("warnings", []):
        warn(note)


def segment(cfg: SegmentOptions) -> int:
    """``torchhpc symnmf segment``: segment an image; write ``segmentation.png`` and ``summary.json`` into
    ``cfg.output`` and print where (or the summary as JSON).

    Raises:
        InputError: an unknown image name or an unreadable file.
    """
    from torchhpc.ext.core.runs import atomic_write_text

    from .segment import draw_segmentation, segment_image

    seg = segment_image(cfg)
    folder = Path(cfg.output)
    folder.mkdir(parents=True, exist_ok=True)
    picture = folder / "segmentation.png"
    draw_segmentation(seg, picture, f"SymNMF ({cfg.algo}) segmentation, k = {cfg.k}")
    summary = {**seg.summary, "picture": str(picture)}
    atomic_write_text(folder / "summary.json", json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary) if cfg.json else f"segmented {summary['image']} into {summary['k']} segments -> "
          f"{summary['picture']}")
    return 0
