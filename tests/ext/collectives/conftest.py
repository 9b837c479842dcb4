"""The folder's one torchrun launch (4 gloo ranks), shared by the exactness, bad-input and application tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.multiproc import torchrun

HERE = Path(__file__).resolve().parent
NPROC = 4
SEEDS = [0, 11]  # 10 edges each on 4 ranks; LAG-H and LAW-H relay, LAW-H splits messages, a zero-row edge


@pytest.fixture(scope="session")
def torch_run(tmp_path_factory) -> Path:
    """Run collectives_dist_worker.py on 4 gloo ranks once; its output folder."""
    out = tmp_path_factory.mktemp("torch")
    res = torchrun(NPROC, [str(HERE / "collectives_dist_worker.py"), str(out), *map(str, SEEDS)], timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return out
