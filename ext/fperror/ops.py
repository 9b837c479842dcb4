"""The bound: interval forward pass, interval adjoint (reverse) pass, branch-and-bound over sub-boxes.

Error model (Satire/FPTaylor): every rounded node k computes ``w_k (1 + d_k) + e_k`` where ``w_k`` is
the exact operation on its (computed) operands, ``|d_k| <= u_k`` and ``|e_k| <= eta_k`` (underflow;
0 for + and -, whose subnormal results are exact).  Elementary functions are assumed correctly
rounded, as in both anchors.

Bound.  Round the nodes one at a time (k = 1..N): the output changes by ``G_k(w_k (1+d_k) + e_k) -
G_k(w_k)`` where ``G_k`` is the rest of the computation done exactly.  By the mean-value theorem
that is ``G_k'(xi) (w_k d_k + e_k)``, and every state met on the way lies in the enclosure ``W`` of
"computed or exact" values (``W_k = op(W operands)`` widened by ``(1 +- u_k) +- eta_k``).  Hence,
for all orders in u::

    |f~(x) - f(x)| <= sum_k (u_k sup|w_k| + eta_k) sup|dG/dv_k over W|          (rigorous)

and the first-order part is the same sum over the exact-value enclosures ``V`` (Satire's
``u max sum |df/dv_k v_k|``).  ``second_order`` in the result is the difference: it bounds every
term of order u^2 and higher.  Both sums come from one forward and one reverse pass over the DAG
(all operations at once), in interval arithmetic rounded outward; branch-and-bound over sub-boxes
(evaluated as one batch of columns) tightens the maximum over the input box.

Tensors: forward values are ``(N, B)`` for B boxes; adjoints are ``(N, C)`` for C columns, each
column one (box, output) pair.  Nodes are processed in groups of one (level, op): each group is a
handful of gathers, interval operations and an ``index_add_``, so a pass costs O(N) work in
O(depth x ops) tensor calls.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch

from torchhpc.ext.core.errors import InputError

from . import interval as iv
from .dag import (
    ABS,
    ADD,
    ATAN,
    CONST,
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

_U64 = 2.0 ** -53


@dataclass
class Groups:
    """Nodes grouped by (level, op), in increasing level: ``(op, idx, a, b)`` per group."""

    groups: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]]
    fanout: torch.Tensor
    levels: list[int] = field(default_factory=list)
    nonpos: torch.Tensor | None = None
    # rounding="power2": (N, 1) bool, the nodes whose rounding error is bounded by u 2^floor(log2|w|)
    power2: torch.Tensor | None = None


def below_pow2(x: torch.Tensor) -> torch.Tensor:
    """The largest power of two strictly below x for x > 0 (exact), 0 for 0, inf for inf.

    If |w| <= M then rounding w to nearest errs by at most u times this: |w| < M lies in a binade
    starting at most there, and |w| = M, when M is a power of two, is representable (error 0).
    """
    _, e = torch.frexp(x)  # x = m 2^e, m in [0.5, 1)
    p = torch.ldexp(torch.ones_like(x), (e - 1).to(torch.int32))  # 2^floor(log2 x) <= x
    p = torch.where(p == x, p / 2, p)
    return torch.where(torch.isfinite(x) & (x > 0), p, x)


def _magnitude(groups: Groups, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """sup |w| over [lo, hi]; under rounding="power2" the power of two below it instead (see
    :func:`below_pow2`: round to nearest errs by at most u times that, FPTaylor's improved model)."""
    m = iv.mag(lo, hi)
    if groups.power2 is None:
        return m
    return torch.where(groups.power2, below_pow2(m), m)


def make_groups(dag: ExprDAG) -> Groups:
    """Group the non-leaf nodes by (level, op) (leaves are set directly)."""
    op = dag.op.long()
    inner = op > CONST
    key = dag.level * 32 + op
    key = torch.where(inner, key, torch.full_like(key, -1))
    order = torch.argsort(key, stable=True)
    ks = key[order]
    keep = ks >= 0
    order, ks = order[keep], ks[keep]
    uniq, counts = torch.unique_consecutive(ks, return_counts=True)
    out, levels = [], []
    start = 0
    for k, c in zip(uniq.tolist(), counts.tolist(), strict=True):
        idx = order[start:start + c]
        start += c
        out.append((k % 32, idx, dag.lhs[idx], dag.rhs[idx]))
        levels.append(k // 32)
    fan = torch.zeros(dag.num_nodes, dtype=torch.float64)
    ones = torch.ones_like(dag.lhs, dtype=torch.float64)
    fan.index_add_(0, dag.lhs.clamp(min=0), torch.where(dag.lhs >= 0, ones, 0.0))
    fan.index_add_(0, dag.rhs.clamp(min=0), torch.where(dag.rhs >= 0, ones, 0.0))
    return Groups(out, fan, levels)


# ----------------------------------------------------------------------------- forward


def _apply(op: int, al, ah, bl=None, bh=None, same=None):
    if op == MUL and same is not None and bool(same.any()):
        ml, mh = iv.mul(al, ah, bl, bh)
        sl, sh = iv.square(al, ah)
        s = same[:, None]
        return torch.where(s, sl, ml), torch.where(s, sh, mh)
    if op == ADD:
        return iv.add(al, ah, bl, bh)
    if op == SUB:
        return iv.sub(al, ah, bl, bh)
    if op == MUL:
        return iv.mul(al, ah, bl, bh)
    if op == DIV:
        return iv.div(al, ah, bl, bh)
    if op == NEG:
        return iv.neg(al, ah)
    if op == ABS:
        return iv.absval(al, ah)
    if op == MAX:
        return iv.vmax(al, ah, bl, bh)
    if op == SQRT:
        lo, hi = iv.sqrt(al, ah)
        return torch.where(al < 0, math.nan, lo), hi
    if op == EXP:
        return iv.exp(al, ah)
    if op == LOG:
        return iv.log(al, ah)
    if op == SIN:
        return iv.sin(al, ah)
    if op == COS:
        return iv.cos(al, ah)
    if op == TAN:
        return iv.tan(al, ah)
    if op == ATAN:
        return iv.monotone(torch.atan, al, ah)
    if op == SINH:
        return iv.monotone(torch.sinh, al, ah)
    if op == COSH:
        return iv.cosh(al, ah)
    if op == TANH:
        return iv.monotone(torch.tanh, al, ah)
    raise InputError(f"unsupported operation code {op}")


@dataclass
class Forward:
    """Enclosures ``(N, B)``: V exact values, P exact op on computed operands, W computed-or-exact."""

    vl: torch.Tensor
    vh: torch.Tensor
    pl: torch.Tensor
    ph: torch.Tensor
    wl: torch.Tensor
    wh: torch.Tensor


def nonpositive_subs(dag: ExprDAG) -> torch.Tensor | None:
    """``(N,)`` bool: ``a - m`` where ``m`` is a chain of ``max`` that includes ``a`` (so <= 0 exactly and
    computed, since max is exact): softmax's ``x - max(x)``.  None when there is none."""
    op = dag.op
    cand = ((op == SUB) & (op[dag.rhs.clamp(min=0)] == MAX) & (dag.rhs >= 0)).nonzero().flatten().tolist()
    if not cand:
        return None
    lhs, rhs, ops = dag.lhs.tolist(), dag.rhs.tolist(), op.tolist()
    out = torch.zeros(dag.num_nodes, dtype=torch.bool)
    for k in cand:
        target, stack, seen = lhs[k], [rhs[k]], set()
        while stack:
            m = stack.pop()
            if m == target:
                out[k] = True
                break
            if m in seen or ops[m] != MAX:
                continue
            seen.add(m)
            stack.extend((lhs[m], rhs[m]))
    return out if bool(out.any()) else None


def forward(dag: ExprDAG, groups: Groups, box_lo: torch.Tensor, box_hi: torch.Tensor,
            check: bool = False, nonpos: torch.Tensor | None = None) -> Forward:
    """Interval values of every node over B boxes; ``box_lo/hi`` are ``(n_inputs, B)``.

    With ``check`` a division by an interval containing 0, a log/sqrt of a possibly non-positive
    /negative argument or an overflow raises :class:`InputError` naming the operation's source.
    """
    n, nb = dag.num_nodes, box_lo.shape[1]
    dev = box_lo.device
    vl = dag.box[:, :1].to(dev).expand(n, nb).clone()
    vh = dag.box[:, 1:].to(dev).expand(n, nb).clone()
    vl[dag.input_nodes] = box_lo
    vh[dag.input_nodes] = box_hi
    u = dag.urnd.to(dev)
    eta = dag.eta.to(dev)
    pl, ph = vl.clone(), vh.clone()
    leaf = (dag.op <= CONST).to(dev)
    rl, rh = iv.scale_out(vl, vh, u[:, None], eta[:, None])
    rounded_leaf = (leaf & (u > 0))[:, None]
    wl = torch.where(rounded_leaf, rl, vl)
    wh = torch.where(rounded_leaf, rh, vh)
    for op, idx, a, b in groups.groups:
        binary = op in (ADD, SUB, MUL, DIV, MAX)
        same = (a == b) if op == MUL else None
        lo, hi = _apply(op, vl[a], vh[a], vl[b] if binary else None, vh[b] if binary else None, same)
        plo, phi = _apply(op, wl[a], wh[a], wl[b] if binary else None, wh[b] if binary else None, same)
        if op == SUB and nonpos is not None:
            npm = nonpos[idx][:, None]
            hi = torch.where(npm, hi.clamp(max=0.0), hi)
            phi = torch.where(npm, phi.clamp(max=0.0), phi)
        if check:
            _check(dag, op, idx, a, b, lo, hi, vl, vh)
        vl[idx], vh[idx] = lo, hi
        pl[idx], ph[idx] = plo, phi
        uu = u[idx][:, None]
        slo, shi = iv.scale_out(plo, phi, uu, eta[idx][:, None])
        wl[idx] = torch.where(uu > 0, slo, plo)
        wh[idx] = torch.where(uu > 0, shi, phi)
    return Forward(vl, vh, pl, ph, wl, wh)


def _check(dag, op, idx, a, b, lo, hi, wl, wh) -> None:
    bad = None
    why = ""
    if op == DIV:
        bad = ((wl[b] <= 0) & (wh[b] >= 0)).any(1)
        why = "the denominator's range contains 0"
    elif op == LOG:
        bad = (wl[a] <= 0).any(1)
        why = "log of an argument whose range reaches 0 or below"
    elif op == SQRT:
        bad = (wl[a] < 0).any(1)
        why = "sqrt of an argument whose range goes below 0"
    elif op == TAN:
        bad = torch.isinf(lo).any(1)
        why = "tan of an argument whose range contains a pole"
    if bad is None or not bool(bad.any()):
        bad = (torch.isinf(lo) | torch.isinf(hi) | torch.isnan(lo) | torch.isnan(hi)).any(1)
        why = "the value range overflows binary64"
    if bool(bad.any()):
        k = int(idx[bad.nonzero()[0, 0]])
        raise InputError(f"{dag.name}: {dag.label(k)}: {why} over the input box; "
                         "narrow the input ranges")


# ----------------------------------------------------------------------------- reverse


def _deriv(op: int, g: int, fw_l, fw_h, pl, ph, al, ah, bl, bh):
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
    top = int(dag.level[col_out].max()) if c else -1  # groups above every output have zero adjoints
    # the outputs' backward cone (down to the cut): nodes outside it have a zero adjoint, skipped
    live, _ = _backward_cone(dag, groups, col_out, cut_level, dev)
    for gi in range(len(groups.groups) - 1, -1, -1):
        op, idx, a, b = groups.groups[gi]
        if groups.levels[gi] > top:
            continue
        if cut_level is not None and groups.levels[gi] <= cut_level:
            break  # below the cut: the cut nodes' adjoints are complete, their errors come from forward_errors
        sel = live[idx]
        if not bool(sel.any()):
            continue
        if not bool(sel.all()):
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
        da, db = _deriv(op, 0, None, None, pl, ph, al, ah, bl, bh)
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
        da, db = _deriv(op, 0, None, None, fw.pl[idx], fw.ph[idx], fw.wl[a], fw.wh[a],
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
        from .linear import linear_adjoints
        al, ah = linear_adjoints(dag, groups, fw, linear_dep, col_out, _deriv, cut_level)
    else:
        al, ah = _adjoint_widened(dag, groups, fw, col_out, col_box, "W", cut_level)
    rig = iv.up(iv.up(u * col(_magnitude(groups, fw.pl, fw.ph)) + eta) * iv.mag(al, ah))
    rig = torch.where(u + eta > 0, rig, 0.0)
    first = None
    if first_order:
        if linear_dep is not None:
            from .linear import linear_adjoints
            fv = Forward(fw.vl, fw.vh, fw.vl, fw.vh, fw.vl, fw.vh)
            bl, bh = linear_adjoints(dag, groups, fv, linear_dep, col_out, _deriv, cut_level)
        else:
            bl, bh = _adjoint_widened(dag, groups, fw, col_out, col_box, "V", cut_level)
        first = torch.where(u > 0, u * col(_magnitude(groups, fw.vl, fw.vh)) * iv.mag(bl, bh), 0.0)
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


def _backward_cone(dag: ExprDAG, groups: Groups, outs: torch.Tensor, cut_level: int | None, dev):
    """The nodes whose adjoint w.r.t. ``outs`` can be non-zero: ``(live (N,) bool, [(group, its live rows)])``,
    groups from the top down, those above every output and those at or below ``cut_level`` left out."""
    top = int(dag.level[outs].max()) if outs.numel() else -1
    live = torch.zeros(dag.num_nodes, dtype=torch.bool, device=dev)
    live[outs] = True
    cone = []
    for gi in range(len(groups.groups) - 1, -1, -1):
        op, idx, a, b = groups.groups[gi]
        if groups.levels[gi] > top:
            continue
        if cut_level is not None and groups.levels[gi] <= cut_level:
            break
        lv = live[idx]
        cone.append((gi, lv))
        live[a[lv]] = True
        if op in (ADD, SUB, MUL, DIV, MAX):
            live[b[lv]] = True
    return live, cone


def cone_errors(dag: ExprDAG, groups: Groups, fw: Forward, cols: torch.Tensor, cut_level: int | None,
                cut_err: torch.Tensor | None) -> torch.Tensor:
    """Rigorous error bounds ``(C,)`` of the nodes ``cols`` (each taken as an output, box 0).

    The same bound as ``upward_sum(error_terms(..., cols, ...)[0])`` (interval adjoints over W, the
    nodes at or below ``cut_level`` carrying ``cut_err``), computed on the rows of the columns'
    backward cone only, so that many columns deep in a large DAG cost their cone, not N.
    """
    n, c = dag.num_nodes, cols.numel()
    dev = fw.vl.device
    live, cone = _backward_cone(dag, groups, cols, cut_level, dev)
    todo = []
    for gi, lv in cone:
        op, idx, a, b = groups.groups[gi]
        if bool(lv.any()):
            todo.append((op, idx[lv], a[lv], b[lv]))
    rows = live.nonzero().flatten()
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
        da, db = _deriv(op, 0, None, None, fw.pl[idx, :1].expand(k, c), fw.ph[idx, :1].expand(k, c), al, ah, bl, bh)
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
    from .linear import reseed_above

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
        cur, err = reseed_above(dag, groups, cur, err, c, _deriv)
        prev = c
    if prev is None:
        return None
    return prev, cur, err


def upward_sum(t: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """A sum of non-negative terms rounded up (round-to-nearest sum x (1 + n 2^-52))."""
    n = t.shape[dim]
    s = t.sum(dim)
    return torch.where(s > 0, iv.up(s * (1 + n * 2.0 ** -52)), s)


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

    def as_json(self) -> dict:
        return {"name": self.name, "ops": self.num_ops, "nodes": self.num_nodes, "seconds": self.seconds,
                "peak_mb": self.peak_mb, "device": self.device, "options": self.options,
                "abstraction_cut_level": self.cut_level, "linear_closed_form": self.linear,
                "linear_cut_level": self.linear_cut, "outputs": [o.as_json() for o in self.outputs]}

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


def _culprits(dag: ExprDAG, terms: torch.Tensor, top: int) -> list[dict]:
    total = float(terms.sum())
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


def analyze(dag: ExprDAG, *, device: str = "cpu", bb_iters: int = 60, bb_batch: int = 512,
            bb_tol: float = 1e-3, bb_max_nodes: int = 20_000, bb_max_outputs: int = 16, bb_max_inputs: int = 12,
            time_budget_s: float = 30.0, top: int = 5, first_order: bool = True,
            progress: bool = False, abstraction: str | tuple[int, int] = "auto",
            auto_depth: int = 500, linear: str = "auto", linear_max_work: float = 2e7,
            rounding: str = "standard") -> Analysis:
    """Bound the round-off error of every output of ``dag`` over its input box.

    Small DAGs (<= ``bb_max_nodes`` nodes, <= ``bb_max_outputs`` outputs, <= ``bb_max_inputs`` free
    inputs: bisection does not pay in more dimensions) are refined by branch and
    bound: the ``bb_batch // 2`` boxes with the largest bound are bisected along their widest
    (relative) side each round, boxes whose bound is below the best point value are dropped, until
    the bound is within ``bb_tol`` of a point value, ``bb_iters`` rounds or ``time_budget_s``.
    Larger DAGs get one interval pass over the whole box, all outputs at once (in column chunks).

    Linear kernels (``linear="auto"``, one-pass mode): when every input-dependent operation is
    + - neg or a scaling by a constant and ``nodes x inputs <= linear_max_work``, the value ranges
    are the exact affine ranges (:mod:`.linear`) instead of interval enclosures.

    Abstraction (Satire's): ``(MIN, MAX)`` cuts the DAG once at the level in that window crossed by
    the fewest nodes; the nodes at the cut carry their range and a forward-propagated error bound
    (:func:`forward_errors`) and the adjoint pass runs above the cut only.  ``"auto"`` cuts DAGs
    deeper than ``auto_depth`` levels in the middle third of their depth; ``"off"`` never cuts.

    Rounding model: ``"standard"`` bounds each rounding by ``u |w|``; ``"power2"`` by ``u 2^floor(log2
    |w|)`` (half an ulp of w's binade, up to 2x less; FPTaylor's ``fp-power2-model``), for every
    operation and rounded input (a rounded literal already carries its exact error).  Both are
    rigorous; the sampled-error tests hold for both.

    Raises:
        InputError: a division by a range containing 0, log/sqrt outside its domain, overflow.
    """
    t0 = time.perf_counter()
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    dagd = dag.to(dev)
    groups = make_groups(dagd)
    if rounding not in ("standard", "power2"):
        raise InputError(f"rounding: expected standard or power2, got {rounding!r}")
    if rounding == "power2":
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
        from .linear import dependence
        fallback_dep = dependence(dagd, groups)
    else:
        use_bb_ok = True
    n_out = len(dag.outputs)
    n_free = int(_free_inputs(dag).sum()) if dag.input_nodes.numel() else 0
    bb_fits = (dag.num_nodes <= bb_max_nodes and n_out <= bb_max_outputs and 0 < n_free <= bb_max_inputs
               and linear != "on")
    linear_used = False
    linear_dep = fallback_dep
    if linear != "off" and rigorous and not (use_bb_ok and bb_fits):
        from .linear import dependence, is_linear, linear_enclosures
        dep = dependence(dagd, groups)
        if (linear == "on" or dag.num_nodes * max(1, dag.input_nodes.numel()) <= linear_max_work) \
                and is_linear(dagd, groups, dep):
            fw0 = linear_enclosures(dagd, groups, fw0, dep, _deriv) if rigorous else fw0
            rigorous = bool(torch.isfinite(fw0.wl).all() & torch.isfinite(fw0.wh).all())
            linear_used = True
            linear_dep = dep
    depth = int(dag.level.max()) if dag.num_nodes else 0
    window = None
    if abstraction == "auto" and depth > auto_depth:
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
            share = max(0.0, t0 + time_budget_s - now) / (n_out - k)
            results.append(_branch_and_bound(dagd, groups, k, lo0, hi0, fw0, bb_iters, bb_batch, bb_tol,
                                             now + share, top, first_order))
    else:
        chunk = max(1, min(n_out, 4_000_000 // max(1, dag.num_nodes)))
        bar = None
        if progress:
            from tqdm import tqdm
            bar = tqdm(total=n_out, desc="fperror outputs", unit="out")
        lin_cut = None
        for s in range(0, n_out, chunk):
            outs = dagd.output_nodes[s:s + chunk]
            rig, first = error_terms(dagd, groups, fw0, outs, None, first_order, cut_level, cut_errors, linear_dep)
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
            for j in range(outs.numel()):
                o = int(outs[j])
                rng = (float(fw0.vl[o, 0]), float(fw0.vh[o, 0]))
                results.append(_make_output(dag, s + j, float(tot[j]), float(ftot[j]), rng, rig[:, j], 1,
                                            {}, top))
            if bar is not None:
                bar.update(outs.numel())
        if bar is not None:
            bar.close()
    for r in results:
        r.rigorous = rigorous
    peak = (torch.cuda.max_memory_allocated(dev) / 2 ** 20) if dev.type == "cuda" else _rss_peak_mb()
    res = Analysis(dag.name, results, dag.num_ops, dag.num_nodes, time.perf_counter() - t0, peak, str(dev))
    res.cut_level = cut_level
    res.linear = linear_used
    res.linear_cut = lin_cut[0] if (not use_bb and lin_cut) else None
    return res


def _rss_peak_mb() -> float:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _make_output(dag, k, abs_b, first, rng, terms, boxes, worst, top, lower=math.nan) -> OutputBound:
    lo, hi = rng
    mn = 0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))
    rel = abs_b / mn if mn > 0 else None
    second = max(abs_b - first, 0.0) if first == first else math.nan
    return OutputBound(dag.outputs[k], abs_b, rel, first, second, rng, _culprits(dag, terms.cpu(), top), boxes,
                       worst, lower)


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


def _branch_and_bound(dag, groups, k, lo0, hi0, fw0, iters, batch, tol, deadline, top, first_order):
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
    first_ub = float(pool.first.max()) if first_order else math.nan
    return _make_output(dag, k, float(pool.ub[i]), first_ub, pool.range(), pool.terms[:, i], evaluated, worst_pt,
                        top, best_lb)
