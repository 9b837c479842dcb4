"""``compute`` (the body of torchhpc ccsdt): the backend it reports is the one triples_energy ran."""

from __future__ import annotations

import json

import pytest

from torchhpc.ext.ccsdt import TriplesInputs, save_inputs, triples_energy_reference
from torchhpc.ext.ccsdt import job as job_module
from torchhpc.ext.ccsdt.config import CCSDTOptions
from torchhpc.ext.ccsdt.job import compute, report_lines
from torchhpc.ext.ccsdt.ops import INPUT_NAMES
from torchhpc.ext.ccsdt.reference import random_inputs
from torchhpc.ext.core.dispatch import triton_available


@pytest.fixture
def saved(tmp_path):
    """Synthetic (T) inputs (o=3, v=5) saved as an .npz, and their dense-reference E(T)."""
    arrays = random_inputs(3, 5, seed=4)
    path = save_inputs(tmp_path / "x.npz", TriplesInputs(**{n: a.numpy() for n, a in zip(INPUT_NAMES, arrays,
                                                                                          strict=True)}))
    return path, triples_energy_reference(*arrays)


@pytest.mark.parametrize("backend", ["auto", "torch", "triton"])
def test_printed_backend_is_the_one_that_ran(saved, monkeypatch, backend):
    """The report's '(<backend> on <device>' names what triples_energy was asked to run; E(T) is right."""
    if backend == "triton" and not triton_available():
        pytest.skip("triton is not installed")
    path, ref = saved
    ran = []
    real = job_module.triples_energy

    def spy(*arrays, backend, **kwargs):
        ran.append(backend)
        return real(*arrays, backend=backend, **kwargs)

    monkeypatch.setattr(job_module, "triples_energy", spy)
    result = compute(CCSDTOptions(inputs=path, backend=backend, device="cpu"))
    assert ran == [result.backend] and result.backend == ("torch" if backend == "auto" else backend)
    assert f"({result.backend} on cpu," in "\n".join(report_lines(result))
    assert result.e_t == pytest.approx(ref, abs=1e-12)
    out = result.as_json()
    assert set(out) == {"e_t", "e_ccsd", "e_hf", "seconds", "gflops"} and out["e_hf"] is None
    json.dumps(out)
