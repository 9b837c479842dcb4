"""Closed-form value ranges for linear kernels (sums, FFT butterflies, constant-coefficient stencils).

When every operation that depends on an input is ``+``, ``-``, negation, or a multiplication or
division by a constant-valued node, each node is an affine function ``v_k = c0_k + sum_j c_kj x_j``
of the inputs, and its exact range over the box is ``c0_k + sum_j c_kj [lo_j, hi_j]`` (each input
appears once).  Interval arithmetic on the DAG instead counts an input once per path, and on a
long stencil or FDTD recurrence the enclosure doubles every few steps; the affine form does not.

The coefficients are computed as intervals (outward rounded) by one forward sweep per chunk of
input columns (``(N, chunk)`` tensors), so memory is O(N * chunk) and time O(N * inputs).  The
enclosures of computed values are then ``W_k = V_k +- E_k`` with ``E_k`` the forward error bound
(mean-value theorem over W), which keeps them as tight as V.
"""

from __future__ import annotations

from fractions import Fraction

import torch

from . import interval as iv
from .dag import ADD, CONST, DIV, MAX, MUL, NEG, SUB, ExprDAG
from .forward import Forward


def dependence(dag: ExprDAG, groups) -> torch.Tensor:
    """``(N,)`` bool: the node depends on some input."""
    dep = torch.zeros(dag.num_nodes, dtype=torch.bool, device=dag.op.device)
    dep[dag.input_nodes] = True
    for _op, idx, a, b in groups.groups:
        d = dep[a]
        if b.numel() and bool((b >= 0).all()):
            d = d | dep[b]
        dep[idx] = d
    return dep


def is_linear(dag: ExprDAG, groups, dep: torch.Tensor) -> bool:
    """Every input-dependent operation is + - neg, or * / by a constant-valued operand (and some are)."""
    if not bool(dep.any()):
        return False
    for op, idx, a, b in groups.groups:
        d = dep[idx]
        if not bool(d.any()):
            continue
        if op in (ADD, SUB, NEG):
            continue
        if op == MUL and not bool((dep[a] & dep[b]).any()):
            continue
        if op == DIV and not bool(dep[b].any()):
            continue
        return False
    return True


