"""A discrete-event simulator of an HPC batch cluster, with RLScheduler's semantics.

The cluster has ``procs_total`` processors, counted not placed; rigid jobs run
for their *actual* run time once started; the *requested* time (the user's
estimate) serves only priorities and backfilling.  A *sequence* is a window of
consecutive jobs of a trace: the clock starts at the first job's submit time
with an empty cluster, only the window's jobs arrive, and the sequence ends
when its last job has started.

A scheduler (a heuristic or a policy) is asked for a decision whenever the
wait queue is non-empty: it names one queued job.  If that job does not fit:

* ``backfill="none"`` — time advances event by event (arrivals join the queue,
  finishes free processors) until it fits; nothing else starts meanwhile.
* ``backfill="rlscheduler"`` — the paper's variant: the chosen job's
  reservation ("shadow") time is computed once from the running jobs'
  ``start + requested time``; until the job fits, every queued job (FCFS order)
  that fits now and ends, by its request, strictly before the shadow time
  starts; then time advances one event.
* ``backfill="easy"`` — textbook EASY: the shadow time and the processors
  left over at that time ("extra") are recomputed at every event; a queued job
  may start if it fits now and either ends before the shadow time or uses no
  more than the extra processors.

The simulator keeps the wait queue and the running set as Python lists and
sorts them stably, exactly where the authors' simulator does, so that ties
break the same way and the published numbers are reproduced to the digit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from torchhpc.ext.core.errors import InputError

from .swf import SchedTrace

Backfill = Literal["none", "rlscheduler", "easy"]
BACKFILL_MODES = ("none", "rlscheduler", "easy")
BSLD_THRESHOLD = 10.0  # seconds: bounded slowdown = max(1, (wait + run) / max(run, 10))


@dataclass
class SequenceMetrics:
    """Per-sequence averages over the sequence's jobs (all of them start exactly once)."""

    bsld: float
    """average bounded slowdown, max(1, (wait + run) / max(run, 10 s))"""
    wait: float
    """average waiting time (s)"""
    turnaround: float
    """average wait + run (s)"""
    slowdown: float
    """average (wait + run) / run"""
    util: float
    """sum(run * procs) / (procs_total * (last finish - first submit)): makespan-based utilisation"""
    util_rlscheduler: float
    """the paper's variant: the same work over (time of the last start - first submit); can exceed 1"""
    jobs: int

    def get(self, metric: str) -> float:
        return float(getattr(self, metric))


METRICS = ("bsld", "wait", "turnaround", "slowdown", "util", "util_rlscheduler")


