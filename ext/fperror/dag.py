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
FORMATS = (16, 32, 64, 128)
#: the largest finite number of each format (binary128's is beyond float64: never reached here)
MAX_FINITE = {16: 65504.0, 32: 3.4028234663852886e38, 64: 1.7976931348623157e308, 128: math.inf}


@dataclass(frozen=True)
class Rounding:
    """One rounding operator: ``rnd(w) = w (1 + d) + e`` with ``|d| <= u`` and ``|e| <= eta``.

    ``bits`` is the IEEE format of the result (16, 32, 64, 128; 0 for no rounding at all).  Round to
    nearest has ``u = 2^-p`` (p the significand's bits) and ``eta`` half the smallest subnormal;
    FPTaylor's ``rnd[bits, type, scale, eps, delta]`` (its REFERENCE.md, "Rounding") doubles both for
    the directed types ``up``, ``down``, ``zero``, multiplies both by ``scale`` (``rnd[64, ne, 1.5]``:
    a library function within 1.5 ulp), or gives them explicitly as ``scale 2^eps`` and
    ``scale 2^delta`` (0 meaning no such term).  ``nearest`` marks plain round-to-nearest, whose
    result on a literal is computed exactly (so its error is a known number, not ``u``).
    """

    bits: int
    u: float
    eta: float
    nearest: bool = True
    name: str = field(default="", compare=False)

    @staticmethod
    def to_nearest(bits: int) -> Rounding:
        """Round to nearest (ties to even) in the IEEE format with ``bits`` bits."""
        return _NEAREST[bits]

    @staticmethod
    def fptaylor(bits: int, kind: str = "ne", scale: float = 1.0, eps: int | None = None,
                 delta: int | None = None, name: str = "") -> Rounding:
        """FPTaylor's ``rnd[bits, kind, scale]`` or ``rnd[bits, kind, scale, eps, delta]``.

        ``kind``: ``ne`` (``nearest``), ``up`` (``positive_infinity``), ``down`` (``negative_infinity``),
        ``zero`` (``toward_zero``).  With ``eps``/``delta`` given the terms are ``scale 2^eps`` and
        ``scale 2^delta`` as written (FPTaylor does not double them for directed types then).

        Raises:
            ValueError: an unknown format or type, or a scale that is not positive.
        """
        if bits not in FORMATS:
            raise ValueError(f"rounding to {bits} bits: the formats are 16, 32, 64 and 128")
        directed = {"ne": False, "nearest": False, "up": True, "positive_infinity": True, "down": True,
                    "negative_infinity": True, "zero": True, "toward_zero": True}.get(kind)
        if directed is None:
            raise ValueError(f"rounding type {kind!r}: the types are ne, up, down and zero")
        if not scale > 0:
            raise ValueError(f"rounding scale {scale}: it must be positive")
        if eps is not None or delta is not None:
            u = scale * 2.0 ** eps if eps else 0.0
            eta = scale * 2.0 ** delta if delta else 0.0
        else:
            c = scale * (2.0 if directed else 1.0)
            u, eta = c * UNIT_ROUNDOFF[bits], c * UNDERFLOW[bits]
        plain = not directed and scale == 1.0 and eps is None and delta is None
        return Rounding(bits, u, eta, plain, name or f"rnd[{bits}, {kind}, {scale:g}]")


_NEAREST = {b: Rounding(b, UNIT_ROUNDOFF[b], UNDERFLOW[b], True, f"rnd{b}") for b in FORMATS}
EXACT = Rounding(0, 0.0, 0.0, True, "no_rnd")
"""No rounding: the operation is exact (FPTaylor's ``no_rnd`` and its plain ``=`` definitions)."""


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


