"""The ``torchhpc demo`` step of pliner: find why a tiny RoPE transformer drifts under bf16 autocast,
and check that the recipe repairs it."""

from __future__ import annotations

import torch

from .config import PlinerTour, SearchOptions, parse_precision
from .examples import tiny_transformer
from .oracle import divergence, precision_context, run_config
from .search import find


def demo(tour: PlinerTour, run, device: torch.device, seed: int) -> dict:
    """Search the bf16 divergence of :func:`~torchhpc.ext.pliner.examples.tiny_transformer`, then apply the recipe.

    The check is independent of the search: the recipe is applied with its own context manager to
    the plain model, under ``torch.autocast``, and compared with the float32 run.

    Returns:
        ``{"status", "culprits", "error_before", "error_after", "recipe_error", "runs", "seconds",
        "ok": found, every culprit in the rotary embedding, and the recipe brings the error under tol}``.
    """
    model, inputs = tiny_transformer(seed)
    res = find(model, inputs, reference="fp32", problem="autocast-bf16", options=SearchOptions(tol=tour.tol))
    ref = run_config(model, inputs, parse_precision("fp32"))
    recipe_error = None
    if res.recipe is not None:
        with torch.no_grad(), res.recipe.applied(model), precision_context(parse_precision("autocast-bf16")):
            recipe_error = divergence(ref, model(*inputs))
    out = {"status": res.status, "culprits": [f"{c['module']}:{c['op']}" for c in res.culprits],
           "error_before": res.error_before, "error_after": res.error_after, "recipe_error": recipe_error,
           "runs": res.runs, "seconds": res.seconds}
    out["ok"] = (res.status == "found" and all(c["module"] == "rotary" for c in res.culprits)
                 and recipe_error is not None and recipe_error <= tour.tol)
    if run is not None:
        run.log(0, step_name="pliner", runs=res.runs, error_before=res.error_before,
                recipe_error=recipe_error if recipe_error is not None else float("nan"))
    return out


__all__ = ["demo"]
