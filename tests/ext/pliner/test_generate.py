"""The Varity-style program generator: deterministic, line-addressable, and its offsets cancel exactly."""

from __future__ import annotations

import torch

from torchhpc.ext.pliner import GraphProgram, parse_precision
from torchhpc.ext.pliner.generate import random_program, suite


def test_same_seed_same_program_and_lines_in_stack_traces():
    """A seed fixes the source and the output; FX nodes point at the generated lines."""
    (m1, x1), (m2, x2) = random_program(5), random_program(5)
    assert m1.spec.source == m2.spec.source and torch.equal(m1(*x1), m2(*x2))
    prog = GraphProgram(m1, x1, parse_precision("tf32"))
    lines = {o.line for o in prog.ops.values()}
    assert all(ln.startswith("<pliner-generated-5>:") for ln in lines) and len(lines) >= m1.spec.n_statements - 1
    assert all(o.code.startswith("v") for o in prog.ops.values())


def test_offset_matmul_cancels_in_float64():
    """(a + C) @ W - b with b = C colsum(W): in float64 it equals a @ W (up to b's float32 storage)."""
    for seed in range(40):
        m, _ = random_program(seed)
        if hasattr(m, "b0") or any(n.startswith("b") for n, _ in m.named_buffers()):
            break
    name = next(n for n, _ in m.named_buffers() if n.startswith("b"))
    i = name[1:]
    w, b = getattr(m, f"w{i}").double(), getattr(m, name).double()
    c = float(b.sum() / w.sum())  # the offset C the generator used
    a = torch.randn(3, w.shape[0], dtype=torch.float64)
    got = (a + c) @ w - b
    torch.testing.assert_close(got, a @ w, rtol=0, atol=abs(c) * 1e-6 * w.shape[0])


def test_suite_keeps_only_divergent_programs():
    """Every program the suite yields diverges under emulated TF32 by more than the tolerance."""
    cases = list(suite("tf32", 3, max_tries=60))
    assert len(cases) == 3 and all(c.error_before > c.tol == 1e-3 for c in cases)
