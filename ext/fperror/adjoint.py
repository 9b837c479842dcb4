"""The adjoint (reverse) pass: interval partial derivatives of the outputs w.r.t. every node, and the
per-node error terms of the bound.

For each column (one (box, output) pair) :func:`reverse` accumulates interval adjoints from the output
down, group by group (the groups of :func:`.forward.make_groups`, top level first), with
:func:`partial_derivatives` of each operation; accumulation by ``index_add_`` is widened so that the
sums stay enclosures.  :func:`error_terms` turns the adjoints into each node's contribution to the
bound (see :mod:`.ops`): rigorous ``(u_k sup|P_k| + eta_k) sup|adj_k over W|`` and first order
``u_k sup|V_k| sup|adj_k over V|``; :func:`cone_errors` computes the same for many columns on their
backward cone only; :func:`upward_sum` adds terms rounded up.  Adjoints are ``(N, C)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from torchhpc.ext.core.budgets import HostBudget
from torchhpc.ext.core.errors import InputError

from . import interval as iv
from .dag import (
    ABS,
    ADD,
    ATAN,
    COS,
    COSH,
    DIV,
    EXP,
    LOG,
    MAX,
    MUL,
    NEG,
    OP_NAMES,
    SIN,
    SINH,
    SQRT,
    SUB,
    TAN,
    TANH,
    ExprDAG,
)
from .forward import Forward, Groups, below_pow2, rounding_magnitude
from .linear import linear_adjoints

GPU_BUDGETS = {
    # the checked forward pass (once an analysis): its findings stay on the device and are read after the pass
    "forward_checked": HostBudget("group", syncs=0, launches=80, fixed_syncs=2, fixed_launches=32,
                                  why="per group: the interval op twice, the rounding, three kinds of check; "
                                      "read once at the end (and once for the inputs' formats)"),
    "reverse": HostBudget("group of the backward cone", syncs=0, launches=64, fixed_syncs=1, fixed_launches=16,
                          why="the outputs read once, their cone worked out on the host from the DAG's structure and "
                              "sent in one transfer; per group: gathers, the partial derivatives, three index_add_"),
    "cone_errors": HostBudget("group of the backward cone", syncs=0, launches=64, fixed_syncs=1, fixed_launches=48,
                              why="as reverse, on the cone's rows only, then the error terms and their upward sum"),
}


def partial_derivatives(op: int, g: int, fw_l, fw_h, pl, ph, al, ah, bl, bh):
    """Interval partial derivatives (da, db) of op at operands a, b (node value p)."""
    one = torch.ones_like(al)
    if op == ADD:
        return (one, one), (one, one)
    if op == SUB:
        return (one, one), (-one, -one)
    if op == NEG:
        return (-one, -one), None
    if op == MUL:
        return (bl, bh), (al, ah)
    if op == DIV:
        rl, rh = iv.recip(bl, bh)
        ql, qh = iv.mul(pl, ph, rl, rh)
        return (rl, rh), iv.neg(ql, qh)
    if op == SQRT:
        two_l, two_h = iv.add(pl, ph, pl, ph)
        return iv.recip(two_l, two_h), None
    if op == EXP:
        return (pl, ph), None
    if op == LOG:
        return iv.recip(al, ah), None
    if op == SIN:
        return iv.cos(al, ah), None
    if op == COS:
        return iv.neg(*iv.sin(al, ah)), None
    if op == TAN:
        sl, sh = iv.mul(pl, ph, pl, ph)
        return iv.add(sl, sh, one, one), None
    if op == ATAN:
        sl, sh = iv.mul(al, ah, al, ah)
        return iv.recip(*iv.add(sl, sh, one, one)), None
    if op == SINH:
        return iv.cosh(al, ah), None
    if op == COSH:
        return iv.monotone(torch.sinh, al, ah), None
    if op == TANH:
        sl, sh = iv.mul(pl, ph, pl, ph)
        return iv.sub(one, one, sl, sh), None
    if op == ABS:
        lo = torch.where(al >= 0, 1.0, -1.0)
        hi = torch.where(ah <= 0, -1.0, 1.0)
        return (lo, hi), None
    if op == MAX:
        # Lipschitz: a sub-gradient in [0, 1] for each operand, 1/0 where the order is certain
        a_lo = torch.where(al > bh, 1.0, 0.0)
        a_hi = torch.where(ah < bl, 0.0, 1.0)
        b_lo = torch.where(bl > ah, 1.0, 0.0)
        b_hi = torch.where(bh < al, 0.0, 1.0)
        return (a_lo, a_hi), (b_lo, b_hi)
    raise InputError(f"no derivative for {OP_NAMES[op]}")


def reverse(dag: ExprDAG, groups: Groups, vals: tuple, col_out: torch.Tensor,
            col_box: torch.Tensor | None, cut_level: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Interval adjoints ``(N, C)`` of output ``col_out[c]`` w.r.t. every node, over box ``col_box[c]``.

    ``vals`` = (lo, hi, plo, phi) node enclosures ``(N, B)`` used for the partial derivatives
    (operand ranges lo/hi and the node's own range p).  Accumulation by ``index_add_`` is widened
    by ``fan-in x 2^-52 x sum|contribution|`` so that the sums stay enclosures.
    """
    lo_all, hi_all, plo_all, phi_all = vals
    n = dag.num_nodes
    c = col_out.numel()
    dev = lo_all.device
    adl = torch.zeros(n, c, dtype=torch.float64, device=dev)
    adh = torch.zeros_like(adl)
    slack = torch.zeros_like(adl)  # sum of |contributions| per node, for the widening
    cols = torch.arange(c, device=dev)
    adl[col_out, cols] = 1.0
    adh[col_out, cols] = 1.0

    def gather(t, idx):
        g = t[idx]
        if col_box is None:
            return g.expand(-1, c) if g.shape[1] == 1 else g
        return g[:, col_box]

    fan = groups.fanout.to(dev)
    seen_done = torch.zeros(n, dtype=torch.bool, device=dev)
    # the outputs' backward cone (groups above every output and nodes outside it have zero adjoints, skipped;
    # it stops at the cut: the cut nodes' adjoints are complete there, their errors come from forward_errors)
    for gi, sel in _backward_cone(dag, groups, col_out, cut_level, dev).groups:
        op, idx, a, b = groups.groups[gi]
        if sel is not None:
            idx, a, b = idx[sel], a[sel], b[sel]
        # the adjoint of these nodes is complete: widen it once for the summation round-off
        w = (fan[idx][:, None] * 2.0 ** -52) * slack[idx]
        gl = iv.down(adl[idx] - w)
        gh = iv.up(adh[idx] + w)
        seen_done[idx] = True
        binary = op in (ADD, SUB, MUL, DIV, MAX)
        al, ah = gather(lo_all, a), gather(hi_all, a)
        bl = gather(lo_all, b) if binary else None
        bh = gather(hi_all, b) if binary else None
        pl, ph = gather(plo_all, idx), gather(phi_all, idx)
        da, db = partial_derivatives(op, 0, None, None, pl, ph, al, ah, bl, bh)
        cl, ch = iv.mul(gl, gh, *da)
        adl.index_add_(0, a, cl)
        adh.index_add_(0, a, ch)
        slack.index_add_(0, a, torch.maximum(cl.abs(), ch.abs()))
        if db is not None:
            cl, ch = iv.mul(gl, gh, *db)
            adl.index_add_(0, b, cl)
            adh.index_add_(0, b, ch)
            slack.index_add_(0, b, torch.maximum(cl.abs(), ch.abs()))
    w = (fan[:, None] * 2.0 ** -52) * slack
    leaf = ~seen_done
    adl = torch.where(leaf[:, None], iv.down(adl - w), adl)
    adh = torch.where(leaf[:, None], iv.up(adh + w), adh)
    return adl, adh


