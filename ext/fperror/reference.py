"""The independent check of a bound: run the computation in its working precision and in high
precision (mpmath, 200 bits) at random and adversarial points of the box, and measure the error.

The working-precision run follows the error model's assumptions literally: + - * / sqrt in binary64
are IEEE operations (torch float64 on the CPU); a binary32/binary16 node is computed in binary64 and
rounded once to its format (for + - * / sqrt that double rounding is innocuous, 53 >= 2 * 24 + 2);
elementary functions use torch's float64 implementations.  The high-precision run evaluates the
same DAG with every rounding removed (the exact real computation, to 200 bits).  An operation the
program does in real arithmetic (FPTaylor's ``no_rnd`` and plain ``=``) is still run in binary64 by
the working-precision run, so its sampled error is not the program's (it is 0 there).
"""

from __future__ import annotations

import itertools
import math

import mpmath
import torch

from .dag import (
    ABS,
    ADD,
    ATAN,
    CONST,
    COS,
    COSH,
    DIV,
    EXP,
    INPUT,
    LOG,
    MAX,
    MUL,
    NEG,
    SIN,
    SINH,
    SQRT,
    SUB,
    TAN,
    TANH,
    ExprDAG,
    round_to_bits,
)

_TORCH_FN = {SQRT: torch.sqrt, EXP: torch.exp, LOG: torch.log, SIN: torch.sin, COS: torch.cos, TAN: torch.tan,
             ATAN: torch.atan, SINH: torch.sinh, COSH: torch.cosh, TANH: torch.tanh, ABS: torch.abs}
_MP_FN = {SQRT: mpmath.sqrt, EXP: mpmath.exp, LOG: mpmath.log, SIN: mpmath.sin, COS: mpmath.cos, TAN: mpmath.tan,
          ATAN: mpmath.atan, SINH: mpmath.sinh, COSH: mpmath.cosh, TANH: mpmath.tanh, ABS: abs}
_ROUND = {2.0 ** -24: torch.float32, 2.0 ** -11: torch.float16}


def _round(x: torch.Tensor, u: float) -> torch.Tensor:
    dt = _ROUND.get(u)
    return x.to(dt).to(torch.float64) if dt is not None else x


def float_eval(dag: ExprDAG, pts: torch.Tensor) -> torch.Tensor:
    """Working-precision values of every node at ``pts`` ``(n_inputs, S)`` (already rounded inputs): ``(N, S)``."""
    n, s = dag.num_nodes, pts.shape[1]
    val = torch.zeros(n, s, dtype=torch.float64)
    op, lhs, rhs, urnd = dag.op.tolist(), dag.lhs.tolist(), dag.rhs.tolist(), dag.urnd.tolist()
    inp = {int(k): j for j, k in enumerate(dag.input_nodes.tolist())}
    for i in range(n):
        o, a, b = op[i], lhs[i], rhs[i]
        if o == INPUT:
            val[i] = _round(pts[inp[i]], urnd[i])
            continue
        if o == CONST:
            bits = dag.const_bits.get(i)
            c = dag.const_values[i]
            if i in dag.const_float:  # a literal expression evaluated in floating point
                val[i] = float(dag.const_float[i])
            elif bits is not None:  # the literal rounded once, exactly, to its precision
                val[i] = float(round_to_bits(c, bits))
            else:
                val[i] = _round(torch.tensor(float(c), dtype=torch.float64), urnd[i])
            continue
        x = val[a]
        if o == ADD:
            r = x + val[b]
        elif o == SUB:
            r = x - val[b]
        elif o == MUL:
            r = x * val[b]
        elif o == DIV:
            r = x / val[b]
        elif o == NEG:
            r = -x
        elif o == MAX:
            r = torch.maximum(x, val[b])
        else:
            r = _TORCH_FN[o](x)
        val[i] = _round(r, urnd[i])
    return val


