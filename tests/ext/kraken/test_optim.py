"""Sparse row optimizers against torch.optim and the written-out update rules."""

from __future__ import annotations

import pytest
import torch

from torchhpc.ext.core.errors import ConfigError
from torchhpc.ext.kraken.optim import SparseOptimizer


def _setup(N=12, D=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(N, D, generator=g), g


def test_adam_on_rows_touched_every_step_equals_torch_adam():
    w, g = _setup()
    rows = torch.tensor([1, 4, 7])
    opt = SparseOptimizer("adam", lr=0.01)
    state = opt.init_state(w.shape[0], w.shape[1], "cpu")
    p = torch.nn.Parameter(w[rows].clone())
    ref = torch.optim.Adam([p], lr=0.01, eps=1e-8)
    for step in range(1, 6):
        grad = torch.randn(3, w.shape[1], generator=g)
        opt.step(w, state, rows, grad, step)
        p.grad = grad.clone()
        ref.step()
    torch.testing.assert_close(w[rows], p.detach(), rtol=1e-6, atol=1e-7)


def test_sgd_and_untouched_rows():
    w, g = _setup()
    w0 = w.clone()
    rows = torch.tensor([0, 11])
    grad = torch.randn(2, w.shape[1], generator=g)
    SparseOptimizer("sgd", lr=0.5).step(w, {}, rows, grad, 1)
    torch.testing.assert_close(w[rows], w0[rows] - 0.5 * grad)
    mask = torch.ones(w.shape[0], dtype=torch.bool)
    mask[rows] = False
    assert torch.equal(w[mask], w0[mask])


def test_rowwise_adagrad_written_out():
    w, g = _setup()
    opt = SparseOptimizer("rowwise_adagrad", lr=0.1, eps=1e-8)
    state = opt.init_state(*w.shape, "cpu")
    assert state["v"].shape == (w.shape[0],)  # one scalar per row
    w_ref, acc = w.clone(), torch.zeros(w.shape[0])
    for step in range(1, 4):
        rows = torch.tensor([2, 5, 9]) if step != 2 else torch.tensor([5])
        grad = torch.randn(rows.numel(), w.shape[1], generator=g)
        opt.step(w, state, rows, grad, step)
        for i, r in enumerate(rows.tolist()):  # the rule, one row at a time
            acc[r] += float((grad[i] ** 2).mean())
            w_ref[r] -= 0.1 * grad[i] / (acc[r].sqrt() + 1e-8)
    torch.testing.assert_close(w, w_ref)
    torch.testing.assert_close(state["v"], acc)


def test_rowwise_adam_written_out():
    w, g = _setup()
    opt = SparseOptimizer("rowwise_adam", lr=0.01)
    state = opt.init_state(*w.shape, "cpu")
    w_ref, m, v = w.clone(), torch.zeros_like(w), torch.zeros(w.shape[0])
    rows = torch.tensor([3, 8])
    for step in range(1, 5):
        grad = torch.randn(2, w.shape[1], generator=g)
        opt.step(w, state, rows, grad, step)
        for i, r in enumerate(rows.tolist()):
            m[r] = 0.9 * m[r] + 0.1 * grad[i]
            v[r] = 0.999 * v[r] + 0.001 * (grad[i] ** 2).mean()
            w_ref[r] -= 0.01 * (m[r] / (1 - 0.9**step)) / ((v[r] / (1 - 0.999**step)).sqrt() + 1e-8)
    torch.testing.assert_close(w, w_ref)


def test_state_memory_per_row():
    assert SparseOptimizer("sgd").state_bytes_per_row(16) == 0
    assert SparseOptimizer("rowwise_adagrad").state_bytes_per_row(16) == 4
    assert SparseOptimizer("rowwise_adam").state_bytes_per_row(16) == 68
    assert SparseOptimizer("adam").state_bytes_per_row(16) == 128


def test_bad_optimizer_config():
    with pytest.raises(ConfigError, match="one of"):
        SparseOptimizer("lamb")
    with pytest.raises(ConfigError, match="lr"):
        SparseOptimizer("sgd", lr=0)
