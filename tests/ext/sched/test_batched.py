"""The batched simulator against the per-window reference simulator, decision for decision."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchhpc.ext.core.dispatch import numba_available
from torchhpc.ext.core.errors import InputError
from torchhpc.ext.sched.batched import BatchedClusterSimulator
from torchhpc.ext.sched.simulator import ClusterSimulator
from torchhpc.ext.sched.swf import SchedTrace, read_swf

MODES = ["none", "rlscheduler", "easy"]
BACKENDS = ["torch", pytest.param("numba", marks=pytest.mark.skipif(
    not numba_available(), reason="numba is not installed (pip install numba): the compiled path cannot run"))]
ALL_BACKENDS = [*BACKENDS, "triton"]  # Triton interpreted here (TRITON_INTERPRET=1, tests/conftest.py)


def tie_heavy_trace(seed: int, n: int = 400, total: int = 8, narrowest: int = 1) -> SchedTrace:
    """Small integer times, so that ends, requested ends and submits often coincide; jobs of ``narrowest`` to
    ``total`` processors (above 1, a backfilling scan stops early once fewer are free)."""
    rng = np.random.default_rng(seed)
    arr = lambda x: np.asarray(x, dtype=np.int64)  # noqa: E731
    submit = np.sort(rng.integers(0, n * 6, n))
    run = rng.choice([10, 20, 30], n)
    req = run + rng.choice([0, 0, 10], n)
    return SchedTrace(name="ties", procs_total=total, job_id=np.arange(1, n + 1), submit=arr(submit), run=arr(run),
                      req_time=arr(req), procs=arr(rng.integers(narrowest, total + 1, n)), req_mem=-np.ones(n),
                      user=-np.ones(n), group=-np.ones(n), executable=-np.ones(n), max_run_time=60.0)


def replay(trace: SchedTrace, mode: str, starts: list[int], length: int, seed: int = 0, backend: str = "torch") -> int:
    """Random valid actions fed to both simulators; every window's queue, start times, clock and free
    processors compared after every decision, then the metrics.  Returns the decisions made."""
    batched = BatchedClusterSimulator(trace, mode, backend=backend)
    assert batched.backend == backend
    batched.reset(starts, length)
    refs = [ClusterSimulator(trace, mode) for _ in starts]
    for ref, s in zip(refs, starts, strict=True):
        ref.reset(s, length)
    gen = torch.Generator().manual_seed(seed)
    while not bool(batched.done.all()):
        jobs = batched.random_valid(gen)
        for b, ref in enumerate(refs):
            if not ref.done:
                ref.schedule(starts[b] + int(jobs[b]))
        batched.schedule(jobs)
        for b, ref in enumerate(refs):
            s = starts[b]
            assert bool(batched.done[b]) == ref.done
            assert torch.nonzero(batched.queued[b]).squeeze(1).tolist() == sorted(j - s for j in ref.queue)
            assert batched.start_time[b].tolist() == [ref.start_time.get(s + i, -1) for i in range(length)]
            assert (int(batched.now[b]), int(batched.free[b])) == (ref.now, ref.free)
            running = [r[3] - s for r in ref.running]  # in the reference's list order (its tie-breaking)
            assert batched.running_order(b) == running
            assert torch.nonzero(batched.running[b]).squeeze(1).tolist() == sorted(running)
    metrics = batched.metrics()
    for b, ref in enumerate(refs):
        m = ref.metrics()
        for name, values in metrics.items():
            assert float(values[b]) == pytest.approx(m.get(name), rel=1e-12), name
    return batched.decisions


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", MODES)
def test_equals_reference_on_lublin1(shared_data, mode, backend):
    """Six 128-job Lublin-1 windows: the same random actions give the same schedule as ClusterSimulator
    (the torch path and the compiled one)."""
    trace = read_swf(shared_data / "swf" / "lublin_256.swf").for_scheduling()
    assert replay(trace, mode, [300, 1981, 4000, 5500, 7000, 9000], 128, backend=backend) > 0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", MODES)
def test_equals_reference_with_many_ties(mode, backend):
    """Tie-heavy synthetic windows (equal ends, requested ends and submits): the reference's list-order
    tie-breaking is reproduced, including after backfilling's re-sorts by requested end (both paths)."""
    trace = tie_heavy_trace(1)
    replay(trace, mode, [0, 50, 100, 150, 200, 250, 300], 96, seed=3, backend=backend)
    replay(tie_heavy_trace(4, total=7, narrowest=3), mode, [0, 60, 200], 64, seed=2, backend=backend)


@pytest.mark.parametrize("mode", MODES)
def test_triton_path_equals_reference(shared_data, mode):
    """The Triton kernel (one program per window; interpreted here, so smaller windows than above) against the
    reference decision for decision: Lublin-1 windows, tie-heavy windows, a batch of one window and a window
    of one job."""
    trace = read_swf(shared_data / "swf" / "lublin_256.swf").for_scheduling()
    assert replay(trace, mode, [300, 4000, 9000], 40, backend="triton") > 0
    replay(tie_heavy_trace(1), mode, [0, 100, 250], 40, seed=3, backend="triton")
    replay(tie_heavy_trace(4, total=7, narrowest=3), mode, [0, 60], 30, seed=2, backend="triton")
    replay(tie_heavy_trace(2), mode, [7], 30, seed=1, backend="triton")
    assert replay(tie_heavy_trace(2), mode, [7, 8], 1, backend="triton") == 2


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("mode", MODES)
def test_a_job_wider_than_the_cluster_stalls_with_an_error(mode, backend):
    """A job that can never fit (built here: the trace readers refuse it) ends the call with one error once
    nothing runs and nothing is left to arrive, in every mode and on every path."""
    trace = tie_heavy_trace(0, n=20)
    trace.procs[1] = trace.procs_total + 1
    sim = BatchedClusterSimulator(trace, mode, backend=backend)
    sim.reset([0], 6)
    sim.schedule([0])
    while not bool(sim.queued[0, 1]):
        sim.schedule(sim.random_valid())
    with pytest.raises(RuntimeError, match="stalled"):
        sim.schedule([1])


def test_compiled_path_is_the_default_on_the_cpu():
    """auto resolves to numba on the CPU where numba is installed (else torch); torch can be asked for."""
    trace = tie_heavy_trace(0, n=20)
    assert BatchedClusterSimulator(trace).backend == ("numba" if numba_available() else "torch")
    assert BatchedClusterSimulator(trace, backend="torch").backend == "torch"
    with pytest.raises(InputError, match="backend"):
        BatchedClusterSimulator(trace, backend="cuda")


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_bad_input(backend):
    """A job not in its window's queue, one job count per window and decreasing submits are clear errors."""
    trace = tie_heavy_trace(0, n=20)
    sim = BatchedClusterSimulator(trace, backend=backend)
    sim.reset([0, 5], 10)
    sim.schedule([0, 0])
    before = [x.clone() for x in (sim.queued, sim.start_time, sim.now, sim.free, sim.done)]
    with pytest.raises(InputError, match="not waiting"):
        sim.schedule([int(sim.random_valid()[0]), 0])  # window 1's job 0 has started: nothing may change
    assert all(torch.equal(x, y) for x, y in zip(before, (sim.queued, sim.start_time, sim.now, sim.free, sim.done),
                                                 strict=True))
    with pytest.raises(InputError, match="one job per window"):
        sim.schedule([0])
    with pytest.raises(InputError, match="outside"):
        sim.reset([15], 10)
    trace.submit[3] = 0
    with pytest.raises(InputError, match="decrease"):
        BatchedClusterSimulator(trace)
