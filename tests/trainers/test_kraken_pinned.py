"""``torchhpc kraken train`` on configs/kraken/debug.yaml gives the metrics it gave before the refactor.

The numbers below were produced by the code before the refactor ("One shape for every system"), at commit
67fa2f8, with ``OMP_NUM_THREADS=1``.  A change that moves code must leave them as they are; only a change
that means to alter the results may update them, and says so.

Updated once, by the table-batched embeddings (one lookup pass, one gather, one pooling over all features,
one optimizer step): the loss, AUC and log-loss figures moved in their 8th-10th significant digit, nothing
else (rows, admissions, evictions, bytes, deltas and checkpoints are the same).  The cause is float summation
order alone: the backward of torch's CPU ``embedding_bag`` adds the gradient contributions of a row in an
order that depends on the whole call's indices.

Classified by the suite's tolerance policy (tests/README.md):

* exact: steps, table rows, admissions, evictions, bytes, rows in deltas, checkpoint files (counts of IDs,
  which no float decides), and the CTR (a mean of 0/1 labels: an integer sum, exact in any order);
* float32 trajectory (rel 1e-5): loss and log-loss, from GEMMs whose kernels differ by CPU model;
* AUC to 4 / (n_pos * n_neg): a pair of predictions that swaps order (or ties) moves it by
  1 / (n_pos * n_neg); on another CPU it moved by 6.5e-8.

Bit-for-bit equality of a refactor is checked outside the suite, on one host (``tools/compare_commits.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness.tolerance import FLOAT32_TRAJECTORY, assert_close_tree

pytest.importorskip("torchrec")

REPO = Path(__file__).resolve().parents[2]
DEBUG = str(REPO / "configs" / "kraken" / "debug.yaml")

# (step, loss, auc, logloss, ctr, rows, table_mb) of every logged step of metrics.jsonl
PINNED_STEPS = [
    (10, 0.7526264190673828, 0.5487715093556397, 0.7374335397463214, 0.3726562559604645, 586, 0.1746063232421875),
    (20, 0.710521399974823, 0.5590277777777778, 0.7308042502719563, 0.37968748807907104, 1146, 0.1746063232421875),
    (30, 0.733370840549469, 0.5742915325334114, 0.7285749150456282, 0.37187498807907104, 1200, 0.1746063232421875),
    (40, 0.7001341581344604, 0.5617219354328538, 0.7247493240155836, 0.3714843690395355, 1200, 0.1746063232421875),
    (50, 0.7008857727050781, 0.5559975825390031, 0.7200042744603096, 0.37453123927116394, 1200, 0.1746063232421875),
    (60, 0.6785399317741394, 0.5608243689487313, 0.7145587590595758, 0.3700520694255829, 1200, 0.1746063232421875),
]

PINNED_SUMMARY = {
    "steps": 60,
    "auc": 0.5608243689487313,
    "logloss": 0.7145587590595758,
    "mean_logloss": 0.714558759059576,
    "loss": 0.6785399317741394,
    "table_bytes": {"weights": 38400, "optimizer": 4800, "index": 114688, "metadata": 25200, "total": 183088},
    "tables": {
        "t_C1": {"rows": 300, "allocated": 300, "max_rows": 300, "admissions": 1131, "evictions": 831},
        "t_C2": {"rows": 300, "allocated": 300, "max_rows": 300, "admissions": 1174, "evictions": 874},
        "t_C3": {"rows": 300, "allocated": 300, "max_rows": 300, "admissions": 1092, "evictions": 792},
        "t_C4": {"rows": 300, "allocated": 300, "max_rows": 300, "admissions": 1091, "evictions": 791},
    },
    "world": 1,
    "rows_in_deltas": 3323,
}

PINNED_CHECKPOINTS = ["delta-00000040.pt", "delta-00000050.pt", "full-00000030.pt", "full-00000060.pt"]


def _auc_tolerance(samples: int, ctr: float) -> tuple[float, float]:
    """``(rel, abs)`` for an AUC over ``samples`` predictions: a few swapped or tied pairs."""
    n_pos = round(ctr * samples)
    return 0.0, 4.0 / (n_pos * (samples - n_pos))


def test_debug_run_is_pinned(cli_here, tmp_path):
    """The debug config's loss, windowed AUC/log-loss, table rows, summary and checkpoint files are unchanged."""
    res = cli_here("kraken", "train", "--config", DEBUG, "--set", f"run.root={tmp_path}", "--set", "run.run_id=r",
                   "--set", "run.progress=false")
    assert res.returncode == 0, res.stderr
    run = tmp_path / "kraken" / "r"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    got = [(r["step"], r["loss"], r["auc"], r["logloss"], r["ctr"], r["rows"], r["table_mb"]) for r in rows]
    assert len(got) == len(PINNED_STEPS)
    for g, (step, loss, auc, logloss, ctr, n_rows, table_mb) in zip(got, PINNED_STEPS, strict=True):
        # the window (50,000 samples) holds every sample so far: 128 a step
        assert (g[0], g[4], g[5], g[6]) == (step, ctr, n_rows, table_mb)
        assert_close_tree([g[1], g[3]], [loss, logloss], FLOAT32_TRAJECTORY, where=f"step {step} loss/logloss")
        assert_close_tree(g[2], auc, _auc_tolerance(128 * step, ctr), where=f"step {step} auc")
    summary = json.loads((run / "summary.json").read_text())
    rules = {"auc": _auc_tolerance(128 * PINNED_SUMMARY["steps"], PINNED_STEPS[-1][4]), "logloss": FLOAT32_TRAJECTORY,
             "mean_logloss": FLOAT32_TRAJECTORY, "loss": FLOAT32_TRAJECTORY}
    assert_close_tree({k: summary[k] for k in PINNED_SUMMARY}, PINNED_SUMMARY, (0.0, 0.0), rules=rules)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == PINNED_CHECKPOINTS
