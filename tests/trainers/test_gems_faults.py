"""gems' bad-input and fault corpus: bad files, bad states, bad checkpoints, dead and interrupted ranks.

Most cases run in-process through the CLI's ``main()``; a few need real processes (torchrun, signals).
Every failure is a non-zero exit with exactly one line on stderr and no traceback.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEBUG = str(REPO / "configs/gems/debug.yaml")



def _rank_main(capsys, monkeypatch, rank: int, world: int, *argv: str) -> tuple[int, str]:
    """The torchrun entry of the job as rank ``rank`` of ``world`` (no process group is ever reached)."""
    from torchhpc.trainers.gems import main

    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("LOCAL_RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", str(world))
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    capsys.readouterr()
    try:
        rc = main(list(argv))
    except SystemExit as exc:
        rc = exc.code
    return rc, capsys.readouterr().err


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err[-3000:]
    assert "Traceback" not in err
    return lines[0]


# ----------------------------------------------------------------------------- 1: validate before any collective


@pytest.mark.parametrize("case", ["empty_folder", "world_size"])
def test_every_rank_validates_before_any_collective_and_only_rank_0_speaks(capsys, monkeypatch, tmp_path, case):
    """An empty data folder, or a config that does not fit the world size, stops every rank before the process
    group is set up (so no rank waits on another): rank 0 prints one line, the other ranks exit 1 silently."""
    empty = tmp_path / "empty"
    empty.mkdir()
    if case == "empty_folder":
        args = ["--config", DEBUG, "--set", "data.source=folder", "--set", f"data.folder={empty}",
                "--run.root", str(tmp_path / "runs")]
        want = "data.folder"
    else:
        args = ["--config", DEBUG, "--pipeline.stages", "1", "--run.root", str(tmp_path / "runs")]
        want = "world size 2 does not fit the config"
    rc0, err0 = _rank_main(capsys, monkeypatch, 0, 2, *args)
    assert rc0 == 1 and want in _one_line(err0)
    rc1, err1 = _rank_main(capsys, monkeypatch, 1, 2, *args)
    assert rc1 == 1 and err1.strip() == ""
    assert not (tmp_path / "runs").exists()


@pytest.mark.distributed
def test_gems_train_shows_the_jobs_one_line_not_torchruns_traces(cli, tmp_path):
    """`torchhpc gems train` with an empty data folder launches torchrun and shows the user one line: the job's."""
    empty = tmp_path / "empty"
    empty.mkdir()
    res = cli("gems", "train", "--config", DEBUG, "--set", "data.source=folder", "--set", f"data.folder={empty}",
              "--run.root", str(tmp_path / "runs"), timeout=240)
    assert res.returncode == 1
    line = _one_line(res.stderr)
    assert line.startswith("torchhpc: error:") and f"data.folder {empty}" in line


# ----------------------------------------------------------------------------- 2: simulate options


@pytest.mark.parametrize("flag,value", [
    ("--latency", "-5"), ("--bandwidth", "0"), ("--bandwidth", "-1"), ("--allreduce-bandwidth", "-2"),
    ("--corun-slowdown", "0"), ("--overhead-ms", "-1"), ("--devices", "0,2"), ("--devices", "-2"),
    ("--devices", "2,x"), ("--devices", "3"), ("--schedules", "mast,foo"), ("--schedules", ","),
])
def test_simulate_refuses_impossible_values(torchhpc_main, flag, value):
    """Every `gems simulate` option with an impossible value is one line naming the flag, exit 1."""
    rc, out, err = torchhpc_main("gems", "simulate", "--config", DEBUG, f"{flag}={value}")
    assert rc in (1, 2)
    assert flag in _one_line(err) and out == ""


# ----------------------------------------------------------------------------- 3, 4: resume


def _train(torchhpc_main, root: Path, run_id: str, *extra: str) -> tuple[int, str, str]:
    return torchhpc_main("gems", "train", "--config", DEBUG, "--pipeline.stages", "1", "--run.root", str(root),
                 "--run.run-id", run_id, "--train.timeline", "false", *extra)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("change", [("--model.width", "8", "model.width"), ("--model.depth", "20", "model.depth"),
                                    ("--data.image-size", "8", "data.image_size")])
def test_resume_with_a_changed_model_is_refused_before_anything_is_written(torchhpc_main, tmp_path, change):
    """Resuming with a different model shape names the key in one line and leaves the run folder as it was."""
    flag, value, key = change
    rc, _, err = _train(torchhpc_main, tmp_path, "r", "--train.steps", "2")
    assert rc == 0, err
    folder = tmp_path / "gems" / "r"
    before = _snapshot(folder)
    rc, _, err = _train(torchhpc_main, tmp_path, "r", "--train.steps", "4", "--run.resume", flag, value)
    assert rc == 1
    line = _one_line(err)
    assert key in line and "config.yaml" in line
    assert _snapshot(folder) == before


