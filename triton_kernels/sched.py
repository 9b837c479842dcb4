"""Triton kernels for sched: one scheduling decision in every window of the batched simulator, per launch.

:class:`torchhpc.ext.sched.batched.BatchedClusterSimulator` keeps ``B`` windows of ``L`` jobs.  On the CPU
its compiled path runs the reference simulator's event loop per window (numba,
:mod:`torchhpc.ext.sched.batched_kernels`); its tensor path advances the windows in lock-step, which on a
GPU is ~100 small launches and ~15 host syncs a decision, ~700 and ~80 with EASY backfilling (a
backfilling scan and an event per round, every window waiting for the one with the most events).

Here one program owns one window and runs that same event loop, line for line, on the window's state in
device memory; windows never wait for each other and a decision is two launches and one host sync (the
flags below), whatever the backfilling:

* ``_check_jobs_kernel`` — every live window's chosen job must be in its queue; counts the bad choices and
  the live windows into ``flags[0]`` and ``flags[2]``.
* ``_schedule_windows_kernel`` — ``grid = (B,)``.  Where ``flags[0]`` is 0, each live window waits
  (without backfilling: events until the job fits) or backfills (rlscheduler: the reservation once, EASY:
  every round; a first-fit scan of the queue, then one event) and starts its job, then advances until its
  queue holds a job or the window is over; a window with nothing running and nothing to arrive adds 1 to
  ``flags[1]`` (stalled).  The running list is kept in list order and sorted stably (insertion sort: the
  list is nearly sorted) by actual end before each event and by requested end at each reservation, as the
  reference sorts its list, so ties break the same way.

Work per program (int64 scalars; every load a few bytes, mostly from L1/L2 after the first touch): per
event ~4 loads per running job (the sort's keys); per backfilling round ~3 loads per queued job; no
arithmetic intensity to speak of, so one warp per program and as many windows as the batch has.
:func:`torchhpc.ext.sched.batched_kernels.schedule_windows` is the twin (same state layout, numpy), and the
per-window :class:`torchhpc.ext.sched.simulator.ClusterSimulator` the reference.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# a global read inside @triton.jit must be a constexpr
_INF = tl.constexpr(1 << 62)

#: backfilling mode -> MODE (as :data:`torchhpc.ext.sched.batched_kernels.MODES`)
MODES = {"none": 0, "rlscheduler": 1, "easy": 2}


@triton.jit
def _sort_running(row, f, rcnt, start_ptr, rjob_ptr, dur_ptr):
    # stable insertion sort of the running list rjob[row, :rcnt] by start + dur (actual or requested end)
    i = rcnt - rcnt + 1
    while i < rcnt:
        x = tl.load(rjob_ptr + row + i)
        kx = tl.load(start_ptr + row + x) + tl.load(dur_ptr + f + x)
        k = i - 1
        y = tl.load(rjob_ptr + row + k)
        go = tl.load(start_ptr + row + y) + tl.load(dur_ptr + f + y) > kx
        while go:
            tl.store(rjob_ptr + row + k + 1, y)
            k -= 1
            y = tl.load(rjob_ptr + row + tl.maximum(k, 0))
            go = (k >= 0) & (tl.load(start_ptr + row + y) + tl.load(dur_ptr + f + y) > kx)
        tl.store(rjob_ptr + row + k + 1, x)
        i += 1


@triton.jit
def _next_event(row, f, L, now, free, nxt, qlen, rcnt, queued_ptr, start_ptr, rjob_ptr,
                submit_ptr, run_ptr, procs_ptr):
    # the next arrival or actual finish (an arrival first on ties); ok = 0 when stalled (nothing changes then)
    arrival = tl.where(nxt < L, tl.load(submit_ptr + f + tl.minimum(nxt, L - 1)), _INF)
    release = now - now + _INF
    j0 = now - now
    if rcnt > 0:
        _sort_running(row, f, rcnt, start_ptr, rjob_ptr, run_ptr)
        j0 = tl.load(rjob_ptr + row)
        release = tl.load(start_ptr + row + j0) + tl.load(run_ptr + f + j0)
    ok = (arrival > release) | (arrival < _INF)
    if arrival <= release:
        if arrival < _INF:
            now = tl.maximum(now, arrival)
            tl.store(queued_ptr + row + nxt, 1)
            qlen += 1
            nxt += 1
    else:
        now = tl.maximum(now, release)
        free += tl.load(procs_ptr + f + j0)
        i = rcnt - rcnt + 1
        while i < rcnt:
            tl.store(rjob_ptr + row + i - 1, tl.load(rjob_ptr + row + i))
            i += 1
        rcnt -= 1
    return now, free, nxt, qlen, rcnt, ok


@triton.jit
def _start(row, f, j, now, free, qlen, rcnt, queued_ptr, start_ptr, rjob_ptr, procs_ptr):
    # start queued job j now: appended to the running list
    tl.store(start_ptr + row + j, now)
    free -= tl.load(procs_ptr + f + j)
    tl.store(rjob_ptr + row + rcnt, j)
    tl.store(queued_ptr + row + j, 0)
    return free, qlen - 1, rcnt + 1


@triton.jit
def _shadow(row, f, need, now, free, rcnt, start_ptr, rjob_ptr, req_ptr, procs_ptr):
    # the reservation of a job needing `need` processors: (shadow time, processors spare then); the running
    # list is left sorted by requested end, as the reference leaves it
    _sort_running(row, f, rcnt, start_ptr, rjob_ptr, req_ptr)
    avail = free
    shadow = now
    i = rcnt - rcnt
    found = i
    while (i < rcnt) & (found == 0):
        r = tl.load(rjob_ptr + row + i)
        avail += tl.load(procs_ptr + f + r)
        shadow = tl.load(start_ptr + row + r) + tl.load(req_ptr + f + r)
        found = (avail >= need).to(tl.int64)
        i += 1
    return shadow, avail - need


@triton.jit(do_not_specialize=["B", "L"])
def _check_jobs_kernel(jobs_ptr, done_ptr, queued_ptr, flags_ptr, B, L, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < B
    j = tl.load(jobs_ptr + offs, mask=m, other=0)
    live = m & (tl.load(done_ptr + offs, mask=m, other=1) == 0)
    fits = (j >= 0) & (j < L)
    q = tl.load(queued_ptr + offs * L + tl.where(fits, j, 0), mask=live & fits, other=0)
    bad = live & ((j < 0) | (j >= L) | (q == 0))
    tl.atomic_add(flags_ptr, tl.sum(bad.to(tl.int64), axis=0))
    tl.atomic_add(flags_ptr + 2, tl.sum(live.to(tl.int64), axis=0))


@triton.jit(do_not_specialize=["L", "min_procs"])
def _schedule_windows_kernel(
    jobs_ptr, first_ptr,  # (B,) int64: the chosen job (window-relative), the window's first trace job
    now_ptr, free_ptr, nxt_ptr, qlen_ptr, qlo_ptr, rcnt_ptr,  # (B,) int64 window state
    done_ptr,  # (B,) uint8
    queued_ptr,  # (B, L) uint8: waiting
    start_ptr, rjob_ptr,  # (B, L) int64: start time (-1 before), the running list (its first rcnt entries)
    submit_ptr, run_ptr, req_ptr, procs_ptr,  # (jobs,) int64: the trace
    flags_ptr,  # (3,) int64: bad choices (set before: then nothing runs), stalled windows (+1 here), live
    L, min_procs, MODE: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    if (tl.load(flags_ptr) == 0) & (tl.load(done_ptr + b) == 0):
        row = b * L
        f = tl.load(first_ptr + b)
        j = tl.load(jobs_ptr + b)
        now = tl.load(now_ptr + b)
        free = tl.load(free_ptr + b)
        nxt = tl.load(nxt_ptr + b)
        qlen = tl.load(qlen_ptr + b)
        qlo = tl.load(qlo_ptr + b)
        rcnt = tl.load(rcnt_ptr + b)
        stalled = now - now
        need = tl.load(procs_ptr + f + j)
        if need > free:
            if MODE == 0:
                while (need > free) & (stalled == 0):
                    now, free, nxt, qlen, rcnt, ok = _next_event(row, f, L, now, free, nxt, qlen, rcnt, queued_ptr,
                                                                 start_ptr, rjob_ptr, submit_ptr, run_ptr, procs_ptr)
                    stalled = 1 - ok.to(tl.int64)
            else:
                shadow, extra = _shadow(row, f, need, now, free, rcnt, start_ptr, rjob_ptr, req_ptr, procs_ptr)
                while (need > free) & (stalled == 0):
                    if MODE == 2:
                        shadow, extra = _shadow(row, f, need, now, free, rcnt, start_ptr, rjob_ptr, req_ptr, procs_ptr)
                    # no job before qlo is queued (a job is queued once)
                    while (qlo < nxt) & (tl.load(queued_ptr + row + tl.minimum(qlo, L - 1)) == 0):
                        qlo += 1
                    # the queue in FCFS order, first fit; a start leaves the rest of the scan unchanged, and
                    # below min_procs free processors nothing more fits
                    k = qlo
                    while (k < nxt) & (free >= min_procs):
                        pk = tl.load(procs_ptr + f + k)
                        if (tl.load(queued_ptr + row + k) != 0) & (pk <= free):
                            end = now + tl.load(req_ptr + f + k)
                            if MODE == 1:
                                if end < shadow:
                                    free, qlen, rcnt = _start(row, f, k, now, free, qlen, rcnt, queued_ptr, start_ptr,
                                                              rjob_ptr, procs_ptr)
                            else:
                                if k != j:
                                    if end <= shadow:
                                        free, qlen, rcnt = _start(row, f, k, now, free, qlen, rcnt, queued_ptr,
                                                                  start_ptr, rjob_ptr, procs_ptr)
                                    elif pk <= extra:
                                        extra -= pk
                                        free, qlen, rcnt = _start(row, f, k, now, free, qlen, rcnt, queued_ptr,
                                                                  start_ptr, rjob_ptr, procs_ptr)
                        k += 1
                    now, free, nxt, qlen, rcnt, ok = _next_event(row, f, L, now, free, nxt, qlen, rcnt, queued_ptr,
                                                                 start_ptr, rjob_ptr, submit_ptr, run_ptr, procs_ptr)
                    stalled = 1 - ok.to(tl.int64)
        if stalled == 0:
            free, qlen, rcnt = _start(row, f, j, now, free, qlen, rcnt, queued_ptr, start_ptr, rjob_ptr, procs_ptr)
            # after a start: advance until the queue holds a job, or the window is over
            if qlen == 0:
                if nxt >= L:
                    tl.store(done_ptr + b, 1)
                else:
                    while (qlen == 0) & (stalled == 0):
                        now, free, nxt, qlen, rcnt, ok = _next_event(row, f, L, now, free, nxt, qlen, rcnt,
                                                                     queued_ptr, start_ptr, rjob_ptr, submit_ptr,
                                                                     run_ptr, procs_ptr)
                        stalled = 1 - ok.to(tl.int64)
        tl.store(now_ptr + b, now)
        tl.store(free_ptr + b, free)
        tl.store(nxt_ptr + b, nxt)
        tl.store(qlen_ptr + b, qlen)
        tl.store(qlo_ptr + b, qlo)
        tl.store(rcnt_ptr + b, rcnt)
        if stalled != 0:
            tl.atomic_add(flags_ptr + 1, 1)


def schedule_windows_triton(jobs: torch.Tensor, mode: str, min_procs: int, state: dict[str, torch.Tensor],
                            trace: tuple[torch.Tensor, ...], *, block: int = 128) -> torch.Tensor:
    """Start ``jobs[b]`` in every window ``b`` not done (waiting or backfilling first), state updated in place.

    ``state``: the windows' tensors on one device, as the compiled path keeps them (``first``, ``now``,
    ``free``, ``nxt``, ``qlen``, ``qlo``, ``rcnt`` ``(B,)`` int64; ``done`` ``(B,)`` bool; ``queued``
    ``(B, L)`` bool; ``start_time``, ``rjob`` ``(B, L)`` int64); ``trace``: ``(submit, run, req, procs)``
    int64 on that device; ``min_procs`` the fewest processors any job asks for.  Nothing changes where a
    live window's job is not in its queue.

    Returns:
        ``flags`` ``(3,)`` int64 on the device: windows whose job was not queued, windows that stalled
        (nothing running, nothing to arrive), live windows; reading it is the decision's one host sync.
    """
    B, L = state["queued"].shape
    flags = torch.zeros(3, dtype=torch.int64, device=jobs.device)
    if B == 0:
        return flags
    done, queued = state["done"].view(torch.uint8), state["queued"].view(torch.uint8)
    _check_jobs_kernel[(triton.cdiv(B, block),)](jobs, done, queued, flags, B, L, BLOCK=block)
    _schedule_windows_kernel[(B,)](
        jobs, state["first"], state["now"], state["free"], state["nxt"], state["qlen"], state["qlo"], state["rcnt"],
        done, queued, state["start_time"], state["rjob"], *trace, flags, L, min_procs, MODE=MODES[mode],
        num_warps=1,
    )
    return flags


__all__ = ["MODES", "schedule_windows_triton"]
