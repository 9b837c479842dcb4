"""Scheduling episodes: a window of consecutive jobs of a trace on an empty simulated cluster, scheduled one
decision at a time by a policy that sees the waiting queue, and ``n`` such episodes stepped in lock-step.

This is the simulation behind the Gymnasium environment ``torchhpc/BatchScheduling-v0``, whose docstring is
the spec (observation columns, rewards, starting state, episode end; :mod:`torchhpc.envs.sched`): the env
adds Gymnasium's spaces and seeding to :class:`SchedulingEpisode`.  PPO's rollouts step
:class:`VecBatchScheduling` directly (observations written into shared ``(n, slots, features)`` arrays), so
training needs nothing from Gymnasium.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from torchhpc.ext.core.errors import InputError

from .heuristics import make_key
from .observation import QueueObserver
from .simulator import BACKFILL_MODES, METRICS, ClusterSimulator
from .swf import SchedTrace
from .traces import load_sched_trace


class SchedulingEpisode:
    """One sequence of ``sequence_length`` consecutive jobs of a trace on an empty cluster; at each decision
    the policy picks one of the visible waiting jobs (see :mod:`torchhpc.envs.sched` for the spec).

    Args:
        trace: an SWF path, a :class:`SchedTrace`, or ``None`` for a generated Lublin–Feitelson trace
            (``generate_jobs`` jobs, ``generate_seed``; ``procs`` overrides the machine size).
        backfill: ``none`` / ``rlscheduler`` / ``easy``.
        metric: the sequence metric whose minus (or, for utilisation, plus) is the terminal reward.
        sequence_length, queue_slots: jobs per sequence; visible queue slots.
        job_slice: draw sequences from the first ``job_slice`` jobs only (0: all).
        filter_heuristic, filter_range: redraw a sequence until that heuristic's bsld on it lies in the range.
        time_scale, prior, context: the observation's settings (:class:`QueueObserver`).

    The window draws come from ``rng`` (a ``numpy.random.Generator``; :meth:`seed` makes one, and a draw
    without one makes an unseeded one, as Gymnasium does).

    Raises:
        InputError: an unknown backfill, metric, time scale or heuristic, or a trace shorter than a sequence.
    """

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
        self.filter_heuristic = filter_heuristic
        self.filter_range = tuple(filter_range)
        self._filter_cache: dict[int, float] = {}
        self._filter_sim = ClusterSimulator(self.trace, backfill) if filter_heuristic else None
        if filter_heuristic:
            make_key(filter_heuristic, self.sim)  # validates the name now
        self.rng: np.random.Generator | None = None
        self.queue = np.zeros((queue_slots, self.observer.features), dtype=np.float32)
        """the observation ``(slots, features)`` of the last :meth:`observe`"""
        self.mask = np.zeros(queue_slots, dtype=np.int8)
        """which slots hold a job ``(slots,)``"""
        self.visible: list[int] = []
        """the jobs in the slots, in slot order"""

    def seed(self, seed: int | None) -> None:
        """A new window-draw generator from ``seed`` (the one Gymnasium's ``reset(seed=...)`` makes)."""
        self.rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed)))

    def reference_bsld(self, start: int) -> float:
        """The filter heuristic's bsld on the sequence from ``start`` (cached)."""
        if start not in self._filter_cache:
            sim = self._filter_sim
            sim.reset(start, self.sequence_length)
            self._filter_cache[start] = sim.run_policy(make_key(self.filter_heuristic, sim)).bsld
        return self._filter_cache[start]

    def draw_start(self) -> int:
        """A sequence start from ``[start_low, start_high)``, redrawn until it passes the filter (if any).

        Raises:
            InputError: no sequence passed the filter in 1000 draws.
        """
        if self.rng is None:
            self.seed(None)
        for _ in range(1000):
            start = int(self.rng.integers(self.start_low, self.start_high))
            if not self.filter_heuristic:
                return start
            lo, hi = self.filter_range
            if lo < self.reference_bsld(start) < hi:
                return start
        raise InputError(f"no sequence with {self.filter_heuristic} bsld in {self.filter_range} after 1000 draws")

    def reset(self, start: int | None = None, length: int | None = None) -> int:
        """Begin the sequence of ``length`` jobs (default ``sequence_length``) from ``start`` (default: drawn);
        returns its start."""
        if start is None:
            start = self.draw_start()
        self.sim.reset(int(start), int(self.sequence_length if length is None else length))
        return int(start)

    def observe(self, queue: np.ndarray | None = None) -> None:
        """Write the observation into ``queue (slots, features)`` (default :attr:`queue`) and :attr:`mask`."""
        self.visible = self.observer.observe(self.sim, self.queue if queue is None else queue, self.mask)

    def apply(self, action: int) -> tuple[float, bool, dict[str, Any]]:
        """Start the job in slot ``action`` (modulo the visible jobs; flagged in ``info["invalid_action"]``);
        ``(reward, terminated, info)``, with ``info["metrics"]`` at the end of the sequence."""
        a = int(action)
        invalid = not (0 <= a < len(self.visible))
        job = self.visible[a % len(self.visible)]
        done = self.sim.schedule(job)
        info: dict[str, Any] = {"invalid_action": invalid}
        if not done:
            return 0.0, False, info
        m = self.sim.metrics()
        info["metrics"] = m.__dict__.copy()
        value = m.get(self.metric)
        return float(value if self.metric.startswith("util") else -value), True, info


