"""Trace a user's PyTorch function into an :class:`~.dag.ExprDAG`, element by element.

The function runs once on tensors at the centre of the ranges under a ``TorchDispatchMode``
that sees every aten operation; for each it records, beside the real result, a tensor of node
ids of the same shape (shape operations are applied to the id tensors themselves, arithmetic adds
one node per element).  Reductions (``sum``, ``mean``, ``mm``, ``matmul``, ``softmax``) are expanded
into left-to-right chains of additions: the bound is for that order (torch may sum in another
order; the sampler checks the real torch function against it).  Each node remembers the line of the
user's code that created it, so the culprit operations name ``file:line``.
"""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.core.usercode import UserFunction

from .dag import ABS, ADD, COS, DIV, EXP, LOG, MAX, MUL, NEG, SIN, SQRT, SUB, TANH, DagBuilder, ExprDAG

aten = torch.ops.aten
_BITS = {torch.float64: 64, torch.float32: 32, torch.float16: 16}
_HERE = str(Path(__file__).resolve().parent)
_TORCH = str(Path(torch.__file__).resolve().parent)

_UNARY = {aten.neg.default: NEG, aten.exp.default: EXP, aten.log.default: LOG, aten.sqrt.default: SQRT,
          aten.sin.default: SIN, aten.cos.default: COS, aten.tanh.default: TANH, aten.abs.default: ABS}
_BINARY = {"add": ADD, "sub": SUB, "mul": MUL, "div": DIV, "maximum": MAX}
_READS = {"_local_scalar_dense", "is_nonzero", "equal"}  # a tensor's value handed to Python
_SHAPE = {"view", "_unsafe_view", "reshape", "expand", "permute", "t", "transpose", "unsqueeze", "squeeze",
          "slice", "select", "clone", "contiguous", "alias", "detach", "cat", "stack", "index_select",
          "lift_fresh", "flip", "roll", "narrow", "split", "unbind", "chunk", "split_with_sizes"}


def _user_line() -> str:
    f = sys._getframe(2)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_HERE) and not fn.startswith(_TORCH) and "torch/" not in fn:
            return f"{Path(fn).name}:{f.f_lineno}"
        f = f.f_back
    return "?"