def _sum_cols(lo: torch.Tensor, hi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row sums of an interval matrix, rounded outward (the float sum's error <= n 2^-53 sum|.|)."""
    n = lo.shape[1]
    slack = (lo.abs().sum(1) + hi.abs().sum(1)) * (n * 2.0 ** -52)
    return iv.down(lo.sum(1) - slack), iv.up(hi.sum(1) + slack)


_DD = 2.0 ** -104  # a generous relative error bound of one double-double operation (4 x 2^-106)
_SPLIT = 134217729.0  # 2^27 + 1, Dekker's splitter


def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(x):
    c = _SPLIT * x
    h = c - (c - x)
    return h, x - h


def _two_prod(a, b):
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


class _DDI:
    """Double-double midpoint + radius intervals: the exact value is in ``[h + l - r, h + l + r]``."""

    def __init__(self, h, l, r):
        self.h, self.l, self.r = h, l, r

    def add(self, o, sign: float = 1.0):
        s, e = _two_sum(self.h, sign * o.h)
        e = e + (self.l + sign * o.l)
        h, l = _two_sum(s, e)
        mag = self.h.abs() + o.h.abs()
        return _DDI(h, l, iv.up(iv.up(self.r + o.r) + mag * _DD))

    def scale(self, k):
        """times the (broadcast) double-double interval k."""
        p, e = _two_prod(self.h, k.h)
        e = e + (self.h * k.l + self.l * k.h)
        h, l = _two_sum(p, e)
        ah, kh = self.h.abs() + self.r, k.h.abs() + k.r
        r = iv.up(iv.up(ah * k.r) + iv.up(kh * self.r))
        return _DDI(h, l, iv.up(r + iv.up(ah * kh) * _DD))

    def where(self, mask, other):
        return _DDI(torch.where(mask, self.h, other.h), torch.where(mask, self.l, other.l),
                    torch.where(mask, self.r, other.r))


def _const_dd(dag: ExprDAG, vl, vh, dev):
    """Every node's value as a double-double interval: exact literals to 106 bits, other
    constant-valued nodes from their V enclosure (midpoint and radius)."""
    mid = (vl + vh) / 2
    h = mid.clone()
    l = torch.zeros_like(mid)
    r = iv.up(torch.maximum(iv.up(vh - mid), iv.up(mid - vl)))
    if dag.const_values:
        idx = torch.tensor(list(dag.const_values.keys()), dtype=torch.int64)
        vals = list(dag.const_values.values())
        hs = [float(c) for c in vals]
        ls = [float(c - Fraction(x)) for c, x in zip(vals, hs, strict=True)]
        h[idx, 0] = torch.tensor(hs, dtype=torch.float64, device=dev)
        l[idx, 0] = torch.tensor(ls, dtype=torch.float64, device=dev)
        r[idx, 0] = torch.tensor([abs(x) * 2.0 ** -106 for x in hs], dtype=torch.float64, device=dev)
    return h, l, r


def affine_ranges(dag: ExprDAG, groups, fw, dep: torch.Tensor, cone_chunk: int = 64):
    """Exact (outward-rounded) value ranges ``(lo, hi)`` of shape ``(N, 1)`` for a linear DAG.

    The coefficients are double-double midpoint-radius intervals: on a stable recurrence of t
    steps the radius grows like 2^t x 2^-104 (in plain interval arithmetic 2^t x 2^-53).  Inputs are
    taken ``cone_chunk`` at a time and only the nodes in their light cone (the nodes that depend on
    them) get coefficient rows, so a stencil costs O(N x cone width), not O(N x inputs).
    """
    n = dag.num_nodes
    dev = fw.vl.device
    vl, vh = fw.vl[:, :1], fw.vh[:, :1]
    box_lo, box_hi = vl[dag.input_nodes, 0], vh[dag.input_nodes, 0]
    kh, kl, kr = _const_dd(dag, vl, vh, dev)

    def const_of(nodes):
        return _DDI(kh[nodes], kl[nodes], kr[nodes])

    def recip_of(nodes):
        # 1 / constant: a double-double Newton step from the double reciprocal, radius from V
        rl, rh = iv.recip(vl[nodes], vh[nodes])
        mid = (rl + rh) / 2
        return _DDI(mid, torch.zeros_like(mid), iv.up(torch.maximum(iv.up(rh - mid), iv.up(mid - rl))))

    def coefficient_step(op, c: _DDI, ra, rb, a, b) -> _DDI:
        """One group's affine coefficients from its operands' rows ``ra``/``rb`` of ``c`` (nodes ``a``/``b``)."""
        ca = _DDI(c.h[ra], c.l[ra], c.r[ra])
        if op in (ADD, SUB):
            return ca.add(_DDI(c.h[rb], c.l[rb], c.r[rb]), 1.0 if op == ADD else -1.0)
        if op == NEG:
            return _DDI(-ca.h, -ca.l, ca.r)
        if op == MUL:  # exactly one operand depends on the inputs; the other is a constant
            da = dep[a][:, None]
            row = ca.where(da, _DDI(c.h[rb], c.l[rb], c.r[rb]))
            k = const_of(b).where(da, const_of(a))
            return row.scale(_DDI(k.h.expand_as(row.h), k.l.expand_as(row.h), k.r.expand_as(row.h)))
        if op == DIV:
            k = recip_of(b)
            return ca.scale(_DDI(k.h.expand_as(ca.h), k.l.expand_as(ca.h), k.r.expand_as(ca.h)))
        z = torch.zeros_like(ca.h)
        return _DDI(z, z, z)

    def run(c: _DDI, with_const: bool) -> _DDI:
        for op, idx, a, b in groups.groups:
            d = dep[idx][:, None]
            res = coefficient_step(op, c, a, b, a, b)
            if with_const:
                res = res.where(d, const_of(idx))
            else:
                z = torch.zeros_like(res.h)
                res = res.where(d, _DDI(z, z, z))
            c.h[idx], c.l[idx], c.r[idx] = res.h, res.l, res.r
        return c

    c0 = _DDI(torch.where(dep[:, None], 0.0, kh), torch.where(dep[:, None], 0.0, kl),
              torch.where(dep[:, None], 0.0, kr))
    c0 = run(c0, True)
    acc_l = iv.down(c0.h + c0.l - c0.r)[:, 0]
    acc_h = iv.up(c0.h + c0.l + c0.r)[:, 0]
    acc_l, acc_h = iv.down(acc_l - acc_l.abs() * 2.0 ** -52), iv.up(acc_h + acc_h.abs() * 2.0 ** -52)
    m = dag.input_nodes.numel()
    chunk = max(1, min(m, cone_chunk))
    for j0 in range(0, m, chunk):
        j1 = min(m, j0 + chunk)
        # the light cone of these inputs: only its nodes have non-zero coefficients
        cone = torch.zeros(n, dtype=torch.bool, device=dev)
        cone[dag.input_nodes[j0:j1]] = True
        for op, idx, a, b in groups.groups:
            cone[idx] = cone[a] | cone[b] if op in (ADD, SUB, MUL, DIV, MAX) else cone[a]
        cidx = cone.nonzero().flatten()
        nc = cidx.numel()
        pos = torch.full((n,), nc, dtype=torch.int64, device=dev)  # row nc: the zero row
        pos[cidx] = torch.arange(nc, device=dev)
        h = torch.zeros(nc + 1, j1 - j0, dtype=torch.float64, device=dev)
        h[pos[dag.input_nodes[j0:j1]], torch.arange(j1 - j0, device=dev)] = 1.0
        c = _DDI(h, torch.zeros_like(h), torch.zeros_like(h))
        for op, idx, a, b in groups.groups:
            sel = cone[idx]
            if not bool(sel.any()):
                continue
            gi, ga, gb = idx[sel], a[sel], b[sel]
            li, la, lb = pos[gi], pos[ga], pos[gb.clamp(min=0)]
            d = dep[gi][:, None]
            res = coefficient_step(op, c, la, lb, ga, gb)
            z0 = torch.zeros_like(res.h)
            res = res.where(d, _DDI(z0, z0, z0))
            c.h[li], c.l[li], c.r[li] = res.h, res.l, res.r
        # the coefficient as a double interval: h + l rounded, widened by r and one ulp
        cm = c.h[:nc] + c.l[:nc]
        rr = c.r[:nc]
        cl, ch = iv.down(iv.down(cm - rr) - cm.abs() * 2.0 ** -52), iv.up(iv.up(cm + rr) + cm.abs() * 2.0 ** -52)
        pl, ph = iv.mul(cl, ch, box_lo[j0:j1][None].expand_as(cl), box_hi[j0:j1][None].expand_as(ch))
        sl, sh = _sum_cols(pl, ph)
        add_l, add_h = iv.add(acc_l[cidx], acc_h[cidx], sl, sh)
        acc_l[cidx], acc_h[cidx] = add_l, add_h
    lo = torch.maximum(acc_l, vl[:, 0])
    hi = torch.minimum(acc_h, vh[:, 0])
    return lo[:, None], hi[:, None]


def linear_enclosures(dag: ExprDAG, groups, fw, dep: torch.Tensor, deriv):
    """Tight (V, P, W) enclosures for a linear DAG: V from :func:`affine_ranges`, W = V +- E."""
    vl, vh = affine_ranges(dag, groups, fw, dep)
    u = dag.urnd.to(vl.device)[:, None]
    eta = dag.eta.to(vl.device)[:, None]
    e = torch.where(u + eta > 0, iv.up(u * iv.mag(vl, vh) + eta), 0.0)
    wl, wh = iv.scale_out(vl, vh, torch.zeros_like(u), e)
    wl = torch.where((dag.op <= CONST)[:, None], torch.where(u > 0, iv.down(vl - e), vl), wl)
    wh = torch.where((dag.op <= CONST)[:, None], torch.where(u > 0, iv.up(vh + e), vh), wh)
    pl, ph = vl.clone(), vh.clone()
    for op, idx, a, b in groups.groups:
        _propagate_group(op, idx, a, b, vl, vh, wl, wh, pl, ph, e, u, eta, deriv)
    return Forward(vl, vh, pl, ph, wl, wh)


def _propagate_group(op, idx, a, b, vl, vh, wl, wh, pl, ph, e, u, eta, deriv) -> None:
    """One level group's forward error step, in place: E of ``idx`` from its operands' E (through the
    derivative over the computed operands' ranges) plus its own rounding; then its P and W enclosures."""
    binary = op in (ADD, SUB, MUL, DIV, MAX)
    # the node's own range over computed operands, for the derivative of / (q = a / b)
    ql, qh = (iv.div(wl[a], wh[a], wl[b], wh[b]) if op == DIV else (vl[idx], vh[idx]))
    da, db = deriv(op, 0, None, None, ql, qh, wl[a], wh[a], wl[b] if binary else None,
                   wh[b] if binary else None)
    prop = iv.up(iv.mag(*da) * e[a])
    if db is not None:
        prop = iv.up(prop + iv.up(iv.mag(*db) * e[b]))
    p_lo, p_hi = iv.down(vl[idx] - prop), iv.up(vh[idx] + prop)
    uu, ee = u[idx], eta[idx]
    own = torch.where(uu + ee > 0, iv.up(uu * iv.mag(p_lo, p_hi) + ee), 0.0)
    ek = iv.up(prop + own)
    e[idx] = ek
    pl[idx], ph[idx] = p_lo, p_hi
    wl[idx], wh[idx] = iv.down(vl[idx] - ek), iv.up(vh[idx] + ek)


def linear_adjoints(dag: ExprDAG, groups, fw, dep: torch.Tensor, col_out: torch.Tensor, deriv,
                    cut_level: int | None = None):
    """Adjoints ``(lo, hi)`` of shape ``(N, C)`` for a linear DAG, in double-double midpoint-radius form.

    With ``cut_level`` the pass stops at the cut (as :func:`.adjoint.reverse` does): nodes at or below it
    get only what flows into them from above.

    Through input-dependent nodes the partial derivatives are the constants (+-1, a literal to 106
    bits), so the adjoints are exact path sums whose radius grows like 2^t x 2^-104 instead of the
    2^t x 2^-53 of plain interval arithmetic; derivatives that depend on the inputs (with respect to
    a constant operand, or inside constant sub-expressions) are W-interval enclosures.
    """
    n, c = dag.num_nodes, col_out.numel()
    dev = fw.vl.device
    vl, vh = fw.vl[:, :1], fw.vh[:, :1]
    kh, kl, kr = _const_dd(dag, vl, vh, dev)
    h = torch.zeros(n, c, dtype=torch.float64, device=dev)
    lo_part = torch.zeros_like(h)
    r = torch.zeros_like(h)
    h[col_out, torch.arange(c, device=dev)] = 1.0

    def dd_of_interval(lo, hi):
        mid = (lo + hi) / 2
        rad = iv.up(torch.maximum(iv.up(hi - mid), iv.up(mid - lo)))
        return _DDI(mid, torch.zeros_like(mid), rad)

    # the backward cone of the outputs: the other nodes have a zero adjoint and are skipped
    live = torch.zeros(n, dtype=torch.bool, device=dev)
    live[col_out] = True
    stop = -1
    if cut_level is not None:
        stop = max((gi for gi, lev in enumerate(groups.levels) if lev <= cut_level), default=-1)
    for gi in range(len(groups.groups) - 1, stop, -1):
        op, idx, a, b = groups.groups[gi]
        lv = live[idx]
        live[a[lv]] = True
        if op in (ADD, SUB, MUL, DIV, MAX):
            live[b[lv]] = True
    for gi in range(len(groups.groups) - 1, stop, -1):
        op, idx, a, b = groups.groups[gi]
        sel = live[idx]
        if not bool(sel.any()):
            continue
        if not bool(sel.all()):
            idx, a, b = idx[sel], a[sel], b[sel]
        g = _DDI(h[idx], lo_part[idx], r[idx])
        binary = op in (ADD, SUB, MUL, DIV, MAX)
        if op in (ADD, SUB, NEG):
            one = torch.ones_like(g.h[:, :1])
            z = torch.zeros_like(one)
            da = _DDI(-one if op == NEG else one, z, z)
            db = _DDI(one if op == ADD else -one, z, z) if binary else None
        elif op == MUL:
            # d/da = b: the constant's double-double value when b is constant-valued, else W_b
            kb = _DDI(kh[b], kl[b], kr[b]).where(~dep[b][:, None], dd_of_interval(fw.wl[b], fw.wh[b]))
            ka = _DDI(kh[a], kl[a], kr[a]).where(~dep[a][:, None], dd_of_interval(fw.wl[a], fw.wh[a]))
            da, db = kb, ka
        else:
            d1, d2 = deriv(op, 0, None, None, fw.pl[idx], fw.ph[idx], fw.wl[a], fw.wh[a],
                           fw.wl[b] if binary else None, fw.wh[b] if binary else None)
            da = dd_of_interval(*d1)
            db = dd_of_interval(*d2) if d2 is not None else None
        for child, d in ((a, da), (b, db)):
            if d is None:
                continue
            contrib = g.scale(_DDI(d.h.expand_as(g.h), d.l.expand_as(g.h), d.r.expand_as(g.h)))
            # accumulate in double-double: a child may appear several times in a group, so add in
            # rounds where each child appears once (its k-th occurrence in round k)
            order = torch.argsort(child, stable=True)
            cs = child[order]
            pos = torch.arange(cs.numel(), device=dev)
            first = torch.ones_like(cs, dtype=torch.bool)
            first[1:] = cs[1:] != cs[:-1]
            start = torch.cummax(torch.where(first, pos, 0), 0).values
            rank = pos - start
            for rk in range(int(rank.max()) + 1 if rank.numel() else 0):
                sel = order[rank == rk]
                ch = child[sel]
                cur = _DDI(h[ch], lo_part[ch], r[ch])
                tot = cur.add(_DDI(contrib.h[sel], contrib.l[sel], contrib.r[sel]))
                h[ch], lo_part[ch], r[ch] = tot.h, tot.l, tot.r
    cm = h + lo_part
    return iv.down(iv.down(cm - r) - cm.abs() * 2.0 ** -52), iv.up(iv.up(cm + r) + cm.abs() * 2.0 ** -52)


def reseed_above(dag: ExprDAG, groups, fw, err: torch.Tensor, cut_level: int, deriv):
    """(V, P, W) enclosures with the forward error propagation restarted at the cut.

    ``err`` ``(N, 1)``: a bound on |computed - exact| for every node at or below ``cut_level`` (the
    cut nodes' from the signed path sums below the cut, see :func:`.analysis.analyze`); the nodes above the
    cut get theirs by the same forward propagation as :func:`linear_enclosures`, starting there, so
    the absolute-path-sum growth spans only the part above the cut.
    """
    vl, vh = fw.vl, fw.vh
    u = dag.urnd.to(vl.device)[:, None]
    eta = dag.eta.to(vl.device)[:, None]
    e = err.clone()
    wl, wh, pl, ph = fw.wl.clone(), fw.wh.clone(), fw.pl.clone(), fw.ph.clone()
    low = (dag.level <= cut_level).to(vl.device)[:, None]
    wl = torch.where(low, torch.maximum(wl, iv.down(vl - e)), wl)
    wh = torch.where(low, torch.minimum(wh, iv.up(vh + e)), wh)
    for gi, (op, idx, a, b) in enumerate(groups.groups):
        if groups.levels[gi] <= cut_level:
            continue
        _propagate_group(op, idx, a, b, vl, vh, wl, wh, pl, ph, e, u, eta, deriv)
    return Forward(vl, vh, pl, ph, wl, wh), e
