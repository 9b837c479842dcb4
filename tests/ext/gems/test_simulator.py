"""The discrete-event simulator reproduces the schedules' closed forms and scales to 1,024 devices."""

from __future__ import annotations

import pytest

from torchhpc.ext.core.errors import ConfigError
from torchhpc.ext.gems.partition import StageInfo
from torchhpc.ext.gems.simulator import simulate, simulation_table


def uniform(P: int, f: float = 1.0, b: float = 2.0, act: int = 1000, params: int = 100, out: int = 0):
    return [StageInfo(s, (s, s + 1), f, b, params, act, out) for s in range(P)]


@pytest.mark.parametrize("P,M", [(2, 1), (3, 4), (4, 2), (8, 8)])
def test_gpipe_makespan_is_the_closed_form(P, M):
    """Uniform stages, free links: GPipe takes (M + P - 1)(f + b) per update."""
    res = simulate(uniform(P), "gpipe", M, bandwidth=1e30, latency=0.0)
    assert res.step_s == pytest.approx((M + P - 1) * 3.0)
    assert res.global_batch == M


def test_mast_doubles_throughput_with_one_micro_batch():
    """With one micro-batch on two stages the mirrored replica fills every bubble: same time, twice the samples."""
    g = simulate(uniform(2), "gpipe", 1, bandwidth=1e30, latency=0.0)
    m = simulate(uniform(2), "mast", 1, bandwidth=1e30, latency=0.0)
    assert m.step_s == pytest.approx(g.step_s)
    assert m.samples_per_s == pytest.approx(2 * g.samples_per_s)
    assert m.busy_fraction == pytest.approx(1.0) and g.busy_fraction == pytest.approx(0.5)


def test_work_another_rank_waits_for_goes_first():
    """MAST, 2 stages x 2 micro-batches: when rank 0 can run either replica A's last backward (which ends
    A's chain) or replica B's backward whose gradient rank 1 needs next, it runs B's first; the rule
    counts the actions waiting on each (critical-path order), as the runtime does."""
    from torchhpc.ext.gems.partition import actions_after

    assert [actions_after(True, s, 3) for s in range(3)] == [5, 4, 3]
    assert [actions_after(False, s, 3) for s in range(3)] == [0, 1, 2]
    st = [StageInfo(0, (0, 1), 10.0, 19.0, 100, 1000, 0), StageInfo(1, (1, 2), 13.0, 32.0, 100, 1000, 0)]
    res = simulate(st, "mast", 2, bandwidth=1e30, latency=0.0, keep_events=True)
    order = [(k, kind, m) for r, k, kind, _, m, _, _ in sorted(res.events, key=lambda e: e[5]) if r == 0]
    # at t = 78 both are ready: A's backward of micro-batch 0 (stage 0, nothing after it) and B's of micro-batch 1
    assert order.index((1, "B", 1)) < order.index((0, "B", 0))
    assert res.busy_fraction == pytest.approx(1.0)


def test_update_overhead_is_added_once_per_update():
    """A fixed per-update time lengthens the update by exactly that much; a negative one is refused."""
    from torchhpc.ext.core.errors import InputError

    base = simulate(uniform(2), "mast", 2, bandwidth=1e9, latency=1e-4)
    slow = simulate(uniform(2), "mast", 2, bandwidth=1e9, latency=1e-4, update_overhead_s=0.5)
    assert slow.step_s == pytest.approx(base.step_s + 0.5)
    assert slow.samples_per_s == pytest.approx(base.global_batch / (base.step_s + 0.5))
    with pytest.raises(InputError, match="update_overhead_s"):
        simulate(uniform(2), "mast", 2, update_overhead_s=-1.0)


def test_corun_slowdown_stretches_only_overlapped_work():
    """A measured co-run slowdown leaves GPipe's non-overlapping actions alone and stretches MAST, where
    both ranks always compute at once, by the full factor; 1.0 is the plain model; <= 0 is refused."""
    g = simulate(uniform(2), "gpipe", 1, bandwidth=1e30, latency=0.0)
    g15 = simulate(uniform(2), "gpipe", 1, bandwidth=1e30, latency=0.0, corun_slowdown=1.5)
    m = simulate(uniform(2), "mast", 1, bandwidth=1e30, latency=0.0)
    m15 = simulate(uniform(2), "mast", 1, bandwidth=1e30, latency=0.0, corun_slowdown=1.5)
    assert g15.step_s == pytest.approx(g.step_s)
    assert m15.step_s == pytest.approx(1.5 * m.step_s, rel=1e-3)
    assert simulate(uniform(3), "gpipe", 4, corun_slowdown=1.0).step_s == simulate(uniform(3), "gpipe", 4).step_s
    with pytest.raises(Exception, match="corun_slowdown"):
        simulate(uniform(2), "mast", 1, corun_slowdown=0.0)


