"""The host-work counter: every kind of device-to-host sync and every launch, counted on CPU tensors."""

from __future__ import annotations

import torch

from torchhpc.ext.core.hostsync import count_host_work


def test_each_kind_of_sync_is_counted_once():
    """item/int, tolist, numpy, cpu, nonzero, boolean-mask index and assignment, unique and repeat_interleave
    without output_size are syncs; with output_size and plain arithmetic they are not."""
    x = torch.arange(10.0)
    with count_host_work() as w:
        x.sum().item()
        int(x[3])
        x.tolist()
        x.numpy()
        x.cpu()
        torch.nonzero(x > 4)
        x[x > 4]
        y = x.clone()
        y[y > 4] = 0
        torch.unique(x)
        torch.repeat_interleave(torch.tensor([1, 2]), torch.tensor([2, 3]))
    assert dict(w.sync_ops) == {"item": 2, "tolist": 1, "numpy": 1, "cpu": 1, "nonzero": 1,
                                "boolean mask index": 2, "_unique2": 1, "repeat_interleave": 1}
    with count_host_work() as w:
        z = x * 2 + 1
        torch.repeat_interleave(torch.tensor([1, 2]), torch.tensor([2, 3]), output_size=5)
        x[torch.tensor([1, 2])]
        z.view(2, 5).t().reshape(-1)
    assert w.syncs == 0


def test_launches_count_compute_not_views_or_allocation():
    """Arithmetic, reductions and fills are launches; views, reshapes and empty allocations are not."""
    x = torch.randn(6, 4)
    with count_host_work() as w:
        y = x.t()  # view
        y = y.reshape(-1)  # copy of a non-contiguous view: one launch
        torch.empty(5)
        torch.zeros(5)
        (x * 2).sum()
    assert dict(w.launch_ops) == {"clone": 1, "zeros": 1, "mul": 1, "sum": 1}


def test_triton_launches_are_one_each_however_the_interpreter_works(monkeypatch):
    """A Triton kernel launch counts once, and the interpreter's own tensor traffic inside it not at all."""
    from torchhpc.triton_kernels.foresight import lorenzo_quantize_triton

    x = torch.randn(3, 4, 5)
    with count_host_work() as w:
        lorenzo_quantize_triton(x, 0.1)
        lorenzo_quantize_triton(x, 0.2)
    assert w.launch_ops["triton:_lorenzo_quantize_kernel"] == 2
    assert w.syncs == 0
    assert w.launches == 2 + 2  # the kernels and the two 1-element fills holding 1 / (2 e)


def test_a_budget_counts_per_unit_plus_a_fixed_part():
    """HostBudget allows syncs * units + fixed_syncs per call (likewise launches) and names what went over."""
    import pytest

    from torchhpc.ext.core.budgets import HostBudget

    x = torch.arange(8.0)
    with count_host_work() as w:
        for i in range(4):
            x[i].item()
        x.sum().item()
    budget = HostBudget("row", syncs=1, launches=2, fixed_syncs=1, fixed_launches=1)
    budget.check(w, 4, "rows")
    with pytest.raises(AssertionError, match="rows: 5 syncs and 1 launches for 3 row"):
        budget.check(w, 3, "rows")
