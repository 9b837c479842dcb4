"""The gapped stage on a repeat-rich pair: anchors one by one with walls, as LASTZ; no two blocks share a pair."""

from __future__ import annotations

import numpy as np
import pytest

from torchhpc.ext.segalign.align import AlignConfig, align_files
from torchhpc.ext.segalign.fasta import write_fasta
from torchhpc.ext.segalign.recall import lastz_available, lastz_command, pairs_from_maf, recall, run_lastz


def _mutate(rng, s, sub, indel):
    s = s.copy()
    m = rng.random(s.size) < sub
    s[m] = (s[m] + rng.integers(1, 4, int(m.sum()))) % 4
    keep = rng.random(s.size) > indel / 2
    s = s[keep]
    ins = np.flatnonzero(rng.random(s.size) < indel / 2)
    return np.insert(s, ins, rng.integers(0, 4, ins.size))


def _repeat_pair(tmp_path, seed=3, copies=5, spacer=1600):
    """A target holding ``copies`` diverged copies of a 700 bp element (both orientations) between random
    spacers, and a diverged query of it: every copy aligns to every other, the case where blocks pile up."""
    rng = np.random.default_rng(seed)
    elem = rng.integers(0, 4, 700)
    parts = []
    for k in range(copies):
        parts.append(rng.integers(0, 4, spacer))
        c = _mutate(rng, elem, 0.04, 0.01)
        parts.append(3 - c[::-1] if k % 2 else c)
    t = np.concatenate(parts + [rng.integers(0, 4, 1000)])
    q = _mutate(rng, t, 0.05, 0.006)
    paths = [tmp_path / "t.fa", tmp_path / "q.fa"]
    for p, name, s in zip(paths, "tq", (t, q), strict=True):
        write_fasta(p, {name: "".join("ACGT"[c] for c in s)})
    return paths


def _pairs_per_block(alns):
    out = []
    for a in alns:
        x = np.frombuffer(a.t_text.encode(), np.uint8) != ord("-")
        y = np.frombuffer(a.q_text.encode(), np.uint8) != ord("-")
        tp, qp = a.t_start + np.cumsum(x) - 1, a.q_start + np.cumsum(y) - 1
        out.append((a.strand, set(zip(tp[x & y].tolist(), qp[x & y].tolist(), strict=True))))
    return out


@pytest.mark.parametrize("gapped_by", ["numba", "numpy"])
def test_repeat_blocks_share_no_pair(tmp_path, gapped_by):
    """Five diverged copies of an element: many blocks, none sharing an aligned pair with another (the path of
    each alignment is a wall for the later ones), and the numba and NumPy stages write the same blocks."""
    if gapped_by == "numba":
        pytest.importorskip("numba")
    tp, qp = _repeat_pair(tmp_path, copies=5 if gapped_by == "numba" else 3, spacer=1600 if gapped_by == "numba" else 500)
    alns = align_files(tp, qp, AlignConfig(gapped_by=gapped_by)).alignments
    assert len(alns) >= (15 if gapped_by == "numba" else 5)
    blocks = _pairs_per_block(alns)
    for i, (si, pi) in enumerate(blocks):
        for sj, pj in blocks[i + 1:]:
            assert si != sj or not pi & pj, "two blocks share aligned pairs"
    if gapped_by == "numpy":
        other = align_files(tp, qp, AlignConfig(gapped_by="numba") if _has_numba() else AlignConfig()).alignments
        assert [(a.t_start, a.q_start, a.score, a.t_text, a.q_text) for a in other] == \
            [(a.t_start, a.q_start, a.score, a.t_text, a.q_text) for a in alns]


def _has_numba():
    from torchhpc.ext.core.dispatch import numba_available

    return numba_available()


@pytest.mark.skipif(not lastz_available(), reason="lastz is not on PATH (apt-get install lastz; "
                                                  "make setup installs it where apt-get works)")
def test_repeat_blocks_match_lastz(tmp_path):
    """On the repeat-rich pair our MAF holds >= 99.5% of LASTZ's matching pairs and >= 99.5% of our aligned
    pairs are LASTZ's (LASTZ's blocks do not pile up either)."""
    tp, qp = _repeat_pair(tmp_path)
    alns = align_files(tp, qp, AlignConfig()).alignments
    from torchhpc.ext.segalign.recall import pairs_from_alignments

    ref = run_lastz(lastz_command(tp, qp, nogapped=False, fmt="maf-"))
    rc = recall(pairs_from_alignments(alns, matching=True), pairs_from_maf(ref))[0]
    pr = recall(pairs_from_maf(ref, matching=False), pairs_from_alignments(alns))[0]
    assert rc >= 0.995 and pr >= 0.995, (rc, pr)
