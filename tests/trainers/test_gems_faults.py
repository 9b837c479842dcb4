"""gems' bad-input and fault corpus: bad files, bad states, bad checkpoints, dead and interrupted ranks.

Most cases run in-process through the CLI's ``main()``; a few need real processes (torchrun, signals).
Every failure is a non-zero exit with exactly one line on stderr and no traceback.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from harness.multiproc import wait_until

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
    monkeypatch.delenv("TORCHHPC_LAUNCHER", raising=False)  # a bare torchrun: only rank 0 speaks
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
                                    ("--data.image-size", "8", "data.image_size"),
                                    ("--pipeline.balance-by", "memory", "pipeline.balance_by")])
def test_resume_with_a_changed_model_is_refused_before_anything_is_written(torchhpc_main, tmp_path, change):
    """Resuming with a different model shape, or another stage split (the resumed run keeps its own, and its
    config.yaml recorded the new one), names the key in one line and leaves the run folder as it was."""
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
    cmd = [sys.executable, "-m", "torchhpc.trainers.cli", "gems", "train", "--config", DEBUG,
           "--run.root", str(tmp_path), "--train.steps", "100000", "--train.checkpoint-every", "100000", *extra]
    # SIGINT as a terminal delivers it, even when pytest itself runs with SIGINT ignored (a background job)
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, cwd=REPO, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait(proc: subprocess.Popen, ready, what: str, timeout: float = 240) -> None:
    """``wait_until`` for the running command, with its stderr when it ended first."""
    try:
        wait_until(ready, timeout=timeout, what=what, proc=proc, poll_s=0.2)
    except AssertionError as exc:
        if proc.poll() is None:
            raise
        raise AssertionError(f"{exc}\n{proc.stderr.read()[-3000:]}") from None


def _wait_for_ranks(proc: subprocess.Popen, n: int) -> list:
    ranks: list = []

    def started() -> bool:
        ranks[:] = _ranks(proc.pid)
        return len(ranks) == n

    _wait(proc, started, f"the {n} ranks of the job")
    return ranks


def _training(root: Path) -> bool:
    """Rank 0 logged a finished step: every rank is past its set-up and inside the training loop."""
    return any(p.stat().st_size > 0 for p in root.glob("gems/*/metrics.jsonl"))


def _alive(procs: list) -> list:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != "zombie":
                out.append(p)
        except Exception:  # noqa: BLE001 - a process that just exited
            pass
    return out


@pytest.mark.distributed
def test_a_killed_rank_is_one_line(tmp_path):
    """SIGKILL to one rank of `torchhpc gems train`: the user sees one line saying a rank died, no traceback."""
    proc = _start_train(tmp_path)
    children = []
    try:
        ranks = _wait_for_ranks(proc, 2)
        children = _descendants(proc.pid)
        _wait(proc, lambda: _training(tmp_path), "the job's first logged step")
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
    """Ctrl-C (SIGINT to the command) stops torchrun and every rank: no rank is left running."""
    proc = _start_train(tmp_path)
    children = []
    try:
        ranks = _wait_for_ranks(proc, 2)
        children = _descendants(proc.pid)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        wait_until(lambda: not _alive(children), timeout=120, what="the end of every rank after torchrun stopped")
        assert len(ranks) == 2
    finally:
        for p in children:
            if p.is_running():
                p.kill()
        if proc.poll() is None:
            proc.kill()
