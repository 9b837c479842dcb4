"""Native gapped extension: the Y-drop DP against the full affine-gap DP, and its tracebacks."""

from __future__ import annotations

import numpy as np
import pytest

from torchhpc.ext.segalign.align import AlignConfig, align_sequences
from torchhpc.ext.segalign.fasta import SEPARATOR, from_strings
from torchhpc.ext.segalign.gapped import ydrop_extend
from torchhpc.ext.segalign.reference import extension_score_reference, path_score
from torchhpc.ext.segalign.scoring import HOXD70, hoxd70
from torchhpc.ext.segalign.simulate import simulate_pair


def _evolved(n, seed):
    rng = np.random.default_rng(seed)
    t = rng.integers(0, 4, n)
    q = []
    for c in t:
        r = rng.random()
        if r < 0.03:
            continue  # deletion
        q.append(int(rng.integers(0, 4)) if r < 0.12 else int(c))
        if rng.random() < 0.03:
            q.extend(rng.integers(0, 4, int(rng.integers(1, 4))).tolist())  # insertion
    return t.astype(np.uint8), np.array(q, dtype=np.uint8)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_ydrop_dp_equals_full_dp(seed):
    """With a huge ydrop, forward and backward extension scores equal the full DP's (no band limits them)."""
    t, q = _evolved(45, seed)
    tc = np.concatenate([[SEPARATOR], t, [SEPARATOR]]).astype(np.uint8)
    qc = np.concatenate([[SEPARATOR], q, [SEPARATOR]]).astype(np.uint8)
    table = hoxd70().table(910).numpy()
    best, pt, pq = ydrop_extend(tc, qc, np.array([1, tc.size - 2]), np.array([1, qc.size - 2]),
                                np.array([1, -1]), table, 400, 30, 10**7)
    assert int(best[0]) == extension_score_reference(t, q, table, 400, 30)
    assert int(best[1]) == extension_score_reference(t[::-1], q[::-1], table, 400, 30)
    # the traceback's columns re-score to the reported best
    for b, (ts, qs) in enumerate([(t, q), (t[::-1], q[::-1])]):
        rows_t = "".join("-" if i < 0 else "ACGT"[ts[i]] for i in pt[b])
        rows_q = "".join("-" if j < 0 else "ACGT"[qs[j]] for j in pq[b])
        assert path_score(rows_t, rows_q, HOXD70, 400, 30) == int(best[b])


def test_ydrop_stops_at_walls():
    """An extension never crosses a record separator, even through a gap."""
    t = np.array([SEPARATOR] + [0, 1, 2, 3] * 10 + [SEPARATOR] + [0, 1, 2, 3] * 10 + [SEPARATOR], dtype=np.uint8)
    best, pt, _ = ydrop_extend(t, t, np.array([1]), np.array([1]), np.array([1]), hoxd70().table(910).numpy(),
                               400, 30, 9430)
    assert pt[0].max() < 40 and int(best[0]) == 10 * (91 + 100 + 100 + 91)


def test_gapped_alignments_rescore_and_cover_truth():
    """On a simulated pair every native alignment re-scores to its score and the truth is mostly recovered."""
    sim = simulate_pair(6000, substitution_rate=0.06, indel_rate=0.004, inversions=1, inversion_length=1500,
                        duplications=0, seed=4)
    res = align_sequences(from_strings({"t": sim.target}), from_strings({"q": sim.query}), AlignConfig())
    assert res.alignments
    for a in res.alignments:
        assert path_score(a.t_text, a.q_text, HOXD70, 400, 30) == a.score
    for strand in "+-":
        truth = sim.true_pairs(strand)
        found = set()
        for a in res.alignments:
            if a.strand != strand:
                continue
            ti = a.t_start + np.cumsum(np.frombuffer(a.t_text.encode(), np.uint8) != ord("-")) - 1
            qi = a.q_start + np.cumsum(np.frombuffer(a.q_text.encode(), np.uint8) != ord("-")) - 1
            both = (np.frombuffer(a.t_text.encode(), np.uint8) != ord("-")) & \
                   (np.frombuffer(a.q_text.encode(), np.uint8) != ord("-"))
            found |= set(((ti[both].astype(np.int64) << 32) | qi[both]).tolist())
        assert np.isin(truth, list(found)).mean() > 0.9, strand
