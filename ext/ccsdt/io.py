"""The (T) inputs: pulled from a PySCF CCSD object, saved to and loaded from an ``.npz``.

:class:`TriplesInputs` holds the seven arrays :func:`~torchhpc.ext.ccsdt.ops.triples_energy`
takes, plus the HF and CCSD energies and a little provenance::

    t1         (o, v)        mycc.t1
    t2         (o, o, v, v)  mycc.t2
    ovvv       (o, v, v, v)  eris.get_ovvv()        (ia|bc)
    ovoo       (o, v, o, o)  eris.ovoo              (ia|jk)
    ovov       (o, v, o, v)  eris.ovov              (ia|jb)
    fock_ov    (o, v)        eris.fock[o:, :o].T    f[k,c]
    mo_energy  (o + v,)      eris.mo_energy         active orbitals only (frozen core removed)

:func:`prepare_triples` is the one way from a molecule (a
:class:`~torchhpc.ext.ccsdt.config.MoleculeOptions` or a PySCF ``Mole``) to these inputs: RHF,
CCSD and the integral transformation in PySCF, then :func:`from_pyscf`.

``prepare_triples`` and ``from_pyscf`` need PySCF; ``save_inputs``/``load_inputs`` need only numpy,
so the (T) can run on a machine without PySCF (``torchhpc ccsdt --inputs FILE.npz``).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from torchhpc.ext.core.errors import InputError

from .blocks import INPUT_NAMES, check_inputs
from .config import MoleculeOptions
from .molecule import build_molecule, hill_formula, parse_atom_string, read_xyz, require_pyscf
from .ops import triples_energy

#: written into every saved file; load_inputs refuses other formats
FORMAT = "torchhpc.ccsdt.inputs/1"


@dataclass
class TriplesInputs:
    """Everything the closed-shell (T) needs, as float64 numpy arrays (shapes in the module docstring)."""

    t1: np.ndarray
    t2: np.ndarray
    ovvv: np.ndarray
    ovoo: np.ndarray
    ovov: np.ndarray
    fock_ov: np.ndarray
    mo_energy: np.ndarray
    e_hf: float = float("nan")
    """total RHF energy (Eh), NaN when unknown"""
    e_ccsd: float = float("nan")
    """total CCSD energy E_HF + E_corr (Eh), NaN when unknown"""
    meta: dict = field(default_factory=dict)
    """provenance: molecule, basis, frozen orbitals, ... (JSON-serialisable)"""

    @property
    def nocc(self) -> int:
        return int(self.t1.shape[0])

    @property
    def nvir(self) -> int:
        return int(self.t1.shape[1])

    def arrays(self) -> tuple[np.ndarray, ...]:
        """The seven arrays in the order :func:`triples_energy` takes them."""
        return tuple(getattr(self, name) for name in INPUT_NAMES)

    def triples_energy(self, **kwargs) -> float:
        """:func:`~torchhpc.ext.ccsdt.ops.triples_energy` of these inputs (same keyword arguments)."""
        return triples_energy(*self.arrays(), **kwargs)


# ----------------------------------------------------------------------------- PySCF


def check_closed_shell(mycc) -> None:
    """Refuse anything but a real closed-shell RHF-based CCSD object.

    Raises:
        InputError: UCCSD/GCCSD, a UHF, ROHF or GHF reference, ``mol.spin != 0``, or complex orbitals.
    """
    require_pyscf()
    from pyscf.cc import ccsd

    name = type(mycc).__name__
    mf = getattr(mycc, "_scf", None)
    mol = getattr(mycc, "mol", None)
    if mol is not None and getattr(mol, "spin", 0) != 0:
        raise InputError(
            f"open-shell molecule (mol.spin = {mol.spin}): the (T) here is the closed-shell RHF formula; "
            "use pyscf.cc.uccsd_t for UHF/ROHF references"
        )
    if mf is not None:
        for kind in ("UHF", "ROHF", "GHF"):
            if mf.istype(kind):
                raise InputError(
                    f"{kind} reference ({type(mf).__name__}): the (T) here needs a closed-shell RHF reference"
                )
    if not isinstance(mycc, ccsd.CCSD) or isinstance(mycc.t1, tuple | list):
        raise InputError(f"{name} is not a closed-shell (restricted) CCSD object; the (T) here needs cc.CCSD(rhf)")
    if np.iscomplexobj(getattr(mycc, "mo_coeff", None)):
        raise InputError("complex orbitals are not supported (real closed-shell RHF reference only)")


def from_pyscf(mycc, eris=None) -> TriplesInputs:
    """Pull the (T) inputs out of a converged PySCF ``cc.CCSD(rhf)`` object.

    Frozen orbitals are handled by PySCF's own active space: ``t1``/``t2``, ``eris`` and
    ``eris.mo_energy`` cover the active orbitals only.

    Args:
        mycc: a ``pyscf.cc.ccsd.CCSD`` (or ``RCCSD``, ``DFCCSD``) object after ``mycc.kernel()``.
        eris: its ``mycc.ao2mo()`` (built when omitted — that is an integral transformation).

    Raises:
        InputError: PySCF missing, an open-shell or complex reference (see
            :func:`check_closed_shell`), or a CCSD object that has not been run.
    """
    check_closed_shell(mycc)
    if getattr(mycc, "t1", None) is None or getattr(mycc, "t2", None) is None:
        raise InputError("the CCSD object has no amplitudes: call mycc.kernel() (or mycc.run()) first")
    if eris is None:
        eris = mycc.ao2mo()
    t1 = np.array(mycc.t1, dtype=np.float64)
    t2 = np.array(mycc.t2, dtype=np.float64)
    o, v = t1.shape
    get_ovvv = getattr(eris, "get_ovvv", None)
    ovvv = np.asarray(get_ovvv() if get_ovvv is not None else eris.ovvv, dtype=np.float64)
    if ovvv.ndim == 3:  # packed lower triangle of (b, c)
        from pyscf import lib

        ovvv = lib.unpack_tril(ovvv.reshape(o * v, -1)).reshape(o, v, v, v)
    fock = np.asarray(eris.fock)
    if np.iscomplexobj(fock) or np.iscomplexobj(t2):
        raise InputError("complex amplitudes or integrals are not supported (real closed-shell RHF reference only)")
    mol = mycc.mol
    frozen = mycc.frozen
    meta = {
        "source": "pyscf",
        "atom": mol.atom if isinstance(mol.atom, str) else [[a[0], list(map(float, a[1]))] for a in mol._atom],
        "basis": mol.basis if isinstance(mol.basis, str) else "custom",
        "charge": int(mol.charge),
        "nao": int(mol.nao_nr()),
        "frozen": frozen if isinstance(frozen, int | type(None)) else [int(x) for x in np.ravel(frozen)],
        "nocc": o,
        "nvir": v,
        "ccsd_converged": bool(getattr(mycc, "converged", False)),
    }
    e_hf = getattr(mycc, "e_hf", None)
    if e_hf is None:
        e_hf = mycc._scf.e_tot
    return TriplesInputs(
        t1=t1, t2=t2, ovvv=np.ascontiguousarray(ovvv),
        ovoo=np.array(eris.ovoo, dtype=np.float64), ovov=np.array(eris.ovov, dtype=np.float64),
        # PySCF's (T) reads the vir-occ block f[c,k]; transposed it is f[k,c] (equal for a converged real RHF)
        fock_ov=np.ascontiguousarray(fock[o:, :o].T, dtype=np.float64),
        mo_energy=np.array(eris.mo_energy, dtype=np.float64),
        e_hf=float(e_hf), e_ccsd=float(mycc.e_tot), meta=meta,
    )


@dataclass
class PreparedTriples:
    """A molecule solved by PySCF (RHF, then CCSD) and the (T) inputs taken from it."""

    inputs: TriplesInputs
    mycc: Any
    """the converged ``pyscf.cc.CCSD`` object"""
    eris: Any
    """its ``mycc.ao2mo()`` integrals"""
    timings: dict[str, float] = field(default_factory=dict)
    """seconds of ``rhf``, ``ccsd`` (its iterations) and ``integrals`` (the one transformation, which CCSD and
    the (T) share, and :func:`from_pyscf`)"""
    warnings: list[str] = field(default_factory=list)
    """one line per step that did not converge"""

    def pyscf_triples_energy(self) -> float:
        """PySCF's own E(T), ``pyscf.cc.ccsd_t.kernel``, on the same amplitudes and integrals (Eh)."""
        from pyscf.cc import ccsd_t

        # PySCF's C path transposes t2 in place and restores it: hand it copies
        return float(ccsd_t.kernel(self.mycc, self.eris, self.mycc.t1.copy(), self.mycc.t2.copy(), verbose=0))