def exact_eval(dag: ExprDAG, pts: list[list[mpmath.mpf]], prec: int = 200) -> list[list[mpmath.mpf]]:
    """High-precision values of the output nodes (no rounding anywhere) at each point: ``[S][n_out]``."""
    op, lhs, rhs = dag.op.tolist(), dag.lhs.tolist(), dag.rhs.tolist()
    inp = {int(k): j for j, k in enumerate(dag.input_nodes.tolist())}
    outs = dag.output_nodes.tolist()
    consts = {i: mpmath.mpf(c.numerator) / c.denominator for i, c in dag.const_values.items()}
    res = []
    with mpmath.workprec(prec):
        consts = {i: mpmath.mpf(c.numerator) / c.denominator for i, c in dag.const_values.items()}
        for p in pts:
            v: list = [None] * dag.num_nodes
            for i in range(dag.num_nodes):
                o, a, b = op[i], lhs[i], rhs[i]
                if o == INPUT:
                    v[i] = p[inp[i]]
                elif o == CONST:
                    v[i] = consts[i]
                elif o == ADD:
                    v[i] = v[a] + v[b]
                elif o == SUB:
                    v[i] = v[a] - v[b]
                elif o == MUL:
                    v[i] = v[a] * v[b]
                elif o == DIV:
                    v[i] = v[a] / v[b]
                elif o == NEG:
                    v[i] = -v[a]
                elif o == MAX:
                    v[i] = max(v[a], v[b])
                else:
                    v[i] = _MP_FN[o](v[a])
            res.append([v[k] for k in outs])
    return res


def sample_points(dag: ExprDAG, n: int, seed: int = 0, extra: list[dict[str, float]] | None = None) -> torch.Tensor:
    """``(n_inputs, S)`` points: the box's corners (up to 64), ``extra`` points and their
    neighbourhoods (the analysis' worst points), and ``n`` uniform random points."""
    g = torch.Generator().manual_seed(seed)
    box = dag.box[dag.input_nodes]
    lo, hi = box[:, 0], box[:, 1]
    d = lo.numel()
    cols = []
    corners = itertools.islice(itertools.product([0, 1], repeat=d), 64)
    for c in corners:
        t = torch.tensor(c, dtype=torch.float64)
        cols.append(lo + t * (hi - lo))
    for e in extra or []:
        p = torch.tensor([e.get(nm, float((lo[i] + hi[i]) / 2)) for i, nm in enumerate(dag.input_names)],
                         dtype=torch.float64)
        cols.append(p)
        for _ in range(16):  # a cloud around the adversarial point
            q = p + (torch.rand(d, generator=g, dtype=torch.float64) - 0.5) * (hi - lo) * 1e-3
            cols.append(torch.minimum(torch.maximum(q, lo), hi))
    r = torch.rand(d, n, generator=g, dtype=torch.float64)
    pts = torch.cat([torch.stack(cols, 1) if cols else torch.zeros(d, 0, dtype=torch.float64), lo[:, None] + r * (hi - lo)[:, None]], 1)
    return pts


def sampled_errors(dag: ExprDAG, n: int = 500, seed: int = 0, extra: list[dict[str, float]] | None = None,
                   rounded_inputs: bool = False) -> list[float]:
    """The largest observed |working - exact| per output over the sample points.

    With ``rounded_inputs`` the exact computation gets a real input within half an ulp of the
    binary64 sample (the sample is its rounding), as FPTaylor's convention requires.
    """
    pts = sample_points(dag, n, seed, extra)
    fl = float_eval(dag, pts)[dag.output_nodes]  # (n_out, S)
    g = torch.Generator().manual_seed(seed + 1)
    mp_pts = []
    urnd = dag.urnd[dag.input_nodes].tolist()
    with mpmath.workprec(200):
        for j in range(pts.shape[1]):
            row = []
            for i in range(pts.shape[0]):
                x = float(pts[i, j])
                m = mpmath.mpf(x)
                if rounded_inputs and urnd[i] > 0:
                    # a real number that rounds to x at the input's precision
                    f32 = urnd[i] == 2.0 ** -24
                    xr = float(torch.tensor(x).to(torch.float32)) if f32 else x
                    half_ulp = (math.ulp(xr) if not f32 else 2.0 ** (math.frexp(xr)[1] - 25)) / 2 if xr else 0.0
                    m = mpmath.mpf(xr) + mpmath.mpf(half_ulp) * (float(torch.rand(1, generator=g)) * 1.98 - 0.99)
                row.append(m)
            mp_pts.append(row)
    ex = exact_eval(dag, mp_pts)
    errs = []
    for k in range(len(dag.outputs)):
        worst = 0.0
        for j in range(pts.shape[1]):
            f = float(fl[k, j])
            if not math.isfinite(f):
                continue
            with mpmath.workprec(200):
                e = float(abs(mpmath.mpf(f) - ex[j][k]))
            worst = max(worst, e)
        errs.append(worst)
    return errs


