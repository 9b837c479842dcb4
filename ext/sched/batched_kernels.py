"""The compiled (numba) step of :class:`~torchhpc.ext.sched.batched.BatchedClusterSimulator`.

The torch path advances all windows in lock-step, so with backfilling each step waits for the window that
needs the most events.  Here every window runs its own event loop, the reference's
(:class:`~torchhpc.ext.sched.simulator.ClusterSimulator`) line for line, in machine code, windows split
over threads (``prange``): :func:`schedule_windows` makes one decision in every window not yet done.

Per window the state is the reference's: the wait queue as a flag per window-relative job (the reference's
list is always in job-index order, which is also its FCFS order since submits do not decrease), and the
running list as job indices in list order (``rjob[b, :rcnt[b]]``), sorted stably (insertion sort: the list
is nearly sorted) by actual end before every event and by requested end at every reservation, exactly
where the reference sorts it, so ties break the same way.

numba is optional: without it the torch path runs (:func:`torchhpc.ext.core.dispatch.numba_available`).
"""

from __future__ import annotations

import time

from torchhpc.ext.core.dispatch import numba_available

_HAVE_NUMBA = numba_available()
if _HAVE_NUMBA:  # pragma: no cover - exercised where numba is installed (make setup installs it)
    import numba
    from numba import njit, prange

MODES = {"none": 0, "rlscheduler": 1, "easy": 2}
"""backfilling mode -> the kernel's code"""

INF = 1 << 62


class ThreadTuner:
    """Picks the thread count of each compiled step: 1 or all of numba's, whichever made the recent steps
    faster (per window), trying the other now and then.  On a machine shared with other jobs a parallel step
    waits at its barrier for a thread that has no core, and one thread can be ten times faster; on an idle
    machine all threads are.  Results never depend on it (windows are independent)."""

    def __init__(self, threads: int | None = None) -> None:
        most = numba.config.NUMBA_NUM_THREADS if _HAVE_NUMBA else 1
        self.choices = [threads] if threads else sorted({1, most})
        self.cost = {n: None for n in self.choices}  # moving average of seconds per window
        self.calls, self.interval, self.next_probe, self.probing = 0, 16, 16, None

    def pick(self) -> int:
        self.calls += 1
        untried = [n for n in self.choices if self.cost[n] is None]
        if untried:
            return untried[0]
        best = min(self.choices, key=self.cost.__getitem__)
        if len(self.choices) > 1 and self.calls >= self.next_probe:  # re-try another now and then (the load
            self.probing = self.choices[(self.choices.index(best) + 1) % len(self.choices)]  # changes); less
            return self.probing                                      # often each time it loses
        return best

    def run(self, fn, windows: int, *args):
        """``fn(*args)`` on the thread count :meth:`pick` says, its cost recorded; the caller's count restored."""
        n = self.pick()
        before = numba.get_num_threads()
        numba.set_num_threads(n)
        try:
            t0 = time.perf_counter()
            out = fn(*args)
            dt = (time.perf_counter() - t0) / max(windows, 1)
        finally:
            numba.set_num_threads(before)
        old = self.cost[n]
        self.cost[n] = dt if old is None else 0.75 * old + 0.25 * dt
        if self.probing is not None:
            won = self.cost[n] <= min(self.cost.values())
            self.interval = 16 if won else min(2 * self.interval, 1024)
            self.next_probe, self.probing = self.calls + self.interval, None
        return out