def _adjoint_widened(dag, groups, fw: Forward, col_out, col_box, which: str, cut_level=None):
    if which == "W":
        return reverse(dag, groups, (fw.wl, fw.wh, fw.pl, fw.ph), col_out, col_box, cut_level)
    return reverse(dag, groups, (fw.vl, fw.vh, fw.vl, fw.vh), col_out, col_box, cut_level)


def error_terms(dag: ExprDAG, groups: Groups, fw: Forward, col_out: torch.Tensor,
                col_box: torch.Tensor | None, first_order: bool = True, cut_level: int | None = None,
                cut_errors: torch.Tensor | None = None, linear_dep: torch.Tensor | None = None):
    """Per-node error contributions ``(N, C)``: rigorous (all orders) and first-order.

    rigorous_k = (u_k sup|P_k| + eta_k) sup|adj_k over W|;  first_k = u_k sup|V_k| sup|adj_k over V|.
    """
    dev = fw.vl.device
    u = dag.urnd.to(dev)[:, None]
    eta = dag.eta.to(dev)[:, None]

    def col(t):
        if col_box is None:
            return t
        return t[:, col_box]

    if linear_dep is not None:  # linear kernel: exact path-sum adjoints (see linear.linear_adjoints)
        al, ah = linear_adjoints(dag, groups, fw, linear_dep, col_out, partial_derivatives, cut_level)
    else:
        al, ah = _adjoint_widened(dag, groups, fw, col_out, col_box, "W", cut_level)
    rig = iv.up(iv.up(u * col(rounding_magnitude(groups, fw.pl, fw.ph)) + eta) * iv.mag(al, ah))
    rig = torch.where(u + eta > 0, rig, 0.0)
    first = None
    if first_order:
        if linear_dep is not None:
            fv = Forward(fw.vl, fw.vh, fw.vl, fw.vh, fw.vl, fw.vh)
            bl, bh = linear_adjoints(dag, groups, fv, linear_dep, col_out, partial_derivatives, cut_level)
        else:
            bl, bh = _adjoint_widened(dag, groups, fw, col_out, col_box, "V", cut_level)
        first = torch.where(u > 0, u * col(rounding_magnitude(groups, fw.vl, fw.vh)) * iv.mag(bl, bh), 0.0)
    if cut_level is not None:
        # below the cut each node's own rounding is already inside its forward error E; the cut
        # nodes (at or below the cut with a user above it) carry E times their adjoint
        below = (dag.level <= cut_level).to(rig.device)[:, None]
        cut_term = iv.up(iv.mag(al, ah) * col(cut_errors))
        is_out = torch.zeros(rig.shape, dtype=torch.bool, device=rig.device)
        is_out[col_out, torch.arange(col_out.numel(), device=rig.device)] = True
        # an output at or below the cut: its whole error is E
        rig = torch.where(below, torch.where(is_out, col(cut_errors), cut_term), rig)
        if first is not None:
            bmag = iv.mag(bl, bh)
            first = torch.where(below, torch.where(is_out, col(cut_errors), bmag * col(cut_errors)), first)
    return rig, first


