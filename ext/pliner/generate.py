"""Random PyTorch programs for the benchmark, after Varity (Laguna, SC20's companion generator).

Each program is a straight-line ``forward(x)`` of 6-16 statements, written as Python source (one op
per line, so source-line granularity means something) and compiled with a synthetic file name that
:mod:`linecache` knows, so FX stack traces point at the generated lines.  Statements are drawn from
patterns that make floating-point results sensitive to precision, as Varity's do:

* ``(a + C) @ W - C * colsum(W)`` — a matmul whose operand carries a large offset ``C`` that is
  subtracted afterwards (cancellation amplifies the rounding of the product: bf16, TF32),
* ``(a + C) * s - C * s`` — elementwise cancellation (amplifies bf16 storage of ``a``),
* long reductions (``sum`` over 256 terms), ``softmax(a * s)``, ``var``, ``layer_norm``, ``tanh``,
  ``exp``, plain matmuls and elementwise products of earlier values.

:func:`suite` draws programs, runs each under a problem configuration and keeps the divergent ones
that enhancing everything fixes (what PLiNER's evaluation keeps, §IV).
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .config import parse_precision
from .oracle import divergence, run_config

DIM = 64
BATCH = 8
LONG = 512  # a long reduction sums DIM * LONG = 32768 terms


@dataclass
class GeneratedSpec:
    """A generated program: its source, its seed and the number of statements."""

    seed: int
    source: str
    n_statements: int
    filename: str


class GeneratedProgram(nn.Module):
    """A random program: parameters ``w0..`` ``(D, D)``, offsets ``b0..`` ``(D,)``; ``forward(x (B, D)) -> (B, D)``."""

    def __init__(self, spec: GeneratedSpec, n_weights: int, offsets: dict[int, float]):
        super().__init__()
        g = torch.Generator().manual_seed(spec.seed)
        self.spec = spec
        for i in range(n_weights):
            w = torch.randn(DIM, DIM, generator=g, dtype=torch.float64) / DIM ** 0.5
            self.register_buffer(f"w{i}", w.float())
            if i in offsets:  # C * colsum(W) in float64, so (a + C) @ W - b is a @ W up to float32 rounding
                self.register_buffer(f"b{i}", (offsets[i] * w.float().double().sum(0)).float())
        linecache.cache[spec.filename] = (len(spec.source), None, spec.source.splitlines(True), spec.filename)
        scope: dict = {"torch": torch}
        exec(compile(spec.source, spec.filename, "exec"), scope)  # noqa: S102 - our own generated source
        self._forward = scope["forward"]

    def forward(self, x):
        return self._forward(self, x)


def random_program(seed: int, min_ops: int = 6, max_ops: int = 14,
                   long_reductions: bool = False) -> tuple[GeneratedProgram, tuple]:
    """Draw program ``seed``: ``(model, (x,))`` with ``x`` of shape ``(8, 64)``.

    ``long_reductions`` adds a pattern that sums 32768 offset terms (``(v ⊗ r + C).sum() - 32768 C``):
    eager PyTorch sums with a cascade, torch.compile's generated loop accumulates differently, and
    the offset cancellation turns that into a visible divergence (the torch.compile suite).
    """
    rng = np.random.default_rng(seed)
    lines = ["def forward(self, x):", "    v0 = x"]
    values = ["v0"]
    n_w = 0
    offsets: dict[int, float] = {}
    target = int(rng.integers(min_ops, max_ops + 1))
    n_stmt = 0

    def pick() -> str:  # recent values more often: long chains, as in Varity
        k = len(values)
        p = np.arange(1, k + 1, dtype=float) ** 2
        return values[int(rng.choice(k, p=p / p.sum()))]

    def emit(expr: str) -> None:
        nonlocal n_stmt
        name = f"v{len(values)}"
        lines.append(f"    {name} = {expr}")
        values.append(name)
        n_stmt += 1

    if long_reductions:  # at least one long reduction, somewhere in the first half
        first_long = int(rng.integers(0, max(1, target // 2)))
    while n_stmt < target:
        if long_reductions and n_stmt >= first_long and "# long" not in " ".join(lines):
            c = float(rng.choice([100.0, 1000.0]))
            a = pick()
            tmp = f"t{len(values)}"  # the (B, 32768) operand: a temporary no later statement picks
            lines.append(f"    {tmp} = ({a}[:, :, None] * self.r[None]).reshape({a}.shape[0], -1)")
            lines.append(f"    {tmp} = ({tmp} + {c}).sum(dim=-1, keepdim=True) - {c * DIM * LONG}  # long")
            emit(f"{tmp} * 0.01 + {pick()}")
            n_stmt += 2
            continue
        kind = rng.choice(["offset_mm", "mm", "cancel", "softmax", "var", "ln", "sum", "unary", "binary"],
                          p=[0.16, 0.14, 0.1, 0.1, 0.08, 0.08, 0.1, 0.12, 0.12])
        a = pick()
        if kind == "offset_mm":
            c = float(rng.choice([64.0, 256.0, 1024.0]))
            offsets[n_w] = c
            emit(f"{a} + {c}")
            emit(f"{values[-1]} @ self.w{n_w}")
            emit(f"{values[-1]} - self.b{n_w}")
            n_w += 1
        elif kind == "mm":
            emit(f"{a} @ self.w{n_w}")
            n_w += 1
        elif kind == "cancel":
            c, s = float(rng.choice([100.0, 1000.0])), float(rng.choice([1.5, 3.0]))
            emit(f"({a} + {c}) * {s}")
            emit(f"{values[-1]} - {c * s}")
        elif kind == "softmax":
            emit(f"torch.softmax({a} * {float(rng.choice([1.0, 4.0, 16.0]))}, dim=-1) * {DIM}.0")
        elif kind == "var":
            emit(f"{a}.var(dim=-1, keepdim=True) + {pick()}")
        elif kind == "ln":
            emit(f"torch.nn.functional.layer_norm({a}, ({DIM},))")
        elif kind == "sum":
            emit(f"{a}.sum(dim=-1, keepdim=True) * {float(rng.choice([0.01, 0.1]))} + {pick()}")
        elif kind == "unary":
            emit(rng.choice([f"torch.tanh({a})", f"torch.exp({a}.clamp(max=8.0))", f"torch.sin({a})"]))
        else:
            emit(rng.choice([f"{a} * {pick()}", f"{a} + {pick()}", f"{a} - 0.5 * {pick()}"]))
    lines.append(f"    return {values[-1]}")
    src = "\n".join(lines) + "\n"
    spec = GeneratedSpec(seed, src, n_stmt, f"<pliner-generated-{seed}>")
    x = torch.randn(BATCH, DIM, generator=torch.Generator().manual_seed(10_000 + seed))
    model = GeneratedProgram(spec, n_w, offsets).eval()
    if long_reductions:
        model.register_buffer("r", torch.rand(DIM, LONG, generator=torch.Generator().manual_seed(20_000 + seed)))
    return model, (x,)


@dataclass
class SuiteCase:
    """A divergent, fixable generated program under one problem configuration."""

    seed: int
    problem: str
    tol: float
    error_before: float
    model: GeneratedProgram
    inputs: tuple


#: default tolerance per problem configuration (relative L2): above the configuration's ordinary noise
TOLERANCES = {"autocast-bf16": 1e-2, "tf32": 1e-3, "compile": 1e-6}


def suite(problem: str, count: int, *, tol: float | None = None, start_seed: int = 0, max_tries: int = 2000,
          reference: str = "fp32"):
    """Yield up to ``count`` :class:`SuiteCase` s: programs that diverge under ``problem`` by more than
    ``tol`` and that enhancing every op fixes (checked by the caller's search: ``error_all``)."""
    tol = TOLERANCES.get(problem, 1e-3) if tol is None else tol
    ref_cfg, prob_cfg = parse_precision(reference, "reference"), parse_precision(problem)
    found = 0
    for seed in range(start_seed, start_seed + max_tries):
        if found >= count:
            return
        model, inputs = random_program(seed, long_reductions=prob_cfg.backend == "compile")
        with torch.no_grad():
            ref = run_config(model, inputs, ref_cfg)
            out = run_config(model, inputs, prob_cfg)
        err = divergence(ref, out)
        if tol < err < float("inf"):
            found += 1
            yield SuiteCase(seed, problem, tol, err, model, inputs)


__all__ = ["GeneratedProgram", "GeneratedSpec", "SuiteCase", "TOLERANCES", "random_program", "suite"]
