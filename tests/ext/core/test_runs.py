"""Run folders: config, metrics, summary, plots, and atomic resumable checkpoints."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import torch
import yaml

from torchhpc.ext.core.config import option
from torchhpc.ext.core.errors import InputError
from torchhpc.ext.core.runs import Run, RunOptions, atomic_write_text, holds_a_run, newest_intact, open_run


@dataclass
class Cfg:
    lr: float = option(0.1)


def test_run_folder_layout(tmp_path):
    """A run writes config.yaml, metrics.jsonl, summary.json and a PNG under runs/<system>/<id>/."""
    run = Run("sched", Cfg(), root=tmp_path, run_id="r1")
    for step in range(5):
        run.log(step, loss=1.0 / (step + 1), reward=torch.tensor(float(step)))
    run.write_summary({"best": 0.2})
    run.write_summary({"final": 0.2})
    png = run.plot_metrics(["loss", "reward"], "curve.png")
    d = tmp_path / "sched" / "r1"
    assert yaml.safe_load((d / "config.yaml").read_text()) == {"lr": 0.1}
    rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(5)) and rows[4]["reward"] == 4.0
    assert json.loads((d / "summary.json").read_text()) == {"best": 0.2, "final": 0.2}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_new_run_refuses_to_overwrite_and_resume_needs_a_run(tmp_path):
    """Starting over a run that did work, or resuming a missing one, is a clear error naming the flag."""
    Run("x", Cfg(), root=tmp_path, run_id="a").log(0, loss=1.0)
    with pytest.raises(InputError, match=r"already holds a run \(pass --run.resume to continue it"):
        Run("x", Cfg(), root=tmp_path, run_id="a")
    with pytest.raises(InputError, match="does not exist"):
        Run("x", Cfg(), root=tmp_path, run_id="b", resume=True)
    # resuming without a run id names the flag (it named a run id it had just made up)
    with pytest.raises(InputError, match="cannot resume without --run.run-id"):
        open_run("x", Cfg(), RunOptions(root=str(tmp_path), resume=True))


@pytest.mark.parametrize("work", ["metrics", "summary", "checkpoint"])
def test_a_failed_start_leaves_a_folder_the_rerun_takes_over(tmp_path, work):
    """A job that stopped after writing only its config (bad data found by a rank) does not block the
    corrected rerun with the same id; once a run has metrics, a summary or a checkpoint it does."""
    Run("x", Cfg(lr=0.1), root=tmp_path, run_id="a")  # ... and the job failed here
    rerun = Run("x", Cfg(lr=0.2), root=tmp_path, run_id="a")
    assert yaml.safe_load((rerun.dir / "config.yaml").read_text()) == {"lr": 0.2}
    assert not holds_a_run(rerun.dir)
    if work == "metrics":
        rerun.log(0, loss=1.0)
    elif work == "summary":
        rerun.write_summary({"done": True})
    else:
        rerun.save_checkpoint({"w": torch.zeros(1)}, 0)
    assert holds_a_run(rerun.dir)
    with pytest.raises(InputError, match="already holds a run"):
        Run("x", Cfg(), root=tmp_path, run_id="a")
    with pytest.raises(InputError, match="already holds a run"):
        open_run("x", Cfg(), RunOptions(root=str(tmp_path), run_id="a"))


def test_checkpoint_resume_keeps_the_newest_and_truncates_metrics(tmp_path):
    """Resume loads the newest checkpoint; only `keep` files stay; later metric rows are dropped."""
    run = Run("x", Cfg(), root=tmp_path, run_id="a")
    model = torch.nn.Linear(3, 2)
    for step in range(1, 6):
        run.log(step, loss=float(step))
        run.save_checkpoint({"model": model.state_dict(), "step_value": step}, step, keep=2)
    run.log(6, loss=6.0)  # logged after the last checkpoint, then the job "crashes"
    files = sorted(p.name for p in run.ckpt_dir.iterdir())
    assert files == ["ckpt-00000004.pt", "ckpt-00000005.pt"]
    again = Run("x", Cfg(lr=0.2), root=tmp_path, run_id="a", resume=True)
    step, state = again.load_checkpoint()
    assert step == 5 and state["step_value"] == 5
    assert torch.equal(state["model"]["weight"], model.weight.detach())
    again.truncate_metrics(step)
    assert [r["step"] for r in again.metrics()] == [1, 2, 3, 4, 5]
    assert (again.dir / "config.previous.yaml").exists()


def test_crash_during_checkpoint_leaves_the_last_good_one(tmp_path, monkeypatch):
    """A failure while writing a checkpoint leaves the previous file intact and no temp file."""
    run = Run("x", None, root=tmp_path, run_id="a")
    run.save_checkpoint({"v": torch.ones(3)}, 1)

    def exploding_save(obj, fh):
        fh.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", exploding_save)  # runs.py calls torch.save at write time
    with pytest.raises(OSError):
        run.save_checkpoint({"v": torch.zeros(3)}, 2)
    monkeypatch.undo()
    assert sorted(p.name for p in run.ckpt_dir.iterdir()) == ["ckpt-00000001.pt"]
    step, state = run.load_checkpoint()
    assert step == 1 and torch.equal(state["v"], torch.ones(3))


def test_sharded_checkpoints_and_corrupt_file(tmp_path):
    """Per-rank shards are separate files; a corrupt checkpoint is an InputError, not a traceback."""
    r1 = Run("x", None, root=tmp_path, run_id="a", rank=1)
    r1.save_checkpoint({"w": 1}, 3, shard=1)
    assert r1.save_checkpoint({"w": 1}, 3) is None  # non-zero ranks write no shared checkpoint
    run = Run("x", None, root=tmp_path, run_id="a", resume=True)
    assert run.latest_checkpoint() is None and run.latest_checkpoint(shard=1).name == "ckpt-00000003.rank1.pt"
    bad = run.ckpt_dir / "ckpt-00000009.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(InputError, match="cannot read checkpoint"):
        run.load_checkpoint()


def test_torn_metrics_line_is_ignored(tmp_path):
    """A half-written last metrics line (a crash mid-write) does not break reading the log."""
    run = Run("x", None, root=tmp_path, run_id="a")
    run.log(1, a=1)
    with open(run.dir / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 2, "a"')
    assert [r["step"] for r in run.metrics()] == [1]
    atomic_write_text(run.dir / "note.txt", "hello")
    assert (run.dir / "note.txt").read_text() == "hello"


def test_summary_and_metrics_stay_strict_json(tmp_path):
    """NaN and inf are written as null: summary.json and metrics.jsonl parse with a strict reader."""
    import json

    import numpy as np
    import torch

    from torchhpc.ext.core.runs import Run

    run = Run("t", {"a": 1}, root=tmp_path, run_id="x")
    run.log(1, loss=float("nan"), auc=torch.tensor(float("inf")), rows=np.float64("nan"), ok=0.5)
    run.write_summary({"loss": float("nan"), "per": [1.0, float("-inf")], "nested": {"x": torch.tensor([np.nan, 2.0])}})

    def strict(text):
        return json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))

    row = strict((run.dir / "metrics.jsonl").read_text().splitlines()[0])
    assert row["loss"] is None and row["auc"] is None and row["rows"] is None and row["ok"] == 0.5
    summary = strict((run.dir / "summary.json").read_text())
    assert summary == {"loss": None, "per": [1.0, None], "nested": {"x": [None, 2.0]}}


def test_newest_intact_skips_damaged_checkpoints_with_one_warning(tmp_path, capsys):
    """The newest checkpoint that loads is chosen, damaged newer ones are named in one warning line;
    none at all is None; all damaged is one error naming the first."""
    run = Run("x", None, root=tmp_path, run_id="a")
    for step in (1, 2, 3):
        run.save_checkpoint({"w": step}, step, keep=0)
    run.checkpoint_path(3).write_bytes(b"garbage")

    def load(path):
        return run.load_checkpoint(path)[1]

    files = [(s, run.checkpoint_path(s)) for s in run.checkpoint_steps()]
    step, path, state = newest_intact(files, load, where=run.ckpt_dir)
    assert (step, path.name, state) == (2, "ckpt-00000002.pt", {"w": 2})
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ckpt-00000003.pt: cannot read checkpoint" in err[0] and "using ckpt-00000002.pt" in err[0]
    assert newest_intact([], load, where=run.ckpt_dir) is None
    with pytest.raises(InputError, match=r"no intact checkpoint in .*ckpt-00000003.pt: cannot read"):
        newest_intact(files[:1], load, where=run.ckpt_dir)


def test_progress_bars_redraw_rarely_into_a_log_and_as_usual_on_a_terminal():
    """Where stderr is a file or a pipe (a job's log) a bar redraws at most every LOG_INTERVAL_S seconds: 1,000
    updates write a start and an end, not a frame per update; on a terminal tqdm's own interval stays."""
    import io

    from torchhpc.ext.core.runs import LOG_INTERVAL_S, progress_bar

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    log = io.StringIO()
    with progress_bar(total=1000, file=log, desc="work") as bar:
        assert bar.mininterval == LOG_INTERVAL_S
        for _ in range(1000):
            bar.update(1)
    assert log.getvalue().count("\r") <= 3 and "1000/1000" in log.getvalue()
    with progress_bar(total=10, file=Terminal()) as bar:
        assert bar.mininterval < LOG_INTERVAL_S
    with progress_bar(total=10, file=io.StringIO(), mininterval=1.0) as bar:  # the caller's choice stands
        assert bar.mininterval == 1.0