if _HAVE_NUMBA:

    @njit(cache=True, inline="always")
    def _start(b, j, f, now, free, qlen, queued, start_time, rjob, rcnt, procs):
        start_time[b, j] = now[b]
        free[b] -= procs[f + j]
        rjob[b, rcnt[b]] = j
        rcnt[b] += 1
        queued[b, j] = False
        qlen[b] -= 1

    @njit(cache=True)
    def _sort_running(b, f, by_request, start_time, rjob, rcnt, run, req):
        """Stable insertion sort of window ``b``'s running list by actual (or requested) end."""
        dur = req if by_request else run
        for i in range(1, rcnt[b]):
            x = rjob[b, i]
            kx = start_time[b, x] + dur[f + x]
            k = i - 1
            while k >= 0 and start_time[b, rjob[b, k]] + dur[f + rjob[b, k]] > kx:
                rjob[b, k + 1] = rjob[b, k]
                k -= 1
            rjob[b, k + 1] = x

    @njit(cache=True)
    def _next_event(b, f, L, now, free, nxt, qlen, queued, start_time, rjob, rcnt, submit, run, req, procs):
        """The next arrival or actual finish (an arrival first on ties); False when stalled."""
        arrival = submit[f + nxt[b]] if nxt[b] < L else INF
        release = INF
        if rcnt[b] > 0:
            _sort_running(b, f, False, start_time, rjob, rcnt, run, req)
            j0 = rjob[b, 0]
            release = start_time[b, j0] + run[f + j0]
        if arrival <= release:
            if arrival == INF:
                return False
            now[b] = max(now[b], arrival)
            queued[b, nxt[b]] = True
            qlen[b] += 1
            nxt[b] += 1
        else:
            now[b] = max(now[b], release)
            free[b] += procs[f + rjob[b, 0]]
            for i in range(1, rcnt[b]):
                rjob[b, i - 1] = rjob[b, i]
            rcnt[b] -= 1
        return True

    @njit(cache=True)
    def _shadow(b, f, need, now, free, start_time, rjob, rcnt, run, req, procs):
        """The reservation of a job needing ``need`` processors: (shadow time, processors spare then)."""
        _sort_running(b, f, True, start_time, rjob, rcnt, run, req)
        avail = free[b]
        shadow = now[b]
        for i in range(rcnt[b]):
            r = rjob[b, i]
            avail += procs[f + r]
            shadow = start_time[b, r] + req[f + r]
            if avail >= need:
                break
        return shadow, avail - need

    @njit(cache=True)
    def _window(b, j, mode, min_procs, L, first, now, free, nxt, qlen, qlo, done, queued, start_time, rjob, rcnt,
                submit, run, req, procs):
        """One decision in window ``b``: start queued job ``j``. Returns 1 when the window stalled."""
        f = first[b]
        need = procs[f + j]
        if need > free[b]:
            if mode == 0:
                while need > free[b]:
                    if not _next_event(b, f, L, now, free, nxt, qlen, queued, start_time, rjob, rcnt,
                                       submit, run, req, procs):
                        return 1
            else:
                shadow, extra = _shadow(b, f, need, now, free, start_time, rjob, rcnt, run, req, procs)
                while need > free[b]:
                    if mode == 2:
                        shadow, extra = _shadow(b, f, need, now, free, start_time, rjob, rcnt, run, req, procs)
                    k0 = qlo[b]  # no job before qlo is queued (a job is queued once)
                    while k0 < nxt[b] and not queued[b, k0]:
                        k0 += 1
                    qlo[b] = k0
                    for k in range(k0, nxt[b]):  # the queue in FCFS order; starting k leaves the rest unchanged
                        if free[b] < min_procs:  # nothing more fits
                            break
                        if not queued[b, k] or procs[f + k] > free[b]:
                            continue
                        end = now[b] + req[f + k]
                        if mode == 1:
                            if end < shadow:
                                _start(b, k, f, now, free, qlen, queued, start_time, rjob, rcnt, procs)
                        elif k != j:
                            if end <= shadow:
                                _start(b, k, f, now, free, qlen, queued, start_time, rjob, rcnt, procs)
                            elif procs[f + k] <= extra:
                                extra -= procs[f + k]
                                _start(b, k, f, now, free, qlen, queued, start_time, rjob, rcnt, procs)
                    if not _next_event(b, f, L, now, free, nxt, qlen, queued, start_time, rjob, rcnt,
                                       submit, run, req, procs):
                        return 1
        _start(b, j, f, now, free, qlen, queued, start_time, rjob, rcnt, procs)
        # after a start: advance until the queue holds a job, or the window is over
        if qlen[b] == 0:
            if nxt[b] >= L:
                done[b] = True
            else:
                while qlen[b] == 0:
                    if not _next_event(b, f, L, now, free, nxt, qlen, queued, start_time, rjob, rcnt,
                                       submit, run, req, procs):
                        return 1
        return 0

    @njit(cache=True, parallel=True)
    def schedule_windows(jobs, mode, min_procs, first, now, free, nxt, qlen, qlo, done, queued, start_time, rjob, rcnt,
                         submit, run, req, procs):
        """Start ``jobs[b]`` in every window ``b`` not done (waiting or backfilling first); state updated in
        place.  ``min_procs``: the fewest processors any job asks for (a backfilling scan stops below it).  Returns the number of windows that stalled (nothing running, nothing to arrive)."""
        B, L = queued.shape
        stalled = 0
        for b in prange(B):
            if not done[b]:
                stalled += _window(b, jobs[b], mode, min_procs, L, first, now, free, nxt, qlen, qlo, done, queued,
                                   start_time, rjob, rcnt, submit, run, req, procs)
        return stalled

    @njit(cache=True)
    def nth_queued(queued, nxt, qlo, pick, out):
        """``out[b]``: window ``b``'s queued job of rank ``pick[b]`` (0-based, index order); 0 when none.
        ``qlo[b]``: no job before it is queued (raised here where it can be)."""
        for b in range(queued.shape[0]):
            out[b] = 0
            left = pick[b]
            while qlo[b] < nxt[b] and not queued[b, qlo[b]]:  # (tightens the bound the scans start from)
                qlo[b] += 1
            for i in range(qlo[b], nxt[b]):
                if queued[b, i]:
                    if left == 0:
                        out[b] = i
                        break
                    left -= 1
        return out


__all__ = ["MODES", "ThreadTuner", "nth_queued", "schedule_windows"]
