"""Launching a job's ranks with torchrun from a CLI command (``torchhpc X --nproc N``).

:func:`relaunch` is what a command does when the user asks for several processes: it writes the
resolved options to a temporary YAML file, runs the job's module on ``nproc`` local ranks with
``--config`` pointing at it (:func:`torchrun`), and removes the file again.

:func:`torchrun` starts ``python -m torch.distributed.run --standalone`` in its own process group and
waits for it.  The ranks' stderr is captured: the job's warnings pass through as they come; on success
the rest is shown afterwards; on failure the user gets one line, the error of the rank that failed first
(not the peers that then lost it) or the rank torchrun saw killed by a signal (:class:`JobError`).  The
ranks see ``TORCHHPC_LAUNCHER=1`` (:data:`LAUNCHER_ENV`): an error every rank finds is then said by every
rank, so the line is there whichever rank exits first (see
:func:`~torchhpc.ext.core.distributed.fail_on_every_rank`).  The launch gets its own ``TMPDIR``, removed afterwards, so torchrun's log folders leave nothing behind.
Ctrl-C (or SIGTERM) stops torchrun and every rank: SIGINT first, SIGKILL after a grace period.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import ConfigError, TorchHPCError

#: a rank's error that only reports another rank's failure (so it does not explain the job's)
CONSEQUENCES = ("a peer rank", "a peer died", "from a neighbour", "rank 0 failed", "rank 0 did not answer",
                "timed out", "interrupted")


#: set (to ``1``) in the ranks' environment by :func:`torchrun`: their stderr is read by this launcher
LAUNCHER_ENV = "TORCHHPC_LAUNCHER"


class JobError(TorchHPCError):
    """The job launched under torchrun failed; the message is its one line."""


def torchrun_command(module: str, nproc: int, argv: Sequence[str] = ()) -> list[str]:
    """The command line that runs ``python -m module argv`` on ``nproc`` local ranks.

    Raises:
        ConfigError: ``nproc`` below 1.
    """
    if nproc < 1:
        raise ConfigError(f"--nproc must be >= 1, got {nproc}")
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", module, *argv]


def relaunch(options: Any, module: str, nproc: int, argv: Sequence[str] = (), *, grace_s: float = 10.0,
             quiet: bool = False) -> int:
    """Run ``module`` on ``nproc`` torchrun ranks with ``options`` (a config dataclass) as its config.

    The ranks get ``argv`` then ``--config PATH``, where ``PATH`` is a temporary YAML file holding the
    resolved ``options`` (flags and ``--set`` included), removed when the job ends.  ``quiet`` drops what
    the ranks print on stdout (a caller that reads the run folder instead).

    Returns:
        0 when every rank succeeded; torchrun's exit status when it failed without a rank's error line.

    Raises:
        ConfigError: ``nproc`` below 1.
        InputError: the options ask for a device this machine does not have (before any rank starts).
        JobError: the job failed; its one line.
    """
    from .config import dump_config

    check_device(options)
    with tempfile.TemporaryDirectory(prefix="torchhpc-launch-") as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(dump_config(options))
        return torchrun(module, nproc, [*argv, "--config", str(path)], grace_s=grace_s, quiet=quiet)


def check_device(options: Any) -> None:
    """Refuse, in this process and in one line, a device the ranks could not use (``cuda`` on a machine
    without one): the ``dist.device`` (or ``device``) of ``options``.

    Raises:
        InputError: from :func:`~torchhpc.ext.core.device.pick_device`.
    """
    device = getattr(getattr(options, "dist", None), "device", None) or getattr(options, "device", None)
    if isinstance(device, str):
        from .device import pick_device

        pick_device(device)


def torchrun(module: str, nproc: int, argv: Sequence[str] = (), *, grace_s: float = 10.0, quiet: bool = False) -> int:
    """Run ``module`` under torchrun on ``nproc`` local ranks and wait for it (``quiet``: drop the ranks' stdout).

    Returns:
        0 when every rank succeeded; torchrun's exit status when it failed without a rank's error line
        (its whole output is shown then).

    Raises:
        ConfigError: ``nproc`` below 1.
        JobError: the job failed; the one line that explains it (see :func:`job_error_line`).
    """
    cmd = torchrun_command(module, nproc, argv)
    with tempfile.TemporaryDirectory(prefix="torchhpc-torchrun-") as scratch:
        env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), TMPDIR=scratch,
                   **{LAUNCHER_ENV: "1"})
        proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True, errors="replace",
                                start_new_session=True, stdout=subprocess.DEVNULL if quiet else None)
        lines: list[str] = []
        warnings = ("torchhpc: warning:", f"{module}: warning:")

        def read() -> None:
            for line in proc.stderr:
                if line.startswith(warnings):
                    sys.stderr.write(line)  # the job's warnings, as they come
                    sys.stderr.flush()
                else:
                    lines.append(line)

        reader = threading.Thread(target=read, name="torchrun-stderr", daemon=True)
        reader.start()
        try:
            rc = proc.wait()
        except BaseException:
            stop_job(proc, grace_s)
            raise
        finally:
            if proc.poll() is None:
                stop_job(proc, grace_s)
            reader.join(timeout=5)
    if rc == 0:
        sys.stderr.write("".join(lines))
        return 0
    line = job_error_line(lines, module)
    if line is None:  # not an error the job knows: show everything
        sys.stderr.write("".join(lines))
        return rc
    raise JobError(line)


def job_error_line(lines: Sequence[str], module: str) -> str | None:
    """The one line that explains a failed torchrun job, from its captured stderr.

    The first rank error (``<module>: error: ...``) that is not a consequence of another rank's failure;
    else rank 0's error as a peer relayed it (``rank 1: rank 0 failed: <rank 0's error>``); else the rank
    torchrun's report names as killed by a signal; else the first rank error; else ``None``.
    """
    prefix = f"{module}: error: "
    # two ranks' lines can share one line of the pipe (a rank that wrote its line in two pieces)
    pieces = [part for ln in lines for part in re.split(f"(?={re.escape(prefix)})", ln.strip())]
    errors = [part[len(prefix):].strip() for part in pieces if part.startswith(prefix)]
    primary = [e for e in errors if not any(mark in e for mark in CONSEQUENCES)]
    if primary:
        return primary[0]
    relayed = [m[1] for e in errors if (m := re.match(r"(?:rank \d+: )?rank 0 failed: (.+)", e))]
    if relayed:  # rank 0 was stopped before it spoke; a peer passed its error on verbatim
        return relayed[0]
    root = "".join(lines).split("Root Cause", 1)[-1]  # torchrun's report: the first failure it observed
    m = re.search(r"rank\s*:\s*(\d+).*?\n\s*exitcode\s*:\s*(-\d+)", root, flags=re.S)
    if m:
        try:
            name = signal.Signals(-int(m[2])).name
        except ValueError:
            name = f"signal {-int(m[2])}"
        return f"rank {m[1]} was killed by {name} (the rank died); the job stopped"
    return errors[0] if errors else None


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (ranks may start their own sessions, outside the launcher's group)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def stop_job(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGINT to torchrun's process group and to every process below it; SIGKILL to whatever is left
    after ``grace_s`` seconds; then reap torchrun."""
    seen = {pid: _cmdline(pid) for pid in _descendants(proc.pid)}
    pids = list(seen)
    try:
        os.killpg(proc.pid, signal.SIGINT)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in pids:
        try:
            os.kill(pid, signal.SIGINT)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    for pid in pids:
        if seen[pid] and _cmdline(pid) == seen[pid]:  # still the process we saw, not a reused pid
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


__all__ = ["JobError", "LAUNCHER_ENV", "check_device", "job_error_line", "relaunch", "stop_job", "torchrun", "torchrun_command"]