def test_a_damaged_newest_checkpoint_is_reported_and_the_newest_intact_one_is_used(torchhpc_main, tmp_path):
    """With the newest checkpoint truncated, resume warns in one line and continues from the older intact one."""
    rc, _, err = _train(torchhpc_main, tmp_path, "d", "--train.steps", "4", "--train.checkpoint-every", "2")
    assert rc == 0, err
    folder = tmp_path / "gems" / "d"
    newest = folder / "checkpoints" / "ckpt-00000004.rank0.pt"
    newest.write_bytes(newest.read_bytes()[:100])
    rc, _, err = _train(torchhpc_main, tmp_path, "d", "--train.steps", "6", "--train.checkpoint-every", "2",
                        "--run.resume")
    assert rc == 0, err
    line = _one_line(err)
    assert "warning" in line and "ckpt-00000004" in line and "step 2" in line
    rows = [json.loads(r) for r in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]


def test_resuming_a_finished_run_does_nothing_and_says_so(torchhpc_main, tmp_path):
    """A run that already reached train.steps, resumed, trains nothing and leaves every file as it was."""
    rc, _, err = _train(torchhpc_main, tmp_path, "f", "--train.steps", "2")
    assert rc == 0, err
    folder = tmp_path / "gems" / "f"
    before = _snapshot(folder)
    rc, out, err = _train(torchhpc_main, tmp_path, "f", "--train.steps", "2", "--run.resume", "--train.lr", "0.5")
    assert rc == 0, err
    assert "already finished at step 2" in out + err
    assert _snapshot(folder) == before


# ----------------------------------------------------------------------------- 5: dead and interrupted ranks


def _descendants(pid: int) -> list:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _ranks(pid: int) -> list:
    out = []
    for p in _descendants(pid):
        try:
            if "torchhpc.trainers.gems" in " ".join(p.cmdline()) and "torch.distributed.run" not in p.cmdline():
                out.append(p)
        except Exception:  # noqa: BLE001 - a process that just exited
            pass
    return out


def _start_train(tmp_path: Path, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torchhpc.trainers.cli", "gems", "train", "--config", DEBUG,
           "--run.root", str(tmp_path), "--train.steps", "100000", "--train.checkpoint-every", "100000", *extra]
    # SIGINT as a terminal delivers it, even when pytest itself runs with SIGINT ignored (a background job)
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                            stdin=subprocess.DEVNULL, cwd=REPO, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_for_ranks(proc: subprocess.Popen, n: int, timeout: float = 120) -> list:
    deadline = time.time() + timeout
    while time.time() < deadline:
        ranks = _ranks(proc.pid)
        if len(ranks) == n:
            return ranks
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.5)
    raise AssertionError("the ranks did not start")


@pytest.mark.distributed
def test_a_killed_rank_is_one_line(tmp_path):
    """SIGKILL to one rank of `torchhpc gems train`: the user sees one line saying a rank died, no traceback."""
    proc = _start_train(tmp_path)
    children = []
    try:
        ranks = _wait_for_ranks(proc, 2)
        children = _descendants(proc.pid)
        time.sleep(3)  # let training start
        victim = next(p for p in ranks if p.environ().get("RANK") == "1")
        victim.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=180)
    finally:
        for p in children:
            if p.is_running():
                p.kill()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1
    line = _one_line(err)
    assert line.startswith("torchhpc: error:") and "rank 1" in line and "died" in line, err


@pytest.mark.distributed
def test_ctrl_c_leaves_no_rank_behind(tmp_path):
    """Ctrl-C (SIGINT to the command) stops torchrun and every rank within seconds."""
    proc = _start_train(tmp_path)
    children = []
    try:
        ranks = _wait_for_ranks(proc, 2)
        children = _descendants(proc.pid)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        deadline = time.time() + 20
        alive = children
        while time.time() < deadline:
            alive = [p for p in children if p.is_running() and p.status() != "zombie"]
            if not alive:
                break
            time.sleep(0.5)
        assert not alive, [p.cmdline() for p in alive]
        assert len(ranks) == 2
    finally:
        for p in children:
            if p.is_running():
                p.kill()
        if proc.poll() is None:
            proc.kill()


def test_the_launcher_picks_the_rank_that_failed_first():
    """From torchrun's captured stderr the user gets the rank's own error over its peers' 'a peer died' lines,
    and, when no rank said anything, the rank torchrun's report names as the root cause (not the ranks its
    agent then stopped)."""
    from torchhpc.ext.gems.train import job_error_line

    peer = "torchhpc.trainers.gems: error: rank 1: a peer rank died (its connection closed); see above\n"
    own = "torchhpc.trainers.gems: error: data.folder x: no such folder\n"
    assert job_error_line([peer, own, "Traceback (most recent call last):\n"]) == "data.folder x: no such folder"
    report = ["Failures:\n", "[1]:\n", "  rank      : 0 (local_rank: 0)\n", "  exitcode  : -15 (pid: 11)\n",
              "Root Cause (first observed failure):\n", "[0]:\n", "  rank      : 1 (local_rank: 1)\n",
              "  exitcode  : -9 (pid: 12)\n"]
    assert job_error_line(report).startswith("rank 1 was killed by SIGKILL")
    assert job_error_line([peer, *report]).startswith("rank 1 was killed by SIGKILL")
    assert job_error_line(["Traceback (most recent call last):\n", "ValueError: boom\n"]) is None
