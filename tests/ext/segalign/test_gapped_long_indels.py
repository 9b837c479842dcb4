"""Alignments across indels of ~250 bases, which LASTZ's Y-drop crosses and the former fixed band did not."""

from __future__ import annotations

import numpy as np
import pytest

from torchhpc.ext.segalign.align import AlignConfig, align_files
from torchhpc.ext.segalign.fasta import write_fasta
from torchhpc.ext.segalign.recall import (
    lastz_available,
    lastz_command,
    pairs_from_alignments,
    pairs_from_maf,
    recall,
    run_lastz,
)


def _indel_pair(tmp_path, seed, gap, insertion):
    """A 4 kbp target and a 5%-diverged query of it that lacks (or gains) ``gap`` bases at 2 kbp."""
    rng = np.random.default_rng(seed)
    t = rng.integers(0, 4, 4000)
    q = t.copy()
    mut = rng.random(q.size) < 0.05
    q[mut] = (q[mut] + rng.integers(1, 4, int(mut.sum()))) % 4
    q = np.concatenate([q[:2000], rng.integers(0, 4, gap), q[2000:]]) if insertion else \
        np.concatenate([q[:2000], q[2000 + gap:]])
    paths = [tmp_path / "t.fa", tmp_path / "q.fa"]
    for p, name, s in zip(paths, "tq", (t, q), strict=True):
        write_fasta(p, {name: "".join("ACGT"[c] for c in s)})
    return paths


def _longest_gap(text: str) -> int:
    runs = np.diff(np.flatnonzero(np.diff(np.r_[0, np.frombuffer(text.encode(), np.uint8) == ord("-"), 0])))[::2]
    return int(runs.max()) if runs.size else 0


@pytest.mark.skipif(not lastz_available(), reason="lastz is not on PATH (apt-get install lastz; "
                                                  "make setup installs it where apt-get works)")
@pytest.mark.parametrize("gap,insertion", [(240, False), (230, True)])
def test_long_indel_block_matches_lastz(tmp_path, gap, insertion):
    """LASTZ writes one block across a 230-240 base indel; so do we (numba and NumPy stages alike), with
    >= 99.5% of LASTZ's matching pairs and >= 99.5% of ours in LASTZ's (the 128-cell band wrote two blocks)."""
    tp, qp = _indel_pair(tmp_path, 7 + insertion, gap, insertion)
    ref = run_lastz(lastz_command(tp, qp, nogapped=False, fmt="maf-"))
    assert ref.count("a score") == 1, "LASTZ itself should cross the indel in one block"
    for gapped_by in ("numba", "numpy"):
        if gapped_by == "numba":
            pytest.importorskip("numba")
        alns = align_files(tp, qp, AlignConfig(gapped_by=gapped_by)).alignments
        plus = [a for a in alns if a.strand == "+"]
        assert len(plus) == 1, (gapped_by, [(a.t_start, a.t_end, a.score) for a in plus])
        assert _longest_gap(plus[0].t_text if insertion else plus[0].q_text) >= gap - 5
        rc = recall(pairs_from_alignments(alns, matching=True), pairs_from_maf(ref))[0]
        pr = recall(pairs_from_maf(ref, matching=False), pairs_from_alignments(alns))[0]
        assert rc >= 0.995 and pr >= 0.995, (gapped_by, rc, pr)
