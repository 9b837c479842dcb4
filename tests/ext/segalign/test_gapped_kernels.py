"""The compiled (numba) gapped extension against the NumPy reference, cell for cell, on random cases."""

from __future__ import annotations

import numpy as np
import pytest

from torchhpc.ext.segalign.align import AlignConfig, align_sequences
from torchhpc.ext.segalign.fasta import SEPARATOR, from_strings
from torchhpc.ext.segalign.gapped import ydrop_extend
from torchhpc.ext.segalign.scoring import hoxd70
from torchhpc.ext.segalign.simulate import simulate_pair

pytest.importorskip("numba")

from torchhpc.ext.segalign.gapped_kernels import ydrop_extend_numba  # noqa: E402


def _case(rng, case):
    """A related pair (substitutions, deletions; walls, ambiguous codes, found cells) and some anchors."""
    n = int(rng.integers(50, 1200))
    t = rng.integers(0, 4, n).astype(np.uint8)
    q = t.copy()
    mut = rng.random(n) < rng.uniform(0.02, 0.4)
    q[mut] = rng.integers(0, 4, int(mut.sum()))
    q = q[rng.random(n) > rng.uniform(0, 0.05)]
    if case % 3 == 0:
        t[rng.integers(0, n, 3)] = SEPARATOR
    if case % 4 == 0:
        q[rng.integers(0, q.size, 5)] = rng.choice([4, 5, 8, 9], 5)  # lowercase, N and IUPAC codes
    b = 6
    t0 = rng.integers(0, n, b)
    q0 = np.clip(t0 + rng.integers(-5, 5, b), 0, q.size - 1)
    cover = None
    if case % 2:
        cover = np.full(q.size, -1, np.int64)
        idx = rng.integers(0, q.size, 40)
        cover[idx] = np.clip(idx + rng.integers(-3, 3, 40), 0, n - 1)
    return t, q, t0, q0, rng.choice([-1, 1], b), cover


@pytest.mark.parametrize("seed", [0, 1])
def test_numba_extension_equals_numpy_reference(seed):
    """On 24 random cases (both directions, bands 8-128, small and large ydrop, walls, found cells) the
    compiled extension returns exactly the NumPy reference's scores and traceback paths."""
    rng = np.random.default_rng(seed)
    table = hoxd70().table(910).numpy()
    for case in range(12):
        t, q, t0, q0, dirs, cover = _case(rng, case)
        band, ydrop = int(rng.choice([8, 16, 128])), int(rng.choice([500, 2000, 9430]))
        ref = ydrop_extend(t, q, t0, q0, dirs, table, 400, 30, ydrop, band, cover)
        got = ydrop_extend_numba(t, q, t0, q0, dirs, table, 400, 30, ydrop, band, cover, threads=1 + case % 2)
        np.testing.assert_array_equal(got[0], ref[0], err_msg=f"case {case}: scores")
        for b in range(t0.size):
            np.testing.assert_array_equal(got[1][b], ref[1][b], err_msg=f"case {case} extension {b}: target path")
            np.testing.assert_array_equal(got[2][b], ref[2][b], err_msg=f"case {case} extension {b}: query path")
        assert (ref[0] > 0).any()


def test_numba_alignments_equal_numpy_and_do_not_depend_on_threads():
    """Whole gapped stage on a simulated pair: numba with one thread (anchors one by one) or two (batches of
    two, re-extended where a wall of the batch meets them) gives the NumPy reference's alignments with its
    batches of up to 256 anchors: the output is that of the one-by-one order whatever the batches."""
    from torchhpc.ext.segalign.gapped import gapped_alignments

    sim = simulate_pair(8000, substitution_rate=0.08, indel_rate=0.006, inversions=1, inversion_length=2000,
                        duplications=2, duplication_length=600, seed=5)
    t, q = from_strings({"t": sim.target}), from_strings({"q": sim.query})
    cfg = AlignConfig()
    hsps = align_sequences(t, q, AlignConfig(gapped=False)).hsps["+"]
    assert len(hsps) > 3

    def key(alns):
        return [(a.t_start, a.t_end, a.q_start, a.q_end, a.score, a.t_text, a.q_text) for a in alns]

    ref = key(gapped_alignments(hsps, t, q, cfg, kernel="numpy"))
    assert ref
    for threads in (1, 2):
        assert key(gapped_alignments(hsps, t, q, cfg, kernel="numba", threads=threads)) == ref
