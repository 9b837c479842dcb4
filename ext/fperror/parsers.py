"""Front ends: Satire's ``INPUTS/OUTPUTS/EXPRS`` language, FPTaylor's ``Variables/Definitions/Expressions``
language and the straight-line subset of FPCore, each into an :class:`~.dag.ExprDAG`.

Semantics (and stated in the docs):

* Satire and FPCore: ``name rndNN = expr`` rounds every operation of ``expr`` (and every literal
  that is not representable) to NN bits; literals are read exactly as rationals, and a
  sub-expression made only of literals is folded exactly and rounded once.  Inputs are exact
  (``inputs="exact"``) or rounded from the real input to their declared precision
  (``inputs="rounded"``).
* FPTaylor: as FPTaylor reads it (:func:`parse_fptaylor`): ``=`` is real arithmetic, ``name rnd=
  expr`` applies the rounding ``rnd`` (``rnd64``, ``rnd32_up``, ``rnd[64, ne, 1.5]``, ...) to every
  operation, literal, variable and definition of ``expr`` that it changes, ``rnd(e)`` rounds e's
  result and ``no_rnd(e)`` keeps e exact; a literal expression is evaluated as floating point
  does, its known error kept.  ``inputs="rounded"`` is FPTaylor's semantics for variables (a
  ``real`` one is rounded where a rounding applies to it), ``inputs="exact"`` rounds none.
* A degenerate range ``(c, c)`` is the constant ``c``.
* A malformed file, or a construct outside the straight-line subset, raises :class:`InputError`
  naming ``file:line:column`` and the construct, in one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from torchhpc.ext.core.errors import InputError

from .dag import (
    ABS,
    ADD,
    ATAN,
    CONST,
    COS,
    COSH,
    DIV,
    EXACT,
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
    UNARY_FUNCS,
    DagBuilder,
    ExprDAG,
    Rounding,
    is_binary64,
    is_representable,
    round_to_bits,
)

_TOKEN_BODY = r"""
    (?P<num>0[xX][0-9a-fA-F]+(?:\.[0-9a-fA-F]*)?(?:[pP][+-]?\d+)? |
            (?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?(?:[fd](?![A-Za-z0-9_]))?) |
    (?P<name>[A-Za-z_$][A-Za-z0-9_.$]*) |
    (?P<op>\+/-|<=|>=|[-+*/^(){}\[\],;:=!<>]) |
    (?P<bad>\S)
"""
_TOKEN = {c: re.compile(r"(?P<comment>" + re.escape(c) + r".*)|" + _TOKEN_BODY, re.VERBOSE) for c in ("#", "//")}


class Tokens:
    """A token stream with line:column positions for error messages.

    Tokenised line by line with one ``finditer`` per line (about 1 us per token: the 3.5 MB
    fdtd1d_64 file is ~1M tokens); ``comment`` is the format's comment marker (``#`` or ``//``).
    """

    def __init__(self, text: str, path: str, comment_chars: str = "#") -> None:
        self.path = path
        pattern = _TOKEN["//" if comment_chars.startswith("/") else "#"]
        toks: list[tuple[str, str, int, int]] = []  # (kind, text, line, col)
        append = toks.append
        lines = text.split("\n")
        for ln, line in enumerate(lines, 1):
            for m in pattern.finditer(line):
                kind = m.lastgroup
                if kind == "comment":
                    break
                if kind == "bad":
                    what = ("the constant %e (FPTaylor's e^x): write exp(x)" if line.startswith("%e", m.start())
                            else f"unexpected character {m.group()!r}")
                    raise InputError(f"{path}:{ln}:{m.start() + 1}: {what}")
                append((kind, m.group(), ln, m.start() + 1))
        self.toks = toks
        self.i = 0
        self.eof_pos = (len(lines), len(lines[-1]) + 1)

    def peek(self, k: int = 0) -> tuple[str, str, int, int]:
        j = self.i + k
        if j < len(self.toks):
            return self.toks[j]
        return ("eof", "end of file", *self.eof_pos)

    def next(self) -> tuple[str, str, int, int]:
        t = self.peek()
        self.i += 1
        return t

    def where(self, t: tuple[str, str, int, int] | None = None) -> str:
        t = t or self.peek()
        return f"{self.path}:{t[2]}:{t[3]}"

    def error(self, msg: str, t: tuple[str, str, int, int] | None = None) -> InputError:
        return InputError(f"{self.where(t)}: {msg}")

    def expect(self, text: str) -> tuple[str, str, int, int]:
        t = self.next()
        if t[1] != text:
            raise self.error(f"expected {text!r}, found {t[1]!r}", t)
        return t

    def accept(self, text: str) -> bool:
        if self.peek()[1] == text:
            self.i += 1
            return True
        return False


def _number(s: str) -> Fraction:
    """A numeral's exact value: ``0.1`` is 1/10; FPTaylor's ``0x1.8p3`` is exact, ``0.1f``/``0.1d`` is the
    binary32/binary64 number nearest to 0.1."""
    if s[:2] in ("0x", "0X"):
        mant, _, exp = s[2:].lower().partition("p")
        whole, _, frac = mant.partition(".")
        return Fraction(int(whole + frac or "0", 16), 16 ** len(frac)) * Fraction(2) ** int(exp or "0")
    if s[-1] in "fd":
        v = round_to_bits(Fraction(s[:-1]), 32 if s[-1] == "f" else 64)
        if v is None:
            raise ValueError(f"{s} is outside the normal range of binary{32 if s[-1] == 'f' else 64}")
        return v
    return Fraction(s)  # exact: Fraction("0.1") is 1/10


def _literal(tk: Tokens, t: tuple[str, str, int, int]) -> Fraction:
    try:
        return _number(t[1])
    except ValueError as exc:
        raise tk.error(str(exc), t) from None


def _bits_of(tok: str) -> int:
    return int(re.sub(r"\D", "", tok))


# ----------------------------------------------------------------------------- expressions


class _InfixGrammar:
    """``expr := term (('+' | '-') term)*``, ``term := unary (('*' | '/') unary)*``: the precedence both
    formats share; a parser supplies ``tk``, ``binop`` and ``unary``."""

    def _additive(self, tok: tuple) -> bool:
        return tok[1] in ("+", "-")

    def expr(self) -> tuple:
        v = self.term()
        while self._additive(self.tk.peek()):
            t = self.tk.next()
            v = self.binop(ADD if t[1] == "+" else SUB, v, self.term(), t)
        return v

    def term(self) -> tuple:
        v = self.unary()
        while self.tk.peek()[1] in ("*", "/"):
            t = self.tk.next()
            v = self.binop(MUL if t[1] == "*" else DIV, v, self.unary(), t)
        return v


class _ExprParser(_InfixGrammar):
    """Recursive descent over ``+ - * / ^``, unary minus, calls and parentheses.

    A value is ``("lit", Fraction)`` while only literals are involved, else ``("node", index)``.
    """

    def __init__(self, tk: Tokens, b: DagBuilder, env: dict[str, int], bits: int) -> None:
        self.tk, self.b, self.env, self.bits = tk, b, env, bits

    def node(self, v: tuple, where: str) -> int:
        if v[0] == "lit":
            return self.b.const(v[1], self.bits, where)
        return v[1]

    def binop(self, op: int, x: tuple, y: tuple, t) -> tuple:
        where = f"{t[2]}:{t[3]}"
        if x[0] == "lit" and y[0] == "lit":
            a, c = x[1], y[1]
            if op == DIV and c == 0:
                raise self.tk.error("division by the literal zero", t)
            return ("lit", {ADD: a + c, SUB: a - c, MUL: a * c, DIV: a / c if op == DIV else None}[op])
        if op == DIV and y[0] == "lit" and y[1] == 0:
            raise self.tk.error("division by the literal zero", t)
        return ("node", self.b.add(op, self.node(x, where), self.node(y, where), self.bits, where))

    def unary(self) -> tuple:
        t = self.tk.peek()
        if t[1] == "-":
            self.tk.next()
            v = self.unary()
            if v[0] == "lit":
                return ("lit", -v[1])
            return ("node", self.b.add(NEG, v[1], -1, self.bits, f"{t[2]}:{t[3]}"))
        if t[1] == "+":
            self.tk.next()
            return self.unary()
        return self.power()

    def power(self) -> tuple:
        v = self.atom()
        if self.tk.peek()[1] == "^":
            t = self.tk.next()
            e = self.tk.next()
            if e[0] != "num" or not e[1].isdigit() or int(e[1]) < 1:
                raise self.tk.error("only positive integer powers are supported", e)
            base = v
            for _ in range(int(e[1]) - 1):
                v = self.binop(MUL, v, base, t)
        return v

    def atom(self) -> tuple:
        t = self.tk.next()
        kind, s = t[0], t[1]
        if kind == "num":
            return ("lit", _literal(self.tk, t))
        if s == "(":
            v = self.expr()
            self.tk.expect(")")
            return v
        if kind == "name":
            if self.tk.peek()[1] == "(":
                self.tk.next()
                args = [self.expr()]
                while self.tk.accept(","):
                    args.append(self.expr())
                self.tk.expect(")")
                return self.call(s, args, t)
            if s not in self.env:
                raise self.tk.error(f"unknown variable {s!r}", t)
            return ("node", self.env[s])
        raise self.tk.error(f"expected an expression, found {s!r}", t)

    def call(self, fname: str, args: list[tuple], t) -> tuple:
        where = f"{t[2]}:{t[3]}"
        f = fname.lower()
        if f in ("sqr",) and len(args) == 1:
            return self.binop(MUL, args[0], args[0], t)
        if f in ("max", "fmax") and len(args) == 2:
            return ("node", self.b.add(MAX, self.node(args[0], where), self.node(args[1], where), self.bits, where))
        if f in UNARY_FUNCS and len(args) == 1:
            return ("node", self.b.add(UNARY_FUNCS[f], self.node(args[0], where), -1, self.bits, where))
        raise self.tk.error(f"unsupported operation {fname}/{len(args)} (supported: + - * / ^ "
                            f"{' '.join(sorted(UNARY_FUNCS))} sqr max)", t)


def _signed_number(tk: Tokens) -> Fraction:
    """A range bound: a signed literal or a literal expression such as ``-62831853/20000000``."""
    p = _ExprParser(tk, DagBuilder(), {}, 64)
    t = tk.peek()
    v = p.expr()
    if v[0] != "lit":
        raise tk.error("a range bound must be a number", t)
    return v[1]


# ----------------------------------------------------------------------------- Satire


def parse_satire(text: str, path: str = "<string>", inputs: str = "exact", progress: bool = False) -> ExprDAG:
    """Parse Satire's ``INPUTS { x fl64 : (lo, hi); } OUTPUTS { y; } EXPRS { y rnd64 = expr; }``.

    As Satire's own parser reads them: items may be separated by ``;`` or follow one another, and an
    empty statement (a lone ``;``) is skipped; a name is assigned once.  ``progress`` shows a tqdm bar
    over the tokens for large files (> 200k tokens).
    """
    tk = Tokens(text, path, "#")
    bar = None
    if progress and len(tk.toks) > 200_000:
        from torchhpc.ext.core.runs import progress_bar as tqdm
        bar = tqdm(total=len(tk.toks), desc=f"parsing {Path(path).name}", unit="tok", unit_scale=True)
    b = DagBuilder()
    env: dict[str, int] = {}
    defined: dict[str, int] = {}  # assigned name -> its line
    declared: dict[str, tuple] = {}  # input name -> ((type, lo, hi), line)
    outputs: list[tuple[str, tuple]] = []
    seen = set()
    while tk.peek()[0] != "eof":
        sec = tk.next()
        if sec[1] not in ("INPUTS", "OUTPUTS", "EXPRS"):
            raise tk.error(f"expected INPUTS, OUTPUTS or EXPRS, found {sec[1]!r}", sec)
        seen.add(sec[1])
        tk.expect("{")
        while not tk.accept("}"):
            if tk.accept(";") or (sec[1] == "OUTPUTS" and tk.accept(",")):
                continue  # an empty statement
            name = tk.next()
            if name[0] != "name":
                raise tk.error(f"expected a name, found {name[1]!r}", name)
            if sec[1] == "OUTPUTS":
                outputs.append((name[1], name))
                continue
            if sec[1] == "INPUTS":
                ty = tk.next()
                if not re.fullmatch(r"fl(16|32|64)", ty[1]):
                    raise tk.error(f"expected a type fl16/fl32/fl64, found {ty[1]!r}", ty)
                tk.expect(":")
                tk.expect("(")
                lo = _signed_number(tk)
                tk.expect(",")
                hi = _signed_number(tk)
                tk.expect(")")
                if lo > hi:
                    raise tk.error(f"empty input range for {name[1]!r}: ({float(lo)}, {float(hi)})", name)
                decl = (ty[1], lo, hi)
                if name[1] in declared:  # Satire takes a repeated declaration; the same one changes nothing
                    if declared[name[1]][0] != decl:
                        raise tk.error(f"input {name[1]!r} is declared again, differently from line "
                                       f"{declared[name[1]][1]}", name)
                    continue
                if name[1] in defined:
                    raise tk.error(f"{name[1]!r} is already assigned on line {defined[name[1]]}", name)
                declared[name[1]] = (decl, name[2])
                env[name[1]] = b.input(name[1], lo, hi, int(ty[1][2:]), inputs == "rounded", f"{name[2]}:{name[3]}")
            else:
                where = defined.get(name[1]) or (declared[name[1]][1] if name[1] in declared else None)
                if where is not None:
                    raise tk.error(f"{name[1]!r} is already defined on line {where} (Satire assigns each name once)",
                                   name)
                defined[name[1]] = name[2]
                r = tk.next()
                if not re.fullmatch(r"rnd(16|32|64)", r[1]):
                    raise tk.error(f"expected rnd16, rnd32 or rnd64, found {r[1]!r}", r)
                tk.expect("=")
                bits = _bits_of(r[1])
                p = _ExprParser(tk, b, env, bits)
                v = p.expr()
                env[name[1]] = p.node(v, f"{name[2]}:{name[3]}")
                if not tk.accept(";") and tk.peek()[1] != "}":
                    raise tk.error(f"expected ';' after the assignment to {name[1]!r}, found {tk.peek()[1]!r}")
                if bar is not None and tk.i - bar.n > 50_000:
                    bar.update(tk.i - bar.n)
    if bar is not None:
        bar.update(len(tk.toks) - bar.n)
        bar.close()
    if "EXPRS" not in seen and not outputs:
        raise InputError(f"{path}: not a Satire file (no INPUTS/OUTPUTS/EXPRS sections)")
    outs = []
    for o, t in outputs:
        if o not in env:
            raise tk.error(f"output {o!r} is never assigned", t)
        outs.append((o, env[o]))
    if not outs:
        raise InputError(f"{path}: no OUTPUTS to analyse")
    return b.build(outs, Path(path).stem)


# ----------------------------------------------------------------------------- FPTaylor

_FPT_SECTIONS = {k: k.capitalize() for k in ("constants", "variables", "definitions", "constraints", "expressions")}
_FPT_SECTIONS.update({v: v for v in list(_FPT_SECTIONS.values())})
_FPT_TYPES = {"real": 0, "int": 0, "float16": 16, "float32": 32, "float64": 64, "float128": 128}
_FPT_DEFAULT_TYPE = 64  # FPTaylor's default-var-type: an untyped variable is a binary64 number
_FPT_DEFAULT_RND = Rounding.fptaylor(64, name="rnd")  # its default-rnd: rnd64
_FPT_NAMED_RND = re.compile(r"rnd(16|32|64|128)(?:_(ne|0|up|down))?")
_FPT_KIND = {"ne": "ne", "0": "zero", "up": "up", "down": "down", None: "ne"}
_FPT_FUNCS = {"sqrt": SQRT, "exp": EXP, "log": LOG, "sin": SIN, "cos": COS, "tan": TAN, "atan": ATAN,
              "arctan": ATAN, "sinh": SINH, "cosh": COSH, "tanh": TANH, "abs": ABS}
_FPT_UNSUPPORTED = {"acos", "asin", "arccos", "arcsin", "acosh", "asinh", "atanh", "arsinh", "arcosh", "artanh",
                    "arcsinh", "arccosh", "arctanh", "argsinh", "argcosh", "argtanh", "atan2", "sub2",
                    "floor_power2", "interval"}
_FPT_SUPPORTED = "+ - * / ^n " + " ".join(sorted(_FPT_FUNCS)) + " inv min max fma rnd..(e) no_rnd(e)"


def _is_rounding(name: str) -> bool:
    return name in ("rnd", "no_rnd") or _FPT_NAMED_RND.fullmatch(name) is not None


def _rounding_spec(tk: Tokens) -> Rounding:
    """``rnd64``, ``rnd32_up``, ``rnd``, ``no_rnd``, ``rnd[64, ne]``, ``rnd[64, ne, 1.5]`` or
    ``rnd[64, ne, 1.5, -53, -1075]`` (FPTaylor's REFERENCE.md, "Rounding")."""
    t = tk.next()
    s = t[1]
    if s == "no_rnd":
        return EXACT
    m = _FPT_NAMED_RND.fullmatch(s)
    if m:
        return Rounding.fptaylor(int(m[1]), _FPT_KIND[m[2]], name=s)
    if s != "rnd":
        raise tk.error(f"expected a rounding (rnd64, rnd32, rnd[64, ne, 1.5], no_rnd, ...), found {s!r}", t)
    if not tk.accept("["):
        return _FPT_DEFAULT_RND
    parts: list[str] = []
    while True:
        sign = "-" if tk.accept("-") else ""
        p = tk.next()
        if p[0] not in ("num", "name"):
            raise tk.error(f"expected a number or a rounding type in rnd[...], found {p[1]!r}", p)
        parts.append(sign + p[1])
        if tk.accept("]"):
            break
        tk.expect(",")
    spec = f"rnd[{', '.join(parts)}]"
    try:
        if len(parts) not in (2, 3, 5) or not parts[0].isdigit():
            raise ValueError("expected rnd[bits, type], rnd[bits, type, scale] or rnd[bits, type, scale, eps, delta]")
        scale = float(parts[2]) if len(parts) > 2 else 1.0
        eps, delta = (int(parts[3]), int(parts[4])) if len(parts) == 5 else (None, None)
        return Rounding.fptaylor(int(parts[0]), parts[1], scale, eps, delta, name=spec)
    except ValueError as exc:
        raise tk.error(f"{spec}: {exc}", t) from None


@dataclass
class _Var:
    lo: Fraction
    hi: Fraction
    bits: int  # the declared format; 0 for real (and int)


class _FPTaylorTask:
    """The names of one FPTaylor task (a file, or one ``{ ... }`` block of it) and their nodes.

    A variable becomes an input node the first time it is used: exact, or rounded to the format of
    the rounding applied to it (FPTaylor's ``rnd64(x)`` of a ``real`` x).  A variable used in more
    than one way (``correlated``: at two precisions, or rounded and exact) is one exact input and a
    rounding node per rounded use, so that every use sees the same x.
    """

    def __init__(self, tk: Tokens, b: DagBuilder, inputs: str, labels: set[str], number: int = 1,
                 correlated: frozenset = frozenset()) -> None:
        self.tk, self.b, self.inputs, self.labels, self.number = tk, b, inputs, labels, number
        self.correlated = correlated
        self.consts: dict[str, Fraction] = {}
        self.vars: dict[str, _Var] = {}
        self.defs: dict[str, tuple] = {}
        self.lines: dict[str, int] = {}
        self.var_nodes: dict[tuple, int] = {}
        self.input_var: dict[int, str] = {}
        self.input_order: dict[int, tuple[int, int, int]] = {}  # node -> (task, declaration, use): the inputs' order
        self.outputs: list[tuple[str, int]] = []
        self.noted: set[str] = set()

    def note(self, key: str, line: str) -> None:
        if key not in self.noted:
            self.noted.add(key)
            self.b.notes.append(line)

    def declare(self, t: tuple[str, str, int, int]) -> str:
        if t[0] != "name" or t[1] in _FPT_SECTIONS or _is_rounding(t[1]):
            raise self.tk.error(f"expected a name, found {t[1]!r}", t)
        if t[1] in self.lines:
            raise self.tk.error(f"{t[1]!r} is already defined on line {self.lines[t[1]]}", t)
        self.lines[t[1]] = t[2]
        return t[1]

    def label(self, name: str, use: str) -> str:
        """The input's name: the variable's, then ``x@rnd32`` for its other uses (``x#2``: task 2's x)."""
        base = name if self.number == 1 else f"{name}#{self.number}"
        out = base if not any(k[0] == name for k in self.var_nodes) else f"{base}@{use}"
        k = 2
        while out in self.labels:
            out, k = f"{base}@{use}~{k}", k + 1
        self.labels.add(out)
        return out

    def var_node(self, name: str, rnd: Rounding, where: str) -> int:
        """Variable ``name`` with ``rnd`` applied (``EXACT``: as it is)."""
        v, b = self.vars[name], self.b
        # a binary-N variable rounded to N or more bits is unchanged; inputs="exact" rounds no variable
        keep = self.inputs == "exact" or rnd.bits == 0 or 0 < v.bits <= rnd.bits
        key = (name, None if keep else rnd)
        hit = self.var_nodes.get(key)
        if hit is not None:
            return hit
        if v.lo == v.hi:  # a point: a constant (FPTaylor makes a real one a Constant)
            if keep:
                i = b.const(v.lo, None, where) if v.bits or self.inputs == "exact" else self.exact_const(v.lo, where)
            else:
                i = b.const(v.lo, rnd, where)
        elif keep:
            # exact inputs are taken as numbers of every format (so no rounding applies to them)
            bits = 16 if self.inputs == "exact" else (v.bits or _FPT_DEFAULT_TYPE)
            i = b.input(self.label(name, "exact"), v.lo, v.hi, bits, False, where, real=v.bits == 0 and bits != 16)
        elif rnd.nearest and (self.number, name) not in self.correlated:
            i = b.input(self.label(name, rnd.name), v.lo, v.hi, rnd.bits, True, where)
        else:
            i = b.round(self.var_node(name, EXACT, where), rnd, where)
        if b.op[i] == INPUT:
            self.input_var[i] = name
            self.input_order[i] = (self.number, list(self.vars).index(name), len(self.input_order))
        self.var_nodes[key] = i
        return i

    def uses(self) -> set[tuple[int, str]]:
        """The variables used in more than one way (each is then one input: see ``correlated``)."""
        seen: dict[str, int] = {}
        for name, _ in self.var_nodes:
            seen[name] = seen.get(name, 0) + 1
        return {(self.number, n) for n, k in seen.items() if k > 1}

    def exact_const(self, c: Fraction, where: str | None) -> int:
        """The real constant ``c``: exact when it is a binary64 number, else the binary64 literal with its
        (known) rounding error -- an over-approximation, so the bound stays sound."""
        return self.b.const(c, None if is_binary64(c) else 64, where)

    def round_ref(self, i: int, rnd: Rounding, where: str) -> int:
        """``rnd`` applied to node ``i`` (a definition, a variable, a sub-expression), as FPTaylor's
        rounding simplification does: no-op where ``i`` is a number of ``rnd``'s format."""
        b = self.b
        if b.fits(i, rnd):
            return i
        if i in self.input_var and b.urnd[i] == 0:
            return self.var_node(self.input_var[i], rnd, where)
        op = b.op[i]
        if op == CONST and b.urnd[i] == 0:
            return b.const(b.const_values[i], rnd, where)
        if op > CONST and b.urnd[i] == 0 and b.eta[i] == 0:  # an exact operation: round its result
            return b.add(op, b.lhs[i], b.rhs[i], rnd, where)
        return b.round(i, rnd, where)

    # -- items of each section -------------------------------------------------------------------
    def constants(self) -> None:
        name = self.declare(self.tk.next())
        self.tk.expect("=")
        self.consts[name] = _FPTaylorExpr(self, EXACT, consts_only=True).constant()

    def variables(self) -> None:
        tk = self.tk
        bits = _FPT_DEFAULT_TYPE
        if tk.peek()[1] in _FPT_TYPES:
            bits = _FPT_TYPES[tk.next()[1]]
        t = tk.peek()
        name = self.declare(tk.next())
        if not (tk.accept("in") or tk.accept("IN")):
            raise tk.error(f"expected 'in' after the variable {name!r}, found {tk.peek()[1]!r}")
        tk.expect("[")
        lo = _FPTaylorExpr(self, EXACT, consts_only=True).constant()
        tk.expect(",")
        hi = _FPTaylorExpr(self, EXACT, consts_only=True).constant()
        tk.expect("]")
        if tk.accept("+/-"):
            _FPTaylorExpr(self, EXACT, consts_only=True).constant()
            self.note("uncertainty", f"{tk.path}:{t[2]}: the uncertainty (+/-) of {name!r} is not used: the "
                                     "inputs are their ranges (FPTaylor's default, uncertainty = false)")
        if lo > hi:
            raise tk.error(f"empty input range for {name!r}: [{float(lo)}, {float(hi)}]", t)
        self.vars[name] = _Var(lo, hi, bits)

    def definitions(self, output: bool = False) -> None:
        tk = self.tk
        t = tk.next()
        name = self.declare(t)
        rnd = EXACT if tk.peek()[1] == "=" else _rounding_spec(tk)
        tk.expect("=")
        p = _FPTaylorExpr(self, rnd)
        self.defs[name] = p.expr()
        if output:
            self.outputs.append((name, p.node(self.defs[name], f"{t[2]}:{t[3]}")))

    def constraints(self) -> None:
        tk = self.tk
        t = tk.peek()
        depth, colon = 0, False
        while True:
            s = tk.peek()
            if s[0] == "eof" or (depth == 0 and (s[1] in (",", ";", "}") or s[1] in _FPT_SECTIONS)):
                break
            depth += s[1] in "([" and s[0] == "op"
            depth -= s[1] in ")]" and s[0] == "op"
            colon = colon or (depth == 0 and s[1] == ":")
            tk.next()
        if not colon:
            raise tk.error("expected a constraint 'name: expr <= expr'", t)
        self.note("constraints", f"{tk.path}:{t[2]}: Constraints are not used: the bound holds over the whole "
                                 "box of the Variables, which contains the constrained set (sound, possibly looser)")

    def expressions(self) -> None:
        tk = self.tk
        t0, t1 = tk.peek(), tk.peek(1)
        named = t0[0] == "name" and (t1[1] == "=" or (_is_rounding(t1[1]) and self._spec_then_eq()))
        if named:
            self.definitions(output=True)
            return
        p = _FPTaylorExpr(self, EXACT)
        v = p.expr()
        single = tk.i > 0 and tk.toks[tk.i - 1] is t0 and t0[0] == "name"
        name = t0[1] if single else f"Expression {len(self.outputs) + 1}"
        self.outputs.append((name, p.node(v, f"{t0[2]}:{t0[3]}")))

    def _spec_then_eq(self) -> bool:
        tk = self.tk
        if tk.peek(1)[1] == "rnd" and tk.peek(2)[1] == "[":
            k = 3
            while tk.peek(k)[1] not in ("]", "eof", ";"):
                k += 1
            return tk.peek(k + 1)[1] == "="
        return tk.peek(2)[1] == "="


class _FPTaylorExpr(_InfixGrammar):
    """FPTaylor expressions, lowered as FPTaylor reads them (REFERENCE.md: "Definitions", "Rounding").

    ``ctx`` is the rounding a definition ``name rnd= expr`` applies to every operation, variable,
    definition and literal of ``expr`` (``EXACT`` for a plain ``=``: real arithmetic).  An explicit
    ``rnd(e)`` rounds e's result only (e itself is exact inside it, and ``ctx`` does not reach in);
    ``no_rnd(e)`` is e exact.  A value is ``("lit", exact, computed, bits)`` while only numbers are
    involved (``computed`` is the binary-``bits`` value floating point gives, ``bits`` 0 while
    exact), ``("op", op, a, b, rounding, where)`` for an operation not yet made a node (so that a
    rounding applied to an exact operation's result makes one rounded node, not an exact one and
    its rounding), else ``("node", i)``.  ``x^n`` is n - 1 multiplications, each rounded in ``ctx``
    (FPTaylor rounds the power once: ours models more roundings, a larger error).
    """

    def __init__(self, task: _FPTaylorTask, ctx: Rounding, consts_only: bool = False) -> None:
        self.task, self.tk, self.b, self.ctx, self.consts_only = task, task.tk, task.b, ctx, consts_only

    def constant(self) -> Fraction:
        t = self.tk.peek()
        v = self.expr()
        if v[0] != "lit":
            raise self.tk.error("expected a constant expression (numbers and Constants)", t)
        return v[1]

    # -- values ----------------------------------------------------------------------------------
    def node(self, v: tuple, where: str) -> int:
        if v[0] == "node":
            return v[1]
        if v[0] == "op":
            _, op, a, b, rnd, at = v
            return self.b.add(op, a, b, rnd, at)
        _, exact, computed, bits = v
        if bits == 0:
            return self.task.exact_const(exact, where)
        return self.b.const(exact, Rounding.to_nearest(bits), where, computed=computed)

    def apply(self, v: tuple, rnd: Rounding, where: str) -> tuple:
        """``rnd`` applied to the value ``v``."""
        if rnd.bits == 0:
            return v
        if v[0] == "op":
            if v[4].bits == 0:  # an exact operation: its result rounded is the operation rounded
                return v[:4] + (rnd, v[5])
            return ("node", self.task.round_ref(self.node(v, where), rnd, where))
        if v[0] == "node":
            return ("node", self.task.round_ref(v[1], rnd, where))
        _, exact, computed, bits = v
        if 0 < bits <= rnd.bits or (bits == 0 and is_representable(exact, rnd.bits)
                                    and round_to_bits(exact, rnd.bits) is not None):
            return v
        if rnd.nearest:
            r = round_to_bits(computed, rnd.bits)
            if r is not None:
                return ("lit", exact, r, rnd.bits)
        if bits == 0:
            return ("node", self.b.const(exact, rnd, where))
        return ("node", self.task.round_ref(self.node(v, where), rnd, where))

    def binop(self, op: int, x: tuple, y: tuple, t) -> tuple:
        where = f"{t[2]}:{t[3]}"
        if op == DIV and y[0] == "lit" and y[2] == 0:
            raise self.tk.error("division by the literal zero", t)
        if x[0] == "lit" and y[0] == "lit":
            fold = {ADD: lambda a, c: a + c, SUB: lambda a, c: a - c, MUL: lambda a, c: a * c,
                    DIV: lambda a, c: a / c}[op]
            exact = fold(x[1], y[1])
            if self.ctx.bits == 0 and x[3] == 0 and y[3] == 0:
                return ("lit", exact, exact, 0)
            if self.ctx.bits and self.ctx.nearest:
                r = round_to_bits(fold(x[2], y[2]), self.ctx.bits) if fold(x[2], y[2]) != 0 else Fraction(0)
                if r is not None:
                    return ("lit", exact, r, self.ctx.bits)
        if self.consts_only:
            raise self.tk.error("expected a constant expression (numbers and Constants)", t)
        return ("op", op, self.node(x, where), self.node(y, where), self.ctx, where)

    # -- grammar ---------------------------------------------------------------------------------
    def _additive(self, tok: tuple) -> bool:
        return tok[1] in ("+", "-") and tok[0] == "op"

    def unary(self) -> tuple:
        t = self.tk.peek()
        if t[1] == "-":
            self.tk.next()
            v = self.unary()
            if v[0] == "lit" and (self.ctx.bits == 0 or self.ctx.nearest):  # rounding to nearest is odd
                return ("lit", -v[1], -v[2], v[3])
            if self.consts_only:
                raise self.tk.error("expected a constant expression (numbers and Constants)", t)
            return ("op", NEG, self.node(v, f"{t[2]}:{t[3]}"), -1, self.ctx, f"{t[2]}:{t[3]}")
        if t[1] == "+":
            self.tk.next()
            return self.unary()
        return self.power()

    def power(self) -> tuple:
        v = self.atom()
        if self.tk.peek()[1] == "^":
            t = self.tk.next()
            e = self.tk.next()
            if e[1] == "(" and self.tk.peek()[1] == "-":
                raise self.tk.error("negative powers x^(-n) are not supported (write 1 / x^n)", e)
            if e[0] != "num" or not e[1].isdigit() or int(e[1]) < 1:
                raise self.tk.error("only positive integer powers x^n are supported", e)
            base = v
            for _ in range(int(e[1]) - 1):
                v = self.binop(MUL, v, base, t)
        return v

    def atom(self) -> tuple:
        tk = self.tk
        t = tk.next()
        kind, s = t[0], t[1]
        where = f"{t[2]}:{t[3]}"
        if kind == "num":
            return self.apply(("lit", _literal(tk, t), _literal(tk, t), 0), self.ctx, where)
        if s == "(":
            v = self.expr()
            tk.expect(")")
            return v
        if kind != "name":
            raise tk.error(f"expected an expression, found {s!r}", t)
        if _is_rounding(s):
            if self.consts_only:
                raise tk.error(f"{s}(...) in a constant expression: Constants are exact rationals", t)
            tk.i -= 1
            rnd = _rounding_spec(tk)
            tk.expect("(")
            v = _FPTaylorExpr(self.task, EXACT).expr()
            tk.expect(")")
            return self.apply(v, rnd, where)
        if tk.peek()[1] == "(":
            tk.next()
            args = [self.expr()]
            while tk.accept(","):
                args.append(self.expr())
            tk.expect(")")
            return self.call(s, args, t)
        task = self.task
        if s in task.consts:
            return self.apply(("lit", task.consts[s], task.consts[s], 0), self.ctx, where)
        if self.consts_only and (s in task.defs or s in task.vars):
            raise tk.error(f"{s!r} in a constant expression: only numbers and Constants may appear there", t)
        if s in task.defs:
            return self.apply(task.defs[s], self.ctx, where)
        if s in task.vars:
            return ("node", task.var_node(s, self.ctx, where))
        raise tk.error(f"unknown name {s!r}", t)

    def call(self, fname: str, args: list[tuple], t) -> tuple:
        tk, b, ctx = self.tk, self.b, self.ctx
        where = f"{t[2]}:{t[3]}"
        if self.consts_only:
            raise tk.error(f"{fname}(...) in a constant expression: Constants are exact rationals "
                           "(FPTaylor: define irrational constants under Definitions)", t)
        arity = {"inv": 1, "min": 2, "max": 2, "fma": 3}.get(fname, 1)
        if fname in _FPT_UNSUPPORTED or (fname not in _FPT_FUNCS and fname not in ("inv", "min", "max", "fma")):
            raise tk.error(f"unsupported operation {fname} (supported: {_FPT_SUPPORTED})", t)
        if len(args) != arity:
            raise tk.error(f"{fname} takes {arity} argument{'s' if arity > 1 else ''}, got {len(args)}", t)
        nodes = [self.node(a, where) for a in args] if fname != "inv" else []
        if fname in _FPT_FUNCS:
            return ("op", _FPT_FUNCS[fname], nodes[0], -1, ctx, where)
        if fname == "inv":  # 1 / x, one rounding
            return self.binop(DIV, ("lit", Fraction(1), Fraction(1), 0), args[0], t)
        if fname == "max":
            return ("op", MAX, nodes[0], nodes[1], ctx, where)
        if fname == "min":  # -max(-a, -b): exact but for the rounding max applies
            na, nb = (b.add(NEG, n, -1, EXACT, where) for n in nodes)
            return ("node", self.task.round_ref(b.add(NEG, b.add(MAX, na, nb, EXACT, where), -1, EXACT, where),
                                                ctx, where))
        # fma(a, b, c): a * b + c rounded once
        return ("op", ADD, b.add(MUL, nodes[0], nodes[1], EXACT, where), nodes[2], ctx, where)


def parse_fptaylor(text: str, path: str = "<string>", inputs: str = "exact") -> ExprDAG:
    """Parse an FPTaylor input file (its REFERENCE.md, "Input file format").

    Sections ``Constants``, ``Variables``, ``Definitions``, ``Constraints``, ``Expressions`` (either
    case), items separated by ``,`` or ``;``; several tasks as ``{ ... } { ... }`` (each with its
    own names; their expressions are all outputs).  ``Constants`` are exact rationals.  Variables are
    ``[real|int|float16|float32|float64|float128] x in [lo, hi] [+/- u]``, untyped ones binary64
    (FPTaylor's default).  Definitions and expressions are ``name = e`` (real arithmetic: nothing
    rounded) or ``name rnd= e`` with ``rnd`` any rounding (``rnd64``, ``rnd32_up``, ``rnd[64, ne,
    1.5]``, ...) applied to every operation, literal, variable and definition of ``e`` that it
    changes; ``rnd(e)`` rounds e's result, ``no_rnd(e)`` is exact; an expression may be unnamed.

    ``inputs="rounded"`` is FPTaylor's semantics: a rounding applied to a ``real`` variable (or to a
    binary-N one, rounded to fewer bits) rounds it.  ``inputs="exact"`` rounds no variable: every
    input is taken as the number it is.  A variable used in more than one way (at two precisions,
    or rounded and exact) is one input with a rounding node per rounded use (the file is read twice
    then).  Not used for the bound (one note each in ``dag.notes``):
    ``Constraints`` (the bound holds over the whole box, which contains the constrained set) and
    ``+/-`` uncertainties (as FPTaylor's default ``uncertainty = false``).

    Raises:
        InputError: a syntax error or an unsupported construct, naming ``file:line:column``.
    """
    dag, multi = _parse_fptaylor(text, path, inputs, frozenset())
    if multi:  # a variable used in more than one way: parse again with one input for it
        dag, _ = _parse_fptaylor(text, path, inputs, frozenset(multi))
    return dag


def _parse_fptaylor(text: str, path: str, inputs: str, correlated: frozenset) -> tuple[ExprDAG, set]:
    tk = Tokens(text, path, "/")
    b = DagBuilder()
    labels: set[str] = set()
    multi: set[tuple[int, str]] = set()
    tasks: list[list[tuple[str, int]]] = []
    if tk.peek()[1] == "{":
        while tk.peek()[0] != "eof":
            t = tk.next()
            if t[1] != "{":
                raise tk.error(f"expected '{{' opening the next task, found {t[1]!r}", t)
            tasks.append(_fptaylor_task(tk, b, inputs, labels, len(tasks) + 1, correlated, multi))
            tk.expect("}")
    else:
        tasks.append(_fptaylor_task(tk, b, inputs, labels, 1, correlated, multi))
        if tk.peek()[0] != "eof":
            raise tk.error(f"unexpected {tk.peek()[1]!r}")
    outputs: list[tuple[str, int]] = []
    names: set[str] = set()
    for k, outs in enumerate(tasks, 1):
        for name, node in outs:
            label = name if name not in names else f"{name}#{k}"
            names.add(label)
            outputs.append((label, node))
    if not outputs:
        raise InputError(f"{path}: no Expressions to analyse")
    return b.build(outputs, Path(path).stem), multi


def _fptaylor_task(tk: Tokens, b: DagBuilder, inputs: str, labels: set[str], number: int,
                   correlated: frozenset, multi: set) -> list[tuple[str, int]]:
    task = _FPTaylorTask(tk, b, inputs, labels, number, correlated)
    section = None
    while True:
        t = tk.peek()
        if t[0] == "eof" or t[1] == "}":
            # inputs in the order the variables are declared (they are made where first used)
            order = sorted(task.input_order, key=task.input_order.get)
            done = [(n, i) for n, i in zip(b.input_names, b.input_nodes, strict=True) if i not in task.input_order]
            names = dict(zip(b.input_nodes, b.input_names, strict=True))
            b.input_nodes[:] = [i for _, i in done] + order
            b.input_names[:] = [n for n, _ in done] + [names[i] for i in order]
            multi |= task.uses()
            return task.outputs
        if t[0] == "name" and t[1] in _FPT_SECTIONS:
            tk.next()
            section = _FPT_SECTIONS[t[1]]
            continue
        if t[1] in (",", ";"):  # an empty item
            tk.next()
            continue
        if section is None:
            raise tk.error(f"expected Constants, Variables, Definitions, Constraints or Expressions, found {t[1]!r}", t)
        getattr(task, section.lower())()
        n = tk.peek()
        if n[1] in (",", ";"):
            tk.next()
        elif not (n[0] == "eof" or n[1] == "}" or (n[0] == "name" and n[1] in _FPT_SECTIONS)):
            raise tk.error(f"expected ',' or ';' after the item, found {n[1]!r}", n)


# ----------------------------------------------------------------------------- FPCore (straight line)

_SEXP = re.compile(r'\s+|;[^\n]*|(\()|(\))|(\[)|(\])|("[^"]*"|[^\s()\[\];"]+)')


def _sexp(text: str, path: str):
    """Nested lists of ``(atom, line, col)`` leaves; brackets count as parentheses."""
    stack: list[list] = [[]]
    line, ls = 1, 0
    pos = 0
    for m in _SEXP.finditer(text):
        s = m.group()
        start = m.start()
        line += text.count("\n", pos, start)
        if text.count("\n", pos, start):
            ls = text.rfind("\n", pos, start) + 1
        pos = start
        col = start - ls + 1
        if m.group(1) or m.group(3):
            stack.append([])
            stack[-1].append(("(", line, col))
        elif m.group(2) or m.group(4):
            if len(stack) == 1:
                raise InputError(f"{path}:{line}:{col}: unbalanced ')'")
            lst = stack.pop()
            stack[-1].append(lst)
        elif m.group(5):
            stack[-1].append((s, line, col))
    if len(stack) != 1:
        raise InputError(f"{path}: unbalanced '(' at end of file")
    return stack[0]


_FPC_OPS = {"+": ADD, "-": SUB, "*": MUL, "/": DIV}
_FPC_PREC = {"binary64": 64, "binary32": 32, "binary16": 16}


def parse_fpcore(text: str, path: str = "<string>", inputs: str = "exact", which: int | None = None) -> ExprDAG:
    """Parse the straight-line subset of FPCore: ``(FPCore (x ...) :pre (and (<= a x) (<= x b) ...) body)``.

    ``let``/``let*`` bindings, arithmetic, ``sqrt exp log sin cos tan atan sinh cosh tanh fabs fmax``,
    ``:precision binary64|binary32``.  Loops and conditionals raise InputError.  Every FPCore in the
    file becomes one output (``which`` selects one).
    """
    forms = _sexp(text, path)
    cores = [f for f in forms if isinstance(f, list) and len(f) > 1 and f[1][0] == "FPCore"]
    if not cores:
        raise InputError(f"{path}: no (FPCore ...) form found")
    if which is not None:
        cores = [cores[which]]
    b = DagBuilder()
    outputs: list[tuple[str, int]] = []
    for k, core in enumerate(cores):
        items = core[2:]
        if items and isinstance(items[0], tuple):  # named FPCore: (FPCore name (args) ...)
            items = items[1:]
        if not items or not isinstance(items[0], list):
            raise InputError(f"{path}:{core[0][1]}:{core[0][2]}: FPCore without an argument list")
        args = [a[0] for a in items[0][1:] if isinstance(a, tuple)]
        props: dict[str, object] = {}
        rest = items[1:]
        while len(rest) >= 2 and isinstance(rest[0], tuple) and rest[0][0].startswith(":"):
            props[rest[0][0]] = rest[1]
            rest = rest[2:]
        if len(rest) != 1:
            raise InputError(f"{path}:{core[0][1]}:{core[0][2]}: FPCore body missing or malformed")
        prec = props.get(":precision")
        bits = _FPC_PREC.get(prec[0], 0) if isinstance(prec, tuple) else 64
        if not bits:
            raise InputError(f"{path}:{prec[1]}:{prec[2]}: unsupported :precision {prec[0]}")
        boxes = _fpcore_boxes(props.get(":pre"), args, path, core[0])
        name_p = props.get(":name")
        name = name_p[0].strip('"') if isinstance(name_p, tuple) else f"core{k}"
        env: dict[str, int] = {}
        for a in args:
            lo, hi = boxes[a]
            env[a] = b.input(a, lo, hi, bits, inputs == "rounded", f"{core[0][1]}:{core[0][2]}")
        v = _fpcore_expr(rest[0], env, b, bits, path)
        outputs.append((name, v if isinstance(v, int) else b.const(v, bits)))
    return b.build(outputs, Path(path).stem)


def _fpcore_boxes(pre, args: list[str], path: str, at) -> dict[str, tuple[Fraction, Fraction]]:
    lo: dict[str, Fraction] = {}
    hi: dict[str, Fraction] = {}

    def num(x):
        if isinstance(x, tuple):
            try:
                return Fraction(x[0])
            except ValueError:
                return None
        if isinstance(x, list) and len(x) == 3 and x[1][0] == "-":
            v = num(x[2])
            return -v if v is not None else None
        if isinstance(x, list) and len(x) == 4 and x[1][0] == "/":
            p, q = num(x[2]), num(x[3])
            return p / q if p is not None and q else None
        return None

    def walk(c):
        if not isinstance(c, list) or len(c) < 2:
            return
        op = c[1][0]
        if op == "and":
            for x in c[2:]:
                walk(x)
            return
        if op in ("<=", "<", ">=", ">"):
            terms = c[2:]
            if op in (">=", ">"):
                terms = terms[::-1]
            for x, y in zip(terms, terms[1:], strict=False):
                if isinstance(y, tuple) and y[0] in args and num(x) is not None:
                    lo[y[0]] = max(lo.get(y[0], num(x)), num(x))
                if isinstance(x, tuple) and x[0] in args and num(y) is not None:
                    hi[x[0]] = min(hi.get(x[0], num(y)), num(y))

    walk(pre)
    out = {}
    for a in args:
        if a not in lo or a not in hi:
            raise InputError(f"{path}:{at[1]}:{at[2]}: no bounded input range for {a!r} in :pre")
        out[a] = (lo[a], hi[a])
    return out


def _fpcore_expr(e, env: dict[str, int], b: DagBuilder, bits: int, path: str):
    """Returns a node index or a Fraction literal."""
    if isinstance(e, tuple):
        s = e[0]
        if s in env:
            return env[s]
        try:
            return Fraction(s)
        except ValueError:
            consts = {"PI": None, "E": None}
            if s in consts:
                raise InputError(f"{path}:{e[1]}:{e[2]}: the constant {s} is not supported") from None
            raise InputError(f"{path}:{e[1]}:{e[2]}: unknown variable {s!r}") from None
    head = e[1] if len(e) > 1 else ("(", 0, 0)
    op = head[0] if isinstance(head, tuple) else None
    where = f"{head[1]}:{head[2]}" if isinstance(head, tuple) else None

    def node(v):
        return v if isinstance(v, int) else b.const(v, bits, where)

    if op in ("let", "let*"):
        new = dict(env)
        for bind in e[2][1:]:
            name = bind[1][0]
            new[name] = node(_fpcore_expr(bind[2], new if op == "let*" else env, b, bits, path))
        return _fpcore_expr(e[3], new, b, bits, path)
    if op == "!":
        return _fpcore_expr(e[-1], env, b, bits, path)
    if op in ("while", "while*", "if", "for", "for*", "tensor", "tensor*", "array", "ref", "dim", "size"):
        raise InputError(f"{path}:{where}: unsupported FPCore operation {op!r} (straight-line arithmetic only)")
    args = [_fpcore_expr(x, env, b, bits, path) for x in e[2:]]
    if op == "-" and len(args) == 1:
        return -args[0] if not isinstance(args[0], int) else b.add(NEG, args[0], -1, bits, where)
    if op in _FPC_OPS and len(args) == 2:
        x, y = args
        if not isinstance(x, int) and not isinstance(y, int):
            if op == "/" and y == 0:
                raise InputError(f"{path}:{where}: division by the literal zero")
            return {"+": x + y, "-": x - y, "*": x * y, "/": x / y if y else 0}[op]
        return b.add(_FPC_OPS[op], node(x), node(y), bits, where)
    if op in UNARY_FUNCS and len(args) == 1:
        return b.add(UNARY_FUNCS[op], node(args[0]), -1, bits, where)
    if op == "fmax" and len(args) == 2:
        return b.add(MAX, node(args[0]), node(args[1]), bits, where)
    raise InputError(f"{path}:{where}: unsupported FPCore operation {op!r} (straight-line arithmetic only)")


# ----------------------------------------------------------------------------- dispatch


def detect_format(text: str) -> str:
    """``satire``, ``fptaylor`` or ``fpcore`` from the file's first keywords."""
    head = re.sub(r"(#|//|;)[^\n]*", "", text[:20000])
    if re.search(r"\(\s*FPCore\b", head):
        return "fpcore"
    if re.search(r"\bINPUTS\s*\{", head) or re.search(r"\bEXPRS\s*\{", head):
        return "satire"
    if re.search(r"\b([Vv]ariables|[Ee]xpressions|[Dd]efinitions|[Cc]onstants)\b", head):
        return "fptaylor"
    raise InputError("cannot tell the input format (no INPUTS/EXPRS, Variables/Expressions or FPCore); "
                     "give --format")


def load(path: str | Path, fmt: str = "auto", inputs: str = "exact", progress: bool = False) -> ExprDAG:
    """Read and parse ``path`` (``fmt``: satire, fptaylor, fpcore or auto; ``progress``: a bar on big files)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not a text file (byte {exc.start} is not UTF-8); expected a Satire, "
                         "FPTaylor or FPCore file") from None
    try:
        return parse(text, str(path), fmt, inputs, progress)
    except InputError as exc:  # a check past the parser (an empty range, ...) names line:column only
        if re.match(r"\d+:\d+: ", str(exc)):
            raise InputError(f"{path}:{exc}") from None
        raise


def parse(text: str, path: str = "<string>", fmt: str = "auto", inputs: str = "exact",
          progress: bool = False) -> ExprDAG:
    """Parse ``text`` in format ``fmt`` (``auto`` detects it)."""
    if fmt == "auto":
        try:
            fmt = detect_format(text)
        except InputError as exc:
            raise InputError(f"{path}: {exc}") from None
    fn = {"satire": parse_satire, "fptaylor": parse_fptaylor, "fpcore": parse_fpcore}.get(fmt)
    if fn is None:
        raise InputError(f"unknown format {fmt!r} (satire, fptaylor, fpcore, auto)")
    if fmt == "satire":
        return parse_satire(text, path, inputs, progress)
    return fn(text, path, inputs)
