"""The Lublin–Feitelson generator: deterministic, valid, and statistically like the real Lublin-1 trace."""

from __future__ import annotations

import numpy as np

from torchhpc.ext.sched.lublin import LublinParams, generate_lublin
from torchhpc.ext.sched.swf import read_swf, write_swf


def stats(t):
    n = t.procs.astype(np.int64)
    return {
        "serial": float((n == 1).mean()),
        "pow2": float((((n & (n - 1)) == 0)[n > 1]).mean()),
        "median_run": float(np.median(t.run)),
        "long_share": float((t.run > 3600).mean()),
        "median_gap": float(np.median(np.diff(t.submit))),
    }


def test_deterministic_and_valid(tmp_path):
    """Same seed, same trace; sizes within the machine; arrivals sorted; SWF round trip."""
    a, b = generate_lublin(2000, seed=3), generate_lublin(2000, seed=3)
    assert all(np.array_equal(a.columns[k], b.columns[k]) for k in a.columns)
    assert not np.array_equal(generate_lublin(2000, seed=4).run, a.run)
    assert a.procs.min() >= 1 and a.procs.max() <= 256 and np.all(np.diff(a.submit) >= 0)
    small = generate_lublin(500, seed=1, params=LublinParams(procs=64))
    assert small.procs.max() <= 64
    write_swf(a, tmp_path / "g.swf")
    back = read_swf(tmp_path / "g.swf")
    assert np.array_equal(back.run, a.run) and back.max_nodes == 256


def test_statistics_match_the_real_lublin_1_trace(shared_data):
    """Serial share, power-of-two share, run-time and inter-arrival medians are close to Lublin-1's."""
    ours = stats(generate_lublin(10_000, seed=0))
    real = stats(read_swf(shared_data / "swf" / "lublin_256.swf"))
    assert abs(ours["serial"] - real["serial"]) < 0.03
    assert abs(ours["pow2"] - real["pow2"]) < 0.06
    assert abs(ours["long_share"] - real["long_share"]) < 0.06
    assert 0.66 < ours["median_run"] / real["median_run"] < 1.5
    assert 0.66 < ours["median_gap"] / real["median_gap"] < 1.5
