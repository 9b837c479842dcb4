"""The gems step of ``torchhpc demo``: a few MAST updates of a small ResNet-v2 on 2 CPU processes (torchrun)."""

from __future__ import annotations

import json
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
    from torchhpc.ext.core.config import load_config
    from torchhpc.ext.core.errors import TorchHPCError
    from torchhpc.ext.core.launch import relaunch

    from .config import GemsConfig

    try:
        cfg = load_config(GemsConfig, DEBUG_CONFIG, [f"run.root={run.dir}", "run.run_id=mast", "dist.threads=1"])
        rc = relaunch(cfg, "torchhpc.trainers.gems", 2, quiet=True)
    except TorchHPCError as exc:
        return {"ok": False, "error": str(exc)}
    if rc != 0:
        return {"ok": False, "error": f"the 2-process job exited {rc}"}
    folder = Path(run.dir) / "gems" / "mast"
    summary = json.loads((folder / "summary.json").read_text())
    keep = {k: summary[k] for k in ("schedule", "steps", "final_loss", "samples_per_s") if k in summary}
    return {"ok": True, **keep, "run": str(folder),
            "what": "MAST (two mirrored pipeline replicas) on 2 gloo processes; timeline.png in the run"}
