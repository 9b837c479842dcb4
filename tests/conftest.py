"""Shared test set-up.  The tolerance policy, the torchrun harness and what the suite may leave behind
are written in tests/README.md; their code is in tests/harness/.

* One thread count for the whole suite: ``TORCHHPC_TEST_THREADS`` (default 1) becomes
  ``OMP_NUM_THREADS`` for this process and every process it starts, and torch's intra-op threads.
* Scratch space: the session makes one temporary folder, points ``TMPDIR`` (so torchrun's log
  folders, our temporary files and every child process) and pytest's ``tmp_path`` into it, and removes
  it at the end, so a run leaves nothing in /tmp.
* ``PYTHONFAULTHANDLER=1`` for every child process: an abort in a rank prints the stacks of all threads.
* ``TORCHHPC_SHARED_DATA`` overrides the shared data folder (default ``../shared/data`` beside the checkout).
* Without CUDA, Triton kernels run under the interpreter: ``TRITON_INTERPRET=1``
  must be set before any ``@triton.jit`` function is defined, so it is set here,
  before the test modules import the kernels.
* Markers: ``gpu`` tests skip without CUDA; ``distributed`` tests launch torchrun;
  ``slow`` tests take more than a few seconds.
* In CI (``CI=true``) a skip is a failure unless it is about CUDA: a reference tool that did
  not install (LASTZ, PySCF, torchrec, numba, the shared data) must turn CI red, not quietly
  remove the check.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

THREADS = int(os.environ.get("TORCHHPC_TEST_THREADS", "1"))
os.environ["OMP_NUM_THREADS"] = str(THREADS)  # before torch is imported, and inherited by every child
os.environ["PYTHONFAULTHANDLER"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(THREADS)

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the suite's helpers: ``from harness import ...``

from torchhpc.ext.core.data import shared_data_dir  # noqa: E402

SHARED_DATA = shared_data_dir()
_SCRATCH: str | None = None


def pytest_configure(config):
    """One scratch folder for the session: TMPDIR for this process and its children, and pytest's basetemp."""
    global _SCRATCH
    if _SCRATCH is None and not hasattr(config, "workerinput"):
        _SCRATCH = tempfile.mkdtemp(prefix="torchhpc-tests-")
        os.environ["TMPDIR"] = _SCRATCH
        tempfile.tempdir = None  # gettempdir() reads TMPDIR again
        if config.option.basetemp is None:
            config.option.basetemp = os.path.join(_SCRATCH, "pytest")


def pytest_unconfigure(config):
    if _SCRATCH is not None:
        shutil.rmtree(_SCRATCH, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def _allowed_skip(reason: str) -> bool:
    """Skips that CI may keep: the ones about a CUDA device (CI has no GPU)."""
    return "CUDA" in reason


def _skip_reason(longrepr) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if _in_ci() and rep.skipped and not hasattr(rep, "wasxfail"):
        reason = _skip_reason(rep.longrepr)
        if not _allowed_skip(reason):
            rep.outcome = "failed"
            rep.longrepr = f"skipped in CI (CI=true needs every reference tool): {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    rep = outcome.get_result()
    if _in_ci() and rep.skipped:
        reason = _skip_reason(rep.longrepr)
        if not _allowed_skip(reason):
            rep.outcome = "failed"
            rep.longrepr = f"module skipped in CI (CI=true needs every reference tool): {reason}"


@pytest.fixture(autouse=True)
def suite_threads():
    """Every test starts with the suite's thread count, whatever a library call before it set."""
    if torch.get_num_threads() != THREADS:
        torch.set_num_threads(THREADS)
    yield


@pytest.fixture
def kernel_device() -> torch.device:
    """Where Triton kernels run in this session: CUDA when present, else the CPU (interpreted)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``$TORCHHPC_SHARED_DATA`` or ``../shared/data`` beside the checkout; tests that need it skip, saying
    why, where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} is absent (set TORCHHPC_SHARED_DATA to its path)")
    return SHARED_DATA


def torchhpc_cli() -> list[str]:
    """The command that runs the CLI: the installed console script, else ``python -m``."""
    exe = shutil.which("torchhpc", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "torchhpc.trainers.cli"]


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None):
    """Run ``torchhpc ARGS`` in a subprocess; returns the CompletedProcess (text mode)."""
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run(
        [*torchhpc_cli(), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def cli():
    """``cli("demo", "--help")`` runs the torchhpc CLI in a subprocess (see :func:`run_cli`)."""
    return run_cli


class _Hang(BaseException):
    """Raised into a ``cli_here`` command that outlived its timeout (a BaseException: no handler of the
    command's own turns it into an error line)."""


@pytest.fixture
def cli_here(capsys, monkeypatch):
    """:func:`cli` run in this process, without a fresh interpreter importing torch and ``torch._dynamo`` again
    (seconds a call): the exit status as the console script returns it, and what the command writes to
    Python's ``sys.stdout`` and ``sys.stderr``.  It does not see what only a real process shows: Python
    warnings (pytest records them), C++ and logging output bound to the process's file descriptors, a
    traceback, a signal.  So it is for commands whose results are checked (train, eval, align, simulate on one
    rank) and that start no process of their own; the exact lines a user sees on stderr (one-line errors),
    torchrun launches, helper programs (LASTZ) and each command's own process are tested with ``cli``.
    ``timeout`` (None: none) stops a command stuck in Python code on this thread (SIGALRM:
    ``subprocess.TimeoutExpired``), not one stuck inside compiled code or waiting on a stuck thread.
    torch's thread count is restored after each call (a command may set it)."""
    import signal

    def run(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float | None = 300
            ) -> subprocess.CompletedProcess:
        from torchhpc.trainers.cli import main

        def hang(signum, frame):
            raise _Hang

        capsys.readouterr()
        threads = torch.get_num_threads()
        before = signal.signal(signal.SIGALRM, hang)
        signal.setitimer(signal.ITIMER_REAL, timeout or 0)
        try:
            with monkeypatch.context() as m:
                if cwd is not None:
                    m.chdir(cwd)
                for key, value in (env or {}).items():
                    m.setenv(key, value)
                try:
                    rc = main(list(args))
                except SystemExit as exc:
                    rc = exc.code
        except _Hang:
            raise subprocess.TimeoutExpired(["torchhpc", *args], timeout) from None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, before)
            torch.set_num_threads(threads)
        out, err = capsys.readouterr()
        if rc is None:  # what the interpreter makes of sys.exit's argument
            rc = 0
        elif isinstance(rc, int):
            rc &= 0xFF
        else:
            err, rc = err + f"{rc}\n", 1
        return subprocess.CompletedProcess(["torchhpc", *args], rc, out, err)

    return run


@pytest.fixture
def torchhpc_main(capsys):
    """``torchhpc ARGV...`` run in this process: ``fn(*argv) -> (exit status, stdout, stderr)``, argparse's
    usage errors included (their SystemExit code is the status)."""

    def run(*argv: str) -> tuple[int, str, str]:
        from torchhpc.trainers.cli import main

        capsys.readouterr()
        try:
            rc = main(list(argv))
        except SystemExit as exc:
            rc = exc.code
        out, err = capsys.readouterr()
        return rc, out, err

    return run
