"""ccsdt: the closed-shell CCSD(T) perturbative-triples energy, exact against PySCF (SC20).

* :func:`triples_energy` — E(T) from ``t1, t2, (ia|bc), (ia|jk), (ia|jb), f_ov, mo_energy``:
  blocked torch GEMMs on the CPU, the fused FP64 Triton kernel on CUDA.
* :func:`triples_energy_reference` — the dense formula, straight from the equations.
* :func:`from_pyscf` / :func:`save_inputs` / :func:`load_inputs` — the inputs from a PySCF
  ``cc.CCSD(rhf)`` object, and an ``.npz`` to run without PySCF.
* :func:`triples_flops` — the ``2 o^3 v^4 + 2 o^4 v^3`` FLOP count behind GFLOP/s figures.
"""

from .io import TriplesInputs, check_closed_shell, from_pyscf, load_inputs, save_inputs
from .ops import check_inputs, occupied_triples, triples_energy, triples_energy_torch, triples_flops
from .reference import triples_energy_reference

__all__ = [
    "TriplesInputs",
    "check_closed_shell",
    "check_inputs",
    "from_pyscf",
    "load_inputs",
    "occupied_triples",
    "save_inputs",
    "triples_energy",
    "triples_energy_reference",
    "triples_energy_torch",
    "triples_flops",
]