class VecBatchScheduling:
    """``n`` scheduling episodes stepped together, observations written into shared arrays.

    ``reset()`` → ``(queue (n, slots, features) float32, mask (n, slots) bool)``;
    ``step(actions (n,))`` → ``(queue, mask, rewards (n,) float64, dones (n,) bool, infos)``, where
    ``infos[i]["metrics"]`` holds a finished episode's sequence metrics.  ``starts (n,)`` is each episode's
    current window start and ``active (n,)`` which episodes are running.  Keyword arguments are those of
    :class:`SchedulingEpisode` (the trace is loaded once and shared).

    Seeds: a full ``reset()`` seeds episode ``i`` with ``seed + i`` (its window draws come from its own
    generator from then on), exactly as ``BatchSchedulingEnv.reset(seed=seed + i)`` does.  With
    ``autoreset=True`` (the default) a finished episode starts its next window at once; with
    ``autoreset=False`` it stays finished (``active[i]`` false, skipped by ``step`` whatever its action) until a
    partial reset starts it again::

        vec.reset(options={"reset_mask": m})                 # episodes m draw new windows
        vec.reset(options={"reset_mask": m, "start": s})     # episodes m replay windows s (n,)

    so a training loop decides per episode whether, and on which window, it goes on — the group advantage
    replays a leader's window in the next episodes this way.  :meth:`rng_states` / :meth:`set_rng_states`
    save and restore the window draws (checkpoints).
    """

    def __init__(self, n: int, seed: int = 0, autoreset: bool = True, **episode_kwargs: Any) -> None:
        base = SchedulingEpisode(**episode_kwargs)
        kwargs = dict(episode_kwargs, trace=base.trace)
        self.episodes = [base] + [SchedulingEpisode(**kwargs) for _ in range(n - 1)]
        self.n = n
        self.seed = seed
        self.autoreset = autoreset
        self.queue = np.zeros((n, base.slots, base.observer.features), dtype=np.float32)
        self.mask = np.zeros((n, base.slots), dtype=bool)
        self.starts = np.zeros(n, dtype=np.int64)
        self.active = np.zeros(n, dtype=bool)

    @property
    def observer(self) -> QueueObserver:
        """The observation builder of the episodes' settings (features, empty slot)."""
        return self.episodes[0].observer

    @property
    def sequence_length(self) -> int:
        """Jobs per sequence (decisions per episode)."""
        return self.episodes[0].sequence_length

    def reset(self, *, options: dict[str, Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Reset every episode (seeding episode ``i`` with ``seed + i``), or only ``options["reset_mask"]`` (n,)
        bool without reseeding; ``options["start"]`` (n,) replays those windows instead of drawing them."""
        options = options or {}
        reset_mask = options.get("reset_mask")
        starts = options.get("start")
        for i in (range(self.n) if reset_mask is None else np.flatnonzero(reset_mask)):
            episode = self.episodes[i]
            if reset_mask is None:
                episode.seed(self.seed + i)
            self.starts[i] = episode.reset(None if starts is None else int(starts[i]))
            self.active[i] = True
            self._write(i)
        return self.queue, self.mask

    def rng_states(self) -> list[dict]:
        """Each episode's window-draw generator state (for a checkpoint)."""
        return [episode.rng.bit_generator.state for episode in self.episodes]

    def set_rng_states(self, states: list[dict]) -> None:
        """Restore the states :meth:`rng_states` returned."""
        for episode, state in zip(self.episodes, states, strict=True):
            episode.rng.bit_generator.state = state

    def _write(self, i: int) -> None:
        episode = self.episodes[i]
        episode.observe(self.queue[i])
        self.mask[i] = episode.mask.astype(bool)

    def step(self, actions: np.ndarray):
        rewards = np.zeros(self.n, dtype=np.float64)
        dones = np.zeros(self.n, dtype=bool)
        infos: list[dict[str, Any]] = [{} for _ in range(self.n)]
        for i in np.flatnonzero(self.active):
            episode = self.episodes[i]
            r, term, info = episode.apply(int(actions[i]))
            if term:
                rewards[i], dones[i], infos[i] = r, True, info
                if not self.autoreset:
                    self.active[i] = False
                    continue
                self.starts[i] = episode.reset()
            self._write(i)
        return self.queue, self.mask, rewards, dones, infos


__all__ = ["SchedulingEpisode", "VecBatchScheduling"]
