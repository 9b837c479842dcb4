"""``torchhpc ccsdt``: the closed-shell CCSD(T) perturbative-triples energy of a molecule.

PySCF runs RHF and CCSD; torchhpc computes the (T) correction (the blocked torch
path on the CPU, the fused Triton kernel on CUDA for nvir <= 64; out of core when the operands
exceed --max-memory; over torchrun ranks with --nproc N or under torchrun) and, with --compare-pyscf,
PySCF's own (T) on the same amplitudes and integrals for comparison.

    torchhpc ccsdt --atom "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692" --basis cc-pvdz
    torchhpc ccsdt --xyz water.xyz --basis aug-cc-pvdz --frozen-core --compare-pyscf
    torchhpc ccsdt --xyz water.xyz --basis cc-pvdz --json --save-inputs water.npz
    torchhpc ccsdt --inputs water.npz --json        # from saved inputs; PySCF not needed
    torchhpc ccsdt --inputs water.npz --nproc 2     # the (T) shared out over 2 torchrun ranks
    torchrun --standalone --nproc-per-node 2 -m torchhpc.trainers.ccsdt --inputs water.npz
    torchhpc ccsdt --inputs big.npz --max-memory 500 # out of core: integral slices stream through a cache

--json prints one object: {"e_t", "e_ccsd", "e_hf", "seconds", "gflops"} (energies in
Hartree, e_ccsd the total CCSD energy, seconds and gflops of our (T) alone), plus
"e_t_pyscf" and "abs_diff" with --compare-pyscf. Closed-shell molecules only: an odd
electron count is refused. Coordinates are in Angstrom unless --unit bohr. Every option is
defined in torchhpc.ext.ccsdt.config (CCSDTOptions); --config FILE takes them as YAML. The command is
run_ccsdt in torchhpc.ext.ccsdt.commands.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from torchhpc.ext.ccsdt.commands import run_ccsdt
from torchhpc.ext.ccsdt.config import CCSDTOptions
from torchhpc.ext.core.cli import config_command, job_main


def register(sub) -> None:
    config_command(sub, "ccsdt", CCSDTOptions, run_ccsdt, config_file=True, description=__doc__,
                   help="CCSD(T) perturbative triples of a molecule, exact against PySCF")


def main(argv: Sequence[str] | None = None) -> int:
    return job_main("torchhpc.trainers.ccsdt", CCSDTOptions, run_ccsdt, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
