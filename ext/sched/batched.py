"""Many job windows simulated at once as tensor operations: :class:`BatchedClusterSimulator`.

The same cluster as :class:`~torchhpc.ext.sched.simulator.ClusterSimulator` (the reference, which it is
tested against decision for decision), but ``B`` windows of ``L`` jobs advance together: every decision
is one call ``schedule(jobs)`` with one queued job per window, and the state is a handful of ``(B, L)``
tensors (window-relative job index) on the CPU or a GPU.

How the event-by-event reference is reproduced exactly:

* **No backfilling.** Waiting until the chosen job fits is one step per window, not one per event: the
  running jobs are sorted by (actual end, list order), their processors summed until the job fits; that
  job's end is the new time, every job before it in that order is released, and every arrival up to that
  time joins the queue (arrivals come first on ties, so exactly those with ``submit <= time``).
* **Backfilling** (``rlscheduler``, ``easy``) keeps the reference's loop (scan the queue, advance one
  event) but runs it for all waiting windows together; a scan's sequential first fit becomes "the first
  eligible job after the last one started", repeated, which is the same because a scan's free processors
  (and EASY's extra ones) only decrease.
* **Ties.** The reference keeps the running jobs in a Python list that it stably sorts by actual end
  (every event) and by requested end (every reservation), and ties between equal ends are broken by that
  list's order. Here each running job has a ``tie`` value and each window remembers whether the last sort
  was by actual end and how many jobs had started then; the list order is then ``(actual end, tie)`` for
  the jobs that were there and ``tie`` (their start order) for those appended since, and a reservation
  re-ranks ``tie`` by ``(requested end, that order)``, as the reference's sort does.

**Compiled paths**: every window runs the reference's own event loop, backfilling included, so no window
waits for another's events.  ``backend="numba"`` (the default on the CPU where numba is installed): in
machine code, windows split over threads (:mod:`.batched_kernels`), on numpy arrays that the tensors above
share memory with.  ``backend="triton"`` (the default on CUDA): one program per window, two launches and one
host sync a decision (:mod:`torchhpc.triton_kernels.sched`), on the same state as device tensors.  The
tensor path remains where neither runs.

A trace's submit times must not decrease with the job index (the traces here all qualify; the loader
sorts jobs by id as the authors' did), so that the queue's FCFS order is the index order.
"""

from __future__ import annotations

import numpy as np
import torch

from torchhpc.ext.core.budgets import HostBudget
from torchhpc.ext.core.dispatch import resolve_backend
from torchhpc.ext.core.errors import InputError

from . import batched_kernels
from .simulator import BACKFILL_MODES, BSLD_THRESHOLD
from .swf import SchedTrace

_INF = 1 << 62


#: Host work per decision step of a batch of windows (``tests/test_gpu_budgets.py``): the tensor path's (4 windows
#: of 64 jobs; its bookkeeping reads the state back) and the Triton path's (the default on CUDA; 4 of 24).
GPU_BUDGETS = {
    "schedule": HostBudget("decision step", syncs=14, launches=96, why="tensor path, no backfilling"),
    "schedule_easy": HostBudget("decision step", syncs=82, launches=735, why="tensor path, EASY backfilling, per-event loops"),
    "schedule_triton": HostBudget("decision step", syncs=1, launches=3,
                                  why="Triton path, any backfilling: the flags, the check, the windows; the flags read"),
}


