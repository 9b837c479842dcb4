"""Launching a job's ranks with torchrun from a CLI command (``torchhpc X --nproc N``).

:func:`torchrun` starts ``python -m torch.distributed.run --standalone`` with the job's module and
arguments, waits for it, and makes sure nothing is left behind: Ctrl-C (or SIGTERM) is passed to the
launcher's process group, which is killed if it has not stopped within a grace period.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence

from .errors import ConfigError


def torchrun_command(module: str, nproc: int, argv: Sequence[str] = ()) -> list[str]:
    """The command line that runs ``python -m module argv`` on ``nproc`` local ranks."""
    if nproc < 1:
        raise ConfigError(f"--nproc must be >= 1, got {nproc}")
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", module, *argv]


def torchrun(module: str, nproc: int, argv: Sequence[str] = (), *, grace_s: float = 10.0) -> int:
    """Run ``module`` under torchrun on ``nproc`` local ranks; returns its exit status.

    The launcher runs in its own process group; an interrupt here stops the whole group (SIGINT,
    then SIGKILL after ``grace_s``), so no rank outlives the command.

    Raises:
        ConfigError: ``nproc`` below 1.
    """
    cmd = torchrun_command(module, nproc, argv)
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        _stop_group(proc, grace_s)
        raise
    finally:
        if proc.poll() is None:
            _stop_group(proc, grace_s)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (ranks may start their own sessions, outside the launcher's group)."""
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            with open(f"/proc/{parent}/task/{parent}/children") as fh:
                kids = [int(k) for k in fh.read().split()]
        except OSError:
            kids = []
        out += kids
        todo += kids
    return out


def _stop_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGINT to the launcher's group, then SIGKILL to it and to every process below it."""
    kids = {pid: _cmdline(pid) for pid in _descendants(proc.pid)}
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    except ProcessLookupError:
        pass
    for pid, cmd in kids.items():
        if cmd and _cmdline(pid) == cmd:  # still the rank we saw, not a reused pid
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


__all__ = ["torchrun", "torchrun_command"]
