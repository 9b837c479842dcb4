"""Benchmark: SymNMF with its default options against scikit-learn's SpectralClustering, on real labelled graphs.

    python benchmarks/symnmf_quality.py [--seeds 5] [--graphs iris,wine,...] [--weights binary|gaussian]
                                        [--no-old] [--ablation]

The graphs (``--graphs``, default all of them):

* ``iris``, ``wine``, ``breast_cancer``, ``digits``: scikit-learn's bundled labelled data sets as
  symmetrised 10-NN graphs, built the way a practitioner builds them and the way
  ``SpectralClustering(affinity="nearest_neighbors")`` does: ``C = kneighbors_graph(X, 10,
  include_self=True)``, ``A = (C + C^T) / 2``.  ``wine`` and ``breast_cancer`` mix units (mg/l, ratios,
  mm), so their features are standardised first; ``iris`` (all cm) and ``digits`` (pixel intensities)
  are used as they are.  ``--weights gaussian`` weights the same edges ``exp(-d_ij^2 / (s_i s_j))`` with
  ``s_i`` the distance to the 7th neighbour (Zelnik-Manor & Perona's self-tuning similarity, the
  input of Kuang et al.'s SymNMF experiments).
* ``penguins``: the Palmer penguins (3 species) that the ``palmerpenguins`` package ships as a CSV
  (read offline), the same kNN graph of its four size measurements (mm and g: standardised), the rows
  with a missing value dropped (``load_penguins(return_X_y=True, drop_na=True)``: 333 of 344).  Skipped,
  with the reason, where the package is absent (``pip install palmerpenguins``; ``make setup`` pins it).
* ``football``, ``polbooks``, ``email-Eu-core``: the labelled graphs of ``../shared/data/graphs``
  (skipped, with the reason, where that folder is absent).  ``dolphins.gml`` carries no labels and is
  left out.

For every graph and seed ``0 .. S-1`` in this one process:

* **ours**: exactly what ``torchhpc symnmf run --graph G --k K --algo anls --seed S`` does with the
  default options (``GraphOptions().normalize``, the ``SolverOptions`` defaults);
* **old**: the defaults before the spectral start, ``--graph.normalize none --solver.init random
  --solver.restarts 1 --solver.assign argmax`` (``--no-old`` skips it);
* **spectral**: ``SpectralClustering(n_clusters=K, affinity="precomputed", random_state=S)`` on the
  same (unnormalised) ``A``.

``k`` is the number of ground-truth classes.  Reported: mean ARI over the seeds and seconds per run
(wall clock, from ``A`` to labels).  ``--ablation`` adds one option changed at a time (the old options
with the normalisation only or the spectral start only; the defaults with 3 or 5 starts, with
Gauss-Newton, with argmax or k-means labels only); email-Eu-core is left out of it
(``--ablation-email`` puts it in: about 15 minutes more on 2 cores).

Results: OUT/symnmf/quality.json (the suite's schema) and quality.png.
"""

from __future__ import annotations

import dataclasses
import sys
import time
import warnings

import numpy as np

from torchhpc.ext.core.bench import bar_plot, benchmark_parser, write_results
from torchhpc.ext.core.data import shared_data_dir

SKLEARN_SETS = ("iris", "wine", "breast_cancer", "digits")
KNN_SETS = (*SKLEARN_SETS, "penguins")
"""The labelled feature sets, each turned into the same symmetrised 10-NN graph."""
STANDARDISED = ("wine", "breast_cancer", "penguins")
"""Feature sets whose columns are in different units: z-scored before the kNN graph."""
SHARED_GRAPHS = ("football", "polbooks", "email-Eu-core")
ALL_GRAPHS = KNN_SETS + SHARED_GRAPHS
N_NEIGHBORS = 10
SELF_TUNING_NEIGHBOR = 7


def knn_graph(X: np.ndarray, weights: str):
    """The symmetrised 10-NN graph ``(C + C^T) / 2`` of the rows of ``X`` (binary or self-tuning Gaussian)."""
    import scipy.sparse as sp
    from sklearn.neighbors import NearestNeighbors, kneighbors_graph

    if weights == "binary":
        C = kneighbors_graph(X, N_NEIGHBORS, include_self=True)
    else:
        dist, idx = NearestNeighbors(n_neighbors=N_NEIGHBORS).fit(X).kneighbors(X)   # the point itself first
        scale = dist[:, SELF_TUNING_NEIGHBOR]
        rows = np.repeat(np.arange(len(X)), N_NEIGHBORS)
        cols = idx.ravel()
        w = np.exp(-dist.ravel() ** 2 / (scale[rows] * scale[cols]))
        C = sp.csr_matrix((w, (rows, cols)), shape=(len(X), len(X)))
    return (0.5 * (C + C.T)).tocsr()


