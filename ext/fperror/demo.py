"""The ``torchhpc demo`` step of fperror: bound three FPBench kernels and a torch function, and check
each bound against the error sampled in high precision (mpmath)."""

from __future__ import annotations

import torch

from .config import FperrorTour
from .ops import analyze, bound
from .parsers import parse_satire
from .reference import sampled_errors

# FPBench kernels in Satire's syntax (written here so the step needs no data files)
KERNELS = {
    "doppler1": """INPUTS { u fl64: (-100, 100); v fl64: (20, 20000); T fl64: (-30, 50); } OUTPUTS { doppler1; }
        EXPRS { t1 rnd64 = (1657/5 + (3/5 * T)); doppler1 rnd64 = ((-1*t1 * v) / ((t1 + u) * (t1 + u))); }""",
    "turbine1": """INPUTS { v fl64: (-4.5, -0.3); w fl64: (0.4, 0.9); r fl64: (3.8, 7.8); } OUTPUTS { turbine1; }
        EXPRS { turbine1 rnd64 = (((3 + (2 / (r * r))) - (((1/8 * (3 - (2 * v))) * (((w * w) * r) * r)) / (1 - v)))
        - 9/2); }""",
    "sine": """INPUTS { x fl64: (-1.57079632679, 1.57079632679); } OUTPUTS { sine; }
        EXPRS { sine rnd64 = (((x - (((x * x) * x) / 6)) + (((((x * x) * x) * x) * x) / 120))
        - (((((((x * x) * x) * x) * x) * x) * x) / 5040)); }""",
}


def _stencil(u):
    return 0.3 * u[:-2] + 0.4 * u[1:-1] + 0.3 * u[2:]


def demo(tour: FperrorTour, run, device: torch.device, seed: int) -> dict:
    """Bound each kernel (binary64) and a float32 3-point stencil; the sampled error must stay below.

    Args:
        tour: the step's options (``samples``: random points per kernel).
        run: the demo's :class:`~torchhpc.ext.core.runs.Run` (one metrics row per kernel).
        device: where the interval passes run.
        seed: seed of the sample points.

    Returns:
        ``{"kernels": {name: {"bound", "observed", "seconds"}}, "ok": every observed <= bound}``.
    """
    out = {}
    dev = "cuda" if torch.device(device).type == "cuda" else "cpu"
    for step, (name, src) in enumerate(KERNELS.items()):
        dag = parse_satire(src, name)
        res = analyze(dag, device=dev, time_budget_s=5.0)
        obs = sampled_errors(dag, tour.samples, seed=seed, extra=[o.worst_point for o in res.outputs])[0]
        out[name] = {"bound": res.outputs[0].abs_bound, "observed": obs, "seconds": res.seconds}
        if run is not None:
            run.log(step, step_name="fperror", kernel=name, bound=out[name]["bound"], observed=obs)
    res = bound(_stencil, {"u": (0.0, 1.0)}, {"u": (8,)}, torch.float32, device=dev, bb_iters=10)
    g = torch.Generator().manual_seed(seed)
    worst = 0.0
    for _ in range(tour.samples):
        u = torch.rand(8, generator=g, dtype=torch.float64).to(torch.float32)
        worst = max(worst, float((_stencil(u).double() - _stencil(u.double())).abs().max()))
    out["stencil_f32"] = {"bound": max(o.abs_bound for o in res.outputs), "observed": worst, "seconds": res.seconds}
    ok = all(v["observed"] <= v["bound"] for v in out.values())
    return {"kernels": out, "ok": ok}
