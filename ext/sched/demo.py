"""The sched step of ``torchhpc demo``: heuristics on a generated Lublin trace, then a short PPO run of the kernel
policy warm-started from F1, evaluated greedily on the same windows."""

from __future__ import annotations

from typing import Any

from torchhpc.ext.core.config import load_config

from .commands import train
from .config import SchedConfig, SchedTour
from .evaluate import draw_starts, evaluate_heuristic, summarise
from .traces import load_sched_trace

WINDOW = 256  # jobs per window, training and evaluation


def demo(tour: SchedTour, run: Any, device: Any, seed: int) -> dict:
    """Run the step; its training run is written under the demo's run folder (``<run.dir>/sched/<id>``).

    Args:
        tour: the step's options.
        run: the demo's :class:`~torchhpc.ext.core.runs.Run`.
        device: unused (the simulator is CPU-bound; the policy trains on the CPU).
        seed: seed of the trace, the windows, the weights and the sampling.

    Returns:
        ``{"what", "bsld": {heuristic or "rl": mean bsld}, "ok"}``; ``ok`` when RL's bsld is valid (>= 1) and
        SJF beats FCFS.
    """
    trace = load_sched_trace(None, None, tour.jobs, seed)
    starts = draw_starts(trace, tour.windows, WINDOW, seed)
    table = {h: round(summarise(evaluate_heuristic(trace, h, starts, WINDOW, "none"))["bsld"], 2)
             for h in ("fcfs", "sjf", "wfp3", "unicep", "f1")}
    cfg = load_config(SchedConfig, None, [
        f"trace.generate_jobs={tour.jobs}", f"trace.generate_seed={seed}", f"env.sequence_length={WINDOW}",
        f"ppo.epochs={tour.epochs}", "ppo.trajectories=8", "ppo.num_envs=4", "ppo.pi_iters=5", "ppo.v_iters=5",
        "ppo.imitate=f1", "ppo.imitate_sequences=16", "env.time_scale=log",
        f"eval.starts={starts}", f"eval.length={WINDOW}", "eval.greedy=true", "log_baselines=false",
        f"run.root={run.dir}", "run.progress=false", f"seed={seed}",
    ])
    summary = train(cfg, verbose=False)
    rl = summary["eval"]["rl"]["bsld"]
    return {
        "what": f"heuristics, and the kernel policy warm-started from F1 then {tour.epochs} PPO epochs, "
                f"evaluated greedily on {tour.windows} windows of {WINDOW} jobs of a generated Lublin trace",
        "bsld": table | {"rl": round(rl, 2)},
        "ok": rl >= 1.0 and table["sjf"] <= table["fcfs"],
    }
