"""Launching a job under torchrun from a command: the resolved config, one error line, nothing left behind."""

from __future__ import annotations

import os
import tempfile
import textwrap
from dataclasses import dataclass

import pytest

from torchhpc.ext.core.config import option
from torchhpc.ext.core.errors import ConfigError
from torchhpc.ext.core.launch import JobError, job_error_line, relaunch, torchrun

JOB = "launch_probe_job"


@dataclass
class ProbeOptions:
    """What the probe job does."""

    fail_rank: int = option(-1, help="the rank that raises a user error (-1: none)")
    out: str = option("", help="folder each rank writes its resolved options to")
    all_fail: bool = option(False, help="every rank finds the same error before any collective; rank 0 last")


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """A job module on PYTHONPATH: each rank writes the options it got; ``fail_rank`` fails with one line,
    the other ranks then fail as peers of a dead rank."""
    (tmp_path / f"{JOB}.py").write_text(textwrap.dedent(f"""
        import os, sys, time
        from dataclasses import asdict, dataclass
        import torch.distributed as dist
        from torchhpc.ext.core.cli import job_main
        from torchhpc.ext.core.config import option
        from torchhpc.ext.core.distributed import distributed, fail_on_every_rank
        from torchhpc.ext.core.errors import InputError

        @dataclass
        class ProbeOptions:
            fail_rank: int = option(-1, help="the rank that raises")
            out: str = option("", help="folder")
            all_fail: bool = option(False, help="every rank fails alike")

        def run(opts):
            if opts.all_fail:
                rank = int(os.environ["RANK"])
                if rank == 0:
                    time.sleep(5)  # the other ranks exit first: torchrun stops rank 0 then
                fail_on_every_rank(InputError("the config every rank rejects"), rank)
            with distributed(device="cpu", timeout_s=30) as ctx:
                with open(os.path.join(opts.out, f"rank{{ctx.rank}}.txt"), "w") as fh:
                    fh.write(repr(asdict(opts)))
                if ctx.rank == opts.fail_rank:
                    raise InputError("the probe's own error")
                dist.barrier()
            return 0

        sys.exit(job_main({JOB!r}, ProbeOptions, run))
    """))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    (tmp_path / "out").mkdir()
    return tmp_path / "out"


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A TMPDIR of this test's own (not the session's, which tests in other workers write to at the same
    time): what the launch leaves behind is whatever is in it afterwards."""
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    return tmp


@pytest.mark.distributed
def test_relaunch_passes_the_resolved_options_and_leaves_nothing_behind(probe, scratch):
    """Every rank gets the options given in Python (through a temporary YAML file); afterwards neither that
    file nor torchrun's log folders remain in TMPDIR."""
    assert relaunch(ProbeOptions(out=str(probe)), JOB, 2) == 0
    for rank in (0, 1):
        assert (probe / f"rank{rank}.txt").read_text() == repr({"fail_rank": -1, "out": str(probe), "all_fail": False})
    assert os.listdir(scratch) == []


@pytest.mark.distributed
def test_a_failing_rank_is_one_line(probe, scratch):
    """Rank 1 fails with a user error, rank 0 then loses its peer: the launcher raises rank 1's own line."""
    with pytest.raises(JobError) as err:
        relaunch(ProbeOptions(fail_rank=1, out=str(probe)), JOB, 2)
    assert str(err.value) == "the probe's own error"
    assert os.listdir(scratch) == []


@pytest.mark.distributed
def test_an_error_every_rank_finds_is_one_line_whichever_rank_exits_first(probe, scratch):
    """Every rank rejects the config before any collective and rank 0 is the slowest: torchrun stops rank 0
    as soon as another rank exits, and the user still gets the line (from the rank that did exit)."""
    with pytest.raises(JobError) as err:
        relaunch(ProbeOptions(all_fail=True, out=str(probe)), JOB, 2)
    assert str(err.value) == "the config every rank rejects"
    assert os.listdir(scratch) == []


