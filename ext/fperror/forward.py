"""The forward pass: interval enclosures of every node of a DAG over a batch of input boxes.

Nodes are processed in groups of one (level, op) (:func:`make_groups`): each group is a handful of
gathers and interval operations (:mod:`.interval`, rounded outward), so a pass costs O(N) work in
O(depth x ops) tensor calls.  Values are ``(N, B)`` for B boxes.  Three enclosures per node
(:class:`Forward`): ``V`` the exact value, ``P`` the exact operation on computed operands and ``W``
"computed or exact" (``P`` widened by the node's rounding, ``(1 +- u_k) +- eta_k``): the mean-value
bound of :mod:`.ops` takes its suprema over ``W``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
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
    MAX_FINITE,
    MUL,
    NEG,
    SIN,
    SINH,
    SQRT,
    SUB,
    TAN,
    TANH,
    ExprDAG,
)


@dataclass
class Groups:
    """Nodes grouped by (level, op), in increasing level: ``(op, idx, a, b)`` per group."""

    groups: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]]
    fanout: torch.Tensor
    levels: list[int] = field(default_factory=list)
    host: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)
    """``(idx, a, b)`` of each group as NumPy arrays: the DAG's structure on the host, read once, so that the
    backward cones of the reverse passes are worked out there (no host sync a group on CUDA)."""
    node_level: np.ndarray | None = None
    """``(N,)`` each node's level, on the host."""
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


