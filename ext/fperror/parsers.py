"""Front ends: Satire's ``INPUTS/OUTPUTS/EXPRS`` language, FPTaylor's ``Variables/Definitions/Expressions``
language and the straight-line subset of FPCore, each into an :class:`~.dag.ExprDAG`.

Semantics shared by all three (and stated in the docs):

* ``name rndNN = expr`` rounds every operation of ``expr`` (and every literal that is not
  representable) to NN bits; literals are read exactly as rationals, and a sub-expression made
  only of literals is folded exactly and rounded once.
* Inputs are exact (``inputs="exact"``) or rounded from the real input to their declared
  precision (``inputs="rounded"``, FPTaylor's convention for ``float64`` variables); a degenerate
  range ``(c, c)`` is the constant ``c``.
* A malformed file raises :class:`InputError` naming ``file:line:column``.
"""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

from torchhpc.ext.core.errors import InputError

from .dag import ADD, DIV, MAX, MUL, NEG, SUB, UNARY_FUNCS, DagBuilder, ExprDAG

_TOKEN_BODY = r"""
    (?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?) |
    (?P<name>[A-Za-z_][A-Za-z0-9_.$]*) |
    (?P<op><=|>=|[-+*/^(){}\[\],;:=!<>]) |
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
                    raise InputError(f"{path}:{ln}:{m.start() + 1}: unexpected character {m.group()!r}")
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
    return Fraction(s)  # exact: Fraction("0.1") is 1/10


def _bits_of(tok: str) -> int:
    return int(re.sub(r"\D", "", tok))


# ----------------------------------------------------------------------------- expressions


class _ExprParser:
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

    def expr(self) -> tuple:
        v = self.term()
        while self.tk.peek()[1] in ("+", "-"):
            t = self.tk.next()
            v = self.binop(ADD if t[1] == "+" else SUB, v, self.term(), t)
        return v

    def term(self) -> tuple:
        v = self.unary()
        while self.tk.peek()[1] in ("*", "/"):
            t = self.tk.next()
            v = self.binop(MUL if t[1] == "*" else DIV, v, self.unary(), t)
        return v

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
            return ("lit", _number(s))
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

    ``progress`` shows a tqdm bar over the tokens for large files (> 200k tokens).
    """
    tk = Tokens(text, path, "#")
    bar = None
    if progress and len(tk.toks) > 200_000:
        from tqdm import tqdm
        bar = tqdm(total=len(tk.toks), desc=f"parsing {Path(path).name}", unit="tok", unit_scale=True)
    b = DagBuilder()
    env: dict[str, int] = {}
    outputs: list[tuple[str, tuple]] = []
    seen = set()
    while tk.peek()[0] != "eof":
        sec = tk.next()
        if sec[1] not in ("INPUTS", "OUTPUTS", "EXPRS"):
            raise tk.error(f"expected INPUTS, OUTPUTS or EXPRS, found {sec[1]!r}", sec)
        seen.add(sec[1])
        tk.expect("{")
        while not tk.accept("}"):
            name = tk.next()
            if name[0] != "name":
                raise tk.error(f"expected a name, found {name[1]!r}", name)
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
                tk.expect(";")
                if lo > hi:
                    raise tk.error(f"empty input range for {name[1]!r}: ({float(lo)}, {float(hi)})", name)
                env[name[1]] = b.input(name[1], lo, hi, int(ty[1][2:]), inputs == "rounded", f"{name[2]}:{name[3]}")
            elif sec[1] == "OUTPUTS":
                tk.expect(";")
                outputs.append((name[1], name))
            else:
                r = tk.next()
                if not re.fullmatch(r"rnd(16|32|64)", r[1]):
                    raise tk.error(f"expected rnd16, rnd32 or rnd64, found {r[1]!r}", r)
                tk.expect("=")
                bits = _bits_of(r[1])
                p = _ExprParser(tk, b, env, bits)
                v = p.expr()
                env[name[1]] = p.node(v, f"{name[2]}:{name[3]}")
                tk.expect(";")
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

_FPT_TYPES = {"real": None, "float16": 16, "float32": 32, "float64": 64, "float128": 128}


def parse_fptaylor(text: str, path: str = "<string>", inputs: str = "exact") -> ExprDAG:
    """Parse FPTaylor's ``{ Variables real x in [a, b]; Definitions t rnd64= e; Expressions f rnd64= e; }``.

    ``real`` variables are exact unless ``inputs="rounded"`` (then rounded to binary64, or to the
    precision of the first ``rndNN`` in the file); ``floatNN`` variables are rounded only under
    ``inputs="rounded"`` too, so that ``exact`` means exact everywhere.
    """
    tk = Tokens(text, path, "/")
    b = DagBuilder()
    env: dict[str, int] = {}
    outputs: list[tuple[str, int]] = []
    m = re.search(r"rnd(16|32|64)", text)
    default_bits = int(m.group(1)) if m else 64
    tk.accept("{")
    section = None
    while tk.peek()[0] != "eof" and tk.peek()[1] != "}":
        t = tk.peek()
        if t[1] in ("Variables", "Definitions", "Expressions", "Constants", "Constraints"):
            tk.next()
            section = t[1]
            if section == "Constraints":
                raise tk.error("Constraints are not supported (straight-line boxes only)", t)
            continue
        if section is None:
            raise tk.error(f"expected Variables, Definitions or Expressions, found {t[1]!r}", t)
        if section == "Variables":
            ty = tk.next()
            if ty[1] not in _FPT_TYPES:
                raise tk.error(f"expected a type (real, float16/32/64), found {ty[1]!r}", ty)
            name = tk.next()
            if name[0] != "name":
                raise tk.error(f"expected a variable name, found {name[1]!r}", name)
            tk.expect("in")
            tk.expect("[")
            lo = _signed_number(tk)
            tk.expect(",")
            hi = _signed_number(tk)
            tk.expect("]")
            tk.accept(";")
            if lo > hi:
                raise tk.error(f"empty input range for {name[1]!r}: [{float(lo)}, {float(hi)}]", name)
            bits = _FPT_TYPES[ty[1]] or default_bits
            env[name[1]] = b.input(name[1], lo, hi, min(bits, 64), inputs == "rounded", f"{name[2]}:{name[3]}")
            continue
        name = tk.next()
        if name[0] != "name":
            raise tk.error(f"expected a name, found {name[1]!r}", name)
        r = tk.next()
        if re.fullmatch(r"rnd(16|32|64)", r[1]):
            tk.expect("=")
            bits = _bits_of(r[1])
        elif r[1] == "=":
            bits = default_bits
        else:
            raise tk.error(f"expected 'rnd64=' or '=', found {r[1]!r}", r)
        p = _ExprParser(tk, b, env, bits)
        v = p.expr()
        env[name[1]] = p.node(v, f"{name[2]}:{name[3]}")
        tk.accept(";")
        if section == "Expressions":
            outputs.append((name[1], env[name[1]]))
    tk.accept("}")
    if tk.peek()[0] != "eof":
        raise tk.error(f"unexpected {tk.peek()[1]!r} after the closing brace")
    if not outputs:
        raise InputError(f"{path}: no Expressions to analyse")
    return b.build(outputs, Path(path).stem)


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
    if re.search(r"\b(Variables|Expressions)\b", head):
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
    return parse(text, str(path), fmt, inputs, progress)


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
