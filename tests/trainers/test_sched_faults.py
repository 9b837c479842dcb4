"""sched's bad-input corpus: bad SWF files, bad checkpoints, bad run states, resumes that must not damage a run.

Each case runs the CLI's ``main()`` in-process and asserts a non-zero exit with exactly one line on stderr
that names the file or option and what is wrong (no traceback). The generated wrong-type / out-of-range cases
of every option are in ``test_bad_input.py``; these are the ones it cannot generate.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from torchhpc.trainers.cli import main

REPO = Path(__file__).resolve().parents[2]
DEBUG = str(REPO / "configs/sched/debug.yaml")
#: a few seconds of training: 4 sequences of 32 jobs per epoch on a 1000-job generated trace
TINY = ["--config", DEBUG, "--set", "trace.generate_jobs=1000", "--set", "env.sequence_length=32",
        "--set", "ppo.trajectories=4", "--set", "ppo.num_envs=4", "--set", "ppo.pi_iters=2",
        "--set", "ppo.v_iters=2", "--set", "eval.starts=[200]", "--set", "eval.length=64",
        "--set", "eval.every=1", "--set", "log_baselines=false", "--set", "run.progress=false"]
VOLATILE = {"time", "decisions_per_s", "rollout_s", "epoch_s", "train_seconds"}
HEADER = "; Version: 2.2\n; MaxNodes: 8\n"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse usage errors
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_error(rc: int, err: str, *words: str) -> str:
    lines = err.strip().splitlines()
    assert rc == 1, err
    assert len(lines) == 1 and lines[0].startswith("torchhpc: error: "), err
    assert "Traceback" not in err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def job(jid: int, submit: str | int, run_time: str | int = 50, procs: int = 2) -> str:
    return " ".join(str(x) for x in [jid, submit, -1, run_time, procs, -1, -1, -1, -1, -1, 1, -1, -1, -1, 0, -1,
                                       -1, -1])


def swf(tmp_path: Path, bad: str | None = None, at: int = 3, n: int = 30, name: str = "t.swf") -> Path:
    """An SWF file of ``n`` jobs; job line ``at`` (1-based) replaced by ``bad``."""
    lines = [job(i, i * 10) for i in range(1, n + 1)]
    if bad is not None:
        lines[at - 1] = bad
    p = tmp_path / name
    p.write_text(HEADER + "\n".join(lines) + "\n")
    return p


HEUR = ["sched", "heuristics", "--start", "0", "--length", "20", "--json"]


# ----------------------------------------------------------------------------- 1. SWF input


@pytest.mark.parametrize("bad, words", [
    (job(3, 30, "inf"), ["t.swf:5", "field 4", "run time", "inf"]),
    (job(3, 30, "nan"), ["t.swf:5", "field 4", "run time", "nan"]),
    (job(3, 30, "-inf"), ["t.swf:5", "field 4", "run time"]),
    (job(3, "-30"), ["t.swf:5", "field 2", "submit time", "negative"]),
    (job(3, 30, "fifty"), ["t.swf:5", "field 4", "not a number", "fifty"]),
], ids=["inf-run", "nan-run", "minus-inf-run", "negative-submit", "word"])
def test_bad_swf_values_are_one_line_errors(tmp_path, capsys, bad, words):
    """A run time of inf / nan, a negative submit time or a word: one line naming the file, line and field."""
    p = swf(tmp_path, bad)
    rc, out, err = run(capsys, *HEUR, "--trace", p)
    one_line_error(rc, err, str(p.parent), *words)
    assert out == ""


def test_lenient_mode_skips_nonfinite_lines(tmp_path, capsys):
    """--lenient skips such a line (and the rest schedules) instead of dropping it silently in strict mode."""
    from torchhpc.ext.sched.swf import read_swf

    p = swf(tmp_path, job(3, 30, "nan"))
    t = read_swf(p, strict=False)
    assert len(t) == 29 and [n for n, _ in t.skipped] == [5]
    rc, out, err = run(capsys, *HEUR, "--trace", p, "--lenient")
    assert rc == 0 and json.loads(out)["fcfs"]["turnaround"] > 0


def test_byte_order_mark_is_read_as_utf8(tmp_path, capsys):
    """A UTF-8 byte-order mark is not part of the first line: the file reads as without it."""
    plain = swf(tmp_path, name="plain.swf")
    bom = tmp_path / "bom.swf"
    bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    rc_a, a, err = run(capsys, *HEUR, "--trace", plain)
    rc_b, b, err = run(capsys, *HEUR, "--trace", bom)
    assert rc_a == rc_b == 0 and json.loads(a) == json.loads(b), err
    # a BOM before a job line (no header) as well
    bare = tmp_path / "bare.swf"
    bare.write_bytes(b"\xef\xbb\xbf" + "\n".join(job(i, i) for i in range(1, 30)).encode() + b"\n")
    rc, out, err = run(capsys, *HEUR, "--trace", bare, "--procs", "8")
    assert rc == 0, err


@pytest.mark.parametrize("content, words", [
    (b"\xff\xfe\x00g\x00a\x00r\x00b\x00a\x00g\x00e\x00\n", ["bin.swf:1", "UTF-8"]),
    (b"\x1f\x8b\x08\x00\x00\x00\x00\x00", ["bin.swf:1", "gzip"]),
    (HEADER.encode() + job(1, 0).encode() + b"\n1 2 3 \xe9\xe9 \n", ["bin.swf:4", "UTF-8"]),
], ids=["utf16", "gzip", "latin1-job-line"])
def test_non_utf8_bytes_are_one_line_errors(tmp_path, capsys, content, words):
    """Bytes that are not UTF-8 text: one line that says so (not 'malformed SWF line' or a traceback)."""
    p = tmp_path / "bin.swf"
    p.write_bytes(content)
    rc, _, err = run(capsys, *HEUR, "--trace", p)
    line = one_line_error(rc, err, *words)
    assert "fields" not in line


def test_non_utf8_bytes_in_a_comment_are_ignored(tmp_path, capsys):
    """A Latin-1 name in a header comment does not make a trace unreadable."""
    p = tmp_path / "latin.swf"
    p.write_bytes(b"; Installation: Universit\xe9\n" + swf(tmp_path).read_bytes())
    rc, out, err = run(capsys, *HEUR, "--trace", p)
    assert rc == 0, err


# ----------------------------------------------------------------------------- 2./3. option bounds


@pytest.mark.parametrize("argv, words", [
    (["sched", "heuristics", "--sequences", "-3"], ["--sequences", "-3", ">= 1"]),
    (["sched", "heuristics", "--sequences", "0"], ["--sequences", ">= 1"]),
    (["sched", "heuristics", "--procs", "0"], ["--procs", ">= 1"]),
    (["sched", "eval", "--checkpoint", "x", "--samples", "0"], ["--samples", ">= 1"]),
    (["sched", "train", "--config", DEBUG, "--set", "eval.samples=0"], ["eval.samples", ">= 1"]),
    (["sched", "train", "--config", DEBUG, "--set", "trace.procs=0"], ["trace.procs", ">= 1"]),
    (["sched", "heuristics", "--starts", ","], ["--starts", "no window"]),
], ids=["sequences-negative", "sequences-0", "procs-0", "eval-samples-0", "train-samples-0", "train-procs-0",
        "starts-empty"])
def test_counts_that_must_be_positive(capsys, argv, words):
    """0 or negative windows, samples or processors, or no window at all: one line naming the option, not
    all-nan metrics."""
    rc, out, err = run(capsys, *argv)
    line = one_line_error(rc, err, *words)
    assert "header" not in line and "nan" not in out


def test_library_procs_zero_is_not_a_header_problem(tmp_path):
    """load_sched_trace(procs=0) says the machine size must be >= 1 (for a file and for the generator)."""
    from torchhpc.ext.core.errors import InputError
    from torchhpc.ext.sched.traces import load_sched_trace

    for trace in (str(swf(tmp_path)), None):
        with pytest.raises(InputError, match=r"procs\) must be >= 1") as exc:
            load_sched_trace(trace, procs=0, generate_jobs=200)
        assert "header" not in str(exc.value)


# ----------------------------------------------------------------------------- 4. bad checkpoints


def _trained(tmp_path: Path, capsys, run_id: str = "r", *extra: str) -> Path:
    rc, _, err = run(capsys, "sched", "train", *TINY, "--set", f"run.root={tmp_path}", "--set",
                     f"run.run_id={run_id}", *extra)
    assert rc == 0, err
    return tmp_path / "sched" / run_id


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished 2-epoch TINY run (checkpoints 1 and 2), copied fresh by each test that changes it."""

    root = tmp_path_factory.mktemp("trained")
    rc = main(["sched", "train", *TINY, "--set", f"run.root={root}", "--set", "run.run_id=r",
               "--set", "ppo.epochs=2"])
    assert rc == 0
    return root / "sched" / "r"