@pytest.mark.distributed
def test_under_a_bare_torchrun_rank_0_says_the_error_even_when_it_is_the_slowest(probe, monkeypatch):
    """A bare torchrun (not the torchhpc launcher): every rank rejects the config, rank 0 last (5 s later). The
    other ranks wait before they exit, so torchrun does not stop rank 0 before its line (it did in CI)."""
    import subprocess
    import sys

    from torchhpc.ext.core.launch import LAUNCHER_ENV

    monkeypatch.delenv(LAUNCHER_ENV, raising=False)
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          "-m", JOB, "--all-fail", "--out", str(probe)], capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    assert res.returncode != 0
    ours = [ln for ln in res.stderr.splitlines() if ln.startswith(f"{JOB}: error:")]
    assert ours == [f"{JOB}: error: the config every rank rejects"], res.stderr[-2000:]


@pytest.mark.parametrize("launcher", [False, True])
def test_an_error_every_rank_finds_is_said_by_rank_0_or_under_the_launcher_by_all(monkeypatch, launcher):
    """Under a bare torchrun only rank 0 raises the error (the others exit 1 silently); under the torchhpc
    launcher, which reads every rank's stderr and shows one line, every rank raises it."""
    from torchhpc.ext.core.distributed import fail_on_every_rank
    from torchhpc.ext.core.errors import InputError
    from torchhpc.ext.core.launch import LAUNCHER_ENV

    if launcher:
        monkeypatch.setenv(LAUNCHER_ENV, "1")
    else:
        monkeypatch.delenv(LAUNCHER_ENV, raising=False)
    monkeypatch.setattr("torchhpc.ext.core.distributed.PEER_EXIT_GRACE_S", 0.0)
    exc = InputError("bad")
    with pytest.raises(InputError):
        fail_on_every_rank(exc, 0)
    with pytest.raises(InputError if launcher else SystemExit) as got:
        fail_on_every_rank(exc, 1)
    assert got.value is exc if launcher else got.value.code == 1


def test_nproc_below_one_is_refused():
    """``nproc`` 0 is a config error before anything starts."""
    with pytest.raises(ConfigError, match="--nproc must be >= 1"):
        torchrun(JOB, 0)


def test_the_line_that_explains_a_failed_job():
    """From torchrun's captured stderr: the rank's own error over its peers' 'a peer died' lines; when no
    rank said anything, the rank torchrun's report names as the root cause; else nothing."""
    prog = "torchhpc.trainers.gems"
    peer = f"{prog}: error: rank 0: a peer rank died (its connection closed); see that rank's own error above\n"
    own = f"{prog}: error: data.folder x: no such folder\n"
    assert job_error_line([peer, own, "Traceback (most recent call last):\n"], prog) == "data.folder x: no such folder"
    report = ["Root Cause (first observed failure):\n", "[0]:\n", "  time      : 2026-11-30\n",
              "  host      : h\n", "  rank      : 1 (local_rank: 1)\n", "  exitcode  : -9 (pid: 5)\n"]
    assert job_error_line(report, prog) == "rank 1 was killed by SIGKILL (the rank died); the job stopped"
    assert job_error_line([peer, *report], prog).startswith("rank 1 was killed by SIGKILL")
    assert job_error_line([peer], prog) == "rank 0: a peer rank died (its connection closed); see that rank's own error above"
    assert job_error_line(["Traceback (most recent call last):\n", "ValueError: boom\n"], prog) is None
    assert job_error_line([own], "torchhpc.trainers.other") is None  # another job's prefix is not ours
    # the agent's later SIGTERMs are listed under Failures; the root cause is the rank it saw die first
    both = ["Failures:\n", "[1]:\n", "  rank      : 0 (local_rank: 0)\n", "  exitcode  : -15 (pid: 11)\n", *report]
    assert job_error_line(both, prog).startswith("rank 1 was killed by SIGKILL")
    ccsdt = "torchhpc.trainers.ccsdt"
    told = f"{ccsdt}: error: rank 1: rank 0 failed: bad.npz: not a zip file\n"
    assert job_error_line(["W1202 warning\n", told, f"{ccsdt}: error: bad.npz: not a zip file\n"], ccsdt) == \
        "bad.npz: not a zip file"
    # two ranks' identical lines run together on the pipe: one of them, not both
    assert job_error_line([f"{prog}: error: a.fa: empty file{prog}: error: a.fa: empty file\n", "\n"], prog) == \
        "a.fa: empty file"
    # rank 0 stopped by torchrun before it printed: the peer's relayed copy of its error is the line
    assert job_error_line(["W1202 warning\n", told], ccsdt) == "bad.npz: not a zip file"
