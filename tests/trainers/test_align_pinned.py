"""``torchhpc align`` on a small simulated pair gives exactly the output pinned before the refactor.

The hashes and counts below were produced by the code before the refactor "One shape for every
system" (commit 67fa2f8), by running the CLI's ``main`` in-process; any change to the alignments,
their order or their formatting fails this test.
"""

from __future__ import annotations

import hashlib

import pytest

from torchhpc.ext.segalign.simulate import simulate_pair
from torchhpc.trainers.cli import main

PINNED = {
    # (extra flags) -> (sha256 of the output text, number of alignments)
    "default": ("ecee27cc55b5210288d1024f396bb1d6050b228b0e863fd9a75d95689fe8b377", 5),
    "segments": ("d70ac898c0a1712dfb98e92f427e5494291b61863ee6802de439025dcea8e4ad", 30),
}
FLAGS = {"default": [], "segments": ["--nogapped", "--format", "segments"]}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A 6 kbp simulated pair with one inversion and one duplication, written as FASTA."""
    d = tmp_path_factory.mktemp("pinned")
    sim = simulate_pair(6000, inversions=1, inversion_length=1500, duplications=1, duplication_length=800, seed=3)
    sim.write(d / "t.fa", d / "q.fa")
    return d


def _count(text: str, name: str) -> int:
    if name == "segments":
        return sum(1 for ln in text.splitlines() if ln and not ln.startswith("#"))
    return sum(1 for ln in text.splitlines() if ln.startswith("a "))


@pytest.mark.parametrize("name", sorted(FLAGS))
def test_align_output_pinned(pair, tmp_path, name):
    """The MAF (default options) and the --nogapped segments output equal the pre-refactor output."""
    out = tmp_path / f"{name}.out"
    rc = main(["align", str(pair / "t.fa"), str(pair / "q.fa"), "--output", str(out), *FLAGS[name]])
    assert rc == 0
    text = out.read_text()
    if name == "default":  # --format maf: the ##maf header line (added after the pin), then the pinned blocks
        head, _, text = text.partition("\n")
        assert head == "##maf version=1 scoring=torchhpc.align"
    assert (hashlib.sha256(text.encode()).hexdigest(), _count(text, name)) == PINNED[name]