def test_memory_model():
    """GPipe stashes all M micro-batches; MAST holds two stages' weights and both replicas' activations."""
    act, params = 1000, 100
    g = simulate(uniform(2, act=act, params=params), "gpipe", 3, bandwidth=1e30, latency=0.0)
    assert g.peak_bytes == [params * 3 + 3 * act] * 2
    m = simulate(uniform(2, act=act, params=params), "mast", 1, bandwidth=1e30, latency=0.0)
    assert max(m.peak_bytes) == 2 * params * 3 + 2 * act


def test_master_repeats_and_allreduce_and_links():
    """MASTER with eta repetitions processes eta x the samples; D > 1 adds an all-reduce; slow links add time."""
    m1 = simulate(uniform(2), "mast", 1, bandwidth=1e30, latency=0.0)
    m3 = simulate(uniform(2), "master", 1, eta=3, bandwidth=1e30, latency=0.0)
    assert m3.global_batch == 3 * m1.global_batch and m3.step_s == pytest.approx(3 * m1.step_s)
    h = simulate(uniform(2, params=10**6), "mast", 1, groups=4, bandwidth=1e30, allreduce_bandwidth=1e6,
                 latency=0.0)
    assert h.allreduce_s == pytest.approx(2 * 7 / 8 * 2 * 10**6 / 1e6)
    slow = simulate(uniform(2, out=10**6), "gpipe", 1, bandwidth=1e6, latency=0.0)
    assert slow.step_s == pytest.approx(6.0 + 2.0)


def test_scales_to_1024_devices():
    """A 1,024-device prediction (16 stages x 64 groups, 16 micro-batches) for every schedule."""
    rows = [simulate(uniform(16), s, 16, groups=64, eta=2 if s == "master" else 1) for s in ("gpipe", "mast", "master")]
    assert all(r.devices == 1024 for r in rows)
    assert "1024" in simulation_table(rows)
    with pytest.raises(ConfigError):
        simulate(uniform(2), "zero-bubble", 1)


TRUE = [StageInfo(0, (0, 3), 0.012, 0.020, 1000, 10_000, 2_000_000),
        StageInfo(1, (3, 7), 0.015, 0.027, 300_000, 20_000, 40)]
LINK = {"bandwidth": 1.5e9, "latency": 1e-4}


def _measured_spans(stages, n: int = 6) -> dict[str, list[float]]:
    return {f"{s.stage}{k}": [t] * n for s in stages for k, t in (("F", s.forward_s), ("B", s.backward_s))}


def _profile_of(stages):
    """Stage byte counts with placeholder times (what a profile gives before calibration)."""
    return [StageInfo(s.stage, s.blocks, 1.0, 1.0, s.param_bytes, s.activation_bytes, s.output_bytes) for s in stages]


def test_calibration_recovers_known_machine_parameters():
    """calibrate() fits stage times, the per-update overhead and the co-run slowdown on one-micro-batch runs made by
    the simulator with known values (GPipe's spans and overheads, MAST's update time) and gives those values back."""
    from torchhpc.ext.gems.simulator import calibrate

    mast = simulate(TRUE, "mast", 1, corun_slowdown=1.25, update_overhead_s=0.004, **LINK)
    overheads = [0.001 + min(0.003, 0.009)] * 6  # rank 0's head + the shorter tail, per update
    cal = calibrate(_profile_of(TRUE), _measured_spans(TRUE), overheads, step_s=mast.step_s, schedule="mast",
                    micro_batches=1, micro_batch=1, **LINK)
    assert cal.overhead_s == pytest.approx(0.004)
    assert cal.corun_slowdown == pytest.approx(1.25, abs=0.01)
    assert [(s.forward_s, s.backward_s) for s in cal.stages] == [(s.forward_s, s.backward_s) for s in TRUE]
    assert [s.param_bytes for s in cal.stages] == [s.param_bytes for s in TRUE]
    again = simulate(cal.stages, "mast", 1, corun_slowdown=cal.corun_slowdown, update_overhead_s=cal.overhead_s,
                     **LINK)
    assert again.step_s == pytest.approx(mast.step_s, rel=1e-3)


