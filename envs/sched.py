"""``torchhpc/BatchScheduling-v0``: pick the next job to start on an HPC batch cluster (RLScheduler).

## Description

A batch cluster of ``P`` processors receives a sequence of jobs from a workload
trace (SWF) or from the Lublin–Feitelson generator.  Whenever jobs wait, the
agent picks one of the visible waiting jobs; the simulator starts it, waiting
(or backfilling) if it does not fit yet (see :mod:`torchhpc.ext.sched.simulator`),
then runs until the next decision.  The episode is one sequence of
``sequence_length`` consecutive jobs, starting on an empty cluster.

## Action Space

``Discrete(queue_slots)``: the slot of a visible job.  An action that points at
an empty slot is taken modulo the number of visible jobs (and flagged in
``info["invalid_action"]``); use ``obs["action_mask"]`` to avoid it.

## Observation Space

``Dict(queue=Box(0, 1, (queue_slots, 8), float32), action_mask=MultiBinary(queue_slots))``.
The queue is sorted by submit time; with more than ``queue_slots`` waiting jobs,
a subset is taken by interleaving the shortest-request, the fewest-processors
and again the shortest-request orders (as RLScheduler does).  Per job, each
value clipped to ``[0, 1 - 1e-5]``:

| column | feature |
|---|---|
| 0 | waiting time so far / 12 h |
| 1 | requested time / the trace's longest run time |
| 2 | processors / machine size |
| 3 | requested memory / trace maximum (1 if unknown) |
| 4 | user id / maximum (1 if unknown) |
| 5 | group id / maximum (1 if unknown) |
| 6 | executable id / maximum (1 if unknown) |
| 7 | fits now: ``1 - 1e-5`` if the job fits the free processors, else ``1e-5`` |
| 8 | only with ``context=True``: start delay, the time until the job fits by the running jobs' requested ends (0 if it fits now), scaled as column 1 |
| 9 | only with ``context=True``: free processors / machine size (every slot) |
| 10 | only with ``context=True``: waiting jobs / ``queue_slots`` (every slot) |
| last | only with ``prior=<heuristic>``: the job's rank under that heuristic now / ``queue_slots`` (0 = its pick) |

Empty slots are ``[0, 1, 1, 1, 1, 1, 1, 0]`` (then ``[1, 0, 0]`` with context, and rank 1) with mask 0.

## Rewards

0 at every step; at the end of the sequence ``-metric`` (``bsld``, ``wait``,
``turnaround``, ``slowdown``) or ``+util`` (``util`` / ``util_rlscheduler``).

## Starting State

A sequence start drawn uniformly by ``self.np_random`` from
``[sequence_length, J - sequence_length - 1)`` (``J`` jobs in the trace, or the first
``job_slice`` of them), or ``options={"start": i}`` in ``reset``.  Optional
trajectory filtering redraws until a reference heuristic's bounded slowdown on
the sequence lies in ``filter_range`` (the paper: SJF in (10, 150)).

## Episode End

Terminated when every job of the sequence has started; never truncated.
``info["metrics"]`` then holds every metric of the sequence.

## Arguments

``trace`` (path, :class:`SchedTrace` or ``None`` for a generated Lublin trace),
``procs``, ``backfill`` (``none``/``rlscheduler``/``easy``), ``metric``,
``sequence_length`` (256), ``queue_slots`` (128), ``job_slice``, ``filter_heuristic``,
``filter_range``, ``generate_jobs``, ``generate_seed``, ``time_scale`` (``linear`` as the paper,
or ``log``: columns 0 and 1 become ``log1p(x) / log1p(max)``), ``prior`` (a heuristic name: adds
a last column, so that a policy can learn a correction to that heuristic; not in the paper), ``context``
(adds columns 8-10, the cluster's state as each job sees it; not in the paper).

The simulation is :class:`~torchhpc.ext.sched.episodes.SchedulingEpisode` (this env adds
Gymnasium's spaces and seeding); ``VecBatchScheduling`` (re-exported here) steps ``n`` of them in
lock-step with shared observation arrays, as PPO's rollouts do.

## Version History

* v0: initial version.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from torchhpc.ext.sched.episodes import SchedulingEpisode, VecBatchScheduling
from torchhpc.ext.sched.observation import QueueObserver
from torchhpc.ext.sched.simulator import ClusterSimulator
from torchhpc.ext.sched.swf import SchedTrace


class BatchSchedulingEnv(gym.Env):
    """See the module docstring (the environment's spec)."""

    metadata = {"render_modes": []}

    def __init__(self, trace: str | SchedTrace | None = None, **episode_kwargs: Any) -> None:
        """The arguments of the spec above, those of :class:`~torchhpc.ext.sched.episodes.SchedulingEpisode`."""
        self.episode = SchedulingEpisode(trace, **episode_kwargs)
        self.slots = slots = self.episode.slots
        self.observation_space = spaces.Dict({
            "queue": spaces.Box(0.0, 1.0, (slots, self.observer.features), dtype=np.float32),
            "action_mask": spaces.MultiBinary(slots),
        })
        self.action_space = spaces.Discrete(slots)

    # -- the simulation, for inspection ------------------------------------------------------------

    @property
    def trace(self) -> SchedTrace:
        return self.episode.trace

    @property
    def sim(self) -> ClusterSimulator:
        return self.episode.sim

    @property
    def observer(self) -> QueueObserver:
        return self.episode.observer

    @property
    def _visible(self) -> list[int]:
        return self.episode.visible

    def _reference_bsld(self, start: int) -> float:
        return self.episode.reference_bsld(start)

    def _observation(self) -> dict[str, np.ndarray]:
        self.episode.observe()
        return {"queue": self.episode.queue.copy(), "action_mask": self.episode.mask.copy()}

    # -- gymnasium API ---------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.episode.rng = self.np_random  # the window draws come from Gymnasium's generator
        options = options or {}
        start = self.episode.reset(options.get("start"), int(options.get("length", self.episode.sequence_length)))
        return self._observation(), {"start": start}

    def apply(self, action: int) -> tuple[float, bool, dict[str, Any]]:
        """Start the job in slot ``action``; ``(reward, terminated, info)`` without building an observation."""
        return self.episode.apply(action)

    def step(self, action):
        reward, done, info = self.episode.apply(action)
        if done:
            obs = {"queue": np.tile(self.observer.empty_slot, (self.slots, 1)),
                   "action_mask": np.zeros(self.slots, dtype=np.int8)}
            return obs, reward, True, False, info
        return self._observation(), reward, False, False, info


__all__ = ["BatchSchedulingEnv", "VecBatchScheduling"]
