"""Synthetic rigid-job workloads after the Lublin–Feitelson model.

Lublin & Feitelson, "The workload on parallel supercomputers: modeling the
characteristics of rigid jobs", JPDC 63(11), 2003 — the model behind
RLScheduler's Lublin-1/Lublin-2 traces.  Its three parts, as generated here:

* **size**: a job is serial with probability ``serial_prob``; otherwise
  ``log2(size)`` is drawn from a two-stage uniform distribution (``[ulow, umed]``
  with probability ``uprob``, else ``[umed, log2(procs)]``) and the size is rounded
  to a power of two with probability ``pow2_prob``;
* **run time**: ``ln(run time)`` follows a hyper-gamma distribution — Gamma(a1, b1)
  with probability ``p``, else Gamma(a2, b2) — whose mixing ``p = pa * size + pb``
  (clipped to [0, 1]) falls with the size, so big jobs tend to run long;
* **arrivals**: ``ln(inter-arrival)`` is Gamma(aarr, barr), modulated by a daily
  cycle (fewer arrivals at night) through thinning.

The defaults start from the model's published parameters and are calibrated
so that the generated workload has the statistics of RLScheduler's Lublin-1
trace (serial share, power-of-two share, run-time distribution, arrival rate,
heuristic slowdowns); ``tests/ext/sched/test_lublin.py`` compares them with the
real trace.  Requested time is left unknown (``-1``), so the
scheduler sees exact estimates, as in the Lublin traces.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from torchhpc.ext.core.config import Options, option

from .swf import FIELDS, Trace


@dataclass
class LublinParams(Options):
    """Parameters of the generator (defaults calibrated to RLScheduler's Lublin-1 trace)."""

    procs: int = option(256, help="machine size (processors)", ge=1)
    serial_prob: float = option(0.24, help="probability a job is serial", ge=0, le=1)
    pow2_prob: float = option(0.75, help="probability a parallel size is a power of two", ge=0, le=1)
    ulow: float = option(0.8, help="two-stage uniform: lower bound of log2(size)", ge=0)
    umed: float = option(5.0, help="two-stage uniform: middle of log2(size)", ge=0)
    uprob: float = option(0.86, help="two-stage uniform: probability of [ulow, umed]", ge=0, le=1)
    a1: float = option(4.2, help="hyper-gamma: shape of the short-job component of ln(run)", gt=0)
    b1: float = option(0.94, help="hyper-gamma: scale of the short-job component", gt=0)
    a2: float = option(312.0, help="hyper-gamma: shape of the long-job component", gt=0)
    b2: float = option(0.03, help="hyper-gamma: scale of the long-job component", gt=0)
    pa: float = option(-0.0054, help="mixing p = pa * size + pb")
    pb: float = option(0.78, help="mixing p = pa * size + pb")
    aarr: float = option(10.23, help="ln(inter-arrival) gamma shape", gt=0)
    barr: float = option(0.4871, help="ln(inter-arrival) gamma scale", gt=0)
    daily_amplitude: float = option(0.75, help="daily cycle: 0 = flat, 1 = no arrivals at the trough", ge=0, le=1)
    daily_peak_hour: float = option(13.0, help="daily cycle: hour of most arrivals", ge=0, lt=24)
    max_run: int = option(200_000, help="cap on run times (s)", ge=1)


def generate_lublin(jobs: int, seed: int = 0, params: LublinParams | None = None) -> Trace:
    """Generate ``jobs`` jobs; deterministic in ``seed``.

    Returns:
        A :class:`~torchhpc.ext.sched.swf.Trace` with ``MaxNodes = MaxProcs = params.procs``.
    """
    p = params or LublinParams()
    rng = np.random.default_rng(seed)
    uhi = math.log2(p.procs)
    # -- sizes ---------------------------------------------------------------------------------
    serial = rng.random(jobs) < p.serial_prob
    low_stage = rng.random(jobs) < p.uprob
    lo = np.where(low_stage, p.ulow, min(p.umed, uhi))
    hi = np.where(low_stage, min(p.umed, uhi), uhi)
    log_size = rng.uniform(lo, hi)
    pow2 = rng.random(jobs) < p.pow2_prob
    size = np.where(pow2, 2.0 ** np.round(log_size), np.round(2.0**log_size))
    size = np.clip(size, 1, p.procs)
    size[serial] = 1
    size = size.astype(np.int64)
    # -- run times: hyper-gamma on ln(run), mixing falls with size ------------------------------
    mix = np.clip(p.pa * size + p.pb, 0.0, 1.0)
    first = rng.random(jobs) < mix
    ln_run = np.where(first, rng.gamma(p.a1, p.b1, jobs), rng.gamma(p.a2, p.b2, jobs))
    run = np.clip(np.round(np.exp(ln_run)), 1, p.max_run).astype(np.int64)
    # -- arrivals: log-gamma gaps, thinned by a daily cycle --------------------------------------
    submit = np.empty(jobs, dtype=np.int64)
    t, filled = 0.0, 0
    while filled < jobs:
        n = 2 * (jobs - filled) + 64
        gaps = np.exp(rng.gamma(p.aarr, p.barr, n)) / (1.0 + p.daily_amplitude)  # thinning keeps 1/(1+amp)
        times = t + np.cumsum(gaps)
        hour = (times / 3600.0) % 24.0
        rate = 1.0 + p.daily_amplitude * np.cos(2 * math.pi * (hour - p.daily_peak_hour) / 24.0)
        keep = rng.random(n) * (1.0 + p.daily_amplitude) < rate
        kept = times[keep][: jobs - filled]
        submit[filled:filled + len(kept)] = np.round(kept).astype(np.int64)
        filled += len(kept)
        t = float(times[-1])
    submit = np.maximum.accumulate(submit)
    cols = {name: np.full(jobs, -1.0) for name in FIELDS}
    cols["job_id"] = np.arange(1, jobs + 1, dtype=np.float64)
    cols["submit"] = submit.astype(np.float64)
    cols["run"] = run.astype(np.float64)
    cols["alloc_procs"] = size.astype(np.float64)
    cols["status"] = np.ones(jobs)
    cols["queue"] = np.zeros(jobs)
    return Trace(columns=cols, max_nodes=p.procs, max_procs=p.procs, name=f"lublin(seed={seed}, jobs={jobs})",
                 max_run_time=float(run.max()))
