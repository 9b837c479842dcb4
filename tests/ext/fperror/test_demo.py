"""The demo step bounds its kernels soundly and reports ok."""

from __future__ import annotations

import torch

from torchhpc.ext.fperror.config import FperrorTour
from torchhpc.ext.fperror.demo import demo


def test_demo_is_ok():
    """Every kernel's sampled error is below its bound and the bounds are in the expected decade."""
    res = demo(FperrorTour(samples=30), None, torch.device("cpu"), 0)
    assert res["ok"]
    assert 1e-14 < res["kernels"]["doppler1"]["bound"] < 1e-12
    assert 1e-9 < res["kernels"]["stencil_f32"]["bound"] < 1e-6
