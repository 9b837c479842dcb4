"""Shared test set-up.

* Without CUDA, Triton kernels run under the interpreter: ``TRITON_INTERPRET=1``
  must be set before any ``@triton.jit`` function is defined, so it is set here,
  before the test modules import the kernels.
* Markers: ``gpu`` tests skip without CUDA; ``distributed`` tests launch torchrun;
  ``slow`` tests take more than a few seconds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture
def kernel_device() -> torch.device:
    """Where Triton kernels run in this session: CUDA when present, else the CPU (interpreted)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; tests that need it skip, saying why, where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} is absent")
    return SHARED_DATA


def torchhpc_cli() -> list[str]:
    """The command that runs the CLI: the installed console script, else ``python -m``."""
    exe = shutil.which("torchhpc", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "torchhpc.trainers.cli"]


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None):
    """Run ``torchhpc ARGS`` in a subprocess; returns the CompletedProcess (text mode)."""
    full_env = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.run(
        [*torchhpc_cli(), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def cli():
    """``cli("demo", "--help")`` runs the torchhpc CLI in a subprocess (see :func:`run_cli`)."""
    return run_cli