class BatchedClusterSimulator:
    """``B`` windows of ``L`` consecutive jobs of one trace, scheduled together.

    Args:
        trace: the jobs (:meth:`~torchhpc.ext.sched.swf.Trace.for_scheduling`).
        backfill: ``none``, ``rlscheduler`` or ``easy`` (as :class:`~torchhpc.ext.sched.simulator.ClusterSimulator`).
        device: where the state lives (``cpu`` or ``cuda``).
        backend: ``auto`` (numba on the CPU where installed, Triton on CUDA, else torch), ``numba``, ``triton``
            or ``torch``.
        threads: the compiled path's threads per step; ``None``: 1 or all of numba's, whichever is faster
            at the time (:class:`~torchhpc.ext.sched.batched_kernels.ThreadTuner`).

    Usage::

        sim = BatchedClusterSimulator(trace, "easy")
        sim.reset(torch.tensor([300, 1981]), length=256)
        while not sim.done.all():
            jobs = (torch.rand(sim.queued.shape) * sim.queued).argmax(1)   # a random queued job per window
            sim.schedule(jobs)                                            # window-relative indices
        sim.metrics()["bsld"]                                             # (B,)

    State after each call (window-relative job ``i`` is trace job ``first[b] + i``): ``queued``,
    ``running`` (B, L) bool; ``start_time`` (B, L) int64 (-1 before the start); ``now``, ``free`` (B,);
    ``done`` (B,) bool.
    """

    def __init__(self, trace: SchedTrace, backfill: str = "none", device: str | torch.device = "cpu",
                 backend: str = "auto", threads: int | None = None) -> None:
        if backfill not in BACKFILL_MODES:
            raise InputError(f"backfill must be one of {', '.join(BACKFILL_MODES)}; got {backfill!r}")
        if np.any(np.diff(trace.submit) < 0):
            raise InputError(f"{trace.name}: submit times decrease with the job index; the batched simulator "
                             "needs them in order (use the per-window ClusterSimulator)")
        self.trace = trace
        self.backfill = backfill
        self.device = torch.device(device)
        self.backend = resolve_backend(backend, self.device, choices=("torch", "numba", "triton"))
        self.procs_total = int(trace.procs_total)
        as_t = lambda a: torch.as_tensor(np.asarray(a, dtype=np.int64), device=self.device)  # noqa: E731
        self._submit, self._run, self._req, self._procs = (as_t(trace.submit), as_t(trace.run),
                                                           as_t(trace.req_time), as_t(trace.procs))
        self._min_procs = int(np.min(trace.procs)) if len(trace) else 1  # the compiled paths' scans stop below it
        if self.backend == "numba":
            self._np = tuple(np.ascontiguousarray(a, dtype=np.int64)
                             for a in (trace.submit, trace.run, trace.req_time, trace.procs))
            self._tuner = batched_kernels.ThreadTuner(threads)
        self.decisions = 0

    # ------------------------------------------------------------------------- life cycle

    def reset(self, starts, length: int) -> None:
        """Start windows ``[starts[b], starts[b] + length)``, each on an empty cluster at its first submit."""
        first = torch.as_tensor(starts, dtype=torch.int64, device=self.device).reshape(-1)
        n = len(self.trace)
        if length < 1 or first.numel() == 0 or int(first.min()) < 0 or int(first.max()) + length > n:
            raise InputError(f"windows of {length} jobs at starts {first.tolist()[:8]} fall outside the trace's {n} jobs")
        B, L, dev = first.numel(), length, self.device
        self.B, self.L, self.first = B, L, first
        if self.backend != "torch":
            self._reset_compiled(first.clone(), L)
            return
        self._l4 = 4 * L  # rkey = actual end * 4L + tie (tie < 2L)
        idx = first[:, None] + torch.arange(L, device=dev)
        self.idx = torch.arange(L, device=dev).expand(B, L)
        self.submit, self.run, self.req, self.procs = (x[idx] for x in (self._submit, self._run, self._req, self._procs))
        zeros = lambda dtype: torch.zeros(B, L, dtype=dtype, device=dev)  # noqa: E731
        self.queued = zeros(torch.bool)
        self.queued[:, 0] = True
        self.qlen = torch.ones(B, dtype=torch.int64, device=dev)
        # release order of running jobs, (actual end, tie) as one int64; +inf when not running
        self.rkey = torch.full((B, L), _INF, dtype=torch.int64, device=dev)
        self.start_time = torch.full((B, L), -1, dtype=torch.int64, device=dev)
        self.now = self.submit[:, 0].clone()
        self.free = torch.full((B,), self.procs_total, dtype=torch.int64, device=dev)
        self.next = torch.ones(B, dtype=torch.int64, device=dev)
        self.started = torch.zeros(B, dtype=torch.int64, device=dev)
        self.last_a = torch.zeros(B, dtype=torch.int64, device=dev)  # jobs started at the last sort by actual end
        self.sorted_a = torch.zeros(B, dtype=torch.bool, device=dev)  # the last sort was by actual end
        self.done = torch.zeros(B, dtype=torch.bool, device=dev)
        self.decisions = 0

    def _reset_compiled(self, first: torch.Tensor, L: int) -> None:
        """The compiled paths' state (the reference's, per window): tensors on the device; numba works on
        numpy views of them (no copies per step)."""
        B, dev = first.numel(), self.device
        idx = first[:, None] + torch.arange(L, device=dev)
        self.submit, self.run, self.req, self.procs = (x[idx] for x in (self._submit, self._run, self._req, self._procs))
        full = lambda shape, v, dtype=torch.int64: torch.full(shape, v, dtype=dtype, device=dev)  # noqa: E731
        queued = full((B, L), False, torch.bool)
        queued[:, 0] = True
        self._state = {
            "first": first, "now": self._submit[first], "free": full((B,), self.procs_total), "nxt": full((B,), 1),
            "qlen": full((B,), 1), "qlo": full((B,), 0), "done": full((B,), False, torch.bool), "queued": queued,
            "start_time": full((B, L), -1), "rjob": full((B, L), 0), "rcnt": full((B,), 0)}
        st = self._state
        self.now, self.free, self.next, self.qlen, self.done, self.queued, self.start_time = (
            st[k] for k in ("now", "free", "nxt", "qlen", "done", "queued", "start_time"))
        if self.backend == "numba":
            self._arrays = {k: v.numpy() for k, v in st.items()}
        self.decisions = 0

    def _schedule_numba(self, jobs: torch.Tensor) -> torch.Tensor:
        st = self._arrays
        jobs = np.ascontiguousarray(jobs.numpy(), dtype=np.int64)
        live = ~st["done"]
        j = jobs[live]
        if np.any((j < 0) | (j >= self.L)) or not st["queued"][live, np.clip(j, 0, self.L - 1)].all():
            raise InputError("a chosen job is not waiting in its window's queue")
        stalled = self._tuner.run(
            batched_kernels.schedule_windows, len(j), jobs, batched_kernels.MODES[self.backfill], self._min_procs,
            st["first"], st["now"], st["free"], st["nxt"], st["qlen"], st["qlo"], st["done"], st["queued"], st["start_time"], st["rjob"], st["rcnt"], *self._np)
        if stalled:
            raise RuntimeError("simulator stalled: nothing running and nothing to arrive")
        self.decisions += len(j)
        return self.done

    def _schedule_triton(self, jobs: torch.Tensor) -> torch.Tensor:
        from torchhpc.triton_kernels.sched import schedule_windows_triton

        flags = schedule_windows_triton(jobs.contiguous(), self.backfill, self._min_procs, self._state,
                                        (self._submit, self._run, self._req, self._procs))
        bad, stalled, live = flags.tolist()  # the decision's one host sync
        if bad:
            raise InputError("a chosen job is not waiting in its window's queue")
        if stalled:
            raise RuntimeError("simulator stalled: nothing running and nothing to arrive")
        self.decisions += live
        return self.done

    @property
    def running(self) -> torch.Tensor:
        """(B, L) bool: started and not finished."""
        if self.backend != "torch":  # the first rcnt entries of each window's running list
            st = self._state
            live = torch.arange(self.L, device=self.device) < st["rcnt"][:, None]
            return torch.zeros_like(st["rjob"]).scatter_add_(1, st["rjob"], live.long()) > 0
        return self.rkey < _INF

    # ------------------------------------------------------------------------- helpers (rows: window ids)

    def _start(self, rows: torch.Tensor, jobs: torch.Tensor) -> None:
        flat = rows * self.L + jobs
        now = self.now.index_select(0, rows)
        self.start_time.view(-1)[flat] = now
        self.queued.view(-1)[flat] = False
        self.qlen.index_add_(0, rows, torch.full_like(rows, -1))
        started = self.started.index_select(0, rows)
        self.rkey.view(-1)[flat] = (now + self.run.view(-1)[flat]) * self._l4 + self.L + started
        self.started.index_add_(0, rows, torch.ones_like(rows))
        self.free.index_add_(0, rows, -self.procs.view(-1)[flat])

    def _arrive_upto(self, rows: torch.Tensor, t: torch.Tensor) -> None:
        """Every job of the window submitted at or before ``t`` (B',) has arrived."""
        nxt = self.next.index_select(0, rows)
        upto = torch.searchsorted(self.submit.index_select(0, rows), t[:, None], right=True).squeeze(1)
        upto = torch.maximum(nxt, upto)
        c = int(upto.max())
        idx = self.idx[: len(rows), :c]
        q = self.queued[:, :c]
        q.index_copy_(0, rows, q.index_select(0, rows) | ((idx >= nxt[:, None]) & (idx < upto[:, None])))
        self.qlen.index_add_(0, rows, upto - nxt)
        self.next.index_copy_(0, rows, upto)

    @staticmethod
    def _release_prefix(key, procs, free, need, k: int):
        """Among the first ``k`` running jobs in release order: the key of the one whose release lets ``need``
        processors be free (R, 1), and the free processors then (R,) (short of ``need`` if ``k`` are too few)."""
        key_sorted, order = torch.topk(key, k, 1, largest=False, sorted=True)
        cum = torch.cumsum(torch.where(key_sorted < _INF, procs.gather(1, order), 0), 1).add_(free)
        i = (cum < need[:, None]).sum(1, keepdim=True).clamp_(max=k - 1)
        return key_sorted.gather(1, i), cum.gather(1, i).squeeze(1)

    def _wait_bulk(self, rows: torch.Tensor, need: torch.Tensor) -> None:
        """No backfilling: advance each window to the release that lets its chosen job fit."""
        c = int(self.next.index_select(0, rows).max())  # jobs from the furthest next arrival on have not arrived
        rk = self.rkey[:, :c]
        key = rk.index_select(0, rows)
        procs = self.procs[:, :c].index_select(0, rows)
        free = self.free.index_select(0, rows)[:, None]
        # the first few releases in order usually suffice (topk is cheaper than a sort); else sort them all
        last, freed = self._release_prefix(key, procs, free, need, min(8, c))
        short = freed < need
        if bool(short.any()):
            s = torch.nonzero(short).squeeze(1)
            last[s], freed[s] = self._release_prefix(key[s], procs[s], free[s], need[s], c)
            if bool((freed < need).any()):  # wider than what every release frees: it would wait forever
                raise RuntimeError("simulator stalled: nothing running and nothing to arrive")
        t = torch.div(last.squeeze(1), self._l4, rounding_mode="floor")
        rk.index_copy_(0, rows, key.masked_fill_(key <= last, _INF))
        self.free.index_copy_(0, rows, freed)
        self._arrive_upto(rows, t)
        self.now.index_copy_(0, rows, torch.maximum(self.now.index_select(0, rows), t))
        self.sorted_a[rows] = True  # (only the order running_order reports depends on these two)
        self.last_a[rows] = self.started[rows]

    def _next_event(self, rows: torch.Tensor) -> None:
        """One event per window: the next arrival, or the first release (arrivals first on ties)."""
        self.sorted_a[rows] = True
        self.last_a[rows] = self.started[rows]
        nxt = self.next[rows]
        has_next = nxt < self.L
        arrival = torch.where(has_next, self.submit[rows].gather(1, nxt.clamp(max=self.L - 1)[:, None]).squeeze(1), _INF)
        key = self.rkey[rows]
        m = key.argmin(1)
        first = key.gather(1, m[:, None]).squeeze(1)
        release = torch.where(first < _INF, torch.div(first, self._l4, rounding_mode="floor"), _INF)
        arrive = arrival <= release
        if bool((arrive & (arrival >= _INF)).any()):
            raise RuntimeError("simulator stalled: nothing running and nothing to arrive")
        ra, rr = rows[arrive], rows[~arrive]
        self.queued[ra, nxt[arrive]] = True
        self.qlen[ra] += 1
        self.next[ra] += 1
        self.now[ra] = torch.maximum(self.now[ra], arrival[arrive])
        mr = m[~arrive]
        self.rkey[rr, mr] = _INF
        self.free[rr] += self.procs[rr, mr]
        self.now[rr] = torch.maximum(self.now[rr], release[~arrive])

    def _reserve(self, rows: torch.Tensor, need: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The reference's ``_shadow``: re-sort the running list by requested end (``tie`` re-ranked) and
        return (shadow time, processors spare then) per window."""
        L4 = self._l4
        rkey = self.rkey[rows]
        running = rkey < _INF
        act_end, tie = torch.div(rkey, L4, rounding_mode="floor"), torch.remainder(rkey, L4)
        appended = tie >= self.L + self.last_a[rows, None]
        primary = torch.where(self.sorted_a[rows, None] & ~appended, act_end, 1 << 40)
        current = torch.where(running, primary * L4 + tie, _INF)
        rank1 = torch.empty_like(current).scatter_(1, torch.argsort(current, 1), self.idx[: len(rows)])
        req_end = self.start_time[rows] + self.req[rows]
        key2 = torch.where(running, req_end * L4 + rank1, _INF)
        key2_sorted, order = torch.sort(key2, 1)
        tie = torch.empty_like(key2).scatter_(1, order, self.idx[: len(rows)])
        self.rkey[rows] = torch.where(running, act_end * L4 + tie, _INF)
        self.sorted_a[rows] = False
        procs_sorted = torch.where(key2_sorted < _INF, self.procs[rows].gather(1, order), 0)
        cum = self.free[rows, None] + torch.cumsum(procs_sorted, 1)
        # the first running job whose release lets the job fit; if none does, the last one (none running: now)
        n_running = running.sum(1, keepdim=True)
        k = torch.minimum((cum < need[:, None]).sum(1, keepdim=True), (n_running - 1).clamp_(min=0))
        shadow = torch.where(n_running.squeeze(1) > 0, req_end.gather(1, order.gather(1, k)).squeeze(1), self.now[rows])
        return shadow, cum.gather(1, k).squeeze(1) - need

    def _scan(self, rows: torch.Tensor, chosen: torch.Tensor, shadow: torch.Tensor, extra: torch.Tensor) -> None:
        """One backfilling pass over each window's queue in FCFS order (sequential first fit)."""
        ptr = torch.full((len(rows),), -1, dtype=torch.int64, device=self.device)
        easy = self.backfill == "easy"
        while len(rows):
            idx = self.idx[: len(rows)]
            end = self.now[rows, None] + self.req[rows]
            procs = self.procs[rows]
            ok = self.queued[rows] & (procs <= self.free[rows, None]) & (idx > ptr[:, None])
            if easy:
                short = end <= shadow[:, None]
                ok &= (idx != chosen[:, None]) & (short | (procs <= extra[:, None]))
            else:
                ok &= end < shadow[:, None]
            anyk = ok.any(1)
            if not bool(anyk.any()):
                return
            rows, ok, chosen, shadow, extra = rows[anyk], ok[anyk], chosen[anyk], shadow[anyk], extra[anyk]
            ptr = ok.to(torch.uint8).argmax(1)
            if easy:
                uses_extra = ~short[anyk].gather(1, ptr[:, None]).squeeze(1)
                extra = extra - torch.where(uses_extra, self.procs[rows, ptr], 0)
            self._start(rows, ptr)

    def _wait_backfilling(self, rows: torch.Tensor, chosen: torch.Tensor) -> None:
        need = self.procs[rows, chosen]
        if self.backfill == "rlscheduler":
            shadow, extra = self._reserve(rows, need)  # once, the paper's variant
        while len(rows):
            if self.backfill == "easy":
                shadow, extra = self._reserve(rows, need)
            self._scan(rows, chosen, shadow, extra)
            self._next_event(rows)
            waiting = need > self.free[rows]
            rows, chosen, need, shadow, extra = (x[waiting] for x in (rows, chosen, need, shadow, extra))

    def _move_forward(self, rows: torch.Tensor) -> None:
        """After a start: windows with an empty queue advance to their next arrival (or end)."""
        rows = rows[self.qlen.index_select(0, rows) == 0]
        if not len(rows):
            return
        over = self.next.index_select(0, rows) >= self.L
        self.done[rows[over]] = True
        rows = rows[~over]
        if not len(rows):
            return
        nxt = self.next.index_select(0, rows)
        t = self.submit.view(-1)[rows * self.L + nxt]
        c = int(nxt.max())
        rk = self.rkey[:, :c]
        key = rk.index_select(0, rows)
        gone = key < t[:, None] * self._l4  # running and actual end < t
        self.free.index_add_(0, rows, (self.procs[:, :c].index_select(0, rows) * gone).sum(1))
        rk.index_copy_(0, rows, key.masked_fill_(gone, _INF))
        self.queued.view(-1)[rows * self.L + nxt] = True
        self.qlen.index_add_(0, rows, torch.ones_like(rows))
        self.next.index_add_(0, rows, torch.ones_like(rows))
        self.now.index_copy_(0, rows, torch.maximum(self.now.index_select(0, rows), t))
        self.sorted_a[rows] = True
        self.last_a[rows] = self.started[rows]

    # ------------------------------------------------------------------------- decisions

    def schedule(self, jobs) -> torch.Tensor:
        """Start queued job ``jobs[b]`` (window-relative) in every window not yet done (others ignore theirs),
        waiting or backfilling first where it does not fit.  Returns ``done`` (B,).

        Raises:
            InputError: a window's job is not in its queue.
        """
        jobs = torch.as_tensor(jobs, dtype=torch.int64, device=self.device).reshape(-1)
        if jobs.numel() != self.B:
            raise InputError(f"schedule needs one job per window ({self.B}); got {jobs.numel()}")
        if self.backend == "numba":
            return self._schedule_numba(jobs)
        if self.backend == "triton":
            return self._schedule_triton(jobs)
        rows = torch.nonzero(~self.done).squeeze(1)
        jobs = jobs[rows]
        if bool(((jobs < 0) | (jobs >= self.L)).any()) or not bool(self.queued[rows, jobs.clamp(0, self.L - 1)].all()):
            raise InputError("a chosen job is not waiting in its window's queue")
        waiting = self.procs[rows, jobs] > self.free[rows]
        if bool(waiting.any()):
            if self.backfill == "none":
                self._wait_bulk(rows[waiting], self.procs[rows[waiting], jobs[waiting]])
            else:
                self._wait_backfilling(rows[waiting], jobs[waiting])
        self._start(rows, jobs)
        self._move_forward(rows)
        self.decisions += len(rows)
        return self.done

    def running_order(self, b: int) -> list[int]:
        """Window ``b``'s running jobs in the order of the reference's running list (tie-breaking state)."""
        if self.backend != "torch":
            return self._state["rjob"][b, : int(self._state["rcnt"][b])].tolist()
        key = self.rkey[b]
        jobs = torch.nonzero(key < _INF).squeeze(1).tolist()
        act = {j: int(key[j]) // self._l4 for j in jobs}
        tie = {j: int(key[j]) % self._l4 for j in jobs}
        last_a, sorted_a = int(self.last_a[b]), bool(self.sorted_a[b])
        appended = {j: tie[j] >= self.L + last_a for j in jobs}
        return sorted(jobs, key=lambda j: ((1, 0) if appended[j] or not sorted_a else (0, act[j]), tie[j]))

    def random_valid(self, generator: torch.Generator | None = None) -> torch.Tensor:
        """A uniformly random queued job per window (0 for finished windows)."""
        if self.backend == "numba":
            pick = (torch.rand(self.B, generator=generator) * self.qlen).long().numpy()
            st = self._arrays
            return torch.from_numpy(batched_kernels.nth_queued(st["queued"], st["nxt"], st["qlo"], pick,
                                                               np.empty(self.B, dtype=np.int64)))
        # (the tensor path's columns up to the furthest arrival; on the Triton path all L: no host sync)
        c = self.L if self.backend == "triton" else max(int(self.next.max()), 1)
        pick = (torch.rand(self.B, generator=generator, device=self.device) * self.qlen).long()
        rank = self.queued[:, :c].to(torch.int32).cumsum_(1)  # queued jobs up to and including i (contiguous: fast)
        return torch.searchsorted(rank, pick[:, None].to(torch.int32) + 1).squeeze(1).clamp(max=c - 1)

    # ------------------------------------------------------------------------- metrics

    def metrics(self) -> dict[str, torch.Tensor]:
        """Per-window metrics of finished windows (B,) float64, as :meth:`ClusterSimulator.metrics`."""
        if not bool(self.done.all()):
            raise InputError("not every window is finished yet")
        submit, run, procs = self.submit.double(), self.run.double(), self.procs.double()
        wait = self.start_time.double() - submit
        work = (run * procs).sum(1)
        first = submit[:, 0]
        makespan = (self.start_time.double() + run).max(1).values - first
        last_start = self.now.double() - first
        total = float(self.procs_total)
        return {
            "bsld": torch.clamp((wait + run) / torch.clamp(run, min=BSLD_THRESHOLD), min=1.0).mean(1),
            "wait": wait.mean(1),
            "turnaround": (wait + run).mean(1),
            "slowdown": ((wait + run) / run).mean(1),
            "util": torch.where(makespan > 0, work / (total * makespan.clamp(min=1e-300)), 1.0),
            "util_rlscheduler": torch.where(last_start > 0, work / (total * last_start.clamp(min=1e-300)), 1.0),
        }


__all__ = ["BatchedClusterSimulator"]
