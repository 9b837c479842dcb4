"""The demo step finds the rotary-angle culprits and its recipe repairs the drift."""

from __future__ import annotations

import torch

from torchhpc.ext.pliner.config import PlinerTour
from torchhpc.ext.pliner.demo import demo


def test_demo_is_ok():
    """ok: culprits all in the rotary module, recipe divergence (checked by applying it) under tol."""
    res = demo(PlinerTour(), None, torch.device("cpu"), 0)
    assert res["ok"] and res["recipe_error"] <= 1e-2 < res["error_before"]
    assert any(c.endswith("aten.matmul.default") for c in res["culprits"])
