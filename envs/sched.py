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

## Version History

* v0: initial version.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.sched.heuristics import make_key
from torchhpc.ext.sched.observation import QueueObserver
from torchhpc.ext.sched.simulator import BACKFILL_MODES, METRICS, ClusterSimulator
from torchhpc.ext.sched.swf import SchedTrace, load_sched_trace


class BatchSchedulingEnv(gym.Env):
    """See the module docstring (the environment's spec)."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        trace: str | SchedTrace | None = None,
        procs: int | None = None,
        backfill: str = "none",
        metric: str = "bsld",
        sequence_length: int = 256,
        queue_slots: int = 128,
        job_slice: int = 0,
        filter_heuristic: str | None = None,
        filter_range: tuple[float, float] = (10.0, 150.0),
        generate_jobs: int = 10_000,
        generate_seed: int = 0,
        time_scale: str = "linear",
        prior: str | None = None,
        context: bool = False,
    ) -> None:
        if backfill not in BACKFILL_MODES:
            raise InputError(f"backfill must be one of {', '.join(BACKFILL_MODES)}; got {backfill!r}")
        if metric not in METRICS:
            raise InputError(f"metric must be one of {', '.join(METRICS)}; got {metric!r}")
        if sequence_length < 1 or queue_slots < 1:
            raise InputError("sequence_length and queue_slots must be positive")
        self.trace = load_sched_trace(trace, procs, generate_jobs, generate_seed)
        n_jobs = len(self.trace) if job_slice <= 0 else min(job_slice, len(self.trace))
        self.start_low, self.start_high = sequence_length, n_jobs - sequence_length - 1
        if self.start_high <= self.start_low:
            # short traces: any window that fits
            self.start_low, self.start_high = 0, n_jobs - sequence_length + 1
        if self.start_high <= self.start_low:
            raise InputError(f"the trace has {n_jobs} jobs, fewer than sequence_length={sequence_length}")
        self.sim = ClusterSimulator(self.trace, backfill)
        self.metric = metric
        self.sequence_length = sequence_length
        self.slots = queue_slots
        if time_scale not in ("linear", "log"):
            raise InputError(f"time_scale must be 'linear' or 'log'; got {time_scale!r}")
        self.observer = QueueObserver(self.trace, queue_slots, time_scale, prior, context)
        features = self.observer.features
        self.filter_heuristic = filter_heuristic
        self.filter_range = tuple(filter_range)
        self._filter_cache: dict[int, float] = {}
        self._filter_sim = ClusterSimulator(self.trace, backfill) if filter_heuristic else None
        if filter_heuristic:
            make_key(filter_heuristic, self.sim)  # validates the name now
        self.observation_space = spaces.Dict({
            "queue": spaces.Box(0.0, 1.0, (queue_slots, features), dtype=np.float32),
            "action_mask": spaces.MultiBinary(queue_slots),
        })
        self.action_space = spaces.Discrete(queue_slots)
        self._obs = np.zeros((queue_slots, features), dtype=np.float32)
        self._mask = np.zeros(queue_slots, dtype=np.int8)
        self._visible: list[int] = []

    # -- helpers -------------------------------------------------------------------------------

    def _reference_bsld(self, start: int) -> float:
        if start not in self._filter_cache:
            sim = self._filter_sim
            sim.reset(start, self.sequence_length)
            self._filter_cache[start] = sim.run_policy(make_key(self.filter_heuristic, sim)).bsld
        return self._filter_cache[start]

    def _draw_start(self) -> int:
        for _ in range(1000):
            start = int(self.np_random.integers(self.start_low, self.start_high))
            if not self.filter_heuristic:
                return start
            lo, hi = self.filter_range
            if lo < self._reference_bsld(start) < hi:
                return start
        raise InputError(f"no sequence with {self.filter_heuristic} bsld in {self.filter_range} after 1000 draws")

    def _observation(self) -> dict[str, np.ndarray]:
        self._visible = self.observer.observe(self.sim, self._obs, self._mask)
        return {"queue": self._obs.copy(), "action_mask": self._mask.copy()}

    # -- gymnasium API ---------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        start = options.get("start")
        length = int(options.get("length", self.sequence_length))
        if start is None:
            start = self._draw_start()
        self.sim.reset(int(start), length)
        return self._observation(), {"start": int(start)}

    def apply(self, action: int) -> tuple[float, bool, dict[str, Any]]:
        """Start the job in slot ``action``; ``(reward, terminated, info)`` without building an observation."""
        a = int(action)
        invalid = not (0 <= a < len(self._visible))
        job = self._visible[a % len(self._visible)]
        done = self.sim.schedule(job)
        info: dict[str, Any] = {"invalid_action": invalid}
        if not done:
            return 0.0, False, info
        m = self.sim.metrics()
        info["metrics"] = m.__dict__.copy()
        value = m.get(self.metric)
        return float(value if self.metric.startswith("util") else -value), True, info

    def step(self, action):
        reward, done, info = self.apply(action)
        if done:
            obs = {"queue": np.tile(self.observer.empty_slot, (self.slots, 1)),
                   "action_mask": np.zeros(self.slots, dtype=np.int8)}
            return obs, reward, True, False, info
        return self._observation(), reward, False, False, info


class VecBatchScheduling:
    """``n`` scheduling envs stepped together, observations written into shared arrays.

    ``reset()`` → ``(queue (n, slots, features) float32, mask (n, slots) bool)``;
    ``step(actions (n,))`` → ``(queue, mask, rewards (n,) float64, dones (n,) bool, infos)``, where
    ``infos[i]["metrics"]`` holds a finished env's sequence metrics.  ``starts (n,)`` is each env's
    current window start and ``active (n,)`` which envs are in an episode.

    Seeds: a full ``reset()`` seeds env ``i`` with ``seed + i`` (its window draws come from its own
    ``np_random`` from then on).  With ``autoreset=True`` (the default) a finished env starts its next
    window at once; with ``autoreset=False`` it stays finished (``active[i]`` false, skipped by ``step``
    whatever its action) until a partial reset starts it again::

        vec.reset(options={"reset_mask": m})                 # envs m draw new windows
        vec.reset(options={"reset_mask": m, "start": s})     # envs m replay windows s (n,)

    so a training loop decides per env whether, and on which window, it goes on — the group advantage
    replays a leader's window in the next envs this way.  :meth:`rng_states` / :meth:`set_rng_states`
    save and restore the window draws (checkpoints).
    """

    def __init__(self, n: int, seed: int = 0, autoreset: bool = True, **env_kwargs: Any) -> None:
        base = BatchSchedulingEnv(**env_kwargs)
        kwargs = dict(env_kwargs, trace=base.trace)
        self.envs = [base] + [BatchSchedulingEnv(**kwargs) for _ in range(n - 1)]
        self.n = n
        self.seed = seed
        self.autoreset = autoreset
        slots = base.slots
        self.queue = np.zeros((n, slots, base.observer.features), dtype=np.float32)
        self.mask = np.zeros((n, slots), dtype=bool)
        self.starts = np.zeros(n, dtype=np.int64)
        self.active = np.zeros(n, dtype=bool)

    @property
    def observer(self) -> QueueObserver:
        """The observation builder shared by the envs' settings (features, empty slot)."""
        return self.envs[0].observer

    def reset(self, *, options: dict[str, Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Reset every env (seeding env ``i`` with ``seed + i``), or only ``options["reset_mask"]`` (n,) bool
        without reseeding; ``options["start"]`` (n,) replays those windows instead of drawing them."""
        options = options or {}
        reset_mask = options.get("reset_mask")
        starts = options.get("start")
        for i in (range(self.n) if reset_mask is None else np.flatnonzero(reset_mask)):
            env_options = None if starts is None else {"start": int(starts[i])}
            seed = self.seed + i if reset_mask is None else None
            _, info = self.envs[i].reset(seed=seed, options=env_options)
            self.starts[i] = info["start"]
            self.active[i] = True
            self._write(i)
        return self.queue, self.mask

    def rng_states(self) -> list[dict]:
        """Each env's window-draw generator state (for a checkpoint)."""
        return [env.np_random.bit_generator.state for env in self.envs]

    def set_rng_states(self, states: list[dict]) -> None:
        """Restore the states :meth:`rng_states` returned."""
        for env, state in zip(self.envs, states, strict=True):
            env.np_random.bit_generator.state = state

    def _write(self, i: int) -> None:
        env = self.envs[i]
        env._visible = env.observer.observe(env.sim, self.queue[i], env._mask)
        self.mask[i] = env._mask.astype(bool)

    def step(self, actions: np.ndarray):
        rewards = np.zeros(self.n, dtype=np.float64)
        dones = np.zeros(self.n, dtype=bool)
        infos: list[dict[str, Any]] = [{} for _ in range(self.n)]
        for i in np.flatnonzero(self.active):
            env = self.envs[i]
            r, term, info = env.apply(int(actions[i]))
            if term:
                rewards[i], dones[i], infos[i] = r, True, info
                if not self.autoreset:
                    self.active[i] = False
                    continue
                _, reset_info = env.reset()
                self.starts[i] = reset_info["start"]
            self._write(i)
        return self.queue, self.mask, rewards, dones, infos
