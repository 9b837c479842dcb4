"""Classic batch-scheduling priority functions (the lowest key is scheduled first).

Notation: ``s`` submit time (absolute trace seconds), ``r`` requested time,
``n`` processors, ``w = now - s`` the waiting time so far.

=================  =====================================================  ===========================
name               key (lower first)                                      source
=================  =====================================================  ===========================
fcfs               s                                                      first come first served
sjf                (r, s)                                                 shortest (requested) job
smallest           (n, s)                                                 fewest processors
saf                (r * n, s)                                             smallest area first
wfp3               -(w / r)^3 * n                                         Tang et al. 2009
unicep             -w / (log2(n) * r); serial jobs (log2 1 = 0) first     Tang et al. 2009
f1                 log10(r) * n + 870 * log10(s)                          Carastan-Santos & de Camargo
f2                 sqrt(r) * n + 25600 * log10(s)                         (2017), r, s <= 0 -> 0.1
wfp3_rlscheduler   ((s + 1) / r)^3 * n                                    the RLScheduler code's WFP3
unicep_rlscheduler (s + 1) / (log2(n + 1e-15) * r)                        the RLScheduler code's UNICEP
=================  =====================================================  ===========================

The two ``*_rlscheduler`` keys are what the RLScheduler authors' code computed
(it took ``w = -1 - s`` because the start time of a queued job was still -1);
their published WFP3/UNI columns were made with them.  Use them to reproduce
the paper, the textbook ones to schedule.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from torchhpc.ext.core.errors import InputError

from .simulator import ClusterSimulator

KeyFn = Callable[[int, int], object]


def _log10(x: float) -> float:
    return math.log10(x if x > 0 else 0.1)


def make_key(name: str, sim: ClusterSimulator) -> KeyFn:
    """The priority function ``key(job, now)`` of heuristic ``name`` over ``sim``'s jobs.

    Raises:
        InputError: unknown heuristic name.
    """
    s, r, n = sim.submit, sim.req, sim.procs
    keys: dict[str, KeyFn] = {
        "fcfs": lambda j, now: s[j],
        "sjf": lambda j, now: (r[j], s[j]),
        "smallest": lambda j, now: (n[j], s[j]),
        "saf": lambda j, now: (r[j] * n[j], s[j]),
        "wfp3": lambda j, now: (-((now - s[j]) / max(r[j], 1)) ** 3 * n[j], s[j]),
        "unicep": lambda j, now: (
            (0, -(now - s[j]) / max(r[j], 1), s[j]) if n[j] <= 1
            else (1, -(now - s[j]) / (math.log2(n[j]) * max(r[j], 1)), s[j])
        ),
        "f1": lambda j, now: _log10(r[j]) * n[j] + 870.0 * _log10(s[j]),
        "f2": lambda j, now: math.sqrt(max(r[j], 0)) * n[j] + 25600.0 * _log10(s[j]),
        "wfp3_rlscheduler": lambda j, now: ((s[j] + 1) / r[j]) ** 3 * n[j],
        "unicep_rlscheduler": lambda j, now: (s[j] + 1) / (math.log2(n[j] + 1e-15) * r[j]),
    }
    if name not in keys:
        raise InputError(f"unknown heuristic {name!r} (available: {', '.join(HEURISTICS)})")
    return keys[name]


HEURISTICS = (
    "fcfs", "sjf", "smallest", "saf", "wfp3", "unicep", "f1", "f2", "wfp3_rlscheduler", "unicep_rlscheduler",
)
