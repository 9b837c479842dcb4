"""The kraken demo step and the `kraken bench` comparison, at tiny sizes: same checks, figures and result files."""

from __future__ import annotations

import json

import pytest
import torch

from torchhpc.ext.core.runs import Run
from torchhpc.ext.kraken.config import BenchOptions, KrakenTour

pytest.importorskip("torchrec")


def test_demo_step_matches_torchrec_and_trains(tmp_path):
    """The demo's pooling equals torchrec's EBC (forward and gradients) and its short continual run finishes."""
    from torchhpc.ext.kraken.demo import demo

    run = Run("demo", None, root=tmp_path, run_id="d", progress=False)
    tour = KrakenTour(features=2, batch=16, rows=100, dim=4, mean_bag=2.0, repeats=2, continual_steps=20)
    res = demo(tour, run, torch.device("cpu"), seed=0)
    assert res["matches_torchrec"] and res["device"] == "cpu"
    assert (run.dir / "kraken_pooling.png").is_file()
    assert 0.0 <= res["continual_auc"] <= 1.0 and 0 < res["continual_rows"] <= 4 * 2000
    summary = json.loads((tmp_path / "demo" / "d" / "kraken" / "continual" / "summary.json").read_text())
    assert summary["steps"] == 20


def test_comparison_runs_the_variants_it_is_given():
    """The comparison (the library part of `kraken bench`) runs the variants asked for, in order, and
    compares kraken with ebc_full; every AUC is an AUC."""
    from torchhpc.ext.kraken.comparison import Comparison

    seen = []
    res = Comparison(BenchOptions(steps=4, vocab=50, batch_size=32, dim=4, out=""), ("ebc_full", "kraken")).run(
        on_result=lambda r: seen.append(r["variant"]))
    assert seen == [r["variant"] for r in res["results"]] == ["ebc_full", "kraken"] and "kraken_vs_full" in res
    assert all(0.0 <= r["auc"] <= 1.0 for r in res["results"]) and 0.0 <= res["bayes_auc"] <= 1.0


def test_bench_writes_the_suite_schema(tmp_path, capsys):
    """`kraken bench` writes stream.json in ext/core/bench's schema (one row per variant) and stream.png, and
    prints one line per variant."""
    from torchhpc.ext.kraken.commands import bench

    assert bench(BenchOptions(steps=4, vocab=50, batch_size=32, dim=4, out=str(tmp_path)),
                 variants=("ebc_full", "kraken")) == 0
    out = capsys.readouterr().out
    assert [ln.split()[0] for ln in out.splitlines()][:2] == ["ebc_full", "kraken"] and "kraken vs ebc_full" in out
    doc = json.loads((tmp_path / "kraken" / "stream.json").read_text())
    assert {"system", "benchmark", "rows", "params", "machine", "torch", "commit", "command", "date"} <= doc.keys()
    assert doc["system"] == "kraken" and [r["name"] for r in doc["rows"]] == [
        "ebc_full", "kraken", "bayes_optimal", "kraken_vs_ebc_full"]
    assert (tmp_path / "kraken" / "stream.png").is_file()