def rounding_magnitude(groups: Groups, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
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
    out, levels, host = [], [], []
    order_h, lhs_h, rhs_h = (t.cpu().numpy() for t in (order, dag.lhs, dag.rhs))
    start = 0
    for k, c in zip(uniq.tolist(), counts.tolist(), strict=True):
        idx = order[start:start + c]
        idx_h = order_h[start:start + c]
        start += c
        out.append((k % 32, idx, dag.lhs[idx], dag.rhs[idx]))
        host.append((idx_h, lhs_h[idx_h], rhs_h[idx_h]))
        levels.append(k // 32)
    fan = torch.zeros(dag.num_nodes, dtype=torch.float64, device=dag.lhs.device)  # dag may be on CUDA
    ones = torch.ones_like(dag.lhs, dtype=torch.float64)
    fan.index_add_(0, dag.lhs.clamp(min=0), torch.where(dag.lhs >= 0, ones, 0.0))
    fan.index_add_(0, dag.rhs.clamp(min=0), torch.where(dag.rhs >= 0, ones, 0.0))
    return Groups(out, fan, levels, host, dag.level.cpu().numpy())


# ----------------------------------------------------------------------------- forward


def _apply(op: int, al, ah, bl=None, bh=None, same=None):
    # same: a MUL group's rows whose two operands are one node (x*x: a square), given where there is one
    if op == MUL and same is not None:
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
    /negative argument or an overflow raises :class:`InputError` naming the operation's source (the first
    such operation in group order).  The checks of every group are kept on the device and read once after the
    pass (on CUDA: one host sync for the whole pass, not two or three a group).
    """
    if check:
        check_input_formats(dag)
    n, nb = dag.num_nodes, box_lo.shape[1]
    dev = box_lo.device
    checks = _Checks(dag, len(groups.groups), dev) if check else None
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
    for gi, ((op, idx, a, b), (_, a_h, b_h)) in enumerate(zip(groups.groups, groups.host, strict=True)):
        binary = op in (ADD, SUB, MUL, DIV, MAX)
        same = (a == b) if op == MUL and bool((a_h == b_h).any()) else None  # (asked of the host's copy)
        lo, hi = _apply(op, vl[a], vh[a], vl[b] if binary else None, vh[b] if binary else None, same)
        plo, phi = _apply(op, wl[a], wh[a], wl[b] if binary else None, wh[b] if binary else None, same)
        if op == SUB and nonpos is not None:
            npm = nonpos[idx][:, None]
            hi = torch.where(npm, hi.clamp(max=0.0), hi)
            phi = torch.where(npm, phi.clamp(max=0.0), phi)
        if checks is not None:
            checks.note(gi, op, idx, a, b, lo, hi, vl, vh)
        vl[idx], vh[idx] = lo, hi
        pl[idx], ph[idx] = plo, phi
        uu = u[idx][:, None]
        slo, shi = iv.scale_out(plo, phi, uu, eta[idx][:, None])
        wl[idx] = torch.where(uu > 0, slo, plo)
        wh[idx] = torch.where(uu > 0, shi, phi)
    if checks is not None:
        checks.raise_first(groups)
    return Forward(vl, vh, pl, ph, wl, wh)


_DOMAIN = {DIV: "the denominator's range contains 0", LOG: "log of an argument whose range reaches 0 or below",
           SQRT: "sqrt of an argument whose range goes below 0", TAN: "tan of an argument whose range contains a pole"}
"""What the domain check of each operation that has one finds (:class:`_Checks`, kind 0)."""


class _Checks:
    """The checked forward pass's findings, kept on the device: per group, whether each kind of fault occurs
    (0: the operation's domain, :data:`_DOMAIN`; 1: a value range that overflows binary64; 2: one past the
    largest finite number of the node's declared format), and per node, where.  A group reports its first
    kind that occurs, as one check after the other would; :meth:`raise_first` reads them once, after the pass,
    and raises for the first group in order that found one."""

    def __init__(self, dag, n_groups: int, dev) -> None:
        self.dag = dag
        self.found = torch.zeros(n_groups, 3, dtype=torch.bool, device=dev)
        self.where = torch.zeros(3, dag.num_nodes, dtype=torch.bool, device=dev)
        limit = _format_limits(dag)
        self.limit = limit.to(dev) if limit is not None else None

    def note(self, gi: int, op: int, idx, a, b, lo, hi, vl, vh) -> None:
        """Record group ``gi``'s faults (``vl``/``vh``: the values before the group's results are written)."""
        kinds = [None, (torch.isinf(lo) | torch.isinf(hi) | torch.isnan(lo) | torch.isnan(hi)).any(1), None]
        if op == DIV:
            kinds[0] = ((vl[b] <= 0) & (vh[b] >= 0)).any(1)
        elif op == LOG:
            kinds[0] = (vl[a] <= 0).any(1)
        elif op == SQRT:
            kinds[0] = (vl[a] < 0).any(1)
        elif op == TAN:
            kinds[0] = torch.isinf(lo).any(1)
        if self.limit is not None:
            kinds[2] = (torch.maximum(lo.abs(), hi.abs()) > self.limit[idx][:, None]).any(1)
        for kind, rows in enumerate(kinds):
            if rows is not None:
                self.where[kind, idx] = rows
                self.found[gi, kind] = rows.any()

    def raise_first(self, groups: Groups) -> None:
        """Raise :class:`InputError` for the first group that found a fault (one host read when none did)."""
        if not bool(self.found.any()):
            return
        found = self.found.cpu().numpy()
        gi = int(np.flatnonzero(found.any(1))[0])
        kind = int(np.flatnonzero(found[gi])[0])
        op, idx_h = groups.groups[gi][0], groups.host[gi][0]
        k = int(idx_h[np.flatnonzero(self.where[kind].cpu().numpy()[idx_h])[0]])
        dag = self.dag
        if kind == 0:
            why = _DOMAIN[op]
        elif kind == 1:
            why = "the value range overflows binary64"
        else:
            b = int(dag.fmt[k])
            why = f"the value range exceeds binary{b}'s largest finite number ({MAX_FINITE[b]:.8g}): it may overflow to inf"
        raise InputError(f"{dag.name}: {dag.label(k)}: {why} over the input box; narrow the input ranges")


def _format_limits(dag) -> torch.Tensor | None:
    """``(N,)`` the largest finite number of the format each node is held in (binary16's 65504, binary32's
    3.4e38; inf for binary64 or no declared format): a value past it would be inf there, which no bound
    covers.  ``None`` when the DAG declares no formats."""
    if dag.fmt is None:
        return None
    fmt = dag.fmt.long()
    table = torch.tensor([MAX_FINITE.get(b, math.inf) for b in range(129)], dtype=torch.float64, device=fmt.device)
    return torch.where(fmt > 0, table[fmt.clamp(0, 128)], math.inf)


def check_input_formats(dag) -> None:
    """Refuse an input whose declared range does not fit the format it is declared in (``x fl16 : (0, 1e5)``).

    Raises:
        InputError: naming the input.
    """
    nodes = dag.input_nodes
    if dag.fmt is None or not nodes.numel():
        return
    box = dag.box[nodes]
    bad = (box.abs().amax(1) > _format_limits(dag)[nodes])
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        b = int(dag.fmt[nodes[i]])
        raise InputError(f"{dag.name}: input {dag.input_names[i]}: its range [{float(box[i, 0]):g}, "
                         f"{float(box[i, 1]):g}] does not fit binary{b} (largest finite {MAX_FINITE[b]:.8g})")


__all__ = ["Forward", "Groups", "below_pow2", "check_input_formats", "forward", "make_groups", "nonpositive_subs", "rounding_magnitude"]
