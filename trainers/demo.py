"""``torchhpc demo`` / ``make demo``: a quick tour that runs each system on an embedded input.

Every step makes its own input (no download, no external file), runs the system, checks the
result against an independent reference where one is cheap, and records figures in one run folder
``runs/demo/<run-id>/``: ``summary.json`` (one entry per step), ``metrics.jsonl`` and a PNG per
step.  Each step is the ``demo(tour, run, device, seed)`` function of ``ext/<system>/demo.py``;
its options are the ``<System>Tour`` dataclass of ``ext/<system>/config.py``.

    torchhpc demo                               # all steps, defaults
    torchhpc demo --config configs/demo/default.yaml --steps [kraken] --kraken.repeats 3
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from torchhpc.ext.ccsdt.config import CCSDTTour
from torchhpc.ext.collectives.config import CollectivesTour
from torchhpc.ext.core.cli import config_command, job_main
from torchhpc.ext.core.config import ConfigError, RunOptions, option
from torchhpc.ext.foresight.config import ForesightTour
from torchhpc.ext.fperror.config import FperrorTour
from torchhpc.ext.gems.config import GemsTour
from torchhpc.ext.kraken.config import KrakenTour
from torchhpc.ext.pliner.config import PlinerTour
from torchhpc.ext.sched.config import SchedTour
from torchhpc.ext.segalign.config import SegalignTour
from torchhpc.ext.symnmf.config import SymnmfTour

#: the tour's steps in order: step name -> the module whose ``demo(tour, run, device, seed)`` runs it
TOUR: dict[str, str] = {
    "sched": "torchhpc.ext.sched.demo",
    "kraken": "torchhpc.ext.kraken.demo",
    "gems": "torchhpc.ext.gems.demo",
    "segalign": "torchhpc.ext.segalign.demo",
    "ccsdt": "torchhpc.ext.ccsdt.demo",
    "fperror": "torchhpc.ext.fperror.demo",
    "symnmf": "torchhpc.ext.symnmf.demo",
    "pliner": "torchhpc.ext.pliner.demo",
    "foresight": "torchhpc.ext.foresight.demo",
    "collectives": "torchhpc.ext.collectives.demo",
}


@dataclass
class DemoConfig:
    """The demo tour: which steps, on which device, and each step's options."""

    steps: list[str] = option(default_factory=lambda: list(TOUR), help="which systems to run, in order")
    seed: int = option(0, help="seed of every generated input", ge=0)
    device: str = option("auto", help="auto (CUDA when present), cpu or cuda", choices=["auto", "cpu", "cuda"])
    sched: SchedTour = option(default_factory=SchedTour, help="sched step")
    kraken: KrakenTour = option(default_factory=KrakenTour, help="kraken step")
    gems: GemsTour = option(default_factory=GemsTour, help="gems step")
    segalign: SegalignTour = option(default_factory=SegalignTour, help="segalign step")
    ccsdt: CCSDTTour = option(default_factory=CCSDTTour, help="ccsdt step")
    fperror: FperrorTour = option(default_factory=FperrorTour, help="fperror step")
    symnmf: SymnmfTour = option(default_factory=SymnmfTour, help="symnmf step")
    pliner: PlinerTour = option(default_factory=PlinerTour, help="pliner step")
    foresight: ForesightTour = option(default_factory=ForesightTour, help="foresight step")
    collectives: CollectivesTour = option(default_factory=CollectivesTour, help="collectives step")
    run: RunOptions = option(default_factory=RunOptions, help="run folder")

    def __post_init__(self) -> None:
        unknown = [s for s in self.steps if s not in TOUR]
        if unknown:
            raise ConfigError(f"steps: unknown step {unknown[0]!r} (available: {', '.join(TOUR)})")


def run_demo(cfg: DemoConfig) -> int:
    """Run the tour's steps; exit status 1 when any step's own check fails."""
    import torch

    from torchhpc.ext.core.device import pick_device
    from torchhpc.ext.core.runs import open_run

    torch.manual_seed(cfg.seed)
    device = pick_device(cfg.device)
    run = open_run("demo", cfg, cfg.run)
    print(f"torchhpc demo -> {run.dir}")
    results = {}
    for name in run.progress(cfg.steps, desc="demo"):
        t0 = time.perf_counter()
        res = importlib.import_module(TOUR[name]).demo(getattr(cfg, name), run, device, cfg.seed)
        res["seconds"] = round(time.perf_counter() - t0, 3)
        results[name] = res
        run.write_summary({name: res})
        print(f"  {name:<8} {_one_line(res)}")
    ok = all(r.get("matches_torchrec", True) and r.get("ok", True) for r in results.values())
    run.write_summary({"ok": ok})
    print(f"summary: {run.dir / 'summary.json'}")
    return 0 if ok else 1


def _one_line(res: dict) -> str:
    keys = [k for k in res if k != "what"][:6]
    return ", ".join(f"{k}={res[k]}" for k in keys)


def register(sub) -> None:
    config_command(sub, "demo", DemoConfig, run_demo, config_file=True, description=__doc__,
                   help="a quick tour of every system on generated inputs (make demo)")


def main(argv: Sequence[str] | None = None) -> int:
    return job_main("torchhpc.trainers.demo", DemoConfig, run_demo, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
