"""Every option of ccsdt, written once: ``torchhpc ccsdt``'s flags and ``--help`` are generated from here.

* :class:`MoleculeOptions` — the molecule PySCF solves (``--atom``/``--xyz``, ``--basis``,
  ``--charge``, ``--unit``, ``--frozen-core``); :func:`~torchhpc.ext.ccsdt.io.prepare_triples`
  takes it.
* :class:`CCSDTOptions` — the whole command: the molecule or saved ``--inputs``, how the (T) runs
  (``--backend``, ``--max-memory``), where and on how many processes (the ``dist`` section,
  :class:`CCSDTDist`: ``--device``, ``--threads``, ``--nproc``, ``--timeout-s``) and what is printed.
* :class:`CCSDTTour` — the ``torchhpc demo`` step (:func:`torchhpc.ext.ccsdt.demo.demo`).

Ranges and choices are checked when a dataclass is built (library, YAML or flags alike), with a
:class:`~torchhpc.ext.core.errors.ConfigError` naming the option.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from torchhpc.ext.core.config import DistOptions, Options, option
from torchhpc.ext.core.errors import ConfigError

#: default bound on the (T) work buffers, MB (PySCF's CCSD default is also 4000 MB)
DEFAULT_MAX_MEMORY_MB = 4000.0

#: what ``--backend`` accepts: ``auto`` picks by :func:`torchhpc.ext.ccsdt.ops.triples_backend`
BACKEND_CHOICES = ("auto", "torch", "triton", "triton-mma")


@dataclass
class MoleculeOptions(Options):
    """The molecule: PySCF runs RHF, then CCSD, and the (T) uses its amplitudes and integrals."""

    atom: str | None = option(None, flag="--atom",
                              help='atoms as "O 0 0 0; H 0 0.76 0.59; ..." (symbol x y z, ; between atoms)')
    xyz: Path | None = option(None, flag="--xyz", input_file=True, help="an XYZ geometry file (instead of --atom)")
    basis: str | None = option(None, flag="--basis",
                               help="basis set name PySCF knows (cc-pvdz, aug-cc-pvtz, 6-31g*, ...)")
    charge: int = option(0, flag="--charge", help="molecular charge (the electron count must be even)")
    unit: str = option("angstrom", flag="--unit", choices=["angstrom", "bohr"], help="coordinate unit")
    frozen_core: bool = option(False, flag="--frozen-core", help="freeze core orbitals (PySCF's set_frozen)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.atom is not None and self.xyz is not None:
            raise ConfigError("give the geometry with --atom or --xyz, not both")

    @property
    def given(self) -> bool:
        """True when a geometry (``atom`` or ``xyz``) is set."""
        return self.atom is not None or self.xyz is not None


@dataclass
class CCSDTDist(DistOptions):
    """Where and on how many processes the (T) runs (the ``dist:`` section)."""

    device: str = option("auto", flag="--device", choices=["auto", "cpu", "cuda"],
                         help="where the (T) runs (auto: CUDA when present)")
    threads: int = option(0, flag="--threads", ge=0, help="CPU threads for PySCF and the (T) (0: torch's default)")
    nproc: int = option(1, flag="--nproc", ge=1, le=4096,
                        help="processes: > 1 launches torchrun and shares the (T) out over the ranks")
    timeout_s: float = option(600.0, flag="--timeout-s", gt=0,
                              help="seconds a rank waits for a peer (PySCF on rank 0 included) before the job fails")


@dataclass
class CCSDTOptions(Options):
    """``torchhpc ccsdt``: E(T) of a molecule (PySCF for RHF and CCSD) or of saved (T) inputs."""

    RENAMED: ClassVar[dict[str, str]] = {"device": "dist.device", "threads": "dist.threads", "nproc": "dist.nproc",
                                         "timeout": "dist.timeout_s"}
    LEGACY_VALUES = {"dist.threads": {None: 0}}  # "threads: null" meant torch's default

    molecule: MoleculeOptions = option(default_factory=MoleculeOptions, help="the molecule")
    inputs: Path | None = option(None, flag="--inputs", input_file=True,
                                 help="(T) inputs saved with --save-inputs, instead of a molecule (no PySCF needed)")
    backend: str = option("auto", choices=BACKEND_CHOICES,
                          help="auto: the fused Triton kernel on CUDA for nvir <= 64, else blocked torch GEMMs; "
                          "triton-mma: the fused kernel on the FP64 tensor cores")
    max_memory: float | None = option(None, gt=0,
                                      help="MB bound of the (T) operands and work buffers on the device, per rank "
                                      "(picks the block size; below the in-core need the integrals stream out of "
                                      "core); null: 4000 on the CPU, 80 percent of the free memory on CUDA")
    compare_pyscf: bool = option(False, help="also run pyscf.cc.ccsd_t.kernel on the same inputs and compare")
    json: bool = option(False, help="print one JSON object instead of the report")
    save_inputs: Path | None = option(None, help="save t1, t2, integrals and energies to this .npz")
    dist: CCSDTDist = option(default_factory=CCSDTDist, help="where and on how many processes the (T) runs")

    def __post_init__(self) -> None:
        super().__post_init__()
        mol = self.molecule
        sources = sum(x is not None for x in (mol.atom, mol.xyz, self.inputs))
        if sources != 1:
            raise ConfigError("give the molecule with exactly one of --atom, --xyz or --inputs"
                              + (f" (got {sources})" if sources else ""))
        if self.inputs is not None:
            if self.compare_pyscf:
                raise ConfigError("--compare-pyscf needs a molecule (--atom or --xyz): saved inputs hold no "
                                  "PySCF object")
            given = [flag for flag, on in (("--basis", mol.basis is not None), ("--frozen-core", mol.frozen_core),
                                           ("--charge", mol.charge != 0), ("--unit", mol.unit != "angstrom")) if on]
            if given:
                raise ConfigError(f"{' and '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to --atom/--xyz; "
                                  "saved inputs already fix the molecule")
        elif not mol.basis:
            raise ConfigError("--basis is required with --atom/--xyz (e.g. --basis cc-pvdz)")


@dataclass
class CCSDTTour(Options):
    """The demo step: E(T) of water, ours against PySCF's ccsd_t on the same inputs (frozen core)."""

    basis: str = option("6-31g", help="basis set of the water molecule")


__all__ = ["BACKEND_CHOICES", "DEFAULT_MAX_MEMORY_MB", "CCSDTDist", "CCSDTOptions", "CCSDTTour", "MoleculeOptions"]
