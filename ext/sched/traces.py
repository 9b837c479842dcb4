"""The trace a sched job schedules: an SWF file (any trace of the Parallel Workloads Archive), one already
loaded, or the generated Lublin–Feitelson workload (:mod:`torchhpc.ext.sched.lublin`) when none is given."""

from __future__ import annotations

from pathlib import Path

from torchhpc.ext.core.errors import InputError

from .lublin import LublinParams, generate_lublin
from .swf import SchedTrace, read_swf


def load_sched_trace(
    trace: str | Path | SchedTrace | None, procs: int | None = None, generate_jobs: int = 10_000,
    generate_seed: int = 0, strict: bool = True,
) -> SchedTrace:
    """A :class:`~torchhpc.ext.sched.swf.SchedTrace` from a path, an existing one, or the Lublin generator
    (``None``: ``generate_jobs`` jobs from ``generate_seed``).

    Args:
        procs: the machine size (default: the trace header's; the generator's 256).
        strict: fail on a malformed SWF line (``False``: skip and count it).

    Raises:
        InputError: ``procs`` below 1, or an unreadable or malformed trace file.
    """
    if isinstance(trace, SchedTrace):
        return trace
    if procs is not None and procs < 1:
        raise InputError(f"the machine size (procs) must be >= 1, got {procs}")
    if trace is None:
        params = LublinParams(procs=procs) if procs else None
        return generate_lublin(generate_jobs, generate_seed, params).for_scheduling()
    return read_swf(trace, strict=strict).for_scheduling(procs)


__all__ = ["load_sched_trace"]
