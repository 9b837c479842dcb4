"""The bad-input corpus of ``torchhpc kraken train|serve``: bad Criteo files, bad serve paths, resumes
that must not damage a run (changed shape, finished run), damaged newest checkpoints.

Most cases run in-process through the CLI's ``main()`` (milliseconds); one runs as a real process.
Each asserts a non-zero exit (or, for the recoveries, a zero one), exactly one line on stderr naming
the file or option, and no traceback.
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torchrec")

from torchhpc.trainers.cli import main  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DEBUG = str(REPO / "configs" / "kraken" / "debug.yaml")
# 30 steps: full-10, delta-15, full-20, delta-25, full-30; keep_full=2 leaves full-20, delta-25, full-30
SHORT = ["--train.steps", "30", "--checkpoint.delta-every", "5", "--checkpoint.full-every", "10",
         "--set", "run.progress=false"]



def _one_line_error(rc: int, err: str, *words: str) -> None:
    assert rc != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and lines[0].startswith("torchhpc: error: ")
    for w in words:
        assert w in lines[0], (w, lines[0])


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


# ----------------------------------------------------------------------------- a trained run to resume / serve


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("kraken_runs")
    rc = main(["kraken", "train", "--config", DEBUG, "--run.root", str(root), "--run.run-id", "r", *SHORT])
    assert rc == 0
    run = root / "kraken" / "r"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "delta-00000025.pt", "full-00000020.pt", "full-00000030.pt"]
    return run


@pytest.fixture
def run(trained, tmp_path):
    """A private copy of the trained run: ``<tmp>/kraken/r``."""
    dst = tmp_path / "kraken" / "r"
    shutil.copytree(trained, dst)
    return dst


def _resume(run: Path, *extra: str) -> list[str]:
    return ["kraken", "train", "--config", DEBUG, "--run.root", str(run.parent.parent), "--run.run-id", "r",
            "--run.resume", *SHORT, *extra]


def _serve(ckpt: Path | str, *extra: str) -> list[str]:
    return ["kraken", "serve", "--checkpoint-dir", str(ckpt), "--poll", "0.01", "--requests", "1", *extra]


# ----------------------------------------------------------------------------- 1. Criteo input


def _criteo_line(rng: random.Random) -> str:
    dense = [str(rng.randint(0, 50)) if rng.random() > 0.1 else "" for _ in range(13)]
    cats = [f"{rng.getrandbits(32):08x}" if rng.random() > 0.1 else "" for _ in range(26)]
    return "\t".join([str(rng.randint(0, 1)), *dense, *cats])


def _criteo_lines(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [_criteo_line(rng) for _ in range(n)]


def _train_criteo(torchhpc_main, tmp_path: Path, path: Path, *extra: str):
    return torchhpc_main("kraken", "train", "--config", DEBUG, "--run.root", str(tmp_path / "runs"),
                 "--set", "run.progress=false", "--stream.source", "criteo", "--stream.path", str(path),
                 "--stream.batch-size", "16", "--train.steps", "3", *extra)


def _no_summary(tmp_path: Path) -> None:
    assert not list((tmp_path / "runs").rglob("summary.json"))


def test_criteo_empty_file_is_an_error_not_a_nan_run(torchhpc_main, tmp_path):
    path = tmp_path / "day_0.tsv"
    path.write_text("")
    rc, _, err = _train_criteo(torchhpc_main, tmp_path, path)
    _one_line_error(rc, err, str(path), "no samples")
    _no_summary(tmp_path)


def test_criteo_non_utf8_byte_names_file_and_line(torchhpc_main, tmp_path):
    path = tmp_path / "day_0.tsv"
    lines = [x.encode() for x in _criteo_lines(40)]
    lines[2] = lines[2][:-3] + b"\xff\xfe1"
    path.write_bytes(b"\n".join(lines) + b"\n")
    rc, _, err = _train_criteo(torchhpc_main, tmp_path, path)
    _one_line_error(rc, err, f"{path}:3", "UTF-8")


def test_criteo_truncated_gzip_names_the_file(torchhpc_main, tmp_path):
    path = tmp_path / "day_0.gz"
    path.write_bytes(gzip.compress(("\n".join(_criteo_lines(40)) + "\n").encode()))
    _truncate(path, 0.6)
    rc, _, err = _train_criteo(torchhpc_main, tmp_path, path)
    _one_line_error(rc, err, f"{path}:", "gzip")


def test_criteo_not_gzip_at_all_names_the_file(torchhpc_main, tmp_path):
    path = tmp_path / "day_0.gz"
    path.write_text("\n".join(_criteo_lines(5)) + "\n")
    rc, _, err = _train_criteo(torchhpc_main, tmp_path, path)
    _one_line_error(rc, err, f"{path}:", "gzip")


@pytest.mark.parametrize("bad,words", [
    (lambda f: "\t".join(f[:-1]), ["expected 40 tab-separated fields", "found 39"]),
    (lambda f: "\t".join([f[0], "abc", *f[2:]]), ["I1", "'abc'"]),
    (lambda f: "\t".join([f[0], *f[1:5], "1.5", *f[6:]]), ["I5", "'1.5'"]),
    (lambda f: "\t".join([*f[:14], "xyz", *f[15:]]), ["C1", "'xyz'"]),
    (lambda f: "\t".join(["2", *f[1:]]), ["label must be 0 or 1"]),
])
def test_criteo_bad_line_names_file_and_line(torchhpc_main, tmp_path, bad, words):
    path = tmp_path / "day_0.tsv"
    lines = _criteo_lines(40)
    lines[1] = bad(lines[1].split("\t"))
    path.write_text("\n".join(lines) + "\n")
    rc, _, err = _train_criteo(torchhpc_main, tmp_path, path)
    _one_line_error(rc, err, f"{path}:2", *words)


def test_criteo_file_shorter_than_train_steps_warns_and_keeps_its_state(torchhpc_main, tmp_path):
    path = tmp_path / "day_0.tsv"
    path.write_text("\n".join(_criteo_lines(40)) + "\n")  # batches of 16, 16, 8: 3 steps of the 5 asked
    rc, out, err = _train_criteo(torchhpc_main, tmp_path, path, "--train.steps", "5", "--run.run-id", "c")
    assert rc == 0, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("torchhpc: warning: ") and "ended at step 3" in lines[0]
    run = tmp_path / "runs" / "kraken" / "c"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["loss"] is not None
    assert (run / "checkpoints" / "full-00000003.pt").is_file()
    # resumed, nothing is left to read: an error, and the run stays as it is
    before = _snapshot(run)
    rc, _, err = _train_criteo(torchhpc_main, tmp_path, path, "--train.steps", "5", "--run.run-id", "c", "--run.resume")
    _one_line_error(rc, err, str(path), "no samples after line 48")
    assert _snapshot(run) == before


def test_criteo_empty_file_in_a_real_process(cli, tmp_path):
    path = tmp_path / "empty.tsv"
    path.write_text("")
    res = cli("kraken", "train", "--config", DEBUG, "--run.root", str(tmp_path / "runs"), "--set", "run.progress=false",
              "--stream.source", "criteo", "--stream.path", str(path))
    _one_line_error(res.returncode, res.stderr, str(path), "no samples")
    _no_summary(tmp_path)


# ----------------------------------------------------------------------------- 2. serve options and paths


@pytest.mark.parametrize("opt,value", [("--duration", "-1"), ("--poll", "-0.5"), ("--idle", "-1"),
                                       ("--until-step", "-3")])
def test_serve_negative_option_is_an_error(torchhpc_main, trained, opt, value):
    rc, _, err = torchhpc_main(*_serve(trained / "checkpoints", opt, value))
    _one_line_error(rc, err, opt, "out of range")


@pytest.mark.parametrize("target", ["checkpoints/full-00000030.pt", "config.yaml", "summary.json"])
def test_serve_pointed_at_a_file_is_an_error(torchhpc_main, trained, target):
    rc, _, err = torchhpc_main(*_serve(trained / target, "--duration", "0"))
    _one_line_error(rc, err, str(trained / target), "not a folder")


def test_serve_pointed_at_a_missing_folder_is_an_error(torchhpc_main, trained):
    rc, _, err = torchhpc_main(*_serve(trained / "checkpoints" / "nope", "--duration", "0"))
    _one_line_error(rc, err, str(trained / "checkpoints" / "nope"), "no such folder, and no kraken run")


# ----------------------------------------------------------------------------- 3. resume with a changed shape


@pytest.mark.parametrize("flag,key,old,new", [
    (["--model.dim", "16"], "model.dim", "8", "16"),
    (["--model.bottom", "[8]"], "model.bottom", "[16]", "[8]"),
    (["--stream.num-sparse", "5"], "stream.num_sparse", "4", "5"),
    (["--optim.sparse", "adam"], "optim.sparse", "rowwise_adagrad", "adam"),
])
def test_resume_with_a_changed_shape_leaves_the_run_untouched(torchhpc_main, run, flag, key, old, new):
    before = _snapshot(run)
    rc, _, err = torchhpc_main(*_resume(run, "--train.steps", "40", *flag))
    _one_line_error(rc, err, key, old, new)
    assert _snapshot(run) == before  # byte-identical: config.yaml, summary, metrics, checkpoints
    # and the run still serves from its untouched checkpoints
    rc, _, err = torchhpc_main(*_serve(run / "checkpoints", "--until-step", "30", "--duration", "60"))
    assert rc == 0 and err == ""


# ----------------------------------------------------------------------------- 4. resume a finished run


def test_resume_of_a_finished_run_is_a_noop_that_says_so(torchhpc_main, run):
    before = _snapshot(run)
    rc, out, err = torchhpc_main(*_resume(run))
    assert rc == 0 and err == ""
    assert "already finished" in out and "30" in out
    assert _snapshot(run) == before
    assert json.loads((run / "summary.json").read_text())["loss"] is not None


def test_resume_with_more_steps_continues(torchhpc_main, run):
    rc, out, err = torchhpc_main(*_resume(run, "--train.steps", "40"))
    assert rc == 0 and err == "", err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 40 and summary["loss"] is not None and summary["auc"] is not None


# ----------------------------------------------------------------------------- 5. damaged newest checkpoint


def test_resume_past_a_damaged_newest_full_uses_full_plus_deltas(torchhpc_main, run):
    _truncate(run / "checkpoints" / "full-00000030.pt")
    rc, out, err = torchhpc_main(*_resume(run))
    assert rc == 0, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("torchhpc: warning: ") and "full-00000030.pt" in lines[0]
    assert "step 25" in lines[0] and "Traceback" not in err
    assert "resumed" in out and "at step 25" in out
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 30 and summary["loss"] is not None
    assert (run / "checkpoints" / "full-00000030.pt").stat().st_size > 1000  # written again, intact


def test_resume_stops_at_the_first_damaged_delta(torchhpc_main, run):
    _truncate(run / "checkpoints" / "full-00000030.pt")
    _truncate(run / "checkpoints" / "delta-00000025.pt", 0.3)
    rc, out, err = torchhpc_main(*_resume(run))
    assert rc == 0, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "full-00000030.pt" in lines[0] and "delta-00000025.pt" in lines[0]
    assert "step 20" in lines[0] and "at step 20" in out


def test_resume_with_no_intact_full_checkpoint_is_an_error(torchhpc_main, run):
    before_metrics = (run / "metrics.jsonl").read_bytes()
    for p in (run / "checkpoints").glob("full-*.pt"):
        _truncate(p)
    rc, _, err = torchhpc_main(*_resume(run, "--train.steps", "40"))
    _one_line_error(rc, err, "no intact checkpoint", "full-00000030.pt", "and 1 more")  # core's newest_intact
    assert (run / "metrics.jsonl").read_bytes() == before_metrics


def test_serve_skips_a_damaged_newest_checkpoint(torchhpc_main, run):
    _truncate(run / "checkpoints" / "full-00000030.pt")
    rc, out, err = torchhpc_main("kraken", "serve", "--checkpoint-dir", str(run / "checkpoints"), "--poll", "0.01",
                         "--requests", "1", "--duration", "0.3")
    assert rc == 0, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("torchhpc: warning: ") and "full-00000030.pt" in lines[0]
    summary = [json.loads(x) for x in out.splitlines() if x.startswith("{")][-1]["summary"]
    assert summary["step"] == 25 and summary["batches_served"] >= 1


def test_serve_stops_at_the_first_damaged_delta(torchhpc_main, run):
    _truncate(run / "checkpoints" / "full-00000030.pt")
    _truncate(run / "checkpoints" / "delta-00000025.pt", 0.3)
    rc, out, err = torchhpc_main("kraken", "serve", "--checkpoint-dir", str(run / "checkpoints"), "--poll", "0.01",
                         "--requests", "1", "--duration", "0.3")
    assert rc == 0, err
    lines = err.strip().splitlines()  # one warning per damaged file, once each however many polls
    assert len(lines) == 2 and all(x.startswith("torchhpc: warning: ") for x in lines)
    assert "full-00000030.pt" in err and "delta-00000025.pt" in err
    assert [json.loads(x) for x in out.splitlines() if x.startswith("{")][-1]["summary"]["step"] == 20


def test_sharded_ranks_agree_on_the_newest_intact_step(run):
    """Under torchrun every rank restarts from the MIN of restorable_step: it must skip damaged files."""
    from torchhpc.ext.kraken.continual import restorable_step

    ckpt = run / "checkpoints"
    assert restorable_step(ckpt) == 30
    _truncate(ckpt / "full-00000030.pt")
    assert restorable_step(ckpt) == 25
    _truncate(ckpt / "delta-00000025.pt", 0.3)
    assert restorable_step(ckpt) == 20


def test_resume_with_another_number_of_ranks_is_an_error(torchhpc_main, run):
    ckpt = run / "checkpoints"
    for r in (0, 1):
        shutil.copytree(ckpt, run / f"rank{r}")
    for p in ckpt.iterdir():
        p.unlink()
    for r in (0, 1):
        (run / f"rank{r}").rename(ckpt / f"rank{r}")
    before = _snapshot(run)
    rc, _, err = torchhpc_main(*_resume(run, "--train.steps", "40"))
    _one_line_error(rc, err, "written by 2 rank(s)", "this job has 1")
    assert _snapshot(run) == before
