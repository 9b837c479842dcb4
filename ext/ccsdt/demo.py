"""The ``torchhpc demo`` step of ccsdt: E(T) of water, ours against PySCF's ccsd_t on the same inputs."""

from __future__ import annotations

import time

import torch

from .config import CCSDTTour, MoleculeOptions
from .io import prepare_triples
from .ops import triples_backend, triples_energy, triples_flops
from .reference import random_inputs, triples_energy_reference

WATER = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"


def demo(tour: CCSDTTour, run, device: torch.device, seed: int) -> dict:
    """The (T) energy of water (frozen core): ours against PySCF's ccsd_t on the same inputs.

    Without PySCF the step compares the torch path with the dense reference on synthetic inputs
    (4 occupied, 12 virtual orbitals, from ``seed``) instead. Logs one metrics row and writes
    ``ccsdt_triples.png`` (ms for E(T), ours and PySCF's) into ``run.dir``.

    Args:
        tour: the step's options.
        run: the demo's :class:`~torchhpc.ext.core.runs.Run`.
        device: where our (T) runs.
        seed: seed of the synthetic inputs (the PySCF path has no randomness).

    Returns:
        the step's summary: energies, ``abs_diff``, ``ok`` (agreement to 1e-10 Eh), sizes and times.
    """
    try:
        import pyscf  # noqa: F401
    except ImportError:
        args = random_inputs(4, 12, seed=seed)
        backend = triples_backend("auto", 12, device)
        ref = triples_energy_reference(*args)
        ours = triples_energy(*[a.to(device) for a in args], backend=backend)
        return {"what": "(T) of synthetic inputs vs the dense reference (PySCF not installed)",
                "e_t": ours, "e_t_reference": ref, "abs_diff": abs(ours - ref), "ok": abs(ours - ref) < 1e-10}
    from torchhpc.ext.core.bench import bar_plot

    prepared = prepare_triples(MoleculeOptions(atom=WATER, basis=tour.basis, frozen_core=True))
    inputs = prepared.inputs
    t0 = time.perf_counter()
    e_theirs = prepared.pyscf_triples_energy()
    s_theirs = time.perf_counter() - t0
    backend = triples_backend("auto", inputs.nvir, device)
    arrays = [torch.as_tensor(a, device=device) for a in inputs.arrays()]
    triples_energy(*arrays, backend=backend)  # warm-up (Triton compiles on first use)
    t0 = time.perf_counter()
    e_ours = triples_energy(*arrays, backend=backend)
    s_ours = time.perf_counter() - t0
    run.log(0, step_name="ccsdt", e_t=e_ours, e_t_pyscf=e_theirs, seconds=s_ours, seconds_pyscf=s_theirs)
    bar_plot(run.dir / "ccsdt_triples.png", [f"H2O {tour.basis}"],
             {f"torchhpc ({backend})": [s_ours * 1e3], "PySCF ccsd_t": [s_theirs * 1e3]},
             ylabel="ms for E(T)", highlight=f"torchhpc ({backend})",
             title=f"H2O {tour.basis} (T) = {e_ours:.10f} Eh, |diff| {abs(e_ours - e_theirs):.1e}")
    return {
        "what": f"CCSD(T) triples energy of H2O/{tour.basis} (frozen core) vs pyscf.cc.ccsd_t on the same inputs",
        "e_t": e_ours, "e_t_pyscf": e_theirs, "abs_diff": abs(e_ours - e_theirs),
        "ok": abs(e_ours - e_theirs) < 1e-10, "nocc": inputs.nocc, "nvir": inputs.nvir,
        "backend": backend, "ms_ours": round(s_ours * 1e3, 3), "ms_pyscf": round(s_theirs * 1e3, 3),
        "gflops_ours": round(triples_flops(inputs.nocc, inputs.nvir) / s_ours / 1e9, 3), "device": device.type,
    }


__all__ = ["demo"]