@dataclass
class Cone:
    """The nodes whose adjoint w.r.t. some outputs can be non-zero, worked out on the host from the DAG's
    structure (:attr:`.forward.Groups.host`) and handed to the device in one transfer."""

    groups: list[tuple[int, torch.Tensor | None]]
    """``(group, its live rows)`` from the top down, groups with a live node only; ``None``: every row."""
    rows: torch.Tensor
    """``(L,)`` the live nodes, ascending."""


def _cone_walk(groups: Groups, live: np.ndarray, top: int, cut_level: int | None):
    """Walk the groups from the top down, from ``live`` (``(N,)`` or ``(N, C)`` bool: the outputs marked), marking
    the operands of every live row in place; yields ``(group, its rows' liveness)`` for each group with a live row.
    Groups above ``top`` are skipped and the walk stops at ``cut_level``.  A row's liveness is final when its
    group is reached: a node's users sit in groups of higher levels, all visited before."""
    for gi in range(len(groups.groups) - 1, -1, -1):
        if groups.levels[gi] > top:
            continue
        if cut_level is not None and groups.levels[gi] <= cut_level:
            break
        idx, a, b = groups.host[gi]
        lv = live[idx]
        if not lv.any():
            continue
        yield gi, lv
        np.logical_or.at(live, a, lv)  # (an operand shared by several rows: every row counts)
        if groups.groups[gi][0] in (ADD, SUB, MUL, DIV, MAX):
            np.logical_or.at(live, b, lv)


def _backward_cone(dag: ExprDAG, groups: Groups, outs: torch.Tensor, cut_level: int | None, dev) -> Cone:
    """The backward cone of the nodes ``outs``: groups above every output and those at or below ``cut_level``
    left out.  One host read (``outs``) and one transfer, whatever the number of groups."""
    outs_h = np.asarray(outs.tolist(), dtype=np.int64).reshape(-1)  # the one host read
    top = int(groups.node_level[outs_h].max()) if outs_h.size else -1
    live = np.zeros(dag.num_nodes, dtype=bool)
    live[outs_h] = True
    picks = [(gi, None if lv.all() else np.flatnonzero(lv)) for gi, lv in _cone_walk(groups, live, top, cut_level)]
    rows = np.flatnonzero(live)
    parts = [rows] + [s for _, s in picks if s is not None]
    flat = torch.from_numpy(np.concatenate(parts).astype(np.int64)).to(dev)
    pieces = iter(torch.split(flat, [p.size for p in parts]))
    rows_d = next(pieces)
    return Cone([(gi, None if s is None else next(pieces)) for gi, s in picks], rows_d)


