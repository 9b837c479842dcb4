"""The scale model: calibrate the cost model from measured runs, predict each algorithm up to 28,672 ranks.

:class:`~torchhpc.ext.collectives.plan.CostModel` charges per phase the slowest rank (latency per
message, intra-node copies, its own inter-node injection) and the busiest node's NIC.  Here:

* :func:`calibrate` fits the latency and intra-node bandwidth to the ``direct`` runs without
  emulation of a benchmark results file (all ranks on one machine: every byte is an intra-node copy);
* :func:`predict` builds the real routing plans (the same code the collective runs) for a graph on
  ``nodes x ranks_per_node`` ranks and evaluates the model on them;
* :func:`compare_measured` puts the model's figure beside each measured emulated run;
* :func:`predict` first asks :func:`~torchhpc.ext.collectives.sizing.check_model_fits` whether the
  machine and graph fit in memory and in ``max_minutes``, from the sizes alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from torchhpc.ext.core.errors import ConfigError, InputError

from .config import ALPHA_US, INTRA_GBPS, ModelOptions
from .graphs import parse_graph
from .plan import ALGORITHMS, CostModel, Plan, build_plan, node_of_ranks, plan_cost
from .sizing import check_model_fits


def _load(path: str | Path) -> dict:
    from torchhpc.ext.core.paths import check_input

    check_input(path, what="--calibration")
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: cannot read benchmark results ({exc})") from None
    params = doc.get("params") if isinstance(doc, dict) else None
    if not isinstance(params, dict) or ("calibration" not in params and "runs" not in params):
        raise InputError(f"{path}: not a results file of benchmarks/collectives.py (no params.runs)")
    return doc


def calibration_samples(run: dict) -> list[dict]:
    """``{"msgs", "bytes", "seconds"}`` per size of the ``direct`` algorithm of an un-emulated run; when
    node-mates exchanged through shared memory, the busiest rank's node-mate messages and bytes apart
    (``msgs_intra``, ``bytes_intra``) from its other messages (``msgs``, ``bytes``: gloo)."""
    P = run["nranks"]
    src, dst = parse_graph(run["graph"], P, run["seed"])

    def busiest(mask):
        return int(np.maximum(np.bincount(src[mask], minlength=P), np.bincount(dst[mask], minlength=P)).max())

    rows = [r for r in run["rows"] if r["algo"] == "direct"]
    if run.get("intra_node_transport") == "shm" and run.get("ranks_per_node"):
        node = node_of_ranks(P, run["ranks_per_node"])
        local = node[src] == node[dst]
        deg, deg_local = busiest(~local), busiest(local)
        return [{"msgs": deg, "bytes": deg * r["size"], "msgs_intra": deg_local, "bytes_intra": deg_local * r["size"],
                 "seconds": r["median_s"]} for r in rows]
    deg = busiest(np.ones(len(src), dtype=bool))
    return [{"msgs": deg, "bytes": deg * r["size"], "seconds": r["median_s"]} for r in rows]


def calibrate(run: dict | list[dict], base: CostModel | None = None) -> CostModel:
    """Fit ``alpha`` and ``beta_intra`` (and ``alpha_intra`` under shared memory) to un-emulated runs (one
    or several graphs on the same machine; see :func:`calibration_samples`)."""
    from .plan import fit_cost_model

    runs = [run] if isinstance(run, dict) else list(run)
    return fit_cost_model([s for r in runs for s in calibration_samples(r)], base)


def compare_measured(run: dict, model: CostModel) -> list[dict]:
    """Model vs measurement for each (size, algorithm) of a run."""
    src, dst = parse_graph(run["graph"], run["nranks"], run["seed"])
    node = node_of_ranks(run["nranks"], run["ranks_per_node"])
    out = []
    for r in run["rows"]:
        plan = build_plan(src, dst, np.full(len(src), r["size"]), node, r["routed_as"])
        out.append({"size": r["size"], "algo": r["algo"], "measured_s": r["median_s"],
                    "predicted_s": plan_cost(plan, model)})
    return out


def model_from_options(opts: ModelOptions) -> CostModel:
    alpha_us = ALPHA_US if opts.alpha_us is None else opts.alpha_us
    intra_gbps = INTRA_GBPS if opts.intra_gbps is None else opts.intra_gbps
    model = CostModel(alpha=alpha_us * 1e-6, beta_intra=intra_gbps * 1e9, beta_rank=opts.rank_gbps * 1e9,
                      beta_node=opts.node_gbps * 1e9)
    if opts.calibration:
        doc = _load(opts.calibration)
        cal = doc["params"].get("calibration")
        if not cal or not isinstance(cal, dict):
            raise InputError(f"{opts.calibration}: no calibration in params")
        model.alpha = _calibrated(cal, "alpha_s", opts.calibration)
        model.beta_intra = _calibrated(cal, "beta_intra_Bps", opts.calibration)
        model.alpha_intra = _calibrated(cal, "alpha_intra_s", opts.calibration) if "alpha_intra_s" in cal else None
    return model


def _calibrated(cal: dict, key: str, path: str) -> float:
    """``cal[key]`` when it is a positive finite number; else one line naming the file and the key."""
    value = cal.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise InputError(f"{path}: params.calibration.{key} must be a positive number, got {value!r}")
    return float(value)


def predict(opts: ModelOptions) -> dict:
    """Each algorithm's predicted time per call on ``opts.nodes x opts.ranks_per_node`` ranks.

    Returns:
        ``{"nranks", "nodes", "graph", "edges", "model": {...}, "rows": [{"size", "algo", "predicted_s",
        "speedup_vs_direct", "inter_node_bytes_max"}]}``.
    """
    from .config import _check_sizes

    model = model_from_options(opts)
    check_model_fits(opts)  # before anything is built
    P = opts.nodes * opts.ranks_per_node
    src, dst = parse_graph(opts.graph, P, opts.seed)
    if len(src) == 0:
        raise ConfigError(f"--graph {opts.graph} on {P} ranks has no edge: nothing to predict (raise the density "
                          f"or the number of ranks)")
    node = node_of_ranks(P, opts.ranks_per_node)
    rows = []
    # with one size for every edge the routes do not depend on the size: plan once, rescale the bytes
    unit = {algo: build_plan(src, dst, np.ones(len(src), dtype=np.int64), node, algo) for algo in ("direct", "lag-h")}
    for size in _check_sizes(opts.sizes, "--sizes"):
        costs, inter = {}, {}
        for algo in ALGORITHMS:
            if algo == "law-h":  # LAW-H splits messages by size: plan it for this size
                plan = build_plan(src, dst, np.full(len(src), size, dtype=np.int64), node, algo)
            else:
                plan = Plan(algo, unit[algo].route, unit[algo].nbytes * size, node)
            costs[algo] = plan_cost(plan, model)
            inter[algo] = int(plan.inter_node_bytes().max())
        for algo in ALGORITHMS:
            rows.append({"size": size, "algo": algo, "predicted_s": costs[algo],
                         "speedup_vs_direct": costs["direct"] / costs[algo], "inter_node_bytes_max": inter[algo]})
    return {"nranks": P, "nodes": opts.nodes, "ranks_per_node": opts.ranks_per_node, "graph": opts.graph,
            "edges": len(src), "model": model.as_dict(), "rows": rows}


def format_prediction(res: dict) -> str:
    lines = [f"predicted: {res['nranks']} ranks = {res['nodes']} nodes x {res['ranks_per_node']}, graph {res['graph']} "
             f"({res['edges']} edges); model {res['model']}",
             f"{'size':>8} {'algo':>7} {'ms/call':>10} {'vs direct':>9} {'inter-node B/rank max':>22}"]
    for r in res["rows"]:
        lines.append(f"{r['size']:>8} {r['algo']:>7} {1e3 * r['predicted_s']:10.3f} {r['speedup_vs_direct']:8.2f}x "
                     f"{r['inter_node_bytes_max']:22d}")
    return "\n".join(lines)


__all__ = ["calibrate", "calibration_samples", "compare_measured", "format_prediction", "model_from_options",
           "predict"]