def _copy(src: Path, tmp_path: Path) -> Path:
    import shutil

    dst = tmp_path / "sched" / src.name
    shutil.copytree(src, dst)
    return dst


EVAL = ["sched", "eval", "--generate-jobs", "1000", "--starts", "200", "--length", "64", "--greedy", "--json"]


def test_eval_on_a_truncated_checkpoint_file(trained, tmp_path, capsys):
    run_dir = _copy(trained, tmp_path)
    ck = run_dir / "checkpoints" / "ckpt-00000002.pt"
    ck.write_bytes(ck.read_bytes()[:100])
    rc, _, err = run(capsys, *EVAL, "--checkpoint", ck)
    one_line_error(rc, err, str(ck), "truncated or damaged")


def test_eval_on_a_file_that_is_not_a_checkpoint(tmp_path, capsys):
    for name, data in (("notes.pt", b"hello\n"), ("empty.pt", b"")):
        p = tmp_path / name
        p.write_bytes(data)
        rc, _, err = run(capsys, *EVAL, "--checkpoint", p)
        line = one_line_error(rc, err, str(p))
        assert "cannot resume" not in line and "/sched/" not in line.replace(str(p), "")
    p = tmp_path / "dict.pt"
    torch.save({"weights": 1}, p)
    rc, _, err = run(capsys, *EVAL, "--checkpoint", p)
    one_line_error(rc, err, str(p), "not a torchhpc checkpoint")


