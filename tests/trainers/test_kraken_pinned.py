"""``torchhpc kraken train`` on configs/kraken/debug.yaml gives exactly the metrics it gave before the refactor.

The numbers below were produced by the code before the refactor ("One shape for every system"), at commit
67fa2f8, with ``OMP_NUM_THREADS=1`` (as the ``cli`` fixture runs it).  A change that moves code must leave
every one of them identical; only a change that means to alter the results may update them, and says so.

Updated once, by the table-batched embeddings (one lookup pass, one gather, one pooling over all features,
one optimizer step): the loss, AUC and log-loss figures moved in their 8th-10th significant digit, nothing
else (rows, admissions, evictions, bytes, deltas and checkpoints are the same).  The cause is float summation
order alone: the backward of torch's CPU ``embedding_bag`` adds the gradient contributions of a row in an
order that depends on the whole call's indices, so pooling all features in one call adds them in another
order than one call per feature (last-bit differences, which training then carries on).  Checked: the new
code with the pooling split back into one ``embedding_bag`` call per feature reproduces the old figures
(``0.7374335393465211`` ... ``0.5608243325840264``) bit for bit; the new lookup, admission, eviction and
optimizer step change no bit (``tests/ext/kraken/test_batched.py`` pins them against the per-table ops).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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


def test_debug_run_is_pinned(cli, tmp_path):
    """The debug config's loss, windowed AUC/log-loss, table rows, summary and checkpoint files are unchanged."""
    res = cli("kraken", "train", "--config", DEBUG, "--set", f"run.root={tmp_path}", "--set", "run.run_id=r",
              "--set", "run.progress=false")
    assert res.returncode == 0, res.stderr
    run = tmp_path / "kraken" / "r"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    got = [(r["step"], r["loss"], r["auc"], r["logloss"], r["ctr"], r["rows"], r["table_mb"]) for r in rows]
    assert got == PINNED_STEPS
    summary = json.loads((run / "summary.json").read_text())
    assert {k: summary[k] for k in PINNED_SUMMARY} == PINNED_SUMMARY
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == PINNED_CHECKPOINTS
