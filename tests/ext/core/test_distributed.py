"""torch.distributed set-up from the torchrun environment, checked with real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from harness.multiproc import torchrun, wait_until

from torchhpc.ext.core.device import pick_device
from torchhpc.ext.core.distributed import distributed
from torchhpc.ext.core.errors import InputError

HERE = Path(__file__).resolve().parent


def test_single_process_without_torchrun(monkeypatch):
    """Outside torchrun a job is one process and no process group is created."""
    for var in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    with distributed(device="cpu") as ctx:
        assert (ctx.rank, ctx.world_size, ctx.initialized) == (0, 1, False)
        assert not torch.distributed.is_initialized()


def test_pick_device():
    """auto picks CUDA only when present; an unusable request is a clear error."""
    assert pick_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert pick_device("cpu") == torch.device("cpu")
    with pytest.raises(InputError, match="unknown device"):
        pick_device("tpu:0:x")
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="no CUDA device"):
            pick_device("cuda")


def _torchrun(args, timeout):
    return torchrun(2, args, timeout=timeout)


@pytest.mark.distributed
def test_teardown_leaves_no_gloo_thread_when_torchrec_is_imported_inside_the_group(tmp_path):
    """A rank that imports torchrec after joining (which binds the default group into
    torch.distributed.nn.functional) has no gloo thread left once the group is torn down."""
    pytest.importorskip("torchrec")
    res = _torchrun([str(HERE / "gloo_teardown_worker.py"), str(tmp_path)], timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["rank"] for r in reports] == [0, 1]
    for r in reports:
        assert not [t for t in r["threads"] if "gloo" in t], f"rank {r['rank']} kept {r['threads']}"


@pytest.mark.distributed
def test_torchrun_two_ranks_allreduce_and_uneven_alltoall():
    """torchrun --standalone --nproc-per-node 2 on loopback: all-reduce and uneven all-to-all are exact."""
    res = _torchrun(["-m", "torchhpc.trainers.distcheck", "--device", "cpu"], timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]
    assert len(lines) == 1 and lines[0]["world_size"] == 2 and lines[0]["all_ranks_ok"]
    reports = lines[0]["ranks"]
    assert [r["rank"] for r in reports] == [0, 1]
    assert all(r["backend"] == "gloo" and r["all_reduce"] and r["all_to_all_uneven"] for r in reports)
    assert [r["received"] for r in reports] == [1 + 2, 2 + 3]  # rank r receives s + r + 1 from each s


@pytest.mark.distributed
def test_a_dead_rank_fails_the_job_instead_of_hanging(tmp_path):
    """When one rank dies, the job exits non-zero within the timeout rather than hanging."""
    script = tmp_path / "die.py"
    script.write_text(
        "import os, sys, torch, torch.distributed as dist\n"
        "from torchhpc.ext.core.distributed import distributed\n"
        "with distributed(device='cpu', timeout_s=20) as ctx:\n"
        "    if ctx.rank == 1:\n"
        "        os._exit(3)\n"
        "    t = torch.ones(1)\n"
        "    dist.all_reduce(t)\n"
    )
    # rank 0 waits in all_reduce for a peer that is gone: without the failure detection it would wait out
    # the 20 s collective timeout at least, and the launch's own timeout stops a hang
    res = _torchrun([str(script)], timeout=120)
    assert res.returncode != 0


@pytest.mark.distributed
def test_a_hanging_rank_fails_the_others_within_the_timeout(tmp_path):
    """A rank that hangs (alive, never joining the collective) makes the others fail after timeout_s.

    Unlike a rank that exits, nothing here makes torchrun's agent stop the job: only the collective
    timeout set by ``distributed(timeout_s=...)`` ends it, and rank 0 reports it as one clean line.
    """
    script = tmp_path / "hang.py"
    script.write_text(
        "import sys, time, torch, torch.distributed as dist\n"
        "from torchhpc.ext.core.cli import run_main\n"
        "from torchhpc.ext.core.distributed import distributed\n"
        "def job(_):\n"
        "    with distributed(device='cpu', timeout_s=4) as ctx:\n"
        "        if ctx.rank == 1:\n"
        "            time.sleep(600)\n"
        "        dist.all_reduce(torch.ones(1))\n"
        "sys.exit(run_main(job, None, 'hang'))\n"
    )
    # rank 1 sleeps 600 s: only the 4 s collective timeout can end the job before the launch's own timeout
    res = _torchrun([str(script)], timeout=150)
    assert res.returncode != 0
    ours = [line for line in res.stderr.splitlines() if line.startswith("hang: error:")]
    assert len(ours) == 1 and "timed out" in ours[0], res.stderr[-3000:]
    assert "Traceback" not in res.stderr.split("hang: error:")[0].split("\n")[-1]


@pytest.mark.distributed
def test_interrupting_the_launcher_leaves_no_rank_behind(tmp_path):
    """Ctrl-C on a command that launched torchrun stops every rank, even ranks that ignore SIGINT."""
    module = f"stubborn_{os.getpid()}"
    (tmp_path / f"{module}.py").write_text(
        "import signal, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "time.sleep(600)\n"
    )
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import sys\n"
        "from torchhpc.ext.core.launch import torchrun\n"
        "try:\n"
        f"    torchrun({module!r}, 2, grace_s=3)\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(130)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    # SIGINT as a terminal delivers it, even when pytest itself runs with SIGINT ignored (a background job)
    proc = subprocess.Popen([sys.executable, str(driver)], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    def ranks():
        out = subprocess.run(["pgrep", "-f", f"python -u -m {module}"], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    try:
        wait_until(lambda: len(ranks()) == 2, timeout=90, what="both ranks started", proc=proc, poll_s=0.5)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
        # the launcher has returned: every rank must be gone already, or be going (SIGKILL is asynchronous)
        wait_until(lambda: not ranks(), timeout=20, what="every rank stopped after the launcher", poll_s=0.2)
    finally:
        proc.kill()
        for pid in ranks():
            os.kill(pid, signal.SIGKILL)


def test_single_process_collectives_are_the_value_itself(monkeypatch):
    """Outside torchrun the context's gather/mean/max/all give back the local value."""
    for var in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    with distributed(device="cpu") as ctx:
        assert ctx.gather({"a": 1}) == [{"a": 1}]
        assert ctx.mean(2.5, 7) == 2.5 and ctx.max(3) == 3.0 and ctx.all(True) and not ctx.all(False)
        ctx.barrier()
