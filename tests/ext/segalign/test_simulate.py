"""The simulator's repeat families: copies where it says, of the length and strand it says, inside the length."""

from __future__ import annotations

import pytest

from torchhpc.ext.segalign.simulate import simulate_pair

_COMPLEMENT = str.maketrans("ACGT", "TGCA")


def test_repeat_families_sit_where_the_simulator_says():
    """Family 0 (no divergence): every copy is the consensus on its strand; family 1 (1 %): its copies differ
    from each other in about 2 % of the bases; the target keeps its length and the query still descends
    from it (the truth maps query bases to target bases of the same letter where not substituted)."""
    sim = simulate_pair(60_000, seed=4, repeats=((1500, 12, 0.0), (5000, 3, 0.01)), substitution_rate=0.0,
                        indel_rate=0.0, inversions=0, duplications=0)
    assert len(sim.target) == 60_000
    copies = sim.params["repeat_copies"]
    assert sorted(f for f, _, _ in copies) == [0] * 12 + [1] * 3
    assert {s for f, s, _ in copies if f == 0} == {"+", "-"}  # both strands

    def forward(family, strand, start, size):
        seq = sim.target[start:start + size]
        return seq.translate(_COMPLEMENT)[::-1] if strand == "-" else seq

    same = {forward(f, s, at, 1500) for f, s, at in copies if f == 0}
    assert len(same) == 1
    a, b = [forward(f, s, at, 5000) for f, s, at in copies if f == 1][:2]
    differ = sum(x != y for x, y in zip(a, b, strict=True)) / 5000
    assert 0.005 < differ < 0.04
    assert sim.query == sim.target  # nothing evolved: the query is the ancestor


def test_repeats_that_do_not_fit_are_refused():
    with pytest.raises(ValueError, match="do not fit"):
        simulate_pair(10_000, repeats=((2000, 6, 0.0),))
    with pytest.raises(ValueError, match="repeat family"):
        simulate_pair(10_000, repeats=((0, 2, 0.0),))
