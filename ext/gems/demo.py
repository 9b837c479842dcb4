"""The gems step of ``torchhpc demo``: a few MAST updates of a small ResNet-v2 on 2 CPU processes (torchrun)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from .config import GemsTour

DEBUG_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "gems" / "debug.yaml"
"""The config the step runs (4 MAST updates, 2 stages); it ships with a checkout."""


def demo(tour: GemsTour, run: Any, device: Any, seed: int) -> dict:
    """Run ``configs/gems/debug.yaml`` under ``torchrun --nproc-per-node 2`` into ``<run>/gems/mast``.

    Args:
        tour: the step's options (none).
        run: the demo's :class:`~torchhpc.ext.core.runs.Run`; the gems run goes into its folder.
        device, seed: unused (the step runs on CPU processes with the config's seeds).

    Returns:
        ``ok`` and, when it ran, the schedule, updates, final loss, samples/s and the run folder; else ``error``
        (the last line the job printed, or a missing config).
    """
    del tour, device, seed
    if not DEBUG_CONFIG.is_file():
        return {"ok": False, "error": f"{DEBUG_CONFIG} not found (run the demo from a checkout)"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           "-m", "torchhpc.trainers.gems", "--config", str(DEBUG_CONFIG),
           "--set", f"run.root={run.dir}", "--set", "run.run_id=mast"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["(no output)"]
        return {"ok": False, "error": tail[0]}
    folder = Path(run.dir) / "gems" / "mast"
    summary = json.loads((folder / "summary.json").read_text())
    keep = {k: summary[k] for k in ("schedule", "steps", "final_loss", "samples_per_s") if k in summary}
    return {"ok": True, **keep, "run": str(folder),
            "what": "MAST (two mirrored pipeline replicas) on 2 gloo processes; timeline.png in the run"}
