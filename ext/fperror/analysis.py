"""The analysis of a DAG: its bound per output, by one interval pass or by branch and bound, with
Satire's abstraction and the closed forms of linear kernels (:func:`analyze`, :class:`Analysis`).

* :func:`analyze` — forward pass (:mod:`.forward`), then for small DAGs branch and bound over
  sub-boxes (:func:`_branch_and_bound`: the boxes with the largest bound bisected each round, evaluated
  as one batch of columns), for larger ones one interval pass over the whole box, all outputs at once;
  the error terms come from the adjoint pass (:mod:`.adjoint`); every setting is a
  :class:`~.config.BoundOptions` field.
* Abstraction: :func:`choose_cut` picks the level to cut at, :func:`forward_errors` bounds the cut
  nodes' errors by forward propagation; :func:`linear_cut` restarts that propagation for linear kernels.
* :class:`Analysis` / :class:`OutputBound` — the result (``table()``, ``as_json()``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from torchhpc.ext.core.errors import ConfigError

from . import interval as iv
from .adjoint import cone_errors, depends_on, error_terms, partial_derivatives, upward_sum
from .config import BoundOptions
from .dag import (
    ADD,
    CONST,
    DIV,
    MAX,
    MUL,
    OP_NAMES,
    SUB,
    ExprDAG,
)
from .forward import Forward, Groups, forward, make_groups, nonpositive_subs
from .linear import dependence, is_linear, linear_enclosures, reseed_above


def forward_errors(dag: ExprDAG, groups: Groups, fw: Forward) -> torch.Tensor:
    """A rigorous bound ``(N, B)`` on each node's accumulated error |computed - exact| (forward propagation).

    ``E_k <= sup|d op/d a| E_a + sup|d op/d b| E_b + u_k sup|P_k| + eta_k`` with the partial derivatives
    bounded over the W enclosures (mean-value theorem on the segment from exact to computed operands).
    This is what cutting the DAG at every level would give; :func:`analyze` uses it at one cut.
    """
    u = dag.urnd.to(fw.vl.device)[:, None]
    eta = dag.eta.to(fw.vl.device)[:, None]
    e = torch.where(u + eta > 0, iv.up(u * iv.mag(fw.vl, fw.vh) + eta), 0.0)
    for op, idx, a, b in groups.groups:
        binary = op in (ADD, SUB, MUL, DIV, MAX)
        da, db = partial_derivatives(op, 0, None, None, fw.pl[idx], fw.ph[idx], fw.wl[a], fw.wh[a],
                                     fw.wl[b] if binary else None, fw.wh[b] if binary else None)
        acc = iv.up(iv.mag(*da) * e[a])
        if db is not None:
            acc = iv.up(acc + iv.up(iv.mag(*db) * e[b]))
        uu, ee = u[idx], eta[idx]
        own = torch.where(uu + ee > 0, iv.up(uu * iv.mag(fw.pl[idx], fw.ph[idx]) + ee), 0.0)
        e[idx] = iv.up(acc + own)
    return e


def choose_cut(dag: ExprDAG, window: tuple[int, int]) -> int:
    """The level in ``window`` crossed by the fewest operation nodes (a node crosses L when its
    level is <= L and one of its users is above L): Satire's abstraction depth, chosen automatically."""
    n = dag.num_nodes
    level = dag.level
    maxuse = level.clone()
    for operand in (dag.lhs, dag.rhs):
        ok = operand >= 0
        maxuse.scatter_reduce_(0, operand[ok], level[ok], reduce="amax")
    inner = (dag.op > CONST) & (maxuse > level)
    depth = int(level.max()) + 2
    dev = level.device
    diff = torch.zeros(depth + 1, dtype=torch.int64, device=dev)
    ones = torch.ones(int(inner.sum()), dtype=torch.int64, device=dev)
    diff.index_add_(0, level[inner], ones)
    diff.index_add_(0, maxuse[inner], -ones)
    crossing = diff.cumsum(0)
    lo, hi = max(1, window[0]), min(window[1], depth - 2)
    if lo > hi:
        return -1
    _ = n
    return lo + int(crossing[lo:hi + 1].argmin())


