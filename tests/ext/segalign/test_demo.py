"""The demo step aligns its simulated pair and finds nearly all of the true aligned bases."""

from __future__ import annotations

from types import SimpleNamespace

from torchhpc.ext.segalign.config import SegalignTour
from torchhpc.ext.segalign.demo import demo


def test_demo_step_finds_the_truth(tmp_path):
    """The step's figures on a 12 kbp pair: alignments written as MAF, truth recall above 0.95."""
    res = demo(SegalignTour(length=12_000), SimpleNamespace(dir=tmp_path), "cpu", seed=0)
    assert res["alignments"] > 0 and res["truth_recall"] > 0.95
    assert (tmp_path / "alignment.maf").read_text().startswith("a score=")
    assert "12 kbp" in res["what"]
    if "recall_of_lastz" in res:
        assert res["recall_of_lastz"] > 0.9
