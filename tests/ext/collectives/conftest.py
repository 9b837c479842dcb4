"""The folder's one torchrun launch (4 gloo ranks), shared by the exactness, bad-input and application tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
NPROC = 4
SEEDS = [0, 11]  # 10 edges each on 4 ranks; LAG-H and LAW-H relay, LAW-H splits messages, a zero-row edge


@pytest.fixture(scope="session")
def torch_run(tmp_path_factory) -> Path:
    """Run collectives_dist_worker.py on 4 gloo ranks once; its output folder."""
    out = tmp_path_factory.mktemp("torch")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          f"--nproc-per-node={NPROC}", str(HERE / "collectives_dist_worker.py"), str(out), *map(str, SEEDS)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return out