def test_eval_on_an_empty_or_foreign_folder(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, _, err = run(capsys, *EVAL, "--checkpoint", empty)
    line = one_line_error(rc, err, str(empty), "no checkpoint")
    assert "cannot resume" not in line
    rc, _, err = run(capsys, *EVAL, "--checkpoint", tmp_path / "missing")
    one_line_error(rc, err, str(tmp_path / "missing"), "no such")


def test_eval_uses_the_newest_intact_checkpoint(trained, tmp_path, capsys):
    """With the newest checkpoint truncated, `sched eval --which last` warns once and uses the one before."""
    run_dir = _copy(trained, tmp_path)
    ck = run_dir / "checkpoints" / "ckpt-00000002.pt"
    ck.write_bytes(ck.read_bytes()[:100])
    rc, out, err = run(capsys, *EVAL[:-1], "--checkpoint", run_dir, "--which", "last")
    assert rc == 0, err
    assert "checkpoint: epoch 1" in out
    warn = err.strip().splitlines()
    assert len(warn) == 1 and "warning" in warn[0] and "ckpt-00000002.pt" in warn[0]


# ----------------------------------------------------------------------------- 5. trace too short


@pytest.mark.parametrize("extra, words", [
    (["--set", "eval.starts=[200,950]"], ["eval.starts", "[950, 1014)", "1000 jobs"]),
    (["--set", "eval.starts=[]"], ["eval.starts", "empty"]),
    (["--set", "env.sequence_length=2000"], ["env.sequence_length", "2000", "1000 jobs"]),
    (["--set", "eval.validate=2", "--set", "eval.validate_length=990"], ["eval.validate_length"]),
], ids=["eval-window", "eval-empty", "sequence", "validation"])
def test_train_checks_the_trace_length_before_training(tmp_path, capsys, extra, words):
    """Windows that do not fit the trace fail before any epoch (no checkpoint, no metrics row)."""
    rc, out, err = run(capsys, "sched", "train", *TINY, "--set", f"run.root={tmp_path}", "--set", "run.run_id=s",
                       *extra)
    one_line_error(rc, err, *words)
    run_dir = tmp_path / "sched" / "s"
    assert not (run_dir / "metrics.jsonl").exists() and not (run_dir / "checkpoints").exists()


# ----------------------------------------------------------------------------- 6. resume never damages a run


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("extra, words", [
    (["--set", "env.context=true"], ["env.context"]),
    (["--set", "ppo.policy=flat"], ["ppo.policy"]),
    (["--set", "ppo.num_envs=2", "--set", "ppo.trajectories=2"], ["ppo.num_envs"]),
], ids=["context", "policy", "num-envs"])
def test_incompatible_resume_changes_nothing(trained, tmp_path, capsys, extra, words):
    run_dir = _copy(trained, tmp_path)
    before = _snapshot(run_dir)
    rc, _, err = run(capsys, "sched", "train", *TINY, "--set", f"run.root={tmp_path}", "--set", "run.run_id=r",
                     "--set", "ppo.epochs=3", "--set", "run.resume=true", *extra)
    one_line_error(rc, err, *words)
    assert _snapshot(run_dir) == before


def test_resuming_a_finished_run_is_a_no_op(trained, tmp_path, capsys):
    run_dir = _copy(trained, tmp_path)
    before = _snapshot(run_dir)
    rc, out, err = run(capsys, "sched", "train", *TINY, "--set", f"run.root={tmp_path}", "--set", "run.run_id=r",
                       "--set", "ppo.epochs=2", "--set", "run.resume=true")
    assert rc == 0, err
    assert "already finished" in out and "nothing to do" in out
    assert _snapshot(run_dir) == before


def test_resume_skips_a_truncated_newest_checkpoint(trained, tmp_path, capsys):
    """The newest checkpoint truncated: one warning line, and training continues from the one before, to the
    same result as the run that was never damaged."""
    run_dir = _copy(trained, tmp_path)
    ck = run_dir / "checkpoints" / "ckpt-00000002.pt"
    ck.write_bytes(ck.read_bytes()[:100])
    rc, out, err = run(capsys, "sched", "train", *TINY, "--set", f"run.root={tmp_path}", "--set", "run.run_id=r",
                       "--set", "ppo.epochs=2", "--set", "run.resume=true")
    assert rc == 0, err
    warn = err.strip().splitlines()
    assert len(warn) == 1 and "warning" in warn[0] and "ckpt-00000002.pt" in warn[0] and "(step 1)" in warn[0]
    assert _rows(run_dir) == _rows(trained)
    assert _weights(run_dir, 2) == _weights(trained, 2)


# ----------------------------------------------------------------------------- 7. resume restores everything


def _rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]