class _Tracer(TorchDispatchMode):
    def __init__(self, builder: DagBuilder) -> None:
        super().__init__()
        self.b = builder
        self.ids: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        # the tensors computed from the inputs (comparisons and masks included): their values are data
        self.tainted: dict[int, torch.Tensor] = {}

    def taint(self, out) -> None:
        for t in (out if isinstance(out, (list, tuple)) else (out,)):
            if isinstance(t, torch.Tensor):
                self.tainted[id(t)] = t

    def depends(self, *args) -> bool:
        """Whether any tensor among ``args`` (lists included) was computed from the traced inputs."""
        for a in args:
            if isinstance(a, (list, tuple)) and self.depends(*a):
                return True
            if isinstance(a, torch.Tensor) and self.tainted.get(id(a)) is a:
                return True
        return False

    # -- id tensors --------------------------------------------------------------------------------
    def ids_of(self, t, bits: int, where: str) -> torch.Tensor:
        if isinstance(t, torch.Tensor):
            hit = self.ids.get(id(t))
            if hit is not None and hit[0] is t:
                return hit[1]
            # a tensor the function made itself (a constant): exact elements
            vals = t.detach().to(torch.float64).reshape(-1).tolist()
            # a wider constant (a Python float wrapped as float64) is rounded to the op's precision
            rb = bits if _BITS.get(t.dtype, 64) > bits else None
            ids = [self.b.const(Fraction(v), rb, where) for v in vals]
            return torch.tensor(ids, dtype=torch.int64).reshape(t.shape)
        if isinstance(t, (int, float)):
            return torch.tensor(self.b.const(Fraction(t), bits, where), dtype=torch.int64)
        raise InputError(f"{where}: unsupported argument {type(t).__name__} in a traced operation")

    def bind(self, out: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        self.ids[id(out)] = (out, ids)
        return out

    def elementwise(self, op: int, a: torch.Tensor, b: torch.Tensor | None, bits: int, where: str) -> torch.Tensor:
        if b is not None:
            a, b = torch.broadcast_tensors(a, b)
            res = [self.b.add(op, x, y, bits, where) for x, y in zip(a.reshape(-1).tolist(), b.reshape(-1).tolist(), strict=True)]
        else:
            res = [self.b.add(op, x, -1, bits, where) for x in a.reshape(-1).tolist()]
        return torch.tensor(res, dtype=torch.int64).reshape(a.shape)

    def chain_sum(self, ids: torch.Tensor, dims, keepdim: bool, bits: int, where: str) -> torch.Tensor:
        nd = ids.dim()
        if nd == 0:  # the sum of a scalar is itself
            return ids
        dims = list(range(nd)) if dims is None or dims == [] else [d % nd for d in dims]
        rest = [d for d in range(nd) if d not in dims]
        x = ids.permute(*rest, *dims)
        out_shape = [ids.shape[d] for d in rest]
        x = x.reshape(-1, max(1, int(torch.tensor([ids.shape[d] for d in dims]).prod())) if dims else 1)
        res = []
        for row in x.tolist():
            acc = row[0]
            for v in row[1:]:
                acc = self.b.add(ADD, acc, v, bits, where)
            res.append(acc)
        out = torch.tensor(res, dtype=torch.int64).reshape(out_shape)
        if keepdim:
            for d in sorted(dims):
                out = out.unsqueeze(d)
        return out

    def chain_max(self, ids: torch.Tensor, dim: int, keepdim: bool, bits: int, where: str) -> torch.Tensor:
        x = ids.movedim(dim, -1)
        shape = x.shape[:-1]
        res = []
        for row in x.reshape(-1, x.shape[-1]).tolist():
            acc = row[0]
            for v in row[1:]:
                acc = self.b.add(MAX, acc, v, bits, where)
            res.append(acc)
        out = torch.tensor(res, dtype=torch.int64).reshape(shape)
        return out.unsqueeze(dim) if keepdim else out

    def matmul_ids(self, a: torch.Tensor, b: torch.Tensor, bits: int, where: str) -> torch.Tensor:
        # (.., m, k) x (.., k, n): products then a chain over k
        prod = self.elementwise(MUL, a.unsqueeze(-1), b.unsqueeze(-3), bits, where)  # (.., m, k, n)
        return self.chain_sum(prod, [prod.dim() - 2], False, bits, where)

    # -- dispatch -------------------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in _READS and self.depends(*args):
            # Python looks at a value computed from the inputs (if/float()/item()/bool()): the path
            # traced at the centre of the box need not be the path taken elsewhere in it
            raise InputError(f"{_user_line()}: the function reads the value of a tensor computed from its "
                             "inputs (if, float(), item(), bool()): its control flow may depend on the inputs, "
                             "and a bound traced along one path does not hold for the others; fperror bounds "
                             "straight-line code (write the choice with torch.maximum, abs or relu, or trace "
                             "each branch over the sub-range where it is taken)")
        out = func(*args, **kwargs)
        if self.depends(*args, *kwargs.values()):
            self.taint(out)
        where = _user_line()
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not tensors or not isinstance(out, (torch.Tensor, list, tuple)):
            return out
        if isinstance(out, torch.Tensor) and not out.is_floating_point():
            return out
        ref = out if isinstance(out, torch.Tensor) else out[0]
        bits = _BITS.get(ref.dtype if isinstance(ref, torch.Tensor) else torch.float64)
        if bits is None:
            raise InputError(f"{where}: dtype {ref.dtype} is not float16/32/64")
        if name in _SHAPE:
            mapped = [self.ids_of(a, bits, where) if isinstance(a, torch.Tensor) else
                      ([self.ids_of(t, bits, where) for t in a] if isinstance(a, (list, tuple)) and a and
                       isinstance(a[0], torch.Tensor) else a) for a in args]
            if name in ("lift_fresh", "alias", "detach", "contiguous"):
                mapped = mapped[:1]
                res = mapped[0]
            else:
                res = func(*mapped, **{k: v for k, v in kwargs.items() if k not in ("memory_format",)})
            if isinstance(out, (list, tuple)):
                for o, r in zip(out, res, strict=True):
                    self.bind(o, r)
                return out
            return self.bind(out, res)
        if func in _UNARY:
            return self.bind(out, self.elementwise(_UNARY[func], self.ids_of(args[0], bits, where), None, bits, where))
        if name == "relu":
            zero = self.ids_of(0.0, bits, where)
            return self.bind(out, self.elementwise(MAX, self.ids_of(args[0], bits, where), zero, bits, where))
        if name in _BINARY:
            a = self.ids_of(args[0], bits, where)
            b = self.ids_of(args[1], bits, where)
            alpha = kwargs.get("alpha", 1)
            if alpha != 1:
                b = self.elementwise(MUL, b, self.ids_of(alpha, bits, where), bits, where)
            if kwargs.get("rounding_mode") is not None:
                raise InputError(f"{where}: division with rounding_mode is not supported")
            return self.bind(out, self.elementwise(_BINARY[name], a, b, bits, where))
        if name == "rsub":
            a = self.ids_of(args[0], bits, where)
            b = self.ids_of(args[1], bits, where)
            return self.bind(out, self.elementwise(SUB, b, a, bits, where))
        if name in ("sum", "mean"):
            ids = self.ids_of(args[0], bits, where)
            dims = args[1] if len(args) > 1 else kwargs.get("dim")
            keep = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
            s = self.chain_sum(ids, list(dims) if dims is not None else None, keep, bits, where)
            if name == "mean":
                n = ids.numel() // max(1, s.numel())
                s = self.elementwise(DIV, s, self.ids_of(float(n), bits, where), bits, where)
            return self.bind(out, s)
        if name == "amax":
            ids = self.ids_of(args[0], bits, where)
            dims = list(args[1]) if len(args) > 1 else list(range(ids.dim()))
            keep = args[2] if len(args) > 2 else False
            if len(dims) != 1:
                raise InputError(f"{where}: amax over several dims is not supported")
            return self.bind(out, self.chain_max(ids, dims[0] % ids.dim(), keep, bits, where))
        if name in ("mm", "bmm", "matmul"):
            return self.bind(out, self.matmul_ids(self.ids_of(args[0], bits, where), self.ids_of(args[1], bits, where),
                                                  bits, where))
        if name in ("mv", "dot"):
            a = self.ids_of(args[0], bits, where)
            b = self.ids_of(args[1], bits, where)
            prod = self.elementwise(MUL, a, b if name == "dot" else b.unsqueeze(0), bits, where)
            return self.bind(out, self.chain_sum(prod, [prod.dim() - 1], False, bits, where))
        if name == "addmm":
            mm = self.matmul_ids(self.ids_of(args[1], bits, where), self.ids_of(args[2], bits, where), bits, where)
            return self.bind(out, self.elementwise(ADD, self.ids_of(args[0], bits, where), mm, bits, where))
        if name == "_softmax":
            x = self.ids_of(args[0], bits, where)
            dim = args[1] % x.dim()
            m = self.chain_max(x, dim, True, bits, where)
            e = self.elementwise(EXP, self.elementwise(SUB, x, m, bits, where), None, bits, where)
            s = self.chain_sum(e, [dim], True, bits, where)
            return self.bind(out, self.elementwise(DIV, e, s, bits, where))
        raise InputError(f"{where}: torch operation {func} is not supported by the fperror tracer "
                         "(supported: + - * / neg exp log sqrt sin cos tanh abs relu maximum sum mean amax "
                         "mm matmul mv dot addmm softmax and shape operations)")


def _result_error(fn, expected: str, got: str) -> InputError:
    if isinstance(fn, UserFunction):
        return fn.result_error(expected, got)
    return InputError(f"the traced function {getattr(fn, '__name__', '')}() must return {expected}, got {got}")


def trace(fn, ranges: dict[str, tuple[float, float]], shapes: dict[str, tuple[int, ...]] | None = None,
          dtype: torch.dtype = torch.float64, inputs: str = "exact") -> ExprDAG:
    """Trace ``fn(**tensors)`` into a DAG; argument ``name`` ranges over ``ranges[name]`` elementwise.

    Args:
        fn: a function of tensors (keyword arguments named as in ``ranges``) returning a tensor
            or a tuple of tensors.
        ranges: ``{name: (lo, hi)}`` for every argument.
        shapes: ``{name: shape}``; an argument without a shape is a 0-d tensor.
        dtype: the precision the function runs in (float64, float32 or float16).

    Raises:
        InputError: an empty range, a bound that is not a finite number, a dimension below 1, an unsupported
            torch operation or a value of the inputs read by Python (a data-dependent branch; naming the line),
            a non-float or empty result.
    """
    if dtype not in _BITS:
        raise InputError(f"dtype {dtype} is not float16/32/64")
    shapes = shapes or {}
    for name, shape in shapes.items():
        if name not in ranges:
            raise InputError(f"a shape is given for {name!r}, which has no range")
        if any(int(d) < 1 for d in shape):
            raise InputError(f"shape of {name!r} is {tuple(shape)}: every dimension must be at least 1")
    bits = _BITS[dtype]
    b = DagBuilder()
    tracer = _Tracer(b)
    kw = {}
    for name, (lo, hi) in ranges.items():
        try:
            lo_f, hi_f = Fraction(lo), Fraction(hi)
        except (ValueError, OverflowError, TypeError):
            raise InputError(f"range of {name!r} is {lo}:{hi}: both bounds must be finite numbers") from None
        if lo_f > hi_f:
            raise InputError(f"range of {name!r} is empty: {lo}:{hi}")
        shape = tuple(shapes.get(name, ()))
        n = 1
        for s in shape:
            n *= s
        ids = []
        for i in range(n):
            idx = torch.unravel_index(torch.tensor(i), shape) if shape else ()
            label = name + ("[" + ",".join(str(int(j)) for j in idx) + "]" if shape else "")
            ids.append(b.input(label, lo_f, hi_f, bits, inputs == "rounded", f"input {label}"))
        t = torch.full(shape, float((lo_f + hi_f) / 2), dtype=dtype)
        kw[name] = t
        tracer.bind(t, torch.tensor(ids, dtype=torch.int64).reshape(shape))
        tracer.taint(t)
    with tracer:
        try:
            res = fn(**kw)
        except InputError as exc:  # the tracer's refusal (an op it does not model, a branch on data)
            if isinstance(fn, UserFunction):
                raise fn.error(f"cannot be traced: {exc}") from exc
            raise
    outs = res if isinstance(res, (tuple, list)) else (res,)
    pairs = []
    for k, o in enumerate(outs):
        if not isinstance(o, torch.Tensor) or not o.is_floating_point():
            got = type(o).__name__ if not isinstance(o, torch.Tensor) else f"a {o.dtype} tensor"
            raise _result_error(fn, "a floating-point tensor or a tuple of them", got)
        hit = tracer.ids.get(id(o))
        if hit is None or hit[0] is not o:
            raise _result_error(fn, "tensors computed from its inputs by supported operations",
                                "a tensor that does not depend on them")
        ids = hit[1].reshape(-1).tolist()
        base = f"out{k}" if len(outs) > 1 else "out"
        for j, i in enumerate(ids):
            idx = torch.unravel_index(torch.tensor(j), o.shape) if o.dim() else ()
            pairs.append((base + ("[" + ",".join(str(int(x)) for x in idx) + "]" if o.dim() else ""), i))
    if not pairs:
        shown = ", ".join(f"{k}={tuple(v)}" for k, v in shapes.items()) or "none"
        raise _result_error(fn, "at least one value to bound", f"only empty tensors (shapes: {shown}); "
                                                               "check the input shapes")
    return b.build(pairs, getattr(fn, "name", None) or getattr(fn, "__name__", "traced"))
