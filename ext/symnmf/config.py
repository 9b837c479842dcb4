"""Every option of symnmf, defined once: the solvers, the job (``torchhpc symnmf run``) and the demo step.

:class:`SolverOptions` is what the library solvers take (:func:`torchhpc.ext.symnmf.solvers.symnmf`);
:class:`SymnmfJob` is the job whose YAML files live in ``configs/symnmf/`` and whose flags and
``--help`` are generated from these fields.  The common flags have short spellings
(``--graph``, ``--k``, ``--algo``, ``--seed``, ``--labels``, ``--output``, ``--json``; and the suite's
``--device``, ``--threads``, ``--nproc``, ``--timeout-s`` of the ``dist`` section).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torchhpc.ext.core.config import ConfigError, DistOptions, Options, RunOptions, option

ALGOS = ("anls", "gn", "hals", "mu")


@dataclass
class SolverOptions(Options):
    """The SymNMF solver: min ||A - H H^T||_F^2 over H >= 0."""

    k: int = option(10, help="rank of H (number of clusters)", ge=1, flag="--k")
    algo: str = option("anls", help="anls (penalty ANLS, block principal pivoting) | gn (projected Gauss-Newton "
                       "with CG) | hals (penalty HALS) | mu (multiplicative updates)", choices=ALGOS, flag="--algo")
    max_iter: int = option(500, help="outer iterations at most", ge=1, flag="--max-iter")
    tol: float = option(1e-8, help="stop when the relative residual changes by less than tol between iterations "
                        "(0: off)", ge=0)
    pgrad_tol: float = option(0.0, help="stop when ||projected gradient|| <= pgrad_tol * its initial value (0: off)",
                              ge=0)
    target_residual: float = option(0.0, help="stop once the relative residual ||A - HH^T|| / ||A|| is at most "
                                    "this (0: off)", ge=0)
    alpha: float | None = option(None, help="ANLS/HALS penalty alpha ||W - H||^2 (null: max(A)^2)", ge=0)
    init: str = option("nndsvd", help="start 0: nndsvd (NNDSVD of the k leading eigenpairs of A, by block "
                       "Krylov; deterministic) | random: uniform in [0, 2 sqrt(mean(A) / k)] (Kuang et al.) | "
                       "unit: uniform in [0, 1]", choices=["nndsvd", "random", "unit"])
    seed: int = option(0, help="seed of the random starts and of the Krylov start block (the same H on any "
                       "number of processes)", ge=0, flag="--seed")
    restarts: int = option(1, help="starts: start 0 from init, starts r >= 1 random (seeds seed + 1000003 r); "
                           "the lowest final residual wins", ge=1, le=1000)
    cg_iters: int = option(20, help="gn: conjugate-gradient iterations per Gauss-Newton step", ge=1)
    cg_tol: float = option(1e-6, help="gn: CG stops when its residual drops by this factor", gt=0, lt=1)
    line_search: int = option(10, help="gn: step halvings tried when the projected step does not decrease "
                              "the residual", ge=0)
    mu_beta: float = option(0.5, help="mu: H <- H * ((1 - beta) + beta * AH / (H H^T H))", gt=0, le=1)
    dtype: str = option("float64", help="float32 | float64", choices=["float32", "float64"])
    assign: str = option("auto", help="labels from H: argmax of each row (Kuang et al.) | kmeans (k-means on "
                         "the rows of D^-1/2 H, as spectral clustering rounds) | auto: of the two, the partition "
                         "whose best one-cluster-per-node factor fits A better (the SymNMF objective restricted to "
                         "hard clusterings)", choices=["auto", "argmax", "kmeans"])


@dataclass
class GraphOptions(Options):
    """The similarity matrix A and its ground truth."""

    path: str | None = option(None, input_file=True, help="graph file: edge list / SNAP text, .mtx, .gml", flag="--graph")
    features: str | None = option(None, input_file=True, flag="--features",
                                  help="feature matrix (.npy/.csv/.txt) turned into a symmetrised kNN graph")
    dataset: str | None = option(None, help="built-in input: digits (sklearn, 10-NN graph) | sbm (stochastic "
                                 "block model with sbm_* options)", choices=["digits", "sbm"], flag="--dataset")
    labels: str | None = option(None, input_file=True, help="ground truth: one integer per line, or 'node label' pairs",
                                flag="--labels")
    label_attribute: str = option("value", help="GML node attribute holding the ground truth (if present)")
    n_neighbors: int = option(10, help="kNN graph: neighbours per point (the point itself included)", ge=1)
    symmetrize: bool = option(True, help="edge lists: a directed edge u->v becomes u-v; a non-symmetric matrix "
                              "becomes (A + A^T)/2 with a warning (false: an error)")
    normalize: str = option("sym", help="sym: factorise D^-1/2 A D^-1/2 (nodes with only a self-loop become "
                            "isolated) | none: A as given", choices=["none", "sym"])
    layout: str = option("auto", help="dense | sparse (torch CSR) | auto: dense when n <= 20000 and A is >5% full",
                         choices=["auto", "dense", "sparse"])
    sbm_n: int = option(100_000, help="sbm: nodes", ge=2)
    sbm_k: int = option(10, help="sbm: communities", ge=1)
    sbm_degree: float = option(20.0, help="sbm: mean degree", gt=0)
    sbm_mixing: float = option(0.1, help="sbm: fraction of each node's edges leaving its community", ge=0, le=1)
    sbm_seed: int = option(0, help="sbm: seed", ge=0)

    def __post_init__(self) -> None:
        super().__post_init__()
        given = [name for name, v in (("graph", self.path), ("features", self.features), ("dataset", self.dataset))
                 if v is not None]
        if len(given) > 1:
            raise ConfigError(f"give one of --graph, --features, --dataset (got {', '.join(given)})")


@dataclass
class SymnmfDist(DistOptions):
    """Where the job runs (device, threads, processes, timeout) and its process grid (under torchrun)."""

    grid: str = option("1d", help="1d: row blocks of A | 2d: pr x pc blocks (the paper's 2D grid)",
                       choices=["1d", "2d"])
    pr: int = option(0, help="2d: grid rows (0: the most square pr x pc = world size)", ge=0)


@dataclass
class SymnmfJob(Options):
    """A SymNMF clustering job: read A, factorise, write H, labels, metrics and plots."""

    RENAMED: ClassVar[dict[str, str]] = {"dist.timeout": "dist.timeout_s", "solver.device": "dist.device"}

    graph: GraphOptions = option(default_factory=GraphOptions, help="input")
    solver: SolverOptions = option(default_factory=SolverOptions, help="solver")
    dist: SymnmfDist = option(default_factory=SymnmfDist, help="where the job runs and its process grid")
    output: str | None = option(None, help="write the run into exactly this folder (default: runs/symnmf/<id>)",
                                flag="--output")
    json: bool = option(False, help="print one JSON object (residual, iterations, time, ARI/NMI) on stdout",
                        flag="--json")
    plot: bool = option(True, help="write convergence.png")
    save_h: bool = option(True, help="write H.pt (the factor) and labels.txt (each node's cluster, by "
                          "solver.assign)")
    run: RunOptions = option(default_factory=RunOptions, help="run folder")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.graph.path is None and self.graph.features is None and self.graph.dataset is None:
            raise ConfigError("no input: give --graph FILE, --features FILE or --dataset digits|sbm")


@dataclass
class SymnmfTour(Options):
    """The symnmf step of ``make demo``: SymNMF vs SpectralClustering on the digits graph."""

    algos: list[str] = option(default_factory=lambda: ["anls", "gn"], help="solvers to run")
    k: int = option(10, help="clusters", ge=2)
    max_iter: int = option(300, help="iterations per solver (at most; tol 1e-8 stops earlier)", ge=1)
    min_ari: float = option(0.7, help="the step fails below this ARI", ge=-1, le=1)


@dataclass
class SegmentOptions(Options):
    """Image segmentation with SymNMF: pixels are nodes, similarity from colour and position."""

    image: str = option("china", help="china | flower (images scikit-learn ships), a scikit-image sample "
                        "(skimage.data.<name>, when installed) or an image file path")
    k: int = option(4, help="segments", ge=2, flag="--k")
    size: int = option(64, help="the image is resized so its longer side has this many pixels", ge=8, le=512)
    n_neighbors: int = option(10, help="neighbours per pixel in (colour, position) space", ge=2)
    position_weight: float = option(0.5, help="weight of the (row, col) position beside the colour", ge=0)
    algo: str = option("anls", help="solver", choices=ALGOS, flag="--algo")
    seed: int = option(0, help="seed", ge=0, flag="--seed")
    max_iter: int = option(200, help="iterations", ge=1)
    output: str = option("runs/symnmf-segment", help="folder for segmentation.png and summary.json",
                         flag="--output")
    json: bool = option(False, help="print the summary as one JSON object", flag="--json")