def features(name: str):
    """``(X, labels, source)`` of one labelled feature set, or ``None`` with the reason printed."""
    if name == "penguins":
        try:
            from palmerpenguins import load_penguins
        except ImportError:
            print("  penguins: skipped (palmerpenguins is not installed: pip install palmerpenguins)")
            return None
        X, species = load_penguins(return_X_y=True, drop_na=True)    # the CSV inside the package
        _, y = np.unique(species.to_numpy(dtype=str), return_inverse=True)
        return X.to_numpy(dtype=np.float64), y.astype(np.int64), "palmerpenguins (rows with a missing value dropped)"
    from sklearn import datasets

    d = getattr(datasets, f"load_{name}")()
    return d.data, d.target.astype(np.int64), f"sklearn {name}"


def load(name: str, weights: str):
    """``(A, labels, description)`` of one graph, or ``None`` with the reason printed."""
    if name in KNN_SETS:
        from sklearn.preprocessing import StandardScaler

        loaded = features(name)
        if loaded is None:
            return None
        X, y, source = loaded
        X = StandardScaler().fit_transform(X) if name in STANDARDISED else X
        how = "standardised, " if name in STANDARDISED else ""
        return knn_graph(X, weights), y, f"{source}, {how}{weights} 10-NN"
    from torchhpc.ext.symnmf.config import GraphOptions
    from torchhpc.ext.symnmf.graphs import load_graph

    folder = shared_data_dir() / "graphs"
    if not folder.is_dir():
        print(f"  {name}: skipped ({folder} is absent)")
        return None
    if name == "email-Eu-core":
        opts = GraphOptions(path=str(folder / "email-Eu-core.txt"),
                            labels=str(folder / "email-Eu-core-department-labels.txt"), normalize="none")
    else:
        opts = GraphOptions(path=str(folder / f"{name}.gml"), normalize="none")
    g = load_graph(opts, 1)
    return g.A, g.labels, f"{name} ({opts.path.rsplit('/', 1)[-1]})"


def variants(args) -> dict[str, tuple[dict, str]]:
    """Name -> (solver option overrides, normalisation); ``ours`` is the defaults."""
    from torchhpc.ext.symnmf.config import GraphOptions

    norm = GraphOptions().normalize
    out = {"ours": ({}, norm)}
    if args.old:
        out["old"] = ({"init": "random", "restarts": 1, "assign": "argmax"}, "none")
    if args.ablation:
        out.update({"normalise only": ({"init": "random", "restarts": 1, "assign": "argmax"}, "sym"),
                    "spectral start only": ({"init": "nndsvd", "restarts": 1, "assign": "argmax"}, "none"),
                    "3 starts": ({"restarts": 3}, norm), "5 starts": ({"restarts": 5}, norm),
                    "gn": ({"algo": "gn"}, norm),
                    "argmax": ({"assign": "argmax"}, norm), "kmeans": ({"assign": "kmeans"}, norm)})
    return out


def run_graph(name, A, truth, k, seeds, runs, device):
    """Every variant and SpectralClustering on one graph: per seed ARI/NMI and seconds."""
    from sklearn.cluster import SpectralClustering

    from torchhpc.ext.symnmf.clustering import cluster, clustering_scores
    from torchhpc.ext.symnmf.config import SolverOptions

    row = {"name": name, "n": int(A.shape[0]), "nnz": int(A.nnz), "k": k}
    for key, (over, norm) in runs.items():
        scores, secs, starts, rounded = [], [], [], []
        for seed in seeds:
            opts = dataclasses.replace(SolverOptions(k=k, algo="anls", seed=seed), **over)
            t0 = time.perf_counter()
            out = cluster(A, opts, normalize=norm, device=device)
            secs.append(time.perf_counter() - t0)
            scores.append(clustering_scores(truth, out.labels))
            starts.append(out.result.restart)
            rounded.append(out.assigned_by)
        row[key] = {"ari_mean": float(np.mean([s["ari"] for s in scores])),
                    "nmi_mean": float(np.mean([s["nmi"] for s in scores])), "ari": [s["ari"] for s in scores],
                    "s_per_run": float(np.mean(secs)), "kept_start": starts, "assigned_by": rounded,
                    "normalize": norm,
                    "options": {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts)
                                if f.name in ("algo", "init", "restarts", "tol", "max_iter", "assign")}}
    scores, secs = [], []
    for seed in seeds:
        t0 = time.perf_counter()
        with warnings.catch_warnings():      # "Graph is not fully connected": the same graph for both
            warnings.simplefilter("ignore", UserWarning)
            lab = SpectralClustering(n_clusters=k, affinity="precomputed", random_state=seed).fit_predict(A)
        secs.append(time.perf_counter() - t0)
        scores.append(clustering_scores(truth, lab))
    row["spectral"] = {"ari_mean": float(np.mean([s["ari"] for s in scores])),
                       "nmi_mean": float(np.mean([s["nmi"] for s in scores])), "ari": [s["ari"] for s in scores],
                       "s_per_run": float(np.mean(secs))}
    row["ours_at_or_above_spectral"] = bool(row["ours"]["ari_mean"] >= row["spectral"]["ari_mean"])
    return row


