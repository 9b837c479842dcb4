"""ccsdt: the closed-shell CCSD(T) perturbative-triples energy, exact against PySCF (SC20).

* :func:`triples_energy` — E(T) from ``t1, t2, (ia|bc), (ia|jk), (ia|jb), f_ov, mo_energy``:
  blocked torch GEMMs on the CPU, the fused FP64 Triton kernel on CUDA.
* :func:`triples_energy_reference` — the dense formula, straight from the equations.
* :func:`from_pyscf` / :func:`save_inputs` / :func:`load_inputs` — the inputs from a PySCF
  ``cc.CCSD(rhf)`` object, and an ``.npz`` to run without PySCF.
* :func:`prepare_triples` — RHF, CCSD and the integrals in PySCF for a molecule
  (:class:`~torchhpc.ext.ccsdt.config.MoleculeOptions` or a ``Mole``): the one way to the inputs.
* :func:`triples_backend` — the implementation ``triples_energy`` runs for given inputs and device.
* :func:`triples_flops` — the ``2 o^3 v^4 + 2 o^4 v^3`` FLOP count behind GFLOP/s figures.
* :func:`triples_energy_distributed` — E(T) over the ranks of a process group, each owning a share of
  the integrals and fetching and caching the slices its cost-balanced work needs
  (:mod:`~torchhpc.ext.ccsdt.distributed`); ``triples_energy(..., group=)`` is the same call.
* :func:`triples_energy_out_of_core` — the integral slices streamed through a bounded cache
  (:mod:`~torchhpc.ext.ccsdt.slices`; ``triples_energy`` switches to it when ``max_memory`` is short).
* :mod:`~torchhpc.ext.ccsdt.costmodel` — the distributed run modelled from its own plan, calibrated on
  measured runs, predicting strong scaling (Summit-like nodes of 6 V100s).
* :func:`compute` / :func:`report_lines` — ``torchhpc ccsdt`` as a call (:mod:`~torchhpc.ext.ccsdt.commands`,
  which also holds the command, ``run_ccsdt``).
* :mod:`~torchhpc.ext.ccsdt.blocks` — the kernel of one block of occupied triples that every torch path
  shares (in core, out of core, distributed), and the input checks.
* :mod:`~torchhpc.ext.ccsdt.config` (every option), :mod:`~torchhpc.ext.ccsdt.molecule` (geometry
  input), :mod:`~torchhpc.ext.ccsdt.demo`.
"""

from __future__ import annotations

from torchhpc.ext.core.lazy import lazy_exports

#: public name -> submodule; imported on first use, so that the options (config.py) load without torch
_EXPORTS = {
    "PreparedTriples": "io", "TriplesInputs": "io", "check_closed_shell": "io", "from_pyscf": "io",
    "load_inputs": "io", "prepare_triples": "io", "save_inputs": "io",
    "check_inputs": "blocks", "occupied_triples": "blocks", "triples_backend": "ops", "triples_energy": "ops",
    "triples_energy_torch": "ops", "triples_flops": "ops",
    "triples_energy_reference": "reference",
    "triples_energy_distributed": "distributed", "triples_energy_out_of_core": "slices",
    "TriplesResult": "commands", "compute": "commands", "report_lines": "commands",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
