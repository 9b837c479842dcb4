"""The torchhpc command: help, the demo end to end, and one-line errors without tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_help_lists_the_commands(cli):
    """torchhpc --help works and names the systems' commands."""
    res = cli("--help")
    assert res.returncode == 0
    for word in ("demo", "distcheck", "sched", "kraken", "gems", "align", "ccsdt", "fperror", "symnmf", "pliner",
                 "foresight", "collectives"):
        assert word in res.stdout


def test_demo_help(cli):
    """torchhpc demo --help documents --config and --set."""
    res = cli("demo", "--help")
    assert res.returncode == 0 and "--config" in res.stdout and "--set" in res.stdout


def test_demo_writes_a_run_folder(cli, tmp_path):
    """The demo (what make demo runs) completes and writes config, summary, metrics and a plot."""
    res = cli("demo", "--config", str(REPO / "configs/demo/default.yaml"), "--set", f"run.root={tmp_path}",
              "--set", "kraken.batch=64", "--set", "kraken.rows=500", "--set", "kraken.repeats=2",
              "--set", "kraken.continual_steps=60", "--set", "run.run_id=t1", "--set", "run.progress=false",
              # the first five systems here; each newer system's step has its own test (tests/ext/<system>/)
              "--steps", "[sched, kraken, gems, segalign, ccsdt]")
    assert res.returncode == 0, res.stderr[-3000:]
    d = tmp_path / "demo" / "t1"
    summary = json.loads((d / "summary.json").read_text())
    assert summary["ok"] is True
    assert summary["kraken"]["matches_torchrec"] is True and summary["kraken"]["max_abs_diff_forward"] < 1e-5
    assert summary["kraken"]["continual_rows"] > 0
    assert summary["gems"]["ok"] is True and summary["gems"]["steps"] == 4
    assert summary["segalign"]["truth_recall"] > 0.95  # the simulated pair's true aligned bases found
    assert set(summary) >= {"sched", "kraken", "gems", "segalign", "ccsdt"}
    assert (d / "config.yaml").read_text().count("batch: 64") == 1
    assert (d / "metrics.jsonl").exists() and (d / "kraken_pooling.png").exists()


@pytest.mark.parametrize(
    "args, words",
    [
        (["demo", "--set", "kraken.bogus=1"], ["unknown key 'kraken.bogus'"]),
        (["demo", "--config", "CONFIG"], ["unknown key 'stepz'", "bad.yaml"]),
        (["demo", "--config", "does/not/exist.yaml"], ["does/not/exist.yaml: config file not found"]),
        (["demo", "--set", "kraken.batch=0"], ["'kraken.batch'", "out of range"]),
        (["demo", "--set", "steps=[nope]"], ["unknown step 'nope'"]),
        (["demo", "--frobnicate"], ["unrecognized arguments: --frobnicate", "(see torchhpc demo --help)"]),
        (["pliner", "find", "--frobnicate"], ["unrecognized arguments: --frobnicate",
                                              "(see torchhpc pliner find --help)"]),
        (["nosuchcommand"], ["invalid choice"]),
    ],
)
def test_bad_input_gives_one_line_and_nonzero_exit(cli, tmp_path, args, words):
    """Invalid configs and arguments exit non-zero with one clear line on stderr, no traceback."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("stepz: [kraken]\n")
    args = [str(bad) if a == "CONFIG" else a for a in args]
    res = cli(*args, "--set", f"run.root={tmp_path}") if args[0] == "demo" and "--frobnicate" not in args \
        else cli(*args)
    assert res.returncode != 0
    err = res.stderr.strip().splitlines()
    assert len(err) == 1, res.stderr
    assert "Traceback" not in res.stderr
    for w in words:
        assert w in err[0], (w, err[0])


def test_debug_shows_the_traceback(cli, tmp_path):
    """--debug re-raises so a developer sees where an error came from."""
    res = cli("demo", "--debug", "--set", "kraken.bogus=1")
    assert res.returncode != 0 and "Traceback" in res.stderr and "ConfigError" in res.stderr


def test_help_does_not_import_torch():
    """torchhpc --help stays fast: building the parser imports no torch (commands import it lazily)."""
    import subprocess
    import sys

    code = "import sys, torchhpc.trainers.cli as c; c.build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


def test_output_into_a_closed_pipe_stops_quietly():
    """`torchhpc ... | head` must not end in a BrokenPipeError traceback: the reader has gone, exit 0."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "torchhpc.trainers.cli", "sched", "heuristics", "--sequences", "2",
           "--length", "200", "--generate-jobs", "2000"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    proc.stdout.close()  # the reader leaves before the table is printed
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and "Traceback" not in err, err[-2000:]


def test_distcheck_takes_the_dist_section_every_job_has(tmp_path):
    """`distcheck` reads --timeout-s, --threads, --config and --set like every other job (it knew only
    --nproc, --device and --timeout, which still loads as dist.timeout_s)."""
    from torchhpc.ext.core.cli import options_from_args
    from torchhpc.ext.core.distcheck import DistcheckOptions
    from torchhpc.trainers.cli import build_parser

    cfg = tmp_path / "d.yaml"
    cfg.write_text("dist:\n  threads: 2\n")
    parse = lambda *argv: options_from_args(DistcheckOptions, build_parser().parse_args(["distcheck", *argv]))  # noqa: E731
    d = parse("--timeout-s", "30", "--config", str(cfg), "--set", "dist.nproc=3").dist
    assert (d.timeout_s, d.threads, d.nproc, d.device) == (30.0, 2, 3, "auto")
    assert parse("--timeout", "12").dist.timeout_s == 12.0
