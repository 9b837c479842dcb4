"""The sched demo step runs end to end on a small tour and passes its own check."""

from __future__ import annotations

import pytest

from torchhpc.ext.core.runs import Run
from torchhpc.ext.sched.config import SchedTour
from torchhpc.ext.sched.demo import demo


@pytest.mark.slow
def test_demo_step_trains_and_reports_heuristics_and_rl(tmp_path):
    """One window, one PPO epoch after the F1 warm start: the table holds every heuristic and RL, and ok."""
    run = Run("demo", None, root=tmp_path, run_id="d", progress=False)
    res = demo(SchedTour(jobs=1000, windows=1, epochs=1), run, "cpu", 0)
    assert set(res["bsld"]) == {"fcfs", "sjf", "wfp3", "unicep", "f1", "rl"} and res["ok"]
    assert list((run.dir / "sched").iterdir())  # the training run sits inside the demo's folder
