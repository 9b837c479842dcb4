"""Evaluating schedulers on job windows of a trace: heuristics and trained policies, side by side."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from torchhpc.ext.core.errors import InputError

from .heuristics import make_key
from .observation import QueueObserver
from .simulator import METRICS, ClusterSimulator
from .swf import SchedTrace

if TYPE_CHECKING:
    import torch

#: the sequence starts of the RLScheduler authors' seed-1 test protocol (PUBLISHED.md)
PUBLISHED_STARTS = (1981, 2756, 4299, 8850, 3316, 2714, 5228, 7762, 4022, 7085)


def log_ratio_reward(metric: str, ours: float, reference: float) -> float:
    """A sequence's reward relative to a reference schedule of the same jobs: ``log(ref / ours)`` for
    metrics to minimise (bsld, wait, ...), ``log(ours / ref)`` for utilisation; 0 = as good, > 0 = better.

    Unlike ``-metric`` its scale does not depend on how hard the sequence is, which is what a value
    function that cannot see the future jobs would otherwise have to guess.
    """
    ratio = math.log(max(ours, 1e-9) / max(reference, 1e-9))
    return ratio if metric.startswith("util") else -ratio


def leave_one_out_advantage(rewards: Sequence[float], groups: Sequence[int]) -> np.ndarray:
    """Each trajectory's reward minus the mean reward of the other trajectories of its group.

    The trajectories of a group schedule the same jobs, so the baseline removes how hard the sequence
    is and leaves only what this trajectory's actions did (REINFORCE leave-one-out, Kool et al. 2019).

    Raises:
        ValueError: a group with fewer than two trajectories, or mismatched lengths.
    """
    r = np.asarray(rewards, dtype=np.float64)
    g = np.asarray(groups, dtype=np.int64)
    if r.shape != g.shape or r.ndim != 1:
        raise ValueError(f"rewards {r.shape} and groups {g.shape} must be 1-D of the same length")
    _, g = np.unique(g, return_inverse=True)
    counts = np.bincount(g)
    if (counts < 2).any():
        raise ValueError("every group needs at least two trajectories")
    sums = np.bincount(g, weights=r)
    return r - (sums[g] - r) / (counts[g] - 1)


def draw_starts(trace: SchedTrace, sequences: int, length: int, seed: int) -> list[int]:
    """``sequences`` window starts drawn uniformly from ``[length, J - length - 1)`` with ``seed``."""
    lo, hi = length, len(trace) - length - 1
    if hi <= lo:
        lo, hi = 0, len(trace) - length + 1
    if hi <= lo:
        raise InputError(f"{trace.name}: {len(trace)} jobs cannot hold a window of {length}")
    return [int(s) for s in np.random.default_rng(seed).integers(lo, hi, size=sequences)]


def draw_validation_starts(
    trace: SchedTrace, count: int, length: int, seed: int, avoid: Sequence[int] = (), avoid_length: int = 0
) -> list[int]:
    """``count`` window starts of ``length`` jobs that share no job with the windows ``[a, a + avoid_length)``.

    Held-out windows for model selection: a checkpoint chosen on them has not been chosen on the test
    windows ``avoid``. Drawn without replacement while there are enough distinct starts.

    Raises:
        InputError: no window of ``length`` jobs fits outside the avoided ones.
    """
    J = len(trace)
    if length > J:
        raise InputError(f"{trace.name}: {J} jobs cannot hold a validation window of {length}")
    covered = np.zeros(J + 1, dtype=np.int64)
    for a in avoid:
        covered[max(a, 0)] += 1
        covered[min(a + avoid_length, J)] -= 1
    busy = np.concatenate([[0], np.cumsum(np.cumsum(covered)[:J] > 0)])  # busy[i] = test jobs before i
    s = np.arange(J - length + 1)
    free = s[busy[s + length] - busy[s] == 0]
    if free.size == 0:
        raise InputError(f"{trace.name}: no window of {length} jobs lies outside the test windows; "
                         f"use a shorter eval.validate_length")
    rng = np.random.default_rng(seed)
    return [int(x) for x in np.sort(rng.choice(free, size=count, replace=count > free.size))]


def check_windows(trace: SchedTrace, starts: Sequence[int], length: int) -> None:
    for s in starts:
        if s < 0 or s + length > len(trace):
            raise InputError(f"{trace.name}: window [{s}, {s + length}) is outside the {len(trace)} jobs")


def evaluate_heuristic(
    trace: SchedTrace, name: str, starts: Sequence[int], length: int, backfill: str = "none"
) -> list[dict[str, float]]:
    """Metrics of heuristic ``name`` on each window ``[s, s + length)``."""
    check_windows(trace, starts, length)
    sim = ClusterSimulator(trace, backfill)
    key = make_key(name, sim)
    out = []
    for s in starts:
        sim.reset(s, length)
        out.append(sim.run_policy(key).__dict__.copy())
    return out


def evaluate_agent(
    agent, trace: SchedTrace, starts: Sequence[int], length: int, backfill: str = "none", *,
    greedy: bool = False, seed: int = 0, queue_slots: int = 128, device: str | torch.device = "cpu",
    time_scale: str = "linear", prior: str | None = None, context: bool = False,
) -> list[dict[str, float]]:
    """Metrics of a trained agent on each window; all windows run in lock-step (one batched forward).

    With ``greedy=False`` actions are sampled, as the paper evaluates its policy.  ``time_scale``,
    ``prior`` and ``context`` must be those the agent was trained with (they shape its observation).
    """
    import torch

    with torch.no_grad():
        return _evaluate_agent(agent, trace, starts, length, backfill, greedy, seed, queue_slots, device,
                               time_scale, prior, context)


def evaluate_policy(
    agent, trace: SchedTrace, starts: Sequence[int], length: int, backfill: str, *, greedy: bool, samples: int,
    seed: int, settings: Mapping[str, Any], device: str | torch.device = "cpu",
) -> list[dict[str, float]]:
    """Per-window metrics of ``agent``: one greedy pass, or ``samples`` sampled passes (seeds ``seed + k``)
    concatenated; ``settings`` are the agent's observation settings
    (:func:`~torchhpc.ext.sched.checkpoints.agent_settings`)."""
    obs = {k: settings[k] for k in ("queue_slots", "time_scale", "prior", "context")}
    return [row for k in range(1 if greedy else samples)
            for row in evaluate_agent(agent, trace, starts, length, backfill, greedy=greedy, seed=seed + k,
                                      device=device, **obs)]


def _evaluate_agent(agent, trace, starts, length, backfill, greedy, seed, queue_slots, device, time_scale, prior,
                    context) -> list[dict[str, float]]:
    import torch

    check_windows(trace, starts, length)
    observer = QueueObserver(trace, queue_slots, time_scale, prior, context)
    sims = [ClusterSimulator(trace, backfill) for _ in starts]
    g = torch.Generator(device="cpu").manual_seed(seed)
    queue = np.zeros((len(sims), queue_slots, observer.features), dtype=np.float32)
    mask = np.zeros((len(sims), queue_slots), dtype=np.int8)
    visible: list[list[int]] = []
    for i, (sim, s) in enumerate(zip(sims, starts, strict=True)):
        sim.reset(s, length)
        visible.append(observer.observe(sim, queue[i], mask[i]))
    results: list[dict[str, float] | None] = [None] * len(sims)
    active = list(range(len(sims)))
    agent.eval()
    while active:
        q = torch.from_numpy(queue[active]).to(device)
        m = torch.from_numpy(mask[active].astype(bool)).to(device)
        logits = agent.actor(q, m).float().cpu()
        if greedy:
            actions = logits.argmax(-1)
        else:
            actions = torch.multinomial(torch.softmax(logits, -1), 1, generator=g).squeeze(-1)
        still = []
        for a, i in zip(actions.tolist(), active, strict=True):
            sim = sims[i]
            if sim.schedule(visible[i][a % len(visible[i])]):
                results[i] = sim.metrics().__dict__.copy()
            else:
                visible[i] = observer.observe(sim, queue[i], mask[i])
                still.append(i)
        active = still
    return results  # type: ignore[return-value]


def summarise(rows: list[dict[str, float]]) -> dict[str, float]:
    """Mean of every metric over windows."""
    return {k: float(np.mean([r[k] for r in rows])) for k in METRICS}


def _per_window(
    ours: list[dict[str, float]], theirs: list[dict[str, float]], metric: str
) -> tuple[np.ndarray, np.ndarray]:
    """``ours`` averaged per window (it may hold several passes over ``theirs``' windows), and ``theirs``."""
    w = len(theirs)
    if w == 0 or len(ours) % w:
        raise ValueError(f"{len(ours)} rows are not whole passes over {w} windows")
    a = np.asarray([r[metric] for r in ours], dtype=np.float64).reshape(-1, w).mean(0)
    b = np.asarray([r[metric] for r in theirs], dtype=np.float64)
    return a, b


def windows_better(
    ours: list[dict[str, float]], theirs: list[dict[str, float]], metric: str = "bsld"
) -> tuple[int, int]:
    """On how many windows ``ours`` beats ``theirs`` (``(wins, windows)``).

    ``theirs`` has one row per window; ``ours`` has one or more passes over the same windows in the same
    order (``k`` sampled passes: ``k * windows`` rows), averaged per window first. Lower is better except
    for the utilisations.
    """
    a, b = _per_window(ours, theirs, metric)
    better = a > b if metric.startswith("util") else a < b
    return int(better.sum()), len(b)


def mean_ratio(
    ours: list[dict[str, float]], theirs: list[dict[str, float]], metric: str = "bsld",
    confidence: float = 0.95, resamples: int = 9999, seed: int = 0,
) -> tuple[float, float, float]:
    """``mean(ours) / mean(theirs)`` over the windows, with a paired bootstrap confidence interval.

    Windows are resampled with replacement, the same windows for both policies (scipy's percentile
    bootstrap), so the window-to-window spread of the load is not counted as a difference between the
    policies. Rows as in ``windows_better``. Returns ``(ratio, low, high)``.
    """
    from scipy.stats import bootstrap

    a, b = _per_window(ours, theirs, metric)
    ratio = float(a.mean() / b.mean())
    if len(b) < 2:
        return ratio, float("nan"), float("nan")
    res = bootstrap((a, b), lambda x, y, axis=-1: x.mean(axis) / y.mean(axis), paired=True, vectorized=True,
                    n_resamples=resamples, confidence_level=confidence, method="percentile",
                    rng=np.random.default_rng(seed))
    return ratio, float(res.confidence_interval.low), float(res.confidence_interval.high)
