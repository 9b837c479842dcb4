"""The expression DAG of a straight-line floating-point computation, held as tensors.

A computation of ``N`` nodes is five tensors (no Python object per node)::

    op     (N,)  int8     operation code (``INPUT``, ``CONST``, ``ADD``, ...; see ``OP_NAMES``)
    lhs    (N,)  int64    first operand's node index (-1 when the op has none)
    rhs    (N,)  int64    second operand's node index (-1 when unary)
    urnd   (N,)  float64  unit round-off u of the rounding applied to this node's exact result
                          (0 = the node is exact: an input taken exactly, a power-of-two scaling, ...)
    box    (N, 2) float64 for INPUT/CONST nodes an enclosure [lo, hi] of the exact value
                          (for CONST the exact literal, rounded outward), otherwise 0
    level  (N,)  int64    1 + the deepest operand's level (inputs and constants are level 0)
    source (N,)  int32    index into ``sources`` (a line:column or file:line label), -1 none

Operands always have smaller indices than the node (the arrays are in topological order), and a
node is shared by every expression that computes the same operation on the same operands
(common sub-expressions are one node).  :class:`DagBuilder` builds one while parsing; its
``add`` hash-conses, folds literal-only sub-expressions exactly (as rationals, rounded once) and
recognises exact operations (multiplication by +-1 or a power of two, adding a zero literal).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import torch

from torchhpc.ext.core.errors import InputError

# operation codes -------------------------------------------------------------------------------
INPUT, CONST, ADD, SUB, MUL, DIV, NEG, SQRT, EXP, LOG, SIN, COS, TAN, ATAN, SINH, COSH, TANH, MAX, ABS = range(19)
OP_NAMES = ["input", "const", "+", "-", "*", "/", "neg", "sqrt", "exp", "log", "sin", "cos", "tan", "atan",
            "sinh", "cosh", "tanh", "max", "abs"]
UNARY_FUNCS = {"sqrt": SQRT, "exp": EXP, "log": LOG, "sin": SIN, "cos": COS, "tan": TAN, "atan": ATAN,
               "sinh": SINH, "cosh": COSH, "tanh": TANH, "abs": ABS, "fabs": ABS}
BINARY = (ADD, SUB, MUL, DIV, MAX)
TRANSCENDENTAL = (EXP, LOG, SIN, COS, TAN, ATAN, SINH, COSH, TANH)

# unit round-off (round to nearest) of each precision name, and the smallest subnormal's half
UNIT_ROUNDOFF = {16: 2.0 ** -11, 32: 2.0 ** -24, 64: 2.0 ** -53, 128: 2.0 ** -113}
UNDERFLOW = {16: 2.0 ** -25, 32: 2.0 ** -150, 64: 2.0 ** -1075, 128: 2.0 ** -16495}


def exact_interval(c: Fraction) -> tuple[float, float]:
    """The tightest float64 interval [lo, hi] containing the rational ``c``."""
    f = float(c)  # correctly rounded
    if Fraction(f) == c:
        return f, f
    if Fraction(f) < c:
        return f, math.nextafter(f, math.inf)
    return math.nextafter(f, -math.inf), f


def is_binary64(c: Fraction) -> bool:
    """Whether the rational ``c`` is exactly a binary64 number."""
    try:
        return Fraction(float(c)) == c
    except OverflowError:
        return False


def is_representable(c: Fraction, bits: int) -> bool:
    """Whether ``c`` is exactly representable in the IEEE format with ``bits`` (16/32/64) bits (normal range)."""
    if c == 0:
        return True
    mant = {16: 11, 32: 24, 64: 53, 128: 113}[bits]
    num, den = abs(c.numerator), c.denominator
    if den & (den - 1):  # the denominator must be a power of two
        return False
    # strip trailing zero bits of the numerator: what is left must fit in the mantissa
    num >>= (num & -num).bit_length() - 1
    return num.bit_length() <= mant


_MANT = {16: 11, 32: 24, 64: 53, 128: 113}
_EMIN = {16: -14, 32: -126, 64: -1022, 128: -16382}
_EMAX = {16: 15, 32: 127, 64: 1023, 128: 16383}


def round_to_bits(c: Fraction, bits: int) -> Fraction | None:
    """``c`` rounded to nearest (ties to even) in the IEEE format with ``bits`` bits, exactly.

    None when the result is not a normal number of that format (subnormal or overflow).
    """
    if c == 0:
        return Fraction(0)
    a = abs(c)
    e = a.numerator.bit_length() - a.denominator.bit_length()  # 2^e <= a < 2^(e+2)
    if Fraction(2) ** e > a:
        e -= 1
    elif Fraction(2) ** (e + 1) <= a:
        e += 1
    if e < _EMIN[bits]:
        return None
    scale = Fraction(2) ** (_MANT[bits] - 1 - e)
    r = Fraction(round(a * scale)) / scale  # round() of a Fraction: exact, ties to even
    if r >= Fraction(2) ** (_EMAX[bits] + 1):
        return None
    return r if c > 0 else -r


def literal_rounding(c: Fraction, bits: int) -> float | None:
    """An upper bound (a float) of the relative error |fl(c) - c| / |c| of rounding the literal ``c``.

    The rounding of a literal is a known number, so its error term is that number, not u (<= u).
    None where fl(c) is not a normal number (the u-and-underflow model applies then).
    """
    r = round_to_bits(c, bits)
    if r is None or c == 0:
        return None
    rel = abs(r - c) / abs(c)
    f = float(rel)
    if Fraction(f) < rel:
        f = math.nextafter(f, math.inf)
    return f


def _pow2(c: Fraction) -> bool:
    c = abs(c)
    return c != 0 and (c.numerator & (c.numerator - 1)) == 0 and (c.denominator & (c.denominator - 1)) == 0


@dataclass
class ExprDAG:
    """A straight-line computation as tensors (see the module docstring for the layout)."""

    op: torch.Tensor
    lhs: torch.Tensor
    rhs: torch.Tensor
    urnd: torch.Tensor
    eta: torch.Tensor
    box: torch.Tensor
    level: torch.Tensor
    source: torch.Tensor
    sources: list[str]
    input_names: list[str]
    input_nodes: torch.Tensor
    outputs: list[str]
    output_nodes: torch.Tensor
    const_values: dict[int, Fraction] = field(default_factory=dict)
    name: str = ""
    # precision (16/32/64) a CONST node is rounded to, for the nodes whose ``urnd`` is their
    # literal's exact relative rounding error rather than u (see ``literal_rounding``)
    const_bits: dict[int, int] = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return int(self.op.numel())

    @property
    def num_ops(self) -> int:
        """Operations (nodes that are neither inputs nor constants)."""
        return int((self.op > CONST).sum())

    def label(self, i: int) -> str:
        """A short description of node ``i``: its operation and source location."""
        s = int(self.source[i])
        where = self.sources[s] if s >= 0 else "?"
        return f"{OP_NAMES[int(self.op[i])]} @ {where}"

    def to(self, device: torch.device | str) -> ExprDAG:
        """The same DAG with its tensors on ``device``."""
        kw = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in self.__dict__.items()}
        return ExprDAG(**kw)


class DagBuilder:
    """Builds an :class:`ExprDAG` node by node, sharing common sub-expressions.

    Literal constants are kept exact (``Fraction``) while a sub-expression uses only literals;
    such a sub-expression is folded and rounded once when it meets a variable (``lit``).
    """

    def __init__(self) -> None:
        self.op: list[int] = []
        self.lhs: list[int] = []
        self.rhs: list[int] = []
        self.urnd: list[float] = []
        self.eta: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.source: list[int] = []
        self.sources: list[str] = []
        self._source_index: dict[str, int] = {}
        self._memo: dict[tuple, int] = {}
        self.input_names: list[str] = []
        self.input_nodes: list[int] = []
        self.const_values: dict[int, Fraction] = {}
        self.const_bits: dict[int, int] = {}

    def _src(self, where: str | None) -> int:
        if where is None:
            return -1
        i = self._source_index.get(where)
        if i is None:
            i = self._source_index[where] = len(self.sources)
            self.sources.append(where)
        return i

    def _push(self, op: int, a: int, b: int, u: float, eta: float, lo: float, hi: float, where: str | None) -> int:
        self.op.append(op)
        self.lhs.append(a)
        self.rhs.append(b)
        self.urnd.append(u)
        self.eta.append(eta)
        self.lo.append(lo)
        self.hi.append(hi)
        self.source.append(self._src(where))
        return len(self.op) - 1

    # -- leaves ----------------------------------------------------------------------------------
    def input(self, name: str, lo: Fraction, hi: Fraction, bits: int, rounded: bool, where: str | None = None) -> int:
        """An input in [lo, hi]; ``rounded`` adds the rounding of the real value to ``bits`` (FPTaylor's convention)."""
        if lo > hi:
            raise InputError(f"{where or name}: empty input range for {name!r}: ({float(lo)}, {float(hi)})")
        if lo == hi:  # a degenerate range is a constant (Satire's convention)
            return self.const(lo, bits if rounded else None, where, name=name)
        flo, _ = exact_interval(lo)
        _, fhi = exact_interval(hi)
        u = UNIT_ROUNDOFF[bits] if rounded else 0.0
        i = self._push(INPUT, -1, -1, u, UNDERFLOW[bits] if rounded else 0.0, flo, fhi, where)
        self.input_names.append(name)
        self.input_nodes.append(i)
        return i

    def const(self, c: Fraction, bits: int | None, where: str | None = None, name: str | None = None) -> int:
        """The constant ``c``, rounded to ``bits`` when it is not representable (``bits=None``: taken exactly).

        A rounded literal's error is known exactly: its ``urnd`` is |fl(c) - c| / |c| (rounded up,
        at most u) instead of u, FPTaylor's treatment of constants made exact.
        """
        u = 0.0 if bits is None or is_representable(c, bits) else UNIT_ROUNDOFF[bits]
        if u == 0.0 and bits is None and not is_binary64(c):
            # an exact constant must be a binary64 number for the evaluation to hold it: round it
            c = Fraction(float(c))
        key = ("c", c, bits if u else None)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        lo, hi = exact_interval(c)
        eta = UNDERFLOW[bits] if u else 0.0
        rel = literal_rounding(c, bits) if u else None
        if rel is not None:
            u, eta = min(u, rel), 0.0
        i = self._push(CONST, -1, -1, u, eta, lo, hi, where)
        self.const_values[i] = c
        if rel is not None:
            self.const_bits[i] = bits
        self._memo[key] = i
        return i

    # -- operations ------------------------------------------------------------------------------
    def add(self, op: int, a: int, b: int = -1, bits: int = 64, where: str | None = None) -> int:
        """Node ``op(a, b)`` rounded to ``bits`` (shared if it exists; exact ops get u = 0)."""
        u = UNIT_ROUNDOFF[bits]
        ca = self.const_values.get(a) if self.op[a] == CONST and self.urnd[a] == 0 else None
        cb = self.const_values.get(b) if b >= 0 and self.op[b] == CONST and self.urnd[b] == 0 else None
        if op == MUL:
            # x * (+-1) and x * 2^k are exact (barring over/underflow)
            if cb is not None and _pow2(cb):
                if cb == -1:
                    return self.add(NEG, a, -1, bits, where)
                if cb == 1:
                    return a
                u = 0.0
            elif ca is not None and _pow2(ca):
                if ca == -1:
                    return self.add(NEG, b, -1, bits, where)
                if ca == 1:
                    return b
                u = 0.0
        elif op in (ADD, SUB) and (cb == 0 or ca == 0):
            if cb == 0:
                return a
            if op == ADD:
                return b
            return self.add(NEG, b, -1, bits, where)
        elif op == DIV and cb is not None and _pow2(cb):
            u = 0.0
        elif op in (NEG, ABS, MAX):
            u = 0.0
        if op in (ADD, SUB, MUL, MAX) and b >= 0 and b < a:
            if op != SUB:  # commutative: one key for both operand orders
                a, b = b, a
        key = (op, a, b, u)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        eta = 0.0 if u == 0.0 or op in (ADD, SUB) else UNDERFLOW[bits]
        i = self._push(op, a, b, u, eta, 0.0, 0.0, where)
        self._memo[key] = i
        return i

    def build(self, outputs: list[tuple[str, int]], name: str = "") -> ExprDAG:
        """Freeze into tensors; ``outputs`` are ``(name, node)`` pairs."""
        n = len(self.op)
        op = torch.tensor(self.op, dtype=torch.int8)
        lhs = torch.tensor(self.lhs, dtype=torch.int64)
        rhs = torch.tensor(self.rhs, dtype=torch.int64)
        return ExprDAG(
            op=op, lhs=lhs, rhs=rhs,
            urnd=torch.tensor(self.urnd, dtype=torch.float64),
            eta=torch.tensor(self.eta, dtype=torch.float64),
            box=torch.stack([torch.tensor(self.lo, dtype=torch.float64),
                             torch.tensor(self.hi, dtype=torch.float64)], 1) if n else torch.zeros(0, 2),
            level=compute_levels(lhs, rhs),
            source=torch.tensor(self.source, dtype=torch.int32),
            sources=list(self.sources), input_names=list(self.input_names),
            input_nodes=torch.tensor(self.input_nodes, dtype=torch.int64),
            outputs=[o for o, _ in outputs], output_nodes=torch.tensor([i for _, i in outputs], dtype=torch.int64),
            const_values=dict(self.const_values), name=name, const_bits=dict(self.const_bits),
        )


def compute_levels(lhs: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """``level[i] = 1 + max(level[lhs[i]], level[rhs[i]])`` (0 for leaves), in O(N) by frontier sweeps.

    Nodes are in topological order; a sweep relaxes every node at once and repeats until no level
    changes, so it costs (depth) tensor passes; a Python loop over nodes is used for deep, small DAGs.
    """
    n = lhs.numel()
    if n == 0:
        return torch.zeros(0, dtype=torch.int64)
    if n < 200_000:
        a, b = lhs.tolist(), rhs.tolist()
        lv = [0] * n
        for i in range(n):
            x, y = a[i], b[i]
            if x >= 0:
                v = lv[x]
                if y >= 0 and lv[y] > v:
                    v = lv[y]
                lv[i] = v + 1
        return torch.tensor(lv, dtype=torch.int64)
    level = torch.zeros(n, dtype=torch.int64)
    has_a, has_b = lhs >= 0, rhs >= 0
    la, lb = lhs.clamp(min=0), rhs.clamp(min=0)
    while True:
        new = torch.where(has_a, torch.maximum(level[la], torch.where(has_b, level[lb], 0)) + 1, 0)
        if torch.equal(new, level):
            return level
        level = new
