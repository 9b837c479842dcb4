"""``--device auto`` is the device measured faster for each system, on a machine with a GPU too.

The CUDA runtime is faked as present (``torch.cuda.is_available`` patched): nothing here touches a GPU,
only the choice is checked.  Where the measured choice is the CPU (segalign's whole alignment, sched's
simulator), ``auto`` must not pick CUDA even though it is there.
"""

from __future__ import annotations

import pytest
import torch

from torchhpc.ext.core.device import pick_device, resolve_auto
from torchhpc.ext.core.distributed import distributed


@pytest.fixture
def cuda_present(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def test_auto_follows_the_declared_choice(cuda_present):
    assert pick_device("auto").type == "cuda"
    assert pick_device(None, auto="cuda").type == "cuda"
    assert pick_device("auto", auto="cpu").type == "cpu"
    assert pick_device("cuda", auto="cpu").type == "cuda"  # an explicit device is taken as given
    assert resolve_auto("auto", "cpu") == "cpu" and resolve_auto("auto", "cuda") == "auto"
    with pytest.raises(ValueError, match="auto must be one of"):
        resolve_auto("auto", "gpu")


def test_auto_without_a_gpu_is_the_cpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert pick_device("auto", auto="cuda").type == "cpu"


def test_segalign_auto_is_the_cpu(cuda_present):
    from torchhpc.ext.segalign.align import plan_alignment
    from torchhpc.ext.segalign.config import AUTO_DEVICE, AlignConfig

    assert AUTO_DEVICE == "cpu"
    plan = plan_alignment(AlignConfig(device="auto"))
    assert plan.device.type == "cpu" and plan.ctx.device.type == "cpu"
    assert plan_alignment(AlignConfig(device="cuda")).device.type == "cuda"  # asked for: taken as given
    assert plan.backend != "triton"


def test_sched_auto_is_the_cpu(cuda_present):
    from torchhpc.ext.sched.config import AUTO_DEVICE

    assert AUTO_DEVICE == "cpu"
    with distributed(device="auto", auto=AUTO_DEVICE) as ctx:  # one process: no process group
        assert ctx.device.type == "cpu"


def test_ccsdt_auto_backend_on_cuda_is_the_measured_one(cuda_present):
    """On CUDA, the fused kernel for small virtual spaces and cuBLAS's blocked GEMMs for large ones."""
    from torchhpc.ext.ccsdt.ops import TRITON_AUTO_MAX_NVIR, triples_backend

    assert triples_backend("auto", 120, torch.device("cuda")) == "torch"  # o=20 v=120: 1.30 s against 4.62 s
    assert triples_backend("auto", TRITON_AUTO_MAX_NVIR, torch.device("cuda")) == "triton"
    assert triples_backend("auto", 60, torch.device("cpu")) == "torch"


def test_cuda_free_bytes_counts_the_allocators_cache(monkeypatch):
    """Memory PyTorch's caching allocator holds but does not use is free for a new buffer (the driver counts it
    as used): ccsdt's (T) sizes its blocks from it, and a second call in one process must get the first's
    budget (faked allocator: 10 GiB free by the driver, 30 GiB reserved, 4 GiB of it allocated)."""
    from torchhpc.ext.ccsdt.ops import memory_budget_mb
    from torchhpc.ext.core.device import cuda_free_bytes

    gib = 1 << 30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (10 * gib, 80 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 30 * gib)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 4 * gib)
    assert cuda_free_bytes("cuda") == 36 * gib
    assert memory_budget_mb(None, "cuda") == 0.8 * 36 * 1024


def test_each_rank_takes_its_own_gpu_or_one_clear_error(monkeypatch):
    """Under torchrun on CUDA a rank computes on cuda:LOCAL_RANK, made current (foresight's sweep, whose process
    group is gloo on the CPU, put every rank on cuda:0); more ranks than GPUs on a machine is one error (it
    wrapped around, and NCCL refused two ranks on one GPU with its own message)."""
    from torchhpc.ext.core.distributed import DistContext, local_cuda_device
    from torchhpc.ext.core.errors import DistributedError
    from torchhpc.ext.foresight.config import SweepConfig
    from torchhpc.ext.foresight.sweep import sweep_device

    current = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    assert local_cuda_device(1) == torch.device("cuda", 1) and current == [torch.device("cuda", 1)]
    with pytest.raises(DistributedError, match="local rank 2 has no GPU of its own: this machine has 2"):
        local_cuda_device(2)
    cfg = SweepConfig()
    cfg.dist.device = "cuda"
    ctx = DistContext(3, 4, 1, torch.device("cpu"), "gloo")  # the sweep's ranks gather over gloo
    assert sweep_device(cfg, ctx) == torch.device("cuda", 1)
    assert sweep_device(cfg, None).type == "cuda"