def _weights(run_dir: Path, epoch: int) -> dict:
    blob = torch.load(run_dir / "checkpoints" / f"ckpt-{epoch:08d}.pt", weights_only=False)
    return {k: v.tolist() for k, v in blob["state"]["agent"].items()}


def test_train_then_resume_equals_one_run(trained, tmp_path, capsys):
    """1 epoch + a resume to 2 gives the same metrics rows and final weights as 2 epochs in one go: a resume
    that restored only the epoch number (not the weights, optimisers or random streams) would differ."""
    common = [*TINY, "--set", f"run.root={tmp_path}", "--set", "run.run_id=k"]
    assert run(capsys, "sched", "train", *common, "--set", "ppo.epochs=1")[0] == 0
    rc, _, err = run(capsys, "sched", "train", *common, "--set", "ppo.epochs=2", "--set", "run.resume=true")
    assert rc == 0, err
    resumed = tmp_path / "sched" / "k"
    assert [r["epoch"] for r in _rows(resumed)] == [1, 2]
    assert _rows(resumed) == _rows(trained)
    assert _weights(resumed, 2) == _weights(trained, 2)
    s_a, s_b = (json.loads((d / "summary.json").read_text()) for d in (resumed, trained))
    assert s_a["eval"] == s_b["eval"]


@pytest.mark.distributed
def test_torchrun_resume_skips_a_checkpoint_damaged_on_one_rank(tmp_path):
    """Under torchrun the resume point is the newest epoch whose shard reads on every rank: rank 1's newest
    shard truncated, the job says so once (not once per rank) and ends where the undamaged run ended."""
    from harness.multiproc import torchrun

    def train(*extra: str):
        return torchrun(2, ["-m", "torchhpc.trainers.sched", *TINY, "--set", f"run.root={tmp_path}",
                            "--set", "run.run_id=d", "--set", "ppo.epochs=2", "--set", "ppo.trajectories=8", *extra],
                        timeout=300)

    res = train()
    assert res.returncode == 0, res.stderr[-3000:]
    run_dir = tmp_path / "sched" / "d"
    ck = run_dir / "checkpoints"
    before = [torch.load(ck / f"ckpt-00000002.rank{r}.pt", weights_only=False)["state"]["agent"] for r in (0, 1)]
    rows = _rows(run_dir)
    (ck / "ckpt-00000002.rank1.pt").write_bytes((ck / "ckpt-00000002.rank1.pt").read_bytes()[:100])
    res = train("--set", "run.resume=true")
    assert res.returncode == 0, res.stderr[-3000:]
    warns = [x for x in res.stderr.splitlines() if "warning" in x]
    assert len(warns) == 1 and "ckpt-00000002.rank1.pt" in warns[0] and "(step 1)" in warns[0], res.stderr
    assert _rows(run_dir) == rows
    after = [torch.load(ck / f"ckpt-00000002.rank{r}.pt", weights_only=False)["state"]["agent"] for r in (0, 1)]
    for r in (0, 1):
        assert all(torch.equal(before[r][k], after[r][k]) for k in before[r])
