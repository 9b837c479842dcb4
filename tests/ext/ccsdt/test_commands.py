"""``compute`` (what ``torchhpc ccsdt`` runs, in commands.py): the backend it reports is the one triples_energy ran."""

from __future__ import annotations

import json

import pytest
import torch

from torchhpc.ext.ccsdt import TriplesInputs, compute, report_lines, save_inputs, triples_energy_reference
from torchhpc.ext.ccsdt import ops as ops_module
from torchhpc.ext.ccsdt.commands import TriplesResult
from torchhpc.ext.ccsdt.config import CCSDTDist, CCSDTOptions
from torchhpc.ext.ccsdt.ops import INPUT_NAMES
from torchhpc.ext.ccsdt.reference import random_inputs
from torchhpc.ext.core.dispatch import triton_available, triton_interpreted


@pytest.fixture
def saved(tmp_path):
    """Synthetic (T) inputs (o=3, v=5) saved as an .npz, and their dense-reference E(T)."""
    arrays = random_inputs(3, 5, seed=4)
    path = save_inputs(tmp_path / "x.npz", TriplesInputs(**{n: a.numpy() for n, a in zip(INPUT_NAMES, arrays,
                                                                                          strict=True)}))
    return path, triples_energy_reference(*arrays)


@pytest.mark.parametrize("backend", ["auto", "torch", "triton", "triton-mma"])
def test_printed_backend_is_the_one_that_ran(saved, monkeypatch, backend):
    """The report's '(<backend> on <device>' names what triples_energy was asked to run; E(T) is right
    (the Triton kernels on CUDA where there is a GPU, else interpreted on the CPU)."""
    if backend.startswith("triton") and not triton_available():
        pytest.skip("triton is not installed")
    device = "cpu"
    if backend.startswith("triton") and not triton_interpreted():
        if not torch.cuda.is_available():
            pytest.skip("triton needs CUDA or TRITON_INTERPRET=1")
        device = "cuda"
    path, ref = saved
    ran = []
    real = ops_module.triples_energy

    def spy(*arrays, backend, **kwargs):
        ran.append(backend)
        return real(*arrays, backend=backend, **kwargs)

    monkeypatch.setattr(ops_module, "triples_energy", spy)
    result = compute(CCSDTOptions(inputs=path, backend=backend, dist=CCSDTDist(device=device)))
    assert ran == [result.backend] and result.backend == ("torch" if backend == "auto" else backend)
    assert f"({result.backend} on {device}," in "\n".join(report_lines(result))
    assert result.e_t == pytest.approx(ref, abs=1e-12)
    out = result.as_json()
    assert set(out) == set(TriplesResult.JSON_KEYS) and out["e_hf"] is None
    json.dumps(out)