def print_tables(rows, keys) -> None:
    """Markdown tables: ours / SpectralClustering / old defaults (mean ARI, seconds per run), then the
    ablation variants when run."""
    main = [k for k in ("ours", "spectral", "old") if any(k in r for r in rows)]
    print("| graph | n | k | " + " | ".join(f"{c} ARI" for c in main) + " | "
          + " | ".join(f"{c} s/run" for c in main) + " | ours >= spectral |")
    print("|---|---|---|" + "---|" * (2 * len(main) + 1))
    for r in rows:
        aris = " | ".join(f"{r[c]['ari_mean']:.3f}" if c in r else "—" for c in main)
        secs = " | ".join(f"{r[c]['s_per_run']:.3f}" if c in r else "—" for c in main)
        print(f"| {r['name']} | {r['n']} | {r['k']} | {aris} | {secs} | "
              f"{'yes' if r['ours_at_or_above_spectral'] else 'no'} |")
    wins = sum(r["ours_at_or_above_spectral"] for r in rows)
    print(f"\nours (defaults) at or above SpectralClustering on {wins} of {len(rows)} graphs\n")
    extra = [k for k in keys if k not in main]
    if extra:
        print("| graph | " + " | ".join(f"{c}: ARI (s/run)" for c in ["ours", *extra]) + " |")
        print("|---|" + "---|" * (len(extra) + 1))
        for r in rows:
            print(f"| {r['name']} | " + " | ".join(f"{r[c]['ari_mean']:.3f} ({r[c]['s_per_run']:.2f})" if c in r
                                                   else "—" for c in ["ours", *extra]) + " |")


def main(argv=None) -> int:
    ap = benchmark_parser(__doc__, repeats=1)
    ap.add_argument("--seeds", type=int, default=5, help="seeds 0 .. S-1 per graph (default 5)")
    ap.add_argument("--graphs", default=",".join(ALL_GRAPHS), help=f"comma-separated subset of {ALL_GRAPHS}")
    ap.add_argument("--weights", choices=["binary", "gaussian"], default="binary",
                    help="edge weights of the kNN graphs (default binary, as SpectralClustering builds)")
    ap.add_argument("--no-old", dest="old", action="store_false", help="skip the old defaults")
    ap.add_argument("--ablation", action="store_true", help="also one option changed at a time")
    ap.add_argument("--ablation-email", action="store_true", help="run the ablation on email-Eu-core too")
    args = ap.parse_args(argv)
    names = [g for g in args.graphs.split(",") if g]
    unknown = sorted(set(names) - set(ALL_GRAPHS))
    if unknown:
        ap.error(f"unknown graph(s) {', '.join(unknown)}; choose from {', '.join(ALL_GRAPHS)}")
    from torchhpc.ext.core.device import pick_device

    device = pick_device(args.device)
    seeds = range(args.seeds)
    t_all = time.time()
    rows = []
    for name in names:
        loaded = load(name, args.weights)
        if loaded is None:
            continue
        A, truth, desc = loaded
        k = int(len(np.unique(truth[truth >= 0])))
        runs = variants(args)
        if name == "email-Eu-core" and not args.ablation_email:
            runs = {key: v for key, v in runs.items() if key in ("ours", "old")}
        row = run_graph(name, A, truth, k, seeds, runs, device)
        row["graph"] = desc
        rows.append(row)
        print(f"  {name:14s} n={row['n']:5d} k={k:2d}  " + "  ".join(
            f"{key} ARI {row[key]['ari_mean']:.3f} ({row[key]['s_per_run']:.3f} s)"
            for key in [*runs, "spectral"]), flush=True)
    print()
    print_tables(rows, list(variants(args)))
    params = {"seeds": list(seeds), "weights": args.weights, "n_neighbors": N_NEIGHBORS,
              "variants": {k: {"options": o, "normalize": n} for k, (o, n) in variants(args).items()},
              "device": str(device), "wall_s": time.time() - t_all}
    path = write_results("symnmf", "quality", rows, out=args.out, params=params)
    keys = [k for k in ("ours", "old", "spectral") if all(k in r for r in rows)]
    bar_plot(path.parent / "quality.png", [r["name"] for r in rows],
             {k: [r[k]["ari_mean"] for r in rows] for k in keys}, ylabel=f"mean ARI, seeds 0-{args.seeds - 1}",
             title="SymNMF defaults vs SpectralClustering (same graph)", highlight="ours")
    print(f"done in {time.time() - t_all:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