def point_enclosures(dag: ExprDAG, prec: int = 320) -> tuple[torch.Tensor, torch.Tensor]:
    """Rigorous enclosures ``(N, 1)`` of every node's exact value when the box is a point (all
    inputs degenerate), by mpmath interval arithmetic at ``prec`` bits, rounded outward to float64.

    Interval arithmetic in binary64 widens by an ulp per operation and, through an ill-conditioned
    recurrence such as 20 CG iterations, those widths grow until a denominator's range contains 0;
    at 320 bits they stay far below binary64 resolution.

    Raises:
        InputError: a division by an interval containing 0 or a log/sqrt outside its domain.
    """
    from torchhpc.ext.core.errors import InputError

    ivm = mpmath.iv
    op, lhs, rhs = dag.op.tolist(), dag.lhs.tolist(), dag.rhs.tolist()
    box = dag.box.tolist()
    fns = {SQRT: ivm.sqrt, EXP: ivm.exp, LOG: ivm.log, SIN: ivm.sin, COS: ivm.cos, TAN: ivm.tan}

    def monotone(f, x, even=False):
        # mpmath.iv lacks these: evaluate the endpoints at prec bits and widen by 2^-(prec - 16)
        with mpmath.workprec(prec):
            ends = [f(mpmath.mpf(x.a)), f(mpmath.mpf(x.b))]
            lo_, hi_ = min(ends), max(ends)
            if even and x.a <= 0 <= x.b:
                lo_ = f(mpmath.mpf(0))
            w = mpmath.mpf(2) ** (16 - prec)
            return ivm.mpf([lo_ - abs(lo_) * w - w, hi_ + abs(hi_) * w + w])

    for k, f, even in ((ATAN, mpmath.atan, False), (SINH, mpmath.sinh, False), (TANH, mpmath.tanh, False),
                       (COSH, mpmath.cosh, True)):
        fns[k] = (lambda f_, e_: (lambda x: monotone(f_, x, e_)))(f, even)
    lo = [0.0] * dag.num_nodes
    hi = [0.0] * dag.num_nodes
    old = ivm.prec
    ivm.prec = prec
    try:
        v: list = [None] * dag.num_nodes
        for i in range(dag.num_nodes):
            o, a, b = op[i], lhs[i], rhs[i]
            if o == CONST:
                c = dag.const_values.get(i)
                v[i] = ivm.mpf(c.numerator) / c.denominator if c is not None else ivm.mpf(box[i])
            elif o == INPUT:
                v[i] = ivm.mpf(box[i])
            elif o == ADD:
                v[i] = v[a] + v[b]
            elif o == SUB:
                v[i] = v[a] - v[b]
            elif o == MUL:
                v[i] = v[a] * v[b]
            elif o == DIV:
                if 0 in v[b]:
                    raise InputError(f"{dag.name}: {dag.label(i)}: the denominator's range contains 0")
                v[i] = v[a] / v[b]
            elif o == NEG:
                v[i] = -v[a]
            elif o == ABS:
                v[i] = abs(v[a])
            elif o == MAX:
                v[i] = ivm.mpf([max(v[a].a, v[b].a), max(v[a].b, v[b].b)])
            else:
                if o in (LOG, SQRT) and v[a].a <= 0 and not (o == SQRT and v[a].a == 0):
                    raise InputError(f"{dag.name}: {dag.label(i)}: argument outside the domain of {dag.label(i)}")
                v[i] = fns[o](v[a])
            x = v[i]
            lo[i] = math.nextafter(float(x.a), -math.inf)
            hi[i] = math.nextafter(float(x.b), math.inf)
    finally:
        ivm.prec = old
    return (torch.tensor(lo, dtype=torch.float64)[:, None], torch.tensor(hi, dtype=torch.float64)[:, None])