def prepare_triples(
    molecule, *, frozen_core: bool | None = None, scf_conv_tol: float = 1e-10, ccsd_conv_tol: float = 1e-9,
    ccsd_max_cycle: int | None = None,
) -> PreparedTriples:
    """RHF, CCSD and the integral transformation in PySCF: the (T) inputs of a molecule.

    The one way every caller (``torchhpc ccsdt``, the demo, the benchmark, the tests) goes from a
    molecule to :class:`TriplesInputs`. ``inputs.meta`` also records the Hill ``formula``,
    ``natm`` and ``nelectron``.

    Args:
        molecule: a :class:`~torchhpc.ext.ccsdt.config.MoleculeOptions` (its geometry is read and
            checked first, see :func:`~torchhpc.ext.ccsdt.molecule.build_molecule`) or a PySCF ``Mole``.
        frozen_core: freeze the core orbitals (PySCF's ``set_frozen``); default: the options'
            ``frozen_core``, ``False`` for a ``Mole``.
        scf_conv_tol, ccsd_conv_tol: convergence thresholds of RHF and CCSD.
        ccsd_max_cycle: stop CCSD after this many iterations (the (T) cost does not depend on
            convergence; a warning says it did not converge); ``None``: PySCF's default.

    Raises:
        InputError: PySCF missing; no geometry or no basis; a malformed geometry, an open shell or
            an unknown basis (:mod:`torchhpc.ext.ccsdt.molecule`); an RHF that does not converge; no
            virtual (or no active occupied) orbital; see also :func:`from_pyscf`.
    """
    require_pyscf()
    from pyscf import cc, scf

    if isinstance(molecule, MoleculeOptions):
        if not molecule.atom and molecule.xyz is None:
            raise InputError("no molecule: give --atom or --xyz")
        if not molecule.basis:
            raise InputError("--basis is required with --atom/--xyz (e.g. --basis cc-pvdz)")
        atoms = read_xyz(molecule.xyz) if molecule.xyz is not None else parse_atom_string(molecule.atom)
        frozen_core = molecule.frozen_core if frozen_core is None else frozen_core
        mol = build_molecule(atoms, molecule.basis, molecule.charge, molecule.unit)
    else:
        mol = molecule
    if frozen_core:  # PySCF's set_frozen asserts (after the RHF) when the core takes every occupied orbital
        from pyscf.data import elements

        if elements.chemcore(mol) >= mol.nelectron // 2:
            raise InputError(f"the frozen core takes all {mol.nelectron // 2} occupied orbital(s) of this molecule "
                             f"(charge {mol.charge}): nothing is left to correlate; drop --frozen-core")
    timings: dict[str, float] = {}
    notes: list[str] = []
    t0 = time.perf_counter()
    mf = scf.RHF(mol)
    mf.conv_tol = scf_conv_tol
    mf.kernel()
    timings["rhf"] = time.perf_counter() - t0
    if not mf.converged:  # its orbitals are not a reference: (T) on them means nothing (and often fails later)
        raise InputError(f"RHF did not converge in {mf.max_cycle} cycles (E = {mf.e_tot:.10f}): the (T) energy "
                         "needs a converged reference; check the geometry and its --unit, the --charge and the basis")
    t0 = time.perf_counter()
    mycc = cc.CCSD(mf)
    if frozen_core:
        mycc.set_frozen()
    nocc, nvir = int(mycc.nocc), int(mycc.nmo - mycc.nocc)
    if nocc < 1 or nvir < 1:
        what = "no virtual orbitals" if nvir < 1 else "no occupied orbital left to correlate (all frozen)"
        raise InputError(f"{mol.nao} basis functions and {mol.nelectron} electrons leave {what}: there are no "
                         "triples; use a larger basis" + (" or drop --frozen-core" if nocc < 1 else ""))
    mycc.conv_tol = ccsd_conv_tol
    if ccsd_max_cycle:
        mycc.max_cycle = ccsd_max_cycle
    setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    eris = mycc.ao2mo()  # once: CCSD iterates on these integrals and the (T) inputs are taken from them
    transform = time.perf_counter() - t0
    t0 = time.perf_counter()
    mycc.kernel(eris=eris)
    timings["ccsd"] = setup + time.perf_counter() - t0
    if not mycc.converged:
        notes.append(f"CCSD did not converge in {mycc.max_cycle} cycles (E_corr = {mycc.e_corr:.10f}); the (T) "
                     "energy is that of these amplitudes")
    t0 = time.perf_counter()
    inputs = from_pyscf(mycc, eris)
    timings["integrals"] = transform + time.perf_counter() - t0
    inputs.meta["formula"] = hill_formula([mol.atom_pure_symbol(n) for n in range(mol.natm)])
    inputs.meta["natm"] = mol.natm
    inputs.meta["nelectron"] = mol.nelectron
    return PreparedTriples(inputs=inputs, mycc=mycc, eris=eris, timings=timings, warnings=notes)