def smallest_format(c: Fraction) -> int:
    """The narrowest IEEE format (16, 32, 64, 128) holding ``c`` exactly as a normal number; 0 if none."""
    for bits in FORMATS:
        if is_representable(c, bits) and (c == 0 or round_to_bits(c, bits) is not None):
            return bits
    return 0


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
    # the working-precision value of a CONST node that is a literal expression evaluated in floating
    # point (FPTaylor's ``rnd64(0.1 * 3)``: fl(fl(0.1) * 3), not the nearest float to 0.3)
    const_float: dict[int, Fraction] = field(default_factory=dict)
    # what a parser read but the bound does not use (FPTaylor's Constraints, +/- uncertainties), one line each
    notes: list[str] = field(default_factory=list)
    # (N,) int16: the IEEE format (16/32/64/128 bits) a node's value is held in, 0 for a real number (no
    # format); what overflows it is refused (see :data:`MAX_FINITE`)
    fmt: torch.Tensor | None = None

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
        self.const_float: dict[int, Fraction] = {}
        # the narrowest IEEE format each node's value is known to be a number of (0: any real);
        # a rounding to a format that holds its operands' values may be exact (x * 2, -x, max)
        self.fmt: list[int] = []
        self.notes: list[str] = []

    def _src(self, where: str | None) -> int:
        if where is None:
            return -1
        i = self._source_index.get(where)
        if i is None:
            i = self._source_index[where] = len(self.sources)
            self.sources.append(where)
        return i

    def _push(self, op: int, a: int, b: int, u: float, eta: float, lo: float, hi: float, where: str | None,
              fmt: int = 0) -> int:
        self.fmt.append(fmt)
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
    def input(self, name: str, lo: Fraction, hi: Fraction, bits: int, rounded: bool, where: str | None = None,
              real: bool = False) -> int:
        """An input in [lo, hi]; ``rounded`` adds the rounding of the real value to ``bits`` (FPTaylor's convention).

        An unrounded input is a number of format ``bits``, or any real number with ``real=True``.
        """
        if lo > hi:
            raise InputError(f"{where or name}: empty input range for {name!r}: ({float(lo)}, {float(hi)})")
        if lo == hi:  # a degenerate range is a constant (Satire's convention)
            return self.const(lo, bits if rounded else None, where, name=name)
        flo, _ = exact_interval(lo)
        _, fhi = exact_interval(hi)
        u = UNIT_ROUNDOFF[bits] if rounded else 0.0
        i = self._push(INPUT, -1, -1, u, UNDERFLOW[bits] if rounded else 0.0, flo, fhi, where,
                       0 if real and not rounded else bits)
        self.input_names.append(name)
        self.input_nodes.append(i)
        return i

    def const(self, c: Fraction, bits: int | Rounding | None, where: str | None = None, name: str | None = None,
              computed: Fraction | None = None) -> int:
        """The constant ``c``, rounded to ``bits`` when it is not representable (``bits=None``: taken exactly).

        A rounded literal's error is known exactly: its ``urnd`` is |fl(c) - c| / |c| (rounded up,
        at most u) instead of u, FPTaylor's treatment of constants made exact.  ``computed`` is the
        value a literal expression takes in floating point (under a round-to-nearest ``bits``), when
        that is not simply ``c`` rounded once: its ``urnd`` is then |computed - c| / |c|.
        """
        rnd = _NEAREST[bits] if isinstance(bits, int) else bits
        if rnd is not None and rnd.bits == 0:
            rnd = None
        if rnd is not None and computed is not None and computed != c and rnd.nearest and c != 0 \
                and computed != round_to_bits(c, rnd.bits):
            return self._computed_const(c, computed, rnd, where)
        u = 0.0 if rnd is None or is_representable(c, rnd.bits) else rnd.u
        if u == 0.0 and rnd is None and not is_binary64(c):
            # an exact constant must be a binary64 number for the evaluation to hold it: round it
            c = Fraction(float(c))
        key = ("c", c, rnd if u else None)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        lo, hi = exact_interval(c)
        eta = rnd.eta if u else 0.0
        rel = literal_rounding(c, rnd.bits) if u and rnd.nearest else None
        if rel is not None:
            u, eta = min(u, rel), 0.0
        i = self._push(CONST, -1, -1, u, eta, lo, hi, where, rnd.bits if u else smallest_format(c))
        self.const_values[i] = c
        if rel is not None:
            self.const_bits[i] = rnd.bits
        self._memo[key] = i
        return i

    def _computed_const(self, c: Fraction, computed: Fraction, rnd: Rounding, where: str | None) -> int:
        key = ("cf", c, computed, rnd.bits)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        rel = abs(computed - c) / abs(c)
        u = float(rel)
        if Fraction(u) < rel:
            u = math.nextafter(u, math.inf)
        lo, hi = exact_interval(c)
        i = self._push(CONST, -1, -1, u, 0.0, lo, hi, where, smallest_format(computed))
        self.const_values[i] = c
        self.const_float[i] = computed
        self._memo[key] = i
        return i

    # -- operations ------------------------------------------------------------------------------
    def fits(self, i: int, rnd: Rounding) -> bool:
        """Whether node ``i``'s value is a number of ``rnd``'s format (so rounding it changes nothing)."""
        return rnd.bits == 0 or 0 < self.fmt[i] <= rnd.bits

    def add(self, op: int, a: int, b: int = -1, bits: int | Rounding = 64, where: str | None = None) -> int:
        """Node ``op(a, b)`` rounded to ``bits`` (a format, or a :class:`Rounding`; shared if it exists).

        Exact operations get u = 0: x * (+-1), x * 2^k and x / 2^k (barring over/underflow), -x, |x|
        and max(x, y), when the operands are numbers of the result's format; + and - of such numbers
        have no underflow term (a sum of floats in the subnormal range is exact).
        """
        rnd = _NEAREST[bits] if isinstance(bits, int) else bits
        u, eta = rnd.u, rnd.eta
        fits_a = self.fits(a, rnd)
        fits_b = b < 0 or self.fits(b, rnd)
        ca = self.const_values.get(a) if self.op[a] == CONST and self.urnd[a] == 0 else None
        cb = self.const_values.get(b) if b >= 0 and self.op[b] == CONST and self.urnd[b] == 0 else None
        fmt = rnd.bits
        if op == MUL:
            if cb is not None and _pow2(cb) and fits_a:
                if cb == -1:
                    return self.add(NEG, a, -1, rnd, where)
                if cb == 1:
                    return a
                u, eta, fmt = 0.0, 0.0, self.fmt[a]
            elif ca is not None and _pow2(ca) and fits_b:
                if ca == -1:
                    return self.add(NEG, b, -1, rnd, where)
                if ca == 1:
                    return b
                u, eta, fmt = 0.0, 0.0, self.fmt[b]
        elif op in (ADD, SUB) and (cb == 0 or ca == 0):
            if cb == 0 and fits_a:
                return a
            if ca == 0 and op == ADD and fits_b:
                return b
            if ca == 0 and op == SUB:
                return self.add(NEG, b, -1, rnd, where)
        elif op == DIV and cb is not None and _pow2(cb) and fits_a:
            u, eta, fmt = 0.0, 0.0, self.fmt[a]
        elif op in (NEG, ABS, MAX) and fits_a and fits_b:
            u, eta = 0.0, 0.0
            fmt = self.fmt[a] if b < 0 else (max(self.fmt[a], self.fmt[b]) if self.fmt[a] and self.fmt[b] else 0)
        if op in (ADD, SUB) and fits_a and fits_b:
            eta = 0.0
        if op in (ADD, SUB, MUL, MAX) and b >= 0 and b < a:
            if op != SUB:  # commutative: one key for both operand orders
                a, b = b, a
        key = (op, a, b, u, eta)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        i = self._push(op, a, b, u, eta, 0.0, 0.0, where, fmt)
        self._memo[key] = i
        return i

    def round(self, a: int, rnd: Rounding, where: str | None = None) -> int:
        """``rnd`` applied to node ``a``'s value: ``a`` itself when that changes nothing, else a node
        ``a * 1`` carrying the rounding (``fl(a * 1) = fl(a)``: every pass already knows ``*``)."""
        if self.fits(a, rnd):
            return a
        key = ("round", a, rnd.u, rnd.eta)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        one = self.const(Fraction(1), None)
        i = self._push(MUL, a, one, rnd.u, rnd.eta, 0.0, 0.0, where, rnd.bits)
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
            const_float=dict(self.const_float), notes=list(self.notes),
            fmt=torch.tensor(self.fmt, dtype=torch.int16),
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
