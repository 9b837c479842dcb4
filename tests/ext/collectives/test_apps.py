"""Applications on 4 gloo ranks: the halo-exchange SpMM equals the single-process product, and the Moore halo
exchange fills every ghost cell as numpy's periodic (wrap) padding of the global array does."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from torchhpc.ext.collectives.apps import block_bounds, halo_offsets

HERE = Path(__file__).resolve().parent
NPROC = 4  # as in conftest.py's launch

pytestmark = pytest.mark.distributed


def _problem():
    sys.path.insert(0, str(HERE))
    try:
        from collectives_dist_worker import spmm_problem
    finally:
        sys.path.remove(str(HERE))
    return spmm_problem()


def test_spmm_with_hierarchical_halo_equals_single_process(torch_run):
    """Y = A @ X from 4 row blocks (direct, LAG-H and LAW-H halo exchanges) equals numpy's A @ X."""
    a, x = _problem()
    want = a @ x
    b = block_bounds(a.shape[0], NPROC)
    for rank in range(NPROC):
        doc = json.loads((torch_run / f"spmm-rank{rank}.json").read_text())
        assert doc["rows"] == [b[rank], b[rank + 1]]
        for algo in ("direct", "lag-h", "law-h"):
            np.testing.assert_allclose(np.array(doc[algo]), want[b[rank]:b[rank + 1]], rtol=0, atol=1e-12)


def test_moore_halo_matches_wrap_padding(torch_run):
    """On the periodic 2 x 2 grid every rank's 5 x 6 block (ghosts included) equals the window of
    np.pad(global, 1, mode='wrap'), where each neighbour sits at two or three offsets at once."""
    glob = np.arange(6 * 8, dtype=np.float64).reshape(6, 8)
    padded = np.pad(glob, 1, mode="wrap")
    for rank in range(NPROC):
        doc = json.loads((torch_run / f"halo-rank{rank}.json").read_text())
        i0, j0 = doc["origin"]
        for algo in ("direct", "law-h"):
            assert np.array_equal(np.array(doc[algo]), padded[i0:i0 + 5, j0:j0 + 6]), (rank, algo)


def test_halo_offsets_are_the_moore_neighbourhood():
    """3^D - 1 offsets, none zero, each with its negation (so every send has a matching receive)."""
    for d in (1, 2, 3):
        offs = halo_offsets(d)
        assert len(offs) == 3 ** d - 1 and len(set(offs)) == len(offs)
        assert all(tuple(-x for x in o) in offs for o in offs)