def test_calibration_without_overlap_keeps_slowdown_one_and_refuses_missing_spans():
    """A GPipe run with one micro-batch never computes on two ranks at once: its fitted slowdown is 1; a stage
    without measured spans, or no measured update, is a clear error."""
    from torchhpc.ext.core.errors import InputError
    from torchhpc.ext.gems.simulator import calibrate

    gpipe = simulate(TRUE, "gpipe", 1, update_overhead_s=0.004, **LINK)
    cal = calibrate(_profile_of(TRUE), _measured_spans(TRUE), [0.004], step_s=1.5 * gpipe.step_s, schedule="gpipe",
                    micro_batches=1, **LINK)
    assert cal.corun_slowdown == 1.0 and cal.overhead_s == 0.004
    with pytest.raises(InputError, match="backward action of stage 1"):
        calibrate(_profile_of(TRUE), {"0F": [1.0], "0B": [1.0], "1F": [1.0]}, [0.0])
    with pytest.raises(InputError, match="no measured updates"):
        calibrate(_profile_of(TRUE), _measured_spans(TRUE), [])


def test_calibration_from_a_run_folder(tmp_path):
    """calibration_from_run reads a run folder (summary.json's split and action times, metrics.jsonl's update
    times) made here by the simulator for MAST with 2 micro-batches, and recovers its machine parameters."""
    import json

    import numpy as np

    from torchhpc.ext.core.errors import InputError
    from torchhpc.ext.gems.partition import BlockProfile
    from torchhpc.ext.gems.simulator import calibration_from_run

    mast = simulate(TRUE, "mast", 2, corun_slowdown=1.4, update_overhead_s=0.002, **LINK)
    # a 7-block profile whose stages (0-3, 3-7) have TRUE's byte counts; its times are not used
    prof = BlockProfile(1, np.ones(7), np.ones(7), np.array([10_000, 0, 0, 20_000, 0, 0, 0]),
                        np.array([0, 0, 2_000_000, 0, 0, 0, 40]), np.array([1000, 0, 0, 300_000, 0, 0, 0]))
    # spans of an overlapped run hold the slowdown already; these are the stage times without it
    summary = {"schedule": "mast", "stages": 2, "groups": 1, "micro_batches": 2, "eta": 1, "micro_batch": 1,
               "bounds": [[0, 3], [3, 7]], "update_times": {"spans": _measured_spans(TRUE), "overhead_s": [0.002] * 3}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    steps = [10.0] + [mast.step_s] * 3  # the first (warm-up) update is left out
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": i + 1, "step_s": s}) + "\n"
                                                    for i, s in enumerate(steps)))
    cal = calibration_from_run(tmp_path, prof, **LINK)
    assert cal.overhead_s == pytest.approx(0.002)
    assert cal.corun_slowdown == pytest.approx(1.4, abs=0.02)
    assert [s.output_bytes for s in cal.stages] == [2_000_000, 40]
    with pytest.raises(InputError, match="summary.json not found"):
        calibration_from_run(tmp_path / "nothing", prof, **LINK)
    short = BlockProfile(1, *(np.ones(5),) * 5)
    with pytest.raises(InputError, match="the run's model has 7 blocks"):
        calibration_from_run(tmp_path, short, **LINK)


def test_benchmark_calibrates_with_the_library_function():
    """benchmarks/gems.py pools its one-micro-batch runs (GPipe's spans, heads and tails per rank, MAST's update
    time) into calibrate(); fed runs made by the simulator with known values, it gives those values back."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "gems.py"
    spec = importlib.util.spec_from_file_location("gems_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    mast = simulate(TRUE, "mast", 1, corun_slowdown=1.25, update_overhead_s=0.004, **LINK)

    def rank(tail):
        return {"methods": {"gpipe@1": {"spans": _measured_spans(TRUE), "head": [0.001] * 6, "tail": [tail] * 6},
                            "mast@1": {"step_s": mast.step_s}}}

    link = {"bandwidth_Bps": LINK["bandwidth"], "latency_s": LINK["latency"]}
    cal = bench.calibrate_on_runs([[rank(0.003), rank(0.009)]], _profile_of(TRUE), link, 1)
    assert cal.overhead_s == pytest.approx(0.004)  # rank 0's head + the shorter tail
    assert cal.corun_slowdown == pytest.approx(1.25, abs=0.01)
    assert [(s.forward_s, s.backward_s) for s in cal.stages] == [(s.forward_s, s.backward_s) for s in TRUE]