class ClusterSimulator:
    """One batch cluster running one sequence of jobs at a time.

    Args:
        trace: the jobs (:meth:`~torchhpc.ext.sched.swf.Trace.for_scheduling`).
        backfill: ``none``, ``rlscheduler`` or ``easy`` (see the module docstring).

    Usage::

        sim = ClusterSimulator(trace, backfill="none")
        sim.reset(start=1981, length=1024)
        while not sim.done:
            sim.schedule(min(sim.queue, key=...))     # a job index from sim.queue
        sim.metrics()
    """

    def __init__(self, trace: SchedTrace, backfill: Backfill = "none") -> None:
        if backfill not in BACKFILL_MODES:
            raise InputError(f"backfill must be one of {', '.join(BACKFILL_MODES)}; got {backfill!r}")
        self.trace = trace
        self.backfill = backfill
        self.procs_total = int(trace.procs_total)
        # Python lists: scalar access in the event loop is ~10x faster than numpy
        self.submit: list[int] = trace.submit.tolist()
        self.run: list[int] = trace.run.tolist()
        self.req: list[int] = trace.req_time.tolist()
        self.procs: list[int] = trace.procs.tolist()
        self.done = True

    # ------------------------------------------------------------------------- sequence life cycle

    def reset(self, start: int, length: int) -> None:
        """Start sequence ``[start, start + length)`` on an empty cluster at ``submit[start]``."""
        n = len(self.submit)
        if start < 0 or length < 1 or start + length > n:
            raise InputError(f"sequence [{start}, {start + length}) is outside the trace's {n} jobs")
        self.first = start
        self.end = start + length
        self.now = self.submit[start]
        self.free = self.procs_total
        self.queue: list[int] = [start]
        self.next_idx = start + 1
        # running entries: [actual end, requested end, procs, job]
        self.running: list[list[int]] = []
        self.start_time: dict[int, int] = {}
        self.done = False
        self.decisions = 0

    def fits(self, j: int) -> bool:
        return self.procs[j] <= self.free

    def _start(self, j: int) -> None:
        now = self.now
        self.start_time[j] = now
        self.free -= self.procs[j]
        self.running.append([now + self.run[j], now + self.req[j], self.procs[j], j])
        self.queue.remove(j)

    def _next_event(self) -> None:
        """Advance to the next arrival or actual finish (an arrival first on ties)."""
        arrival = self.submit[self.next_idx] if self.next_idx < self.end else math.inf
        release = math.inf
        if self.running:
            self.running.sort(key=_actual_end)
            release = self.running[0][0]
        if arrival <= release:
            if arrival == math.inf:
                raise RuntimeError("simulator stalled: nothing running and nothing to arrive")
            self.now = max(self.now, arrival)
            self.queue.append(self.next_idx)
            self.next_idx += 1
        else:
            self.now = max(self.now, release)
            self.free += self.running.pop(0)[2]

    def _move_forward_for_job(self) -> bool:
        """After a start: advance until the queue holds a job; False when the sequence is over."""
        if self.queue:
            return True
        if self.next_idx >= self.end:
            return False
        while not self.queue:
            self._next_event()
        return True

    # ------------------------------------------------------------------------- waiting / backfilling

    def _wait_until_fits(self, j: int) -> None:
        while not self.fits(j):
            self._next_event()

    def _shadow(self, j: int) -> tuple[float, int]:
        """Reservation of ``j``: (earliest start by requested ends, processors spare at that time)."""
        self.running.sort(key=_requested_end)
        free = self.free
        shadow = self.now
        for r in self.running:
            free += r[2]
            shadow = r[1]
            if free >= self.procs[j]:
                break
        return shadow, free - self.procs[j]

    def _backfill_rlscheduler(self, j: int) -> None:
        shadow, _ = self._shadow(j)  # computed once (the paper's variant)
        while not self.fits(j):
            self.queue.sort(key=self.submit.__getitem__)
            for k in list(self.queue):
                if self.procs[k] <= self.free and self.now + self.req[k] < shadow:
                    self._start(k)
            self._next_event()

    def _backfill_easy(self, j: int) -> None:
        while not self.fits(j):
            shadow, extra = self._shadow(j)
            self.queue.sort(key=self.submit.__getitem__)
            for k in list(self.queue):
                if k == j or self.procs[k] > self.free:
                    continue
                if self.now + self.req[k] <= shadow:
                    self._start(k)
                elif self.procs[k] <= extra:
                    extra -= self.procs[k]
                    self._start(k)
            self._next_event()

    # ------------------------------------------------------------------------- decisions

    def schedule(self, j: int) -> bool:
        """Start queued job ``j`` (waiting or backfilling first if it does not fit).

        Returns:
            True when the sequence is over (every job has started).

        Raises:
            InputError: ``j`` is not in the queue.
        """
        if self.done:
            raise InputError("the sequence is over; call reset()")
        if j not in self.queue:
            raise InputError(f"job {j} is not waiting in the queue")
        if not self.fits(j):
            if self.backfill == "none":
                self._wait_until_fits(j)
            elif self.backfill == "rlscheduler":
                self._backfill_rlscheduler(j)
            else:
                self._backfill_easy(j)
        self._start(j)
        self.decisions += 1
        self.done = not self._move_forward_for_job()
        return self.done

    def run_policy(self, key: Callable[[int, int], object]) -> SequenceMetrics:
        """Run the whole sequence with a priority function ``key(job, now)`` (lowest first)."""
        while not self.done:
            now = self.now
            self.queue.sort(key=lambda j: key(j, now))
            self.schedule(self.queue[0])
        return self.metrics()

    # ------------------------------------------------------------------------- metrics

    def job_arrays(self) -> dict[str, np.ndarray]:
        """Per-job ``submit, start, run, procs, wait`` of the current sequence ``(length,)``."""
        idx = np.arange(self.first, self.end)
        start = np.array([self.start_time.get(int(i), -1) for i in idx], dtype=np.int64)
        submit = np.asarray(self.submit[self.first:self.end], dtype=np.int64)
        return {"submit": submit, "start": start, "wait": start - submit,
                "run": np.asarray(self.run[self.first:self.end], dtype=np.int64),
                "procs": np.asarray(self.procs[self.first:self.end], dtype=np.int64)}

    def metrics(self) -> SequenceMetrics:
        """Metrics of the finished sequence."""
        if not self.done:
            raise InputError("the sequence is not finished yet")
        a = self.job_arrays()
        wait, run = a["wait"].astype(np.float64), a["run"].astype(np.float64)
        work = float((a["run"] * a["procs"]).sum())
        first_submit = float(a["submit"][0])
        makespan = float((a["start"] + a["run"]).max()) - first_submit
        last_start = float(self.now) - first_submit
        return SequenceMetrics(
            bsld=float(np.maximum(1.0, (wait + run) / np.maximum(run, BSLD_THRESHOLD)).mean()),
            wait=float(wait.mean()),
            turnaround=float((wait + run).mean()),
            slowdown=float(((wait + run) / run).mean()),
            util=work / (self.procs_total * makespan) if makespan > 0 else 1.0,
            util_rlscheduler=work / (self.procs_total * last_start) if last_start > 0 else 1.0,
            jobs=len(run),
        )


def _actual_end(r: list[int]) -> int:
    return r[0]


def _requested_end(r: list[int]) -> int:
    return r[1]