def first_order_bound_slow(dag: ExprDAG, prec: int = 120) -> list[float]:
    """Satire's first-order bound ``sum_k u_k sup|v_k| sup|df/dv_k|`` over the whole box, node by node in
    mpmath interval arithmetic: the slow reference for :func:`~.ops.analyze` with ``bb_iters=0``.

    Forward: interval values of every node.  Reverse (chain rule, one output at a time): the
    adjoint of node k is the sum over its users of the user's adjoint times the partial derivative.
    Supports + - * / neg sqrt exp log sin cos (the ops of the small benchmarks).
    """
    ivm = mpmath.iv
    old = ivm.prec
    ivm.prec = prec
    try:
        op, lhs, rhs = dag.op.tolist(), dag.lhs.tolist(), dag.rhs.tolist()
        box = dag.box.tolist()
        urnd = dag.urnd.tolist()
        v: list = [None] * dag.num_nodes
        for i in range(dag.num_nodes):
            o, a, b = op[i], lhs[i], rhs[i]
            if o == CONST:
                c = dag.const_values.get(i)
                v[i] = ivm.mpf(c.numerator) / c.denominator if c is not None else ivm.mpf(box[i])
            elif o == INPUT:
                v[i] = ivm.mpf(box[i])
            elif o in (ADD, SUB, MUL, DIV):
                x, y = v[a], v[b]
                v[i] = x + y if o == ADD else x - y if o == SUB else x * y if o == MUL else x / y
                if o == MUL and a == b:  # a square is never negative
                    v[i] = ivm.mpf([0 if 0 in x else min(x.a ** 2, x.b ** 2).a, v[i].b])
            elif o == NEG:
                v[i] = -v[a]
            else:
                v[i] = {SQRT: ivm.sqrt, EXP: ivm.exp, LOG: ivm.log, SIN: ivm.sin, COS: ivm.cos}[o](v[a])
        out = []
        for root in dag.output_nodes.tolist():
            adj: list = [ivm.mpf(0)] * dag.num_nodes
            adj[root] = ivm.mpf(1)
            for i in range(root, -1, -1):
                o, a, b, g = op[i], lhs[i], rhs[i], adj[i]
                if o in (INPUT, CONST):
                    continue
                if o == ADD:
                    parts = [(a, 1), (b, 1)]
                elif o == SUB:
                    parts = [(a, 1), (b, -1)]
                elif o == MUL:
                    parts = [(a, v[b]), (b, v[a])]
                elif o == DIV:
                    parts = [(a, 1 / v[b]), (b, -v[a] / (v[b] * v[b]))]
                elif o == NEG:
                    parts = [(a, -1)]
                elif o == SQRT:
                    parts = [(a, 1 / (2 * v[i]))]
                elif o == EXP:
                    parts = [(a, v[i])]
                elif o == LOG:
                    parts = [(a, 1 / v[a])]
                elif o == SIN:
                    parts = [(a, ivm.cos(v[a]))]
                else:  # COS
                    parts = [(a, -ivm.sin(v[a]))]
                for child, d in parts:
                    adj[child] = adj[child] + g * d
            total = mpmath.mpf(0)
            for i in range(dag.num_nodes):
                if urnd[i] > 0:
                    mag_v = max(abs(v[i].a), abs(v[i].b))
                    mag_a = max(abs(adj[i].a), abs(adj[i].b))
                    total += mpmath.mpf(urnd[i]) * mag_v.b * mag_a.b
            out.append(float(total))
        return out
    finally:
        ivm.prec = old
