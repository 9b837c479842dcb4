"""The agent's view of the wait queue: ``(slots, 8)`` normalised job features (RLScheduler's encoding).

With ``prior=<heuristic>`` (not in the paper) one more column holds each visible job's rank under that
heuristic's priority, ``rank / slots`` (0 = the job the heuristic would start), for policies that learn
a correction to the heuristic (:class:`torchhpc.ext.sched.modules.KernelActor` with ``prior=True``).
The rank is always the last column.

With ``context=True`` (not in the paper) three columns follow column 7 (before the rank):

* 8: the job's start delay: how long until enough processors are free for it, by the running jobs'
  *requested* ends (0 if it fits now), scaled like the time columns.  Under ``backfill="none"`` the
  whole cluster idles this long if the job is chosen, so it is the cost the fits-now bit only flags.
* 9: free processors / machine size (the same in every slot).
* 10: waiting jobs / ``slots``, clipped (the same in every slot).

The kernel network scores each slot on its own; the two shared columns let the score depend on the
cluster's load.

See the observation table in :mod:`torchhpc.envs.sched`.  ``time_scale="log"`` (not in the
paper) maps the two time columns through ``log1p(x) / log1p(max)`` instead of ``x / max``: run
times span five orders of magnitude, and on the linear scale most jobs' requested time is below
0.001, which the small kernel network needs many epochs to resolve.
"""

from __future__ import annotations

import numpy as np

from torchhpc.ext.core.errors import InputError

from .heuristics import HEURISTICS, make_key
from .simulator import ClusterSimulator
from .swf import SchedTrace

JOB_FEATURES = 8
MAX_WAIT = 12 * 3600.0
_HI = 1.0 - 1e-5
CONTEXT_FEATURES = 3
EMPTY_SLOT = np.array([0, 1, 1, 1, 1, 1, 1, 0], dtype=np.float32)


def feature_count(prior: bool, context: bool) -> int:
    """Columns of the observation: 8, plus 3 with ``context``, plus 1 (the rank, last) with a prior."""
    return JOB_FEATURES + CONTEXT_FEATURES * bool(context) + bool(prior)


def empty_slot(prior: bool, context: bool) -> np.ndarray:
    """What an empty slot holds: ``[0, 1, 1, 1, 1, 1, 1, 0]``, then ``[1, 0, 0]`` with context, then rank 1."""
    parts = [EMPTY_SLOT]
    if context:
        parts.append(np.array([1, 0, 0], dtype=np.float32))
    if prior:
        parts.append(np.ones(1, dtype=np.float32))
    return np.concatenate(parts)


