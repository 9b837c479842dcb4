"""The demo step of ccsdt: water against PySCF (or synthetic inputs against the reference without PySCF)."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch

from torchhpc.ext.ccsdt.config import CCSDTTour
from torchhpc.ext.ccsdt.demo import demo


def _run(tmp_path):
    rows = []
    return SimpleNamespace(dir=tmp_path, log=lambda step, **m: rows.append((step, m)), rows=rows)


def test_demo_matches_pyscf_and_plots(tmp_path):
    """The step's E(T) equals PySCF's to 1e-10 Eh, logs one row and writes its PNG."""
    pytest.importorskip("pyscf")
    run = _run(tmp_path)
    out = demo(CCSDTTour(), run, torch.device("cpu"), seed=0)
    assert out["ok"] and out["abs_diff"] < 1e-10 and (out["nocc"], out["nvir"]) == (4, 8)
    assert out["backend"] == "torch" and out["e_t"] < 0
    assert (tmp_path / "ccsdt_triples.png").stat().st_size > 0
    assert run.rows[0][1]["step_name"] == "ccsdt"


def test_demo_without_pyscf_uses_the_reference(tmp_path, monkeypatch):
    """Where PySCF is missing the step checks the torch path against the dense formula instead."""
    monkeypatch.setitem(sys.modules, "pyscf", None)  # makes `import pyscf` raise ImportError
    out = demo(CCSDTTour(), _run(tmp_path), torch.device("cpu"), seed=3)
    assert out["ok"] and "PySCF not installed" in out["what"]
