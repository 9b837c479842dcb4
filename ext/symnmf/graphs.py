"""Similarity matrices for SymNMF: graph readers, kNN graphs, a planted-community generator, checks.

A SymNMF input is a symmetric nonnegative ``n x n`` matrix ``A``: a dense tensor or a torch sparse
CSR tensor.  This module builds one from

* an edge list / SNAP text file (``u v [w]`` per line, ``#`` or ``%`` comments; node ids are any
  integers and are renumbered ``0 .. n-1`` in increasing order),
* a Matrix Market file (``.mtx``, read by scipy),
* a GML file (``.gml``, read by networkx; a node attribute can carry the ground truth),
* a feature matrix (``.npy``, ``.csv``, ``.txt``): the symmetrised kNN connectivity graph
  ``0.5 (C + C^T)`` that scikit-learn's ``SpectralClustering(affinity="nearest_neighbors")`` uses,
* scikit-learn's bundled digits (``dataset: digits``), or a stochastic block model with known
  communities (:func:`stochastic_block_model`).

:func:`check_similarity` is the one gate every solver input passes: NaN/inf, a wrong shape, negative
entries, an empty graph or ``k > n`` are one-line :class:`InputError`\\ s; an asymmetric matrix is an
error unless ``symmetrize`` is asked for (then it is replaced by ``(A + A^T) / 2`` with a warning);
isolated nodes are reported with a warning (their rows of ``H`` stay zero and they get label ``-1``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.core.paths import open_text

from .config import GraphOptions

FEATURE_SUFFIXES = (".npy", ".csv")


@dataclass
class Graph:
    """A similarity matrix with its node ids and, when known, ground-truth labels."""

    A: sp.csr_matrix
    """``(n, n)`` scipy CSR, symmetric and nonnegative once checked."""
    node_ids: np.ndarray
    """``(n,)`` the original id of each row (file ids, or ``0..n-1``)."""
    labels: np.ndarray | None = None
    """``(n,)`` int ground truth (``-1``: unknown), or ``None``."""
    source: str = ""
    degrees: np.ndarray | None = None
    """``(n,)`` row sums of ``A`` as checked, before any normalisation (set by :func:`load_graph`)."""

    @property
    def n(self) -> int:
        return self.A.shape[0]


# ----------------------------------------------------------------------------- readers


def read_edge_list(path: str | Path, *, symmetrize: bool = True) -> Graph:
    """An edge list / SNAP text file: ``u v`` or ``u v w`` per line; ``#``/``%`` lines are comments.

    Directed edges ``u -> v`` become the symmetric ``A_uv = A_vu`` when ``symmetrize`` (the SNAP
    convention for undirected use); duplicate edges keep the largest weight; self-loops are kept.

    Raises:
        InputError: a line that is not two or three numbers (names the line), a negative or
            non-finite weight, or no edges at all.
    """
    path = Path(path)
    us, vs, ws = [], [], []
    with open_text(path) as fh:  # plain or gzipped (SNAP ships .txt.gz); LF, CRLF or CR
        for lineno, line in enumerate(fh, 1):
            s = line.strip()
            if not s or s[0] in "#%":
                continue
            parts = s.replace(",", " ").split()
            if len(parts) not in (2, 3):
                raise InputError(f"{path}:{lineno}: expected 'u v' or 'u v weight', got {s[:60]!r}")
            try:
                u, v = int(parts[0]), int(parts[1])
                w = float(parts[2]) if len(parts) == 3 else 1.0
            except ValueError:
                raise InputError(f"{path}:{lineno}: node ids must be integers and the weight a number, "
                                  f"got {s[:60]!r}") from None
            if not np.isfinite(w):
                raise InputError(f"{path}:{lineno}: weight is not finite ({parts[2]})")
            if w < 0:
                raise InputError(f"{path}:{lineno}: negative weight {w} (SymNMF needs a nonnegative similarity)")
            us.append(u)
            vs.append(v)
            ws.append(w)
    if not us:
        raise InputError(f"{path}: empty graph (no edges)")
    u = np.asarray(us)
    v = np.asarray(vs)
    ids, inv = np.unique(np.concatenate([u, v]), return_inverse=True)
    n = len(ids)
    ui, vi = inv[: len(u)], inv[len(u):]
    A = _coo_max(ui, vi, np.asarray(ws, dtype=np.float64), n)
    if symmetrize:
        A = A.maximum(A.T).tocsr()
    return Graph(A, ids, None, str(path))


def _coo_max(u: np.ndarray, v: np.ndarray, w: np.ndarray, n: int) -> sp.csr_matrix:
    """CSR with duplicate entries reduced by max (not the scipy default, sum)."""
    key = u.astype(np.int64) * n + v
    order = np.lexsort((-w, key))
    key, w = key[order], w[order]
    first = np.ones(len(key), dtype=bool)
    first[1:] = key[1:] != key[:-1]
    key, w = key[first], w[first]
    return sp.csr_matrix((w, (key // n, key % n)), shape=(n, n))


def read_matrix_market(path: str | Path) -> Graph:
    """A Matrix Market file (``coordinate`` or ``array``; ``symmetric`` storage is expanded by scipy)."""
    import scipy.io

    path = Path(path)
    try:
        M = scipy.io.mmread(str(path))
    except (ValueError, IndexError, TypeError) as exc:
        raise InputError(f"{path}: not a readable Matrix Market file ({exc})") from None
    M = sp.csr_matrix(M) if sp.issparse(M) else sp.csr_matrix(np.asarray(M, dtype=np.float64))
    if np.iscomplexobj(M.data):
        raise InputError(f"{path}: complex entries (SymNMF needs a real nonnegative similarity)")
    return Graph(M.astype(np.float64), np.arange(M.shape[0]), None, str(path))


def read_gml(path: str | Path, *, label_attribute: str | None = "value") -> Graph:
    """A GML graph (networkx, ``label='id'``); edge ``weight`` is used when present.

    Ground truth comes from the node attribute ``label_attribute`` when every node has it; text
    values (polbooks' ``l``/``n``/``c``) are numbered in order of first appearance.
    """
    import networkx as nx

    path = Path(path)
    try:
        g = nx.read_gml(str(path), label="id")
    except (nx.NetworkXError, ValueError, KeyError) as exc:
        raise InputError(f"{path}: not a readable GML file ({str(exc).splitlines()[0] if str(exc) else exc})") \
            from None
    nodes = sorted(g.nodes())
    if not nodes:
        raise InputError(f"{path}: empty graph (no nodes)")
    try:
        A = nx.to_scipy_sparse_array(g, nodelist=nodes, weight="weight", format="csr").astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{path}: edge weights must be numbers ({exc})") from None
    A = sp.csr_matrix(A)
    if not g.is_directed():
        A = A.maximum(A.T).tocsr()
    labels = None
    if label_attribute:
        values = [g.nodes[v].get(label_attribute) for v in nodes]
        if all(x is not None for x in values):
            labels = _factorize(values)
        else:
            others = sorted({a for v in nodes for a in g.nodes[v]} - {label_attribute, "label", "id"})
            if others:  # the ground truth may be there under another name: say which
                missing = sum(x is None for x in values)
                warnings.warn(f"{path}: {missing} of {len(nodes)} nodes lack the attribute {label_attribute!r} "
                              f"(--graph.label-attribute), so no ARI/NMI; the nodes have {', '.join(others)}",
                              UserWarning, stacklevel=2)
    return Graph(A, np.asarray(nodes), labels, str(path))


def _factorize(values: list) -> np.ndarray:
    codes: dict = {}
    return np.asarray([codes.setdefault(v, len(codes)) for v in values], dtype=np.int64)


def read_features(path: str | Path) -> np.ndarray:
    """A feature matrix ``(n, d)``: ``.npy``, or ``.csv``/``.txt`` of numbers (comma or space separated)."""
    path = Path(path)
    if path.suffix == ".npy":
        from torchhpc.ext.core.paths import load_numpy

        X = load_numpy(path, what="--features", one_array=True)
    else:
        try:
            X = np.loadtxt(path, delimiter="," if path.suffix == ".csv" else None, ndmin=2)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InputError(f"{path}: not a numeric feature matrix ({exc})") from None
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] == 0:
        raise InputError(f"{path}: a feature matrix must be 2-D (n, d) with n >= 1, got shape {X.shape}")
    if not np.isfinite(X).all():
        bad = np.argwhere(~np.isfinite(X))[0]
        raise InputError(f"{path}: feature ({bad[0]}, {bad[1]}) is not finite")
    return X


def read_graph(path: str | Path, *, symmetrize: bool = True, label_attribute: str | None = "value") -> Graph:
    """Read a graph by its suffix: ``.mtx`` Matrix Market, ``.gml`` GML, anything else an edge list.

    Raises:
        InputError: a missing or malformed file.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such graph file")
    name = path.name.lower()
    suffix = Path(name.removesuffix(".gz")).suffix  # x.mtx.gz, x.gml.gz, x.txt.gz: scipy and networkx un-gzip
    if suffix == ".mtx":
        return read_matrix_market(path)
    if suffix == ".gml":
        return read_gml(path, label_attribute=label_attribute)
    return read_edge_list(path, symmetrize=symmetrize)


def read_labels(path: str | Path, node_ids: np.ndarray) -> np.ndarray:
    """Ground truth: one integer per line (line ``i`` = node ``i``), or ``node label`` pairs.

    Pairs are matched to ``node_ids`` (nodes without a label get ``-1``); a one-column file must
    have exactly one line per node.

    Raises:
        InputError: a malformed line or a count that does not match the graph.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such labels file")
    rows = []
    with open_text(path) as fh:  # plain or gzipped (SNAP ships .txt.gz); LF, CRLF or CR
        for lineno, line in enumerate(fh, 1):
            s = line.strip()
            if not s or s[0] in "#%":
                continue
            parts = s.replace(",", " ").split()
            try:
                rows.append([int(p) for p in parts])
            except ValueError:
                raise InputError(f"{path}:{lineno}: labels must be integers, got {s[:60]!r}") from None
            if len(parts) not in (1, 2) or (rows and len(parts) != len(rows[0])):
                raise InputError(f"{path}:{lineno}: expected 'label' or 'node label' on every line, got {s[:60]!r}")
    if not rows:
        raise InputError(f"{path}: no labels")
    arr = np.asarray(rows, dtype=np.int64)
    if arr.shape[1] == 1:
        if len(arr) != len(node_ids):
            raise InputError(f"{path}: {len(arr)} labels for a graph of {len(node_ids)} nodes "
                             "(one label per line, in node order)")
        return arr[:, 0]
    pos = {int(v): i for i, v in enumerate(node_ids)}
    out = np.full(len(node_ids), -1, dtype=np.int64)
    stray = []
    for node, lab in arr:
        if int(node) in pos:
            out[pos[int(node)]] = lab
        else:
            stray.append(int(node))
    if (out < 0).all():
        raise InputError(f"{path}: no labelled node is in the graph (node ids do not match)")
    unlabelled = int((out < 0).sum())
    if stray or unlabelled:
        from torchhpc.ext.core.errors import warn

        parts = ([f"{len(stray)} labelled node(s) are not in the graph (e.g. {stray[0]}) and are ignored"]
                 if stray else []) + ([f"{unlabelled} graph node(s) have no label and are left out of ARI/NMI"]
                                      if unlabelled else [])
        warn(f"{path}: " + "; ".join(parts))
    return out


# ----------------------------------------------------------------------------- builders


def knn_similarity(X: np.ndarray | torch.Tensor, n_neighbors: int = 10, *, include_self: bool = True,
                   block: int = 4096) -> sp.csr_matrix:
    """The symmetrised kNN connectivity graph ``0.5 (C + C^T)`` of the rows of ``X``.

    ``C_ij = 1`` when ``j`` is one of the ``n_neighbors`` nearest rows of ``i`` (Euclidean; ``i``
    itself counts when ``include_self``, as in scikit-learn's ``SpectralClustering``).  Distances are
    computed in blocks of rows with ``torch.cdist``.

    Args:
        X: ``(n, d)`` features.
        n_neighbors: neighbours per row.

    Returns:
        ``(n, n)`` scipy CSR with entries in ``{0.5, 1}``.

    Raises:
        InputError: ``n_neighbors`` not below ``n`` (``<= n`` with ``include_self``), or non-finite features.
    """
    Xt = torch.as_tensor(np.asarray(X, dtype=np.float64))
    n = Xt.shape[0]
    if not bool(torch.isfinite(Xt).all()):
        raise InputError("knn_similarity: the features contain NaN or inf")
    limit = n if include_self else n - 1
    if n_neighbors < 1 or n_neighbors > limit:
        raise InputError(f"knn_similarity: n_neighbors = {n_neighbors} must be in 1..{limit} for {n} points")
    cols = []
    for s in range(0, n, block):
        D = torch.cdist(Xt[s:s + block], Xt)  # (b, n)
        if not include_self:
            D[torch.arange(D.shape[0]), torch.arange(s, s + D.shape[0])] = float("inf")
        else:  # the point itself first, whatever ties there are
            D[torch.arange(D.shape[0]), torch.arange(s, s + D.shape[0])] = -1.0
        cols.append(torch.topk(D, n_neighbors, dim=1, largest=False).indices)
    J = torch.cat(cols).numpy().ravel()
    Irow = np.repeat(np.arange(n), n_neighbors)
    C = sp.csr_matrix((np.ones(len(J)), (Irow, J)), shape=(n, n))
    return (0.5 * (C + C.T)).tocsr()


def digits_graph(n_neighbors: int = 10) -> Graph:
    """scikit-learn's bundled digits (1,797 8x8 images, 10 classes) as a symmetrised kNN graph."""
    from sklearn.datasets import load_digits

    d = load_digits()
    return Graph(knn_similarity(d.data, n_neighbors), np.arange(len(d.target)), d.target.astype(np.int64),
                 f"sklearn digits, symmetrised {n_neighbors}-NN graph")


def stochastic_block_model(n: int, k: int, *, avg_degree: float = 20.0, mixing: float = 0.1,
                           seed: int = 0) -> Graph:
    """An undirected, unweighted stochastic block model with ``k`` equal communities (planted truth).

    Each node has on average ``avg_degree`` neighbours, a fraction ``mixing`` of them outside its own
    community.  Edges are sampled as uniform random pairs (within / across communities), duplicates
    and self-loops removed — ``O(n * avg_degree)`` time and memory, so 10^5..10^6 nodes are quick.

    Returns:
        A :class:`Graph` with ``labels`` the planted communities.
    """
    if k < 1 or n < k:
        raise InputError(f"stochastic_block_model: need 1 <= k <= n, got n={n}, k={k}")
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % k
    rng.shuffle(labels)
    members = [np.flatnonzero(labels == c) for c in range(k)]
    m_in = int(round(n * avg_degree * (1 - mixing) / 2))
    m_out = int(round(n * avg_degree * mixing / 2))
    comm = rng.integers(0, k, m_in)
    sizes = np.asarray([len(m) for m in members])
    offs = np.concatenate([[0], np.cumsum(sizes)])
    flat = np.concatenate(members)
    a = flat[offs[comm] + (rng.random(m_in) * sizes[comm]).astype(np.int64)]
    b = flat[offs[comm] + (rng.random(m_in) * sizes[comm]).astype(np.int64)]
    c = rng.integers(0, n, m_out) if k > 1 else np.zeros(0, dtype=np.int64)
    other = (labels[c] + rng.integers(1, max(k, 2), len(c))) % k   # a different community
    d = flat[offs[other] + (rng.random(len(c)) * sizes[other]).astype(np.int64)]
    u = np.concatenate([a, c])
    v = np.concatenate([b, d])
    keep = u != v
    u, v = u[keep], v[keep]
    A = sp.csr_matrix((np.ones(len(u)), (u, v)), shape=(n, n))
    A = A.maximum(A.T).tocsr()
    A.data[:] = 1.0
    return Graph(A, np.arange(n), labels.astype(np.int64), f"SBM n={n} k={k} degree={avg_degree} mixing={mixing}")


# ----------------------------------------------------------------------------- checks and scaling


def check_similarity(A: sp.spmatrix | np.ndarray, k: int | None = None, *, symmetrize: bool = False,
                     where: str = "A", sym_tol: float = 1e-10) -> tuple[sp.csr_matrix, np.ndarray]:
    """The gate every SymNMF input passes; returns ``(A as CSR float64, isolated node mask)``.

    Raises:
        InputError: not square, NaN/inf, negative entries, empty (no nodes or no nonzero entry),
            ``k > n``, or asymmetric (unless ``symmetrize``).

    Warns:
        UserWarning: when an asymmetric ``A`` was symmetrised, and when there are isolated nodes.
    """
    A = sp.csr_matrix(A, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise InputError(f"{where}: a similarity matrix must be square, got shape {A.shape}")
    n = A.shape[0]
    if n == 0 or A.nnz == 0 or not np.any(A.data):
        raise InputError(f"{where}: empty graph ({n} nodes, no nonzero similarity)")
    if not np.isfinite(A.data).all():
        i = int(np.flatnonzero(~np.isfinite(A.data))[0])
        row = int(np.searchsorted(A.indptr, i, side="right") - 1)
        raise InputError(f"{where}: entry ({row}, {A.indices[i]}) is {A.data[i]} (NaN/inf are not allowed)")
    if (A.data < 0).any():
        i = int(np.flatnonzero(A.data < 0)[0])
        row = int(np.searchsorted(A.indptr, i, side="right") - 1)
        raise InputError(f"{where}: entry ({row}, {A.indices[i]}) = {A.data[i]:g} is negative "
                         "(SymNMF needs a nonnegative similarity)")
    if k is not None and k > n:
        raise InputError(f"k = {k} is larger than the number of nodes n = {n}")
    diff = abs(A - A.T)
    if diff.nnz and diff.max() > sym_tol * max(abs(A).max(), 1e-300):
        if not symmetrize:
            r, c = (diff > sym_tol * abs(A).max()).nonzero()
            raise InputError(f"{where}: not symmetric: A[{r[0]}, {c[0]}] = {A[r[0], c[0]]:g} but "
                             f"A[{c[0]}, {r[0]}] = {A[c[0], r[0]]:g} (pass symmetrize to use (A + A^T) / 2)")
        warnings.warn(f"{where}: not symmetric; using (A + A^T) / 2", UserWarning, stacklevel=2)
        A = (0.5 * (A + A.T)).tocsr()
    A.eliminate_zeros()
    isolated = np.asarray(A.getnnz(axis=1) == 0)
    if isolated.any():
        warnings.warn(f"{where}: {int(isolated.sum())} isolated node(s) (no similarity to any node); their rows "
                      "of H stay 0 and they get label -1", UserWarning, stacklevel=2)
    return A, isolated


def normalize_similarity(A: sp.csr_matrix, how: str = "sym") -> sp.csr_matrix:
    """``sym``: ``D^{-1/2} A D^{-1/2}`` (Kuang, Ding & Park 2012); ``none``: ``A`` unchanged.

    Under ``sym`` a node whose only similarity is to itself (a self-loop and nothing else) is made
    isolated: scaled, its self-loop would be a unit diagonal entry, a component of its own with
    eigenvalue 1, and both SymNMF and spectral methods would spend a whole cluster (a column of ``H``)
    on it.  Its row stays 0, so it gets label ``-1`` like any isolated node (a warning says how many).

    Raises:
        InputError: ``how`` is neither ``sym`` nor ``none``; under ``sym``, a graph of self-loops only.
    """
    if how == "none":
        return A
    if how != "sym":
        raise InputError(f"normalize must be 'sym' or 'none', got {how!r}")
    A = sp.csr_matrix(A)
    diag = A.diagonal()
    lonely = (diag != 0) & (np.asarray((A != 0).sum(axis=1)).ravel() == 1)
    if lonely.any():
        warnings.warn(f"{int(lonely.sum())} node(s) with a self-loop and no other similarity are treated as "
                      "isolated under normalize=sym (their rows of H stay 0 and they get label -1)",
                      UserWarning, stacklevel=2)
        A = (A - sp.diags(np.where(lonely, diag, 0.0))).tocsr()
        A.eliminate_zeros()
        if A.nnz == 0:
            raise InputError(f"empty graph under normalize=sym: each of the {A.shape[0]} node(s) is similar only "
                             "to itself (self-loops, no edge between two nodes); nothing to cluster")
    d = np.asarray(A.sum(axis=1)).ravel()
    inv = np.zeros_like(d)
    inv[d > 0] = d[d > 0] ** -0.5
    D = sp.diags(inv)
    return (D @ A @ D).tocsr()


def load_graph(opts: GraphOptions, k: int) -> Graph:
    """The graph and ground truth that ``opts`` (the job's ``graph:`` section) name, checked for ``k``
    clusters and normalised as asked.

    Raises:
        InputError: a missing or malformed file, or a matrix :func:`check_similarity` refuses.

    Warns:
        UserWarning: as :func:`check_similarity` (symmetrised input, isolated nodes); features with fewer
            distinct points than clusters.
    """
    if opts.dataset == "digits":
        g = digits_graph(opts.n_neighbors)
    elif opts.dataset == "sbm":
        g = stochastic_block_model(opts.sbm_n, opts.sbm_k, avg_degree=opts.sbm_degree, mixing=opts.sbm_mixing,
                                   seed=opts.sbm_seed)
    elif opts.features is not None:
        if not Path(opts.features).is_file():
            raise InputError(f"{opts.features}: no such feature file")
        X = read_features(opts.features)
        distinct = len(np.unique(X.reshape(len(X), -1), axis=0))
        if distinct < k:  # the kNN graph's ties among equal points are broken by row order alone
            warnings.warn(f"{opts.features}: only {distinct} distinct point(s) among {len(X)} for k = {k} "
                          "clusters: equal points are told apart by their row order alone, so the clusters are "
                          "arbitrary", stacklevel=2)
        g = Graph(knn_similarity(X, opts.n_neighbors), np.arange(len(X)), None, opts.features)
    else:
        g = read_graph(opts.path, symmetrize=opts.symmetrize, label_attribute=opts.label_attribute)
    if opts.labels is not None:
        g.labels = read_labels(opts.labels, g.node_ids)
    A, _ = check_similarity(g.A, k, symmetrize=opts.symmetrize, where=g.source or "A")
    g.degrees = np.asarray(A.sum(axis=1)).ravel()
    g.A = normalize_similarity(A, opts.normalize)
    return g


def to_torch(A: sp.csr_matrix, *, dense: bool, dtype: torch.dtype = torch.float64,
             device: str | torch.device = "cpu") -> torch.Tensor:
    """A scipy CSR as a dense tensor or a torch sparse CSR tensor."""
    if dense:
        return torch.as_tensor(A.toarray(), dtype=dtype, device=device)
    A = A.tocsr()
    A.sort_indices()
    with warnings.catch_warnings():  # torch notes that sparse CSR is "beta" on every construction
        warnings.filterwarnings("ignore", message=".*[Ss]parse.*")
        return torch.sparse_csr_tensor(torch.as_tensor(A.indptr, dtype=torch.int64),
                                       torch.as_tensor(A.indices, dtype=torch.int64),
                                       torch.as_tensor(A.data, dtype=dtype), size=A.shape,
                                       check_invariants=False).to(device)


def cluster_labels(H: torch.Tensor) -> np.ndarray:
    """Cluster of each node: the argmax of its row of ``H`` (``-1`` for an all-zero row)."""
    lab = H.argmax(dim=1)
    lab = torch.where(H.amax(dim=1) > 0, lab, torch.full_like(lab, -1))
    return lab.cpu().numpy()
