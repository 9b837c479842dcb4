"""The one way the suite starts torchrun jobs and waits for what a running job does.

Every multi-process test runs its ranks as ``torchrun --standalone`` (the launcher picks a free port
itself, so no test looks for one), on gloo, with the suite's thread count, ``PYTHONFAULTHANDLER=1``
(an abort prints every thread's stack) and the session's scratch ``TMPDIR`` (torchrun's log folders
and our temporary files go there and are removed with it).  Nothing here asserts a duration: a
``timeout`` only stops a test that would otherwise hang.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def torchrun_cmd(nproc: int, target: Sequence[str]) -> list[str]:
    """``python -m torch.distributed.run --standalone --nproc-per-node N TARGET...``.

    ``target`` is ``["-m", module, *args]`` or ``[script, *args]``.
    """
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *target]


def torchrun(nproc: int, target: Sequence[str], *, timeout: float, env: dict | None = None,
             cwd: Path | str | None = REPO) -> subprocess.CompletedProcess:
    """Run ``target`` on ``nproc`` gloo ranks and wait; stdout and stderr captured as text.

    torchrun runs in its own session: on ``timeout`` the whole session (launcher and ranks) is killed
    before ``subprocess.TimeoutExpired`` is raised, so a hung job leaves no rank behind.
    """
    proc = subprocess.Popen(torchrun_cmd(nproc, target), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, **(env or {})), cwd=cwd, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        kill_session(proc)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL every process of ``proc``'s session (it was started with ``start_new_session=True``)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.communicate()


def wait_until(ready: Callable[[], bool], *, timeout: float, what: str, proc: subprocess.Popen | None = None,
               poll_s: float = 0.05) -> None:
    """Poll ``ready()`` until it holds; fail naming ``what`` after ``timeout`` s or when ``proc`` ended first.

    Raises:
        AssertionError: ``what`` did not happen (with the process's exit status when it ended).
    """
    import time

    deadline = time.monotonic() + timeout
    while not ready():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the process ended first (exit {proc.returncode})")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen within {timeout:g} s")
        time.sleep(poll_s)
