"""SymNMF solvers: min_{H >= 0} ||A - H H^T||_F^2, written once against a similarity operator.

Four algorithms (Eswar, Hayashi, Ballard, Kannan, Vuduc, Park, SC20, and the methods it builds on):

* ``anls`` — the penalty formulation (Kuang, Yun & Park 2015, eq. (20); the paper's Sec. 3.1)::

      min_{W, H >= 0} ||A - W H^T||_F^2 + alpha ||W - H||_F^2

  alternating two NNLS problems with normal equations ``(H^T H + alpha I) w_i = (A H + alpha H)_i``
  per row, solved exactly by block principal pivoting (:func:`~.nnls.nnls_bpp`).
* ``hals`` — the same two subproblems solved by one sweep of hierarchical ALS (exact coordinate
  minimisation of one column at a time, Cichocki & Phan 2009).
* ``gn`` — projected Gauss-Newton (Kuang et al. 2015 Sec. 4; the paper's Sec. 3.2): with ``J`` the
  Jacobian of ``r(H) = A - H H^T``, the step ``X`` solves ``J^T J X = -J^T r``, i.e.::

      X (H^T H) + H (X^T H) = A H - H (H^T H)

  by conjugate gradients on the free variables (``H > 0`` or gradient < 0, Bertsekas' projected
  Newton), then ``H <- max(0, H + s X)`` with ``s`` halved until the residual decreases.
* ``mu`` — multiplicative updates ``H <- H * ((1 - beta) + beta A H / (H H^T H))`` (He et al. 2011),
  the simple baseline.

Every iteration needs ``A @ H`` (one product; two for ANLS/HALS, which also need ``A @ W``), a few
``k x k`` Gram matrices and scalar sums: exactly the operator interface of :mod:`.ops`, so the same
code runs on one process or a process grid.  The residual is evaluated without forming ``H H^T``::

    ||A - H H^T||_F^2 = ||A||_F^2 - 2 tr(H^T (A H)) + ||H^T H||_F^2
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from torchhpc.ext.core.errors import InputError

from .config import SolverOptions
from .nnls import nnls_bpp
from .spectral import leading_eigenpairs, nndsvd_factor

DTYPES = {"float32": torch.float32, "float64": torch.float64}


@dataclass
class SymNMFResult:
    """What a solver returns (on every rank: ``H`` holds this rank's owned rows)."""

    H: torch.Tensor
    """``(n_local, k)`` the factor (all ``n`` rows on a single process)."""
    iterations: int
    residual: float
    """``||A - H H^T||_F / ||A||_F`` at the returned ``H``."""
    pgrad: float
    """``||projected gradient||_F`` of ``||A - H H^T||_F^2`` at the returned ``H``."""
    converged: str
    """Which rule stopped the run: ``tol``, ``pgrad_tol``, ``target_residual``, ``stalled`` or ``max_iter``."""
    time_s: float
    history: list[dict] = field(default_factory=list)
    """Per iteration: ``iter``, ``residual``, ``pgrad``, ``time_s`` and seconds per phase."""
    W: torch.Tensor | None = None
    """ANLS/HALS: the second factor of the penalty formulation (close to ``H``)."""
    restart: int = 0
    """Which of the ``restarts`` starts this is (0: the ``init`` start)."""
    restart_residuals: list[float] = field(default_factory=list)
    """The final residual of every start, in order."""
    eigenvalues: list[float] | None = None
    """``init: nndsvd``: the leading Ritz values of ``A`` (``k`` + a few, descending)."""


def initial_factor(op, k: int, opts: SolverOptions) -> torch.Tensor:
    """The seeded initial ``H`` for this rank's rows (identical on any number of processes).

    ``random``/``unit``: the full ``(n, k)`` matrix is drawn on the CPU in float64 from ``opts.seed``
    and sliced, so a rank's rows do not depend on the world size, the device or the dtype.
    ``nndsvd``: :func:`~.spectral.nndsvd_factor`, the nonnegative part of the ``k`` leading eigenpairs
    of ``A`` (computed through ``op``; its start block is seeded the same way).
    """
    if opts.init == "nndsvd":
        return nndsvd_factor(op, k)
    g = torch.Generator().manual_seed(opts.seed)
    H = torch.rand(op.n, k, generator=g, dtype=torch.float64)
    if opts.init == "random":
        mean = op.total / float(op.n) ** 2
        H *= 2.0 * math.sqrt(max(mean, 0.0) / k)
    H = H[op.owned_rows()].to(dtype=op.dtype, device=op.device)
    return H.masked_fill(op.isolated[:, None].to(op.device), 0.0)


def restart_options(opts: SolverOptions, r: int) -> SolverOptions:
    """The options of start ``r`` of ``opts.restarts``: start 0 is ``opts`` itself; start ``r >= 1`` is a
    random start (``init: random`` unless ``unit`` was asked for) with the seed ``seed + 1000003 r``."""
    if r == 0:
        return dataclasses.replace(opts, restarts=1)
    init = "unit" if opts.init == "unit" else "random"
    return dataclasses.replace(opts, restarts=1, seed=opts.seed + 1_000_003 * r, init=init)


def _residual(op, H: torch.Tensor, AH: torch.Tensor, G: torch.Tensor) -> float:
    """``||A - H H^T||_F / ||A||_F`` from ``A H`` and ``G = H^T H`` (one scalar all-reduce)."""
    cross = op.allsum((H * AH).sum().reshape(1).double())
    sq = op.norm_sq - 2.0 * float(cross) + float((G.double() ** 2).sum())
    return math.sqrt(max(sq, 0.0) / op.norm_sq)


def _pgrad(op, H: torch.Tensor, AH: torch.Tensor, G: torch.Tensor) -> float:
    """``||P[grad]||_F`` of ``f(H) = ||A - H H^T||^2``: ``grad = 4 (H G - A H)``; at ``H = 0`` only
    negative components count."""
    grad = 4.0 * (H @ G - AH)
    pg = torch.where(H > 0, grad, grad.clamp_max(0.0))
    return math.sqrt(float(op.allsum((pg.double() ** 2).sum().reshape(1))))


def symnmf(op, opts: SolverOptions, *, H0: torch.Tensor | None = None,
           callback: Callable[[dict], None] | None = None) -> SymNMFResult:
    """Factorise ``A ~ H H^T`` with ``H >= 0`` by ``opts.algo``: the lowest residual of ``opts.restarts`` starts.

    Start 0 is ``opts.init`` (by default the spectral NNDSVD start, :mod:`.spectral`); starts
    ``r = 1 .. R-1`` are random with the seeds ``seed + 1000003 r`` (:func:`restart_options`).  The
    run with the lowest final residual is returned, ties to the earlier start (Kuang, Yun & Park 2015
    keep the best of several starts the same way).  ``history`` and ``time_s`` cover all runs and the
    spectral start.  With ``init: random`` the starts and the choice are those of the releases before
    the spectral start existed.

    Args:
        op: a similarity operator (:class:`~.ops.LocalSimilarity` or a distributed one).
        opts: the solver options (``k``, ``algo``, ``init``, ``restarts``, stopping rules, seed ...).
        H0: ``(n_local, k)`` initial factor of start 0 (default: :func:`initial_factor`).
        callback: called with each iteration's record (``iter``, ``residual``, ``pgrad``, times).

    Returns:
        A :class:`SymNMFResult` (``restart``: which start it is; ``restart_residuals``: every start's).

    Raises:
        InputError: ``k > n``, or an ``H0`` of the wrong shape or with negative entries.
    """
    if opts.k > op.n:
        raise InputError(f"k = {opts.k} is larger than the number of nodes n = {op.n}")
    t0 = time.perf_counter()
    eigenvalues = None
    if H0 is None and opts.init == "nndsvd":
        pairs = leading_eigenpairs(op, opts.k)
        eigenvalues = [float(v) for v in pairs.values]
        H0 = nndsvd_factor(op, opts.k, pairs=pairs)
    best = None
    history: list[dict] = []
    residuals: list[float] = []
    for r in range(opts.restarts):
        one = restart_options(opts, r)
        cb = callback if callback is None or opts.restarts == 1 else functools.partial(_tag_restart, callback, r)
        res = _solve(op, one, H0 if r == 0 else None, cb)
        history.extend({**h, "restart": r} if opts.restarts > 1 else h for h in res.history)
        residuals.append(res.residual)
        if best is None or res.residual < best.residual:
            best = res
            best.restart = r
    best.history = history
    best.restart_residuals = residuals
    best.eigenvalues = eigenvalues
    best.time_s = time.perf_counter() - t0
    return best


def _tag_restart(callback: Callable[[dict], None], r: int, rec: dict) -> None:
    callback({**rec, "restart": r})


def eigengap_k(eigenvalues: list[float] | None) -> int | None:
    """Where the largest gap of the leading eigenvalues lies: ``j >= 2`` maximising ``lambda_j - lambda_{j+1}``
    (1-based; von Luxburg 2007, Sec. 8.3, on the normalised similarity); ``None`` with fewer than three.

    A hint for ``k`` (the number of well separated groups), not a choice: the run uses ``opts.k``. ``j = 1`` is
    left out: the leading eigenvalue of a normalised connected graph is 1, set apart from the rest, so its gap
    would name one group on nearly every graph (it did on football's 12 conferences and email-Eu-core's 42).
    """
    if not eigenvalues or len(eigenvalues) < 3:
        return None
    gaps = [eigenvalues[j] - eigenvalues[j + 1] for j in range(1, len(eigenvalues) - 1)]
    return 2 + max(range(len(gaps)), key=gaps.__getitem__)


def _solve(op, opts: SolverOptions, H0, callback) -> SymNMFResult:
    k = opts.k
    H = initial_factor(op, k, opts) if H0 is None else H0.to(dtype=op.dtype, device=op.device).clone()
    if tuple(H.shape) != (op.n_local, k):
        raise InputError(f"H0 must be (n_local, k) = ({op.n_local}, {k}), got {tuple(H.shape)}")
    if bool((H < 0).any()) or not bool(torch.isfinite(H).all()):
        raise InputError("H0 must be finite and nonnegative")
    alpha = opts.alpha if opts.alpha is not None else op.max_entry ** 2
    step = {"anls": _anls_step, "hals": _hals_step, "gn": _gn_step, "mu": _mu_step}[opts.algo]
    state: dict = {"W": H.clone(), "alpha": alpha}
    t0 = time.perf_counter()
    AH = op.matmul(H)
    G = op.gram(H)
    history: list[dict] = []
    prev = None
    pg0 = None
    converged = "max_iter"
    it = 0
    while True:
        res = _residual(op, H, AH, G)
        pg = _pgrad(op, H, AH, G)
        pg0 = pg if pg0 is None else pg0
        rec = {"iter": it, "residual": res, "pgrad": pg, "time_s": time.perf_counter() - t0,
               **{f"{k_}_s": v for k_, v in op.phase_s.items()}}
        history.append(rec)
        if callback is not None:
            callback(rec)
        if opts.target_residual > 0 and res <= opts.target_residual:
            converged = "target_residual"
            break
        if opts.pgrad_tol > 0 and pg <= opts.pgrad_tol * pg0:
            converged = "pgrad_tol"
            break
        if opts.tol > 0 and prev is not None and abs(prev - res) <= opts.tol * max(res, 1e-300):
            converged = "tol"
            break
        if it >= opts.max_iter:
            break
        if state.get("stalled"):
            converged = "stalled"
            break
        prev = res
        H, AH, G = step(op, H, AH, G, state, opts)
        it += 1
    return SymNMFResult(H=H, iterations=it, residual=res, pgrad=pg, converged=converged,
                        time_s=time.perf_counter() - t0, history=history,
                        W=state["W"] if opts.algo in ("anls", "hals") else None)


# ----------------------------------------------------------------------------- the four updates


def _nnls_rows(op, G: torch.Tensor, RHS: torch.Tensor, X0: torch.Tensor) -> torch.Tensor:
    """Rows ``x_i = argmin_{x >= 0} x^T G x / 2 - rhs_i^T x`` (BPP, warm-started at ``X0``)."""
    with op.timer.phase("nnls"):
        return nnls_bpp(G, RHS.T, x0=X0.T).T.contiguous()


def _anls_step(op, H, AH, G, state, opts):
    """One ANLS iteration of the penalty formulation: W from H, then H from W (Kuang et al. eq. (21))."""
    a = state["alpha"]
    eye = a * torch.eye(G.shape[0], dtype=G.dtype, device=G.device)
    W = _nnls_rows(op, G + eye, AH + a * H, state["W"])
    AW = op.matmul(W)
    Gw = op.gram(W)
    H = _nnls_rows(op, Gw + eye, AW + a * W, H)
    state["W"] = W
    return H, op.matmul(H), op.gram(H)


def _hals_sweep(op, X, G, RHS):
    """One HALS sweep: column ``j`` of ``X`` <- max(0, x_j + (rhs_j - X g_j) / g_jj), in order."""
    with op.timer.phase("hals"):
        X = X.clone()
        for j in range(X.shape[1]):
            if G[j, j] <= 0:
                continue
            X[:, j] = (X[:, j] + (RHS[:, j] - X @ G[:, j]) / G[j, j]).clamp_min(0.0)
        return X


def _hals_step(op, H, AH, G, state, opts):
    """Penalty formulation, one HALS sweep per factor."""
    a = state["alpha"]
    eye = a * torch.eye(G.shape[0], dtype=G.dtype, device=G.device)
    W = _hals_sweep(op, state["W"], G + eye, AH + a * H)
    AW = op.matmul(W)
    Gw = op.gram(W)
    H = _hals_sweep(op, H, Gw + eye, AW + a * W)
    state["W"] = W
    return H, op.matmul(H), op.gram(H)


def _mu_step(op, H, AH, G, state, opts):
    """``H <- H * ((1 - beta) + beta * A H / (H G))`` (He, Xie, Zdunek, Zhou & Cichocki 2011)."""
    with op.timer.phase("update"):
        tiny = torch.finfo(H.dtype).tiny ** 0.5
        H = H * ((1.0 - opts.mu_beta) + opts.mu_beta * AH / (H @ G).clamp_min(tiny))
    return H, op.matmul(H), op.gram(H)


def _dot(op, X, Y) -> float:
    return float(op.allsum((X * Y).sum().reshape(1).double()))


def _gn_step(op, H, AH, G, state, opts):
    """Projected Gauss-Newton: CG on ``X G + H (X^T H) = A H - H G`` over the free variables, then a
    projected step halved until ``||A - H H^T||`` decreases (Kuang et al. 2015 Sec. 4)."""
    with op.timer.phase("cg"):
        B = AH - H @ G                                  # = -grad / 4
        free = (H > 0) | (B > 0)                        # at the bound with grad >= 0: held at 0
        B = B * free

        def jtj(X):  # (J^T J X) / 2 restricted to the free set
            return (X @ G + H @ op.gram(X, H)) * free

        X = torch.zeros_like(H)
        R = B.clone()
        P = R.clone()
        rr = _dot(op, R, R)
        rr0 = rr
        for _ in range(opts.cg_iters):
            if rr <= (opts.cg_tol ** 2) * rr0 or rr == 0.0:
                break
            Q = jtj(P)
            pq = _dot(op, P, Q)
            if pq <= 0:                                 # the null space of J^T J: stop here
                break
            a = rr / pq
            X = X + a * P
            R = R - a * Q
            rr_new = _dot(op, R, R)
            P = R + (rr_new / rr) * P
            rr = rr_new
    f0 = _residual(op, H, AH, G)
    s = 1.0
    for _ in range(opts.line_search + 1):
        Hn = (H + s * X).clamp_min(0.0)
        AHn = op.matmul(Hn)
        Gn = op.gram(Hn)
        if _residual(op, Hn, AHn, Gn) < f0:
            return Hn, AHn, Gn
        s *= 0.5
    state["stalled"] = True                             # no decrease along the projected arc
    return H, AH, G
