"""The ``torchhpc demo`` step of foresight: a small sweep (ours, SZ3, ZFP, fpzip on a synthetic Gaussian
random field) judged by the power spectrum, written as a Cinema database with its table and HTML page,
and the page loaded in a headless browser when one is installed."""

from __future__ import annotations

import torch

from .config import (
    AnalysisSpec,
    CompressorSpec,
    ForesightTour,
    InputOptions,
    OutputOptions,
    SweepConfig,
    SweepDist,
)


def demo_config(tour: ForesightTour, root: str, seed: int, device: str = "cpu") -> SweepConfig:
    """The demo's sweep: every bound of ``tour.bounds`` (value-range relative) for four compressors."""
    from torchhpc.ext.core.runs import RunOptions

    comps = [CompressorSpec(n, {"mode": "rel", "bound": list(tour.bounds)}) for n in ("ours", "sz3", "zfp", "fpzip")]
    return SweepConfig(input=InputOptions(synthetic="grf", size=tour.size, seed=seed), compressors=comps,
                       analyses=[AnalysisSpec("power_spectrum", tolerance=0.01, k_max_fraction=0.5)],
                       output=OutputOptions(name="demo"), dist=SweepDist(device=device),
                       run=RunOptions(root=root, run_id="sweep", progress=False))


def demo(tour: ForesightTour, run, device: torch.device, seed: int) -> dict:
    """Run the sweep into ``<run>/foresight/sweep/``; check bounds, Cinema columns and the page.

    Returns:
        ``{"best": [...], "rows", "failed", "html", "page_check", "ok"}``; ``ok`` when every row ran within
        its bound, data.csv starts with Foresight's columns and the page shows every row and image.
    """
    from torchhpc.ext.core.runs import Run

    from .cinema import FORESIGHT_COLUMNS, check_page, read_cinema
    from .sweep import load_input, run_sweep

    root = str(run.dir) if run is not None else "runs/demo"
    cfg = demo_config(tour, root, seed, "cuda" if torch.device(device).type == "cuda" else "cpu")
    sub = Run("foresight", cfg, root=root, run_id="sweep", progress=False)
    summary = run_sweep(cfg, sub)
    cols, rows = read_cinema(summary["cinema"])
    x = next(iter(load_input(cfg)[0].values()))
    rng = float(x.max() - x.min())
    within = all(r["status"] == "ok" and float(r["absolute_error"]) <= float(r["bound"]) * rng * (1 + 1e-9)
                 for r in rows)
    page = check_page(summary["html"])
    ok = (within and cols[:len(FORESIGHT_COLUMNS)] == FORESIGHT_COLUMNS and page["broken"] == 0
          and page["rows"] == len(rows) and page["images"] > 0)
    if run is not None:
        for i, b in enumerate(summary["best"]):
            run.log(i, step_name="foresight", compressor=b["compressor"], best_ratio=b["ratio"])
    return {"best": summary["best"], "rows": len(rows), "failed": summary["failed"], "html": summary["html"],
            "page_check": page, "ok": bool(ok)}
