"""Recall against real LASTZ on the mitochondrial pairs of ../shared/data/genomes (the issue's criteria).

* HSPs (``--nogapped``) cover >= 99% of the aligned base pairs of ``lastz --nogapped``.
* The final MAF recovers >= 98% of the matching base pairs of LASTZ's MAF, with the
  LASTZ hand-off and with the native gapped extension.
* On a simulated pair with inversions the minus-strand HSPs equal LASTZ's.
"""

from __future__ import annotations

import pytest

from torchhpc.ext.segalign.align import AlignConfig, align_files, align_sequences
from torchhpc.ext.segalign.fasta import read_fasta
from torchhpc.ext.segalign.recall import (
    lastz_available,
    lastz_command,
    pairs_from_alignments,
    pairs_from_general,
    pairs_from_maf,
    recall,
    run_lastz,
)
from torchhpc.ext.segalign.simulate import simulate_pair

PAIRS = [
    ("MT-human.fa", "MT-orang.fa"),
    ("humanMito.fa", "mouseMito.fa"),
    ("humanMito.fa", "chickenMito.fa"),
    ("humanMito.fa", "fuguMito.fa"),
]

needs_lastz = pytest.mark.skipif(not lastz_available(), reason="lastz is not on PATH (apt-get install lastz; "
                                                             "make setup installs it where apt-get works)")


@pytest.fixture(scope="module")
def genomes(shared_data):
    d = shared_data / "genomes"
    if not (d / "MT-human.fa").exists():
        pytest.skip(f"{d} holds no mitochondrial genomes")
    return d


@needs_lastz
@pytest.mark.parametrize("target,query", PAIRS)
def test_hsp_recall_vs_lastz_nogapped(genomes, target, query):
    """--nogapped HSPs cover >= 99% of lastz --nogapped's aligned pairs (same seed, xdrop, hspthresh)."""
    t, q = genomes / target, genomes / query
    ours = align_files(t, q, AlignConfig(gapped=False))
    ref = pairs_from_general(run_lastz(lastz_command(t, q, nogapped=True, fmt="general")))
    frac, found, total = recall(pairs_from_alignments(ours.alignments), ref)
    assert total > 5000
    assert frac >= 0.99, f"{target} vs {query}: {found}/{total}"


@needs_lastz
@pytest.mark.parametrize("gapped_by", ["lastz", "native"])
@pytest.mark.parametrize("target,query", PAIRS)
def test_maf_recall_vs_lastz(genomes, target, query, gapped_by):
    """The MAF recovers >= 98% of the matching base pairs of LASTZ's MAF, by either gapped path."""
    t, q = genomes / target, genomes / query
    ours = align_files(t, q, AlignConfig(gapped_by=gapped_by))
    ref = pairs_from_maf(run_lastz(lastz_command(t, q, nogapped=False, fmt="maf-")))
    frac, found, total = recall(pairs_from_alignments(ours.alignments, matching=True), ref)
    assert total > 5000
    assert frac >= 0.98, f"{target} vs {query} ({gapped_by}): {found}/{total}"


@needs_lastz
def test_minus_strand_hsps_match_lastz(tmp_path):
    """On a simulated pair with inversions, minus-strand HSPs (reverse-complement coordinates) equal LASTZ's."""
    sim = simulate_pair(40_000, inversions=2, inversion_length=5000, duplications=1, seed=2)
    t, q = tmp_path / "t.fa", tmp_path / "q.fa"
    sim.write(t, q)
    ours = align_sequences(read_fasta(t), read_fasta(q), AlignConfig(gapped=False))
    ref = pairs_from_general(run_lastz(lastz_command(t, q, nogapped=True, fmt="general")))
    assert ("target", "query", "-") in ref
    frac, found, total = recall(pairs_from_alignments(ours.alignments), ref)
    assert frac >= 0.99, f"{found}/{total}"
    # and the truth of the simulator is covered on both strands
    mine = pairs_from_alignments(ours.alignments)
    for strand in "+-":
        truth = {("target", "query", strand): sim.true_pairs(strand)}
        assert recall(mine, truth)[0] > 0.8