def depends_on(groups: Groups, outs: np.ndarray, n: int) -> np.ndarray:
    """``(N, C)`` bool: node ``i`` lies in the backward cone of node ``outs[c]`` (the node itself included),
    from the DAG's structure on the host.  An operation outside an output's cone has a zero adjoint, which the
    widened interval arithmetic carries as the smallest subnormal: not a contribution to that output."""
    outs = np.asarray(outs, dtype=np.int64)
    live = np.zeros((n, len(outs)), dtype=bool)
    live[outs, np.arange(len(outs))] = True
    top = int(groups.node_level[outs].max()) if outs.size else -1
    for _ in _cone_walk(groups, live, top, None):
        pass
    return live


def cone_errors(dag: ExprDAG, groups: Groups, fw: Forward, cols: torch.Tensor, cut_level: int | None,
                cut_err: torch.Tensor | None) -> torch.Tensor:
    """Rigorous error bounds ``(C,)`` of the nodes ``cols`` (each taken as an output, box 0).

    The same bound as ``upward_sum(error_terms(..., cols, ...)[0])`` (interval adjoints over W, the
    nodes at or below ``cut_level`` carrying ``cut_err``), computed on the rows of the columns'
    backward cone only, so that many columns deep in a large DAG cost their cone, not N.
    """
    n, c = dag.num_nodes, cols.numel()
    dev = fw.vl.device
    cone = _backward_cone(dag, groups, cols, cut_level, dev)
    todo = []
    for gi, sel in cone.groups:
        op, idx, a, b = groups.groups[gi]
        todo.append((op, idx, a, b) if sel is None else (op, idx[sel], a[sel], b[sel]))
    rows = cone.rows
    nl = rows.numel()
    pos = torch.full((n,), nl, dtype=torch.int64, device=dev)
    pos[rows] = torch.arange(nl, device=dev)
    adl = torch.zeros(nl + 1, c, dtype=torch.float64, device=dev)
    adh = torch.zeros_like(adl)
    slack = torch.zeros_like(adl)
    adl[pos[cols], torch.arange(c, device=dev)] = 1.0
    adh[pos[cols], torch.arange(c, device=dev)] = 1.0
    done = torch.zeros(nl + 1, dtype=torch.bool, device=dev)
    fan = groups.fanout.to(dev)
    for op, idx, a, b in todo:
        pi = pos[idx]
        w = (fan[idx][:, None] * 2.0 ** -52) * slack[pi]
        gl, gh = iv.down(adl[pi] - w), iv.up(adh[pi] + w)
        done[pi] = True
        binary = op in (ADD, SUB, MUL, DIV, MAX)
        k = idx.numel()
        al, ah = fw.wl[a, :1].expand(k, c), fw.wh[a, :1].expand(k, c)
        bl = fw.wl[b, :1].expand(k, c) if binary else None
        bh = fw.wh[b, :1].expand(k, c) if binary else None
        da, db = partial_derivatives(op, 0, None, None, fw.pl[idx, :1].expand(k, c), fw.ph[idx, :1].expand(k, c), al, ah, bl, bh)
        for child, d in ((a, da), (b, db)):
            if d is None:
                continue
            cl, ch = iv.mul(gl, gh, *d)
            pc = pos[child]
            adl.index_add_(0, pc, cl)
            adh.index_add_(0, pc, ch)
            slack.index_add_(0, pc, torch.maximum(cl.abs(), ch.abs()))
    w = (fan[rows][:, None] * 2.0 ** -52) * slack[:nl]
    leaf = ~done[:nl, None]
    adl = torch.where(leaf, iv.down(adl[:nl] - w), adl[:nl])
    adh = torch.where(leaf, iv.up(adh[:nl] + w), adh[:nl])
    amag = iv.mag(adl, adh)
    u = dag.urnd.to(dev)[rows][:, None]
    eta = dag.eta.to(dev)[rows][:, None]
    m = iv.mag(fw.pl[rows, :1], fw.ph[rows, :1])
    if groups.power2 is not None:
        m = torch.where(groups.power2[rows], below_pow2(m), m)
    rig = torch.where(u + eta > 0, iv.up(iv.up(u * m + eta) * amag), 0.0)
    if cut_level is not None:
        below = (dag.level.to(dev)[rows] <= cut_level)[:, None]
        rig = torch.where(below, iv.up(amag * cut_err[rows, :1]), rig)
    return upward_sum(rig)


def upward_sum(t: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """A sum of non-negative terms rounded up (round-to-nearest sum x (1 + n 2^-52))."""
    n = t.shape[dim]
    s = t.sum(dim)
    return torch.where(s > 0, iv.up(s * (1 + n * 2.0 ** -52)), s)


__all__ = ["cone_errors", "error_terms", "partial_derivatives", "reverse", "upward_sum"]