def linear_cut(dag: ExprDAG, groups: Groups, fw: Forward, dep: torch.Tensor, segments: int = 3, chunk: int = 128):
    """Cuts for a linear kernel whose all-order bound the forward error propagation spoils.

    Forward propagation bounds |computed - exact| by sums of *absolute* path products, which on a
    stable recurrence of t steps grow like 2^t while the signed sums stay bounded.  Cut at
    ``segments - 1`` levels (each the level crossed by the fewest nodes in a window around k/segments
    of the depth): each cut node's error is bounded by its own rigorous analysis down to the previous
    cut (signed path sums, interval adjoints: :func:`error_terms` with the cut node as the output
    and the previous cut's nodes carrying their errors), and the propagation restarts at every cut
    (:func:`.linear.reseed_above`), so absolute growth spans one segment, not the whole depth.

    Returns ``(last cut level, Forward, err)`` for :func:`error_terms`' ``cut_level``/``cut_errors``, or None.
    """
    depth = int(dag.level.max()) if dag.num_nodes else 0
    level = dag.level
    err = torch.maximum(iv.up(fw.vl - fw.wl), iv.up(fw.wh - fw.vh))[:, :1].clone()
    maxuse = level.clone()
    for operand in (dag.lhs, dag.rhs):
        ok = operand >= 0
        maxuse.scatter_reduce_(0, operand[ok], level[ok], reduce="amax")
    prev, cur = None, fw
    half = max(1, depth // (2 * segments))
    for m in range(1, segments):
        mid = depth * m // segments
        c = choose_cut(dag, (max(1, mid - half), max(1, mid + half)))
        if c < 1 or (prev is not None and c <= prev):
            continue
        cut = ((level <= c) & (maxuse > c) & (dag.op > CONST)).nonzero().flatten()
        for s in range(0, cut.numel(), chunk):
            cols = cut[s:s + chunk]
            err[cols, 0] = torch.minimum(err[cols, 0], cone_errors(dag, groups, cur, cols, prev, err))
        cur, err = reseed_above(dag, groups, cur, err, c, partial_derivatives)
        prev = c
    if prev is None:
        return None
    return prev, cur, err


# ----------------------------------------------------------------------------- results


@dataclass
class OutputBound:
    """The bound of one output."""

    name: str
    abs_bound: float
    rel_bound: float | None
    first_order: float
    second_order: float
    range: tuple[float, float]
    culprits: list[dict]
    boxes: int
    worst_point: dict[str, float]
    lower_estimate: float = math.nan
    rigorous: bool = True

    def as_json(self) -> dict:
        return {"output": self.name, "abs_bound": self.abs_bound, "rel_bound": self.rel_bound,
                "first_order": self.first_order, "second_order": self.second_order,
                "range": list(self.range), "culprits": self.culprits, "boxes": self.boxes,
                "worst_point": self.worst_point, "rigorous": self.rigorous,
                "lower_estimate": None if self.lower_estimate != self.lower_estimate else self.lower_estimate}


@dataclass
class Analysis:
    """All outputs of one analysis, with time and memory."""

    name: str
    outputs: list[OutputBound]
    num_ops: int
    num_nodes: int
    seconds: float
    peak_mb: float
    device: str
    options: dict = field(default_factory=dict)
    cut_level: int | None = None
    linear: bool = False
    linear_cut: int | None = None  # last level where a linear kernel's error propagation restarted
    notes: list[str] = field(default_factory=list)  # what the input said that the bound does not use

    def as_json(self) -> dict:
        return {"name": self.name, "ops": self.num_ops, "nodes": self.num_nodes, "seconds": self.seconds,
                "peak_mb": self.peak_mb, "device": self.device, "options": self.options,
                "abstraction_cut_level": self.cut_level, "linear_closed_form": self.linear,
                "linear_cut_level": self.linear_cut, "notes": self.notes,
                "outputs": [o.as_json() for o in self.outputs]}

    @property
    def max_abs_bound(self) -> float:
        return max(o.abs_bound for o in self.outputs)

    def table(self, top: int = 3) -> str:
        """A plain-text table: per output the bounds, the range and the top culprits."""
        lines = [f"{self.name}: {self.num_ops} ops, {self.num_nodes} nodes, {self.seconds:.3f} s, "
                 f"peak {self.peak_mb:.1f} MB ({self.device})",
                 f"{'output':<20} {'abs bound':>12} {'rel bound':>12} {'2nd order':>10} {'range':>27}"]
        def g(x: float) -> str:  # outward rounding turns an exact 0 into -4.9e-324: show 0
            return f"{0.0 if abs(x) < 1e-300 else x:>11.4g}"

        for o in self.outputs:
            rel = f"{o.rel_bound:.4e}" if o.rel_bound is not None else "-"
            flag = "" if o.rigorous else "  (first order only)"
            lines.append(f"{o.name[:20]:<20} {o.abs_bound:>12.4e} {rel:>12} {o.second_order:>10.2e} "
                         f"[{g(o.range[0])}, {g(o.range[1])}]{flag}")
            for c in o.culprits[:top]:
                lines.append(f"    {c['share'] * 100:5.1f}%  {c['bound']:.3e}  {c['op']:<6} at {c['source']}")
        return "\n".join(lines)


# ----------------------------------------------------------------------------- driver


def _free_inputs(dag: ExprDAG) -> torch.Tensor:
    return (dag.box[dag.input_nodes, 1] > dag.box[dag.input_nodes, 0])


def _culprits(dag: ExprDAG, terms: torch.Tensor, top: int, related: np.ndarray | None = None) -> list[dict]:
    """The ``top`` largest error terms as culprits, among the operations the output depends on (``related``,
    :func:`.adjoint.depends_on`: the others' terms are the outward rounding of a zero adjoint, not
    contributions; their share of the bound stays in the total)."""
    total = float(terms.sum())
    if related is not None:
        terms = torch.where(torch.from_numpy(related), terms, 0.0)
    k = min(top, int((terms > 0).sum()))
    if k == 0:
        return []
    vals, idx = torch.topk(terms, k)
    out = []
    for v, i in zip(vals.tolist(), idx.tolist(), strict=True):
        s = int(dag.source[i])
        out.append({"node": i, "op": OP_NAMES[int(dag.op[i])], "source": dag.sources[s] if s >= 0 else "?",
                    "bound": v, "share": v / total if total > 0 else 0.0})
    return out


def analyze(dag: ExprDAG, options: BoundOptions | None = None, *, progress: bool = False,
            **overrides) -> Analysis:
    """Bound the round-off error of every output of ``dag`` over its input box.

    Args:
        dag: the expression DAG (:func:`~.parsers.load`, :func:`~.tracing.trace`).
        options: how the bound is computed (:class:`~.config.BoundOptions`; default: its defaults).
        progress: a tqdm bar over the outputs (one-pass mode).
        **overrides: :class:`~.config.BoundOptions` fields applied to ``options`` (a copy, range-checked
            like any instance): ``analyze(dag, bb_iters=0)``, ``analyze(dag, opts, time_budget_s=5.0)``.

    Small DAGs (<= ``bb_max_nodes`` nodes, <= ``bb_max_outputs`` outputs, <= ``bb_max_inputs`` free
    inputs: bisection does not pay in more dimensions) are refined by branch and
    bound: the ``bb_batch // 2`` boxes with the largest bound are bisected along their widest
    (relative) side each round, boxes whose bound is below the best point value are dropped, until
    the bound is within ``bb_tol`` of a point value, ``bb_iters`` rounds or ``time_budget_s``.
    Larger DAGs get one interval pass over the whole box, all outputs at once (in column chunks).

    Linear kernels (``linear="auto"``, one-pass mode): when every input-dependent operation is
    + - neg or a scaling by a constant and ``nodes x inputs <= linear_max_work``, the value ranges
    are the exact affine ranges (:mod:`.linear`) instead of interval enclosures.

    Abstraction (Satire's): ``abstraction="MIN:MAX"`` cuts the DAG once at the level in that window
    crossed by the fewest nodes; the nodes at the cut carry their range and a forward-propagated error
    bound (:func:`forward_errors`) and the adjoint pass runs above the cut only.  ``"auto"`` cuts DAGs
    deeper than ``abstraction_depth`` levels in the middle third of their depth; ``"off"`` never cuts.

    Rounding model: ``"standard"`` bounds each rounding by ``u |w|``; ``"power2"`` by ``u 2^floor(log2
    |w|)`` (half an ulp of w's binade, up to 2x less; FPTaylor's ``fp-power2-model``), for every
    operation and rounded input (a rounded literal already carries its exact error).  Both are
    rigorous; the sampled-error tests hold for both.

    Raises:
        InputError: a division by a range containing 0, log/sqrt outside its domain, overflow.
        ConfigError: an override out of range, or ``device="cuda"`` without a CUDA device.
        TypeError: an override that is not a :class:`~.config.BoundOptions` field.
    """
    opts = (options if options is not None else BoundOptions()).updated(**overrides)
    if opts.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is available")
    t0 = time.perf_counter()
    dev = torch.device(opts.device)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    dagd = dag.to(dev)
    groups = make_groups(dagd)
    if opts.rounding == "power2":
        groups.power2 = (dagd.op != CONST)[:, None]
    box = dagd.box[dagd.input_nodes]  # (n_in, 2)
    lo0, hi0 = box[:, :1].clone(), box[:, 1:].clone()
    point = dag.input_nodes.numel() == 0  # every input degenerate: the box is one point
    nonpos = nonpositive_subs(dag)
    nonpos = nonpos.to(dev) if nonpos is not None else None
    groups.nonpos = nonpos
    fw0 = forward(dagd, groups, lo0, hi0, check=not point, nonpos=nonpos)
    n_out = len(dag.outputs)
    if point:
        # exact values to 320 bits (binary64 intervals widen an ulp per operation and blow up
        # through ill-conditioned recurrences such as CG)
        from .reference import point_enclosures
        pl_, ph_ = point_enclosures(dag)
        fw0.vl = torch.maximum(fw0.vl, pl_.to(dev))
        fw0.vh = torch.minimum(fw0.vh, ph_.to(dev))
    # the computed-value enclosures W may blow up where the exact ones V do not (e.g. a converged
    # CG residual whose rounding noise straddles 0): then only the first-order bound is available,
    # with adjoints in double-double (linear.linear_adjoints) over the exact-value enclosures
    rigorous = bool(torch.isfinite(fw0.wl).all() & torch.isfinite(fw0.wh).all())
    fallback_dep = None
    if not rigorous:
        fw0 = Forward(fw0.vl, fw0.vh, fw0.vl, fw0.vh, fw0.vl, fw0.vh)
        use_bb_ok = False
        fallback_dep = dependence(dagd, groups)
    else:
        use_bb_ok = True
    n_out = len(dag.outputs)
    n_free = int(_free_inputs(dag).sum()) if dag.input_nodes.numel() else 0
    bb_fits = (dag.num_nodes <= opts.bb_max_nodes and n_out <= opts.bb_max_outputs
               and 0 < n_free <= opts.bb_max_inputs and opts.linear != "on")
    linear_used = False
    linear_dep = fallback_dep
    if opts.linear != "off" and rigorous and not (use_bb_ok and bb_fits):
        dep = dependence(dagd, groups)
        if (opts.linear == "on" or dag.num_nodes * max(1, dag.input_nodes.numel()) <= opts.linear_max_work) \
                and is_linear(dagd, groups, dep):
            fw0 = linear_enclosures(dagd, groups, fw0, dep, partial_derivatives) if rigorous else fw0
            rigorous = bool(torch.isfinite(fw0.wl).all() & torch.isfinite(fw0.wh).all())
            linear_used = True
            linear_dep = dep
    depth = int(dag.level.max()) if dag.num_nodes else 0
    abstraction = opts.abstraction_window()
    window = None
    if abstraction == "auto" and depth > opts.abstraction_depth:
        window = (depth // 3, 2 * depth // 3)
    elif isinstance(abstraction, tuple):
        window = abstraction
    cut_level = choose_cut(dagd, window) if window is not None and not linear_used else None
    cut_level = cut_level if cut_level is not None and cut_level >= 1 else None
    cut_errors = forward_errors(dagd, groups, fw0) if cut_level is not None else None
    use_bb = use_bb_ok and cut_level is None and bb_fits and not linear_used
    results: list[OutputBound] = []
    if use_bb:
        for k in range(n_out):
            # each output gets an equal share of the time that is left
            now = time.perf_counter()
            share = max(0.0, t0 + opts.time_budget_s - now) / (n_out - k)
            results.append(_branch_and_bound(dagd, groups, k, lo0, hi0, fw0, opts.bb_iters, opts.bb_batch,
                                             opts.bb_tol, now + share, opts.top))
    else:
        chunk = max(1, min(n_out, 4_000_000 // max(1, dag.num_nodes)))
        bar = None
        if progress:
            from torchhpc.ext.core.runs import progress_bar as tqdm
            bar = tqdm(total=n_out, desc="fperror outputs", unit="out")
        lin_cut = None
        for s in range(0, n_out, chunk):
            outs = dagd.output_nodes[s:s + chunk]
            rig, first = error_terms(dagd, groups, fw0, outs, None, True, cut_level, cut_errors, linear_dep)
            if not rigorous:  # first order only (Satire's guarantee): the V-based terms
                rig = first
            tot = upward_sum(rig)
            ftot = first.sum(0) if first is not None else torch.full_like(tot, math.nan)
            if (linear_used and rigorous and cut_level is None and first is not None
                    and bool((tot > 2 * ftot).any())):
                # the beyond-first-order part dominates: restart the error propagation at a cut
                lin_cut = lin_cut or linear_cut(dagd, groups, fw0, linear_dep) or False
                if lin_cut:
                    rig2, _ = error_terms(dagd, groups, lin_cut[1], outs, None, False, lin_cut[0], lin_cut[2],
                                          linear_dep)
                    tot2 = upward_sum(rig2)
                    better = tot2 < tot
                    rig = torch.where(better[None], rig2, rig)
                    tot = torch.minimum(tot, tot2)
            related = depends_on(groups, dag.output_nodes[s:s + chunk].numpy(), dag.num_nodes)
            for j in range(outs.numel()):
                o = int(outs[j])
                rng = (float(fw0.vl[o, 0]), float(fw0.vh[o, 0]))
                results.append(_make_output(dag, s + j, float(tot[j]), float(ftot[j]), rng, rig[:, j], 1,
                                            {}, opts.top, related=related[:, j]))
            if bar is not None:
                bar.update(outs.numel())
        if bar is not None:
            bar.close()
    for r in results:
        r.rigorous = rigorous
    peak = (torch.cuda.max_memory_allocated(dev) / 2 ** 20) if dev.type == "cuda" else _rss_peak_mb()
    res = Analysis(dag.name, results, dag.num_ops, dag.num_nodes, time.perf_counter() - t0, peak, str(dev))
    res.cut_level = cut_level
    res.notes = list(getattr(dag, "notes", []))
    if isinstance(abstraction, tuple) and cut_level is None:  # asked for, and no level there to cut at
        why = ("the closed form of a linear kernel was used instead" if linear_used else
               f"the DAG is {depth} level(s) deep and no level in {abstraction[0]}:{abstraction[1]} has nodes used "
               "above it")
        res.notes.append(f"--abstraction {abstraction[0]}:{abstraction[1]} made no cut: {why}")
    res.linear = linear_used
    res.linear_cut = lin_cut[0] if (not use_bb and lin_cut) else None
    res.options = {"inputs": opts.inputs, "bb_iters": opts.bb_iters, "bb_batch": opts.bb_batch,
                   "abstraction": opts.abstraction, "linear": opts.linear, "rounding": opts.rounding}
    return res


def _rss_peak_mb() -> float:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _make_output(dag, k, abs_b, first, rng, terms, boxes, worst, top, lower=math.nan, related=None) -> OutputBound:
    lo, hi = rng
    mn = 0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))
    rel = abs_b / mn if mn > 0 else None
    second = max(abs_b - first, 0.0) if first == first else math.nan
    return OutputBound(dag.outputs[k], abs_b, rel, first, second, rng, _culprits(dag, terms.cpu(), top, related),
                       boxes, worst, lower)


class _Pool:
    """Leaf boxes of the branch and bound, with their bounds; dropped boxes keep only their range."""

    def __init__(self, lo, hi, ub, first, terms, rng):
        self.lo, self.hi, self.ub, self.first, self.terms, self.rng = lo, hi, ub, first, terms, rng
        self.dropped_rng: tuple[float, float] | None = None

    def keep(self, mask: torch.Tensor) -> None:
        if bool(mask.all()):
            return
        d = self.rng[~mask]
        if d.numel():
            lo, hi = float(d[:, 0].min()), float(d[:, 1].max())
            if self.dropped_rng is not None:
                lo, hi = min(lo, self.dropped_rng[0]), max(hi, self.dropped_rng[1])
            self.dropped_rng = (lo, hi)
        self.lo, self.hi = self.lo[:, mask], self.hi[:, mask]
        self.ub, self.first, self.terms, self.rng = self.ub[mask], self.first[mask], self.terms[:, mask], self.rng[mask]

    def add(self, lo, hi, ub, first, terms, rng) -> None:
        self.lo, self.hi = torch.cat([self.lo, lo], 1), torch.cat([self.hi, hi], 1)
        self.ub, self.first = torch.cat([self.ub, ub]), torch.cat([self.first, first])
        self.terms, self.rng = torch.cat([self.terms, terms], 1), torch.cat([self.rng, rng])

    def range(self) -> tuple[float, float]:
        lo, hi = float(self.rng[:, 0].min()), float(self.rng[:, 1].max())
        if self.dropped_rng is not None:
            lo, hi = min(lo, self.dropped_rng[0]), max(hi, self.dropped_rng[1])
        return lo, hi


def _branch_and_bound(dag, groups, k, lo0, hi0, fw0, iters, batch, tol, deadline, top):
    """Maximise the error bound of output k over the box by bisection (see :func:`analyze`).

    Every leaf box's bound is >= the true error everywhere in it, so the maximum over the kept
    leaves is a bound as long as only boxes with a smaller bound than some kept box are dropped:
    boxes below a point value (the point's own box stays), and the smallest when the pool is capped.
    """
    out = dag.output_nodes[k:k + 1]
    o = int(out)
    free = hi0[:, 0] > lo0[:, 0]
    width0 = (hi0 - lo0)[:, 0].clamp(min=1e-300)
    rig, first = error_terms(dag, groups, fw0, out, None, True)
    pool = _Pool(lo0.clone(), hi0.clone(), upward_sum(rig), first.sum(0), rig.clone(),
                 torch.stack([fw0.vl[o], fw0.vh[o]], 1))
    best_lb, worst_pt, evaluated = 0.0, {}, 1
    half = max(1, batch // 4)
    cap = 32 * batch
    for _ in range(iters):
        if time.perf_counter() > deadline:
            break
        kk = min(half, pool.ub.numel())
        top_v, top_i = torch.topk(pool.ub, kk)
        if best_lb > 0 and float(top_v[0]) <= best_lb * (1 + tol):
            break
        sel_lo, sel_hi = pool.lo[:, top_i], pool.hi[:, top_i]
        mask = torch.ones(pool.ub.numel(), dtype=torch.bool, device=pool.ub.device)
        mask[top_i] = False
        pool.lo, pool.hi = pool.lo[:, mask], pool.hi[:, mask]
        pool.ub, pool.first, pool.terms, pool.rng = pool.ub[mask], pool.first[mask], pool.terms[:, mask], pool.rng[mask]
        # bisect along the widest side relative to the initial box
        rel = torch.where(free[:, None], (sel_hi - sel_lo) / width0[:, None], -1.0)
        dim = rel.argmax(0)[None]
        mid = (sel_lo.gather(0, dim) + sel_hi.gather(0, dim)) / 2
        lo_a, hi_a, lo_b, hi_b = sel_lo.clone(), sel_hi.clone(), sel_lo.clone(), sel_hi.clone()
        hi_a.scatter_(0, dim, mid)
        lo_b.scatter_(0, dim, mid)
        nlo, nhi = torch.cat([lo_a, lo_b], 1), torch.cat([hi_a, hi_b], 1)
        # box midpoints, as degenerate boxes, give the first-order error at a point: a lower bound
        cen = (nlo + nhi) / 2
        fw = forward(dag, groups, torch.cat([nlo, cen], 1), torch.cat([nhi, cen], 1), nonpos=groups.nonpos)
        nb, nbox = 2 * nlo.shape[1], nlo.shape[1]
        rig_b, first_b = error_terms(dag, groups, fw, out.expand(nb), torch.arange(nb, device=nlo.device), True)
        lb_pts = first_b[:, nbox:].sum(0)
        j = int(lb_pts.argmax())
        if float(lb_pts[j]) > best_lb:
            best_lb = float(lb_pts[j])
            worst_pt = {dag.input_names[i]: float(cen[i, j]) for i in range(cen.shape[0])}
        evaluated += nbox
        pool.add(nlo, nhi, upward_sum(rig_b[:, :nbox]), first_b[:, :nbox].sum(0), rig_b[:, :nbox],
                 torch.stack([fw.vl[o, :nbox], fw.vh[o, :nbox]], 1))
        pool.keep(pool.ub >= best_lb)
        if pool.ub.numel() > cap:
            keep = torch.zeros(pool.ub.numel(), dtype=torch.bool, device=pool.ub.device)
            keep[torch.topk(pool.ub, cap).indices] = True
            pool.keep(keep)
    i = int(pool.ub.argmax())
    first_ub = float(pool.first.max())
    related = depends_on(groups, dag.output_nodes[k:k + 1].cpu().numpy(), dag.num_nodes)[:, 0]
    return _make_output(dag, k, float(pool.ub[i]), first_ub, pool.range(), pool.terms[:, i], evaluated, worst_pt,
                        top, best_lb, related)


__all__ = ["Analysis", "OutputBound", "analyze", "choose_cut", "forward_errors", "linear_cut"]
