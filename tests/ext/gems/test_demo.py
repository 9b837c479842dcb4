"""The gems step of the demo tour runs the debug config on 2 torchrun processes and reports its figures."""

from __future__ import annotations

import pytest

from torchhpc.ext.core.runs import Run
from torchhpc.ext.gems.config import GemsTour
from torchhpc.ext.gems.demo import demo


@pytest.mark.distributed
def test_demo_step_trains_mast_and_reports_its_loss(tmp_path):
    """demo() trains 4 MAST updates in the demo's run folder and returns ok with the final loss of the debug run."""
    run = Run("demo", None, root=tmp_path, run_id="tour", progress=False)
    res = demo(GemsTour(), run, "cpu", 0)
    assert res["ok"] is True, res
    assert res["schedule"] == "mast" and res["steps"] == 4 and res["samples_per_s"] > 0
    assert res["final_loss"] == pytest.approx(1.4431813955307007, rel=1e-6)  # as tests/trainers/test_gems_pinned.py
    assert (run.dir / "gems" / "mast" / "timeline.png").is_file()