# ----------------------------------------------------------------------------- .npz files


def save_inputs(path: str | os.PathLike, inputs: TriplesInputs) -> Path:
    """Write ``inputs`` to ``path`` (an uncompressed ``.npz``), atomically (temp file, then rename).

    Returns the path written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {name: np.ascontiguousarray(getattr(inputs, name), dtype=np.float64) for name in INPUT_NAMES}
    payload["energies"] = np.array([inputs.e_hf, inputs.e_ccsd], dtype=np.float64)
    payload["format"] = np.array(FORMAT)
    payload["meta"] = np.array(json.dumps(inputs.meta))
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **payload)
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the permissions open() would
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_inputs(path: str | os.PathLike, validate: bool = True) -> TriplesInputs:
    """Read a file written by :func:`save_inputs`.

    Args:
        validate: also run :func:`~torchhpc.ext.ccsdt.blocks.check_inputs` (shapes, NaNs, energies).

    Raises:
        InputError: the file is missing, not an ``.npz``, of another format, lacks an array,
            or (``validate``) holds inconsistent arrays — the message names the file.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: inputs file not found")
    with open(path, "rb") as fh:
        if fh.read(6) == b"\x93NUMPY":  # a plain .npy (one array, not an archive): refused before it is read
            raise InputError(f"{path}: one NumPy array, not a ccsdt .npz inputs file (write one with --save-inputs)")
    try:
        with np.load(path, allow_pickle=False) as data:
            keys = set(data.files)
            fmt = str(data["format"]) if "format" in keys else None
            if fmt != FORMAT:
                raise InputError(f"{path}: not a ccsdt inputs file (format {fmt!r}, expected {FORMAT!r})")
            missing = [k for k in (*INPUT_NAMES, "energies", "meta") if k not in keys]
            if missing:
                raise InputError(f"{path}: missing array {missing[0]!r}")
            arrays = {name: np.array(data[name]) for name in INPUT_NAMES}
            energies = np.array(data["energies"], dtype=np.float64).ravel()
            meta = json.loads(str(data["meta"]))
    except InputError:
        raise
    except EOFError:
        raise InputError(f"{path}: empty or truncated, not a ccsdt .npz inputs file") from None
    except (OSError, ValueError, zipfile.BadZipFile, KeyError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: cannot read as a ccsdt .npz inputs file ({exc})") from exc
    if energies.size != 2:
        raise InputError(f"{path}: 'energies' must hold [e_hf, e_ccsd], got {energies.size} values")
    inputs = TriplesInputs(**arrays, e_hf=float(energies[0]), e_ccsd=float(energies[1]), meta=meta)
    if validate:
        try:
            check_inputs(*inputs.arrays())
        except InputError as exc:
            raise InputError(f"{path}: {exc}") from exc
    return inputs