class QueueObserver:
    """Builds the ``(slots, features)`` observation of a simulator's queue (vectorised over visible jobs)."""

    def __init__(self, trace: SchedTrace, slots: int, time_scale: str = "linear", prior: str | None = None,
                 context: bool = False) -> None:
        if time_scale not in ("linear", "log"):
            raise ValueError(f"time_scale must be 'linear' or 'log', got {time_scale!r}")
        if prior is not None:
            if prior not in HEURISTICS:
                raise InputError(f"unknown prior heuristic {prior!r} (available: {', '.join(HEURISTICS)})")
        self.prior = prior
        self.context = bool(context)
        self.features = feature_count(prior is not None, self.context)
        self.empty_slot = empty_slot(prior is not None, self.context)
        self._key: tuple[ClusterSimulator, object] | None = None  # (sim, the prior's key function over it)
        self.slots = slots
        self.log_time = time_scale == "log"
        self.submit = trace.submit
        self.req = trace.req_time
        self.procs = trace.procs
        total = float(trace.procs_total)

        def scaled(v: np.ndarray, m: float) -> np.ndarray:
            return np.where(v < 0, 1.0, v / m)

        # the time-independent columns 1..6, precomputed for every job of the trace
        max_run = max(trace.max_run_time, 1.0)
        self._time_norm = float(np.log1p(max_run)) if self.log_time else max_run
        self.procs_total = total
        req = np.log1p(trace.req_time) / np.log1p(max_run) if self.log_time else trace.req_time / max_run
        self.static = np.stack([
            req,
            trace.procs / total,
            scaled(trace.req_mem, trace.max_req_mem),
            scaled(trace.user, trace.max_user),
            scaled(trace.group, trace.max_group),
            scaled(trace.executable, trace.max_executable),
        ], axis=1).clip(0.0, _HI).astype(np.float32)

    def visible(self, sim: ClusterSimulator) -> list[int]:
        """The jobs shown, in slot order (FCFS, or the interleaved subset when the queue is long)."""
        sim.queue.sort(key=sim.submit.__getitem__)
        q = sim.queue
        if len(q) <= self.slots:
            return list(q)
        # q is in submit order, so a stable sort on one key breaks ties by submit time
        qa = np.fromiter(q, dtype=np.int64, count=len(q))
        sjf = qa[np.argsort(self.req[qa], kind="stable")][: self.slots].tolist()
        small = qa[np.argsort(self.procs[qa], kind="stable")][: self.slots].tolist()
        chosen: list[int] = []
        seen: set[int] = set()
        for trio in zip(sjf, small, sjf, strict=True):
            for j in trio:
                if j not in seen:
                    seen.add(j)
                    chosen.append(j)
                    if len(chosen) == self.slots:
                        return chosen
        return chosen

    def observe(self, sim: ClusterSimulator, out: np.ndarray, mask: np.ndarray) -> list[int]:
        """Fill ``out (slots, features)`` and ``mask (slots,)``; returns the visible jobs."""
        jobs = self.visible(sim)
        k = len(jobs)
        out[:] = self.empty_slot
        mask[:] = 0
        if k:
            idx = np.asarray(jobs)
            wait = np.maximum(sim.now - self.submit[idx], 0)
            out[:k, 0] = np.clip(np.log1p(wait) / np.log1p(MAX_WAIT) if self.log_time else wait / MAX_WAIT, 0.0, _HI)
            out[:k, 1:7] = self.static[idx]
            out[:k, 7] = np.where(self.procs[idx] <= sim.free, _HI, 1e-5)
            mask[:k] = 1
            if self.context:
                c = JOB_FEATURES
                delay = self.start_delay(sim, idx)
                out[:k, c] = np.clip((np.log1p(delay) if self.log_time else delay) / self._time_norm, 0.0, _HI)
                out[:k, c + 1] = min(sim.free / self.procs_total, _HI)
                out[:k, c + 2] = min(len(sim.queue) / self.slots, _HI)
            if self.prior is not None:
                out[:k, -1] = self.prior_ranks(sim, jobs) / self.slots
        return jobs

    def start_delay(self, sim: ClusterSimulator, idx: np.ndarray) -> np.ndarray:
        """Seconds until each job of ``idx`` fits, by the running jobs' requested ends (0 if it fits now)."""
        need = self.procs[idx]
        delay = np.zeros(len(idx), dtype=np.float64)
        late = need > sim.free
        if late.any() and sim.running:
            run = np.asarray(sim.running, dtype=np.int64)  # rows: actual end, requested end, procs, job
            order = np.argsort(run[:, 1], kind="stable")
            freed = sim.free + np.cumsum(run[order, 2])
            at = np.searchsorted(freed, need[late], side="left").clip(max=len(order) - 1)
            delay[late] = np.maximum(run[order[at], 1] - sim.now, 0)
        return delay

    def prior_ranks(self, sim: ClusterSimulator, jobs: list[int]) -> np.ndarray:
        """Rank of each of ``jobs`` under the prior heuristic now (0 = its pick; ties keep slot order)."""
        if self._key is None or self._key[0] is not sim:
            self._key = (sim, make_key(self.prior, sim))
        key, now = self._key[1], sim.now
        order = sorted(range(len(jobs)), key=lambda i: key(jobs[i], now))
        ranks = np.empty(len(jobs), dtype=np.float32)
        ranks[order] = np.arange(len(jobs), dtype=np.float32)
        return ranks
