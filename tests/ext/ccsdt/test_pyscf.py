"""E(T) on PySCF's own amplitudes and integrals against pyscf.cc.ccsd_t.kernel, to 1e-10 Eh."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

pyscf = pytest.importorskip("pyscf")

from pyscf import cc, gto, scf  # noqa: E402

from torchhpc.ext.ccsdt import from_pyscf, prepare_triples, triples_energy, triples_energy_reference  # noqa: E402
from torchhpc.ext.ccsdt.config import MoleculeOptions  # noqa: E402
from torchhpc.ext.ccsdt.ops import check_inputs  # noqa: E402
from torchhpc.ext.core.errors import InputError  # noqa: E402

GEOMETRY = {
    "H2O": "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692",
    "NH3": "N 0 0 0.1162; H 0 0.9377 -0.2711; H 0.8121 -0.4689 -0.2711; H -0.8121 -0.4689 -0.2711",
}

#: (molecule, basis, frozen core) — the last one has more than 40 virtual orbitals
SYSTEMS = [("H2O", "cc-pvdz", False), ("H2O", "cc-pvdz", True), ("NH3", "cc-pvdz", False),
           ("H2O", "cc-pvtz", False)]


@pytest.fixture(scope="module")
def solved():
    """prepare_triples (PySCF RHF + CCSD + integrals) and PySCF's E(T) per system, once per test module."""
    cache = {}

    def get(molecule: str, basis: str, frozen_core: bool) -> SimpleNamespace:
        key = (molecule, basis, frozen_core)
        if key not in cache:
            mol = gto.M(atom=GEOMETRY[molecule], basis=basis, verbose=0)
            s = prepare_triples(mol, frozen_core=frozen_core)
            cache[key] = SimpleNamespace(mycc=s.mycc, inputs=s.inputs, e_pyscf=s.pyscf_triples_energy())
        return cache[key]

    return get


def test_options_and_mole_give_the_same_inputs():
    """prepare_triples of MoleculeOptions (the CLI's path) equals that of the same PySCF Mole."""
    opts = MoleculeOptions(atom=GEOMETRY["H2O"], basis="sto-3g", frozen_core=True)
    a = prepare_triples(opts)
    b = prepare_triples(gto.M(atom=GEOMETRY["H2O"], basis="sto-3g", verbose=0), frozen_core=True)
    for x, y in zip(a.inputs.arrays(), b.inputs.arrays(), strict=True):
        np.testing.assert_allclose(x, y, atol=1e-9)
    assert a.inputs.meta["formula"] == "H2O" and a.inputs.meta["frozen"] == 1 and not a.warnings
    assert set(a.timings) == {"rhf", "ccsd", "integrals"}


def test_unconverged_ccsd_is_a_warning_not_an_error():
    """Stopping CCSD early (as the benchmark does) still gives inputs, with a warning line."""
    s = prepare_triples(gto.M(atom=GEOMETRY["H2O"], basis="6-31g", verbose=0), ccsd_max_cycle=2)
    assert len(s.warnings) == 1 and s.warnings[0].startswith("CCSD did not converge in 2 cycles")


@pytest.mark.parametrize("atom, words", [
    ("He 0 0 0", ["1 basis functions and 2 electrons leave no virtual orbitals", "use a larger basis"]),
    (GEOMETRY["H2O"], ["RHF did not converge in 1 cycles", "needs a converged reference"]),
])
def test_no_triples_or_no_reference_is_one_line(capsys, monkeypatch, atom, words):
    """He in STO-3G has no virtual orbital (no triples); an RHF that does not converge (water, held to one SCF
    cycle) is no reference: each is one line before CCSD (it ran, then failed on the shapes or on the orbital
    energies of the unconverged reference, or went on with a warning)."""
    from pyscf import scf

    from torchhpc.trainers.cli import main

    if "RHF" in words[0]:
        monkeypatch.setattr(scf.hf.SCF, "max_cycle", 1)
    assert main(["ccsdt", "--atom", atom, "--basis", "sto-3g"]) == 1
    err = capsys.readouterr().err
    if "RHF" in words[0]:  # the calculation started: the line saying its size came first
        first, err = err.split("\n", 1)
        assert first.startswith("ccsdt: H2O, sto-3g: 7 basis functions"), first
    assert err.count("\n") == 1 and err.startswith("torchhpc: error: "), err
    for w in words:
        assert w in err, err


@pytest.mark.parametrize("molecule,basis,frozen_core", SYSTEMS)
def test_triples_energy_matches_pyscf(solved, molecule, basis, frozen_core):
    """Our blocked (T) equals pyscf.cc.ccsd_t.kernel to 1e-10 Eh on PySCF's own t1, t2 and integrals."""
    s = solved(molecule, basis, frozen_core)
    ours = triples_energy(*s.inputs.arrays())
    assert abs(ours - s.e_pyscf) < 1e-10, (ours, s.e_pyscf)
    assert -0.05 < s.e_pyscf < -1e-4  # a real (T) correction: negative, millihartree-sized


@pytest.mark.parametrize("epilogue", ["torch", "triton"])
def test_gpu_blocking_matches_pyscf(solved, epilogue):
    """The GPU's (T) (pair-blocked GEMMs; the fused Triton epilogue interpreted on the CPU) equals PySCF to
    1e-10 Eh on a real molecule, with blocks that split the runs of k."""
    from torchhpc.ext.ccsdt.ops import triples_energy_torch

    s = solved("H2O", "cc-pvdz", True)
    args = check_inputs(*s.inputs.arrays())
    ours = triples_energy_torch(*args, blocking="pair", block_triples=2, epilogue=epilogue)
    assert abs(ours - s.e_pyscf) < 1e-10, (ours, s.e_pyscf)


def test_mma_kernel_matches_pyscf(solved, kernel_device):
    """The fused kernel on FP64 MMA (interpreted on the CPU) equals PySCF to 1e-10 Eh on a real molecule:
    H2O cc-pVDZ with a frozen core, o=4 v=19, three tiles of 8 with a ragged one."""
    s = solved("H2O", "cc-pvdz", True)
    ours = triples_energy(*[a.to(kernel_device) for a in check_inputs(*s.inputs.arrays())], backend="triton-mma")
    assert abs(ours - s.e_pyscf) < 1e-10, (ours, s.e_pyscf)


def test_system_with_over_40_virtuals_is_covered(solved):
    """The cc-pVTZ water of the list has at least 40 active virtual orbitals."""
    assert solved("H2O", "cc-pvtz", False).inputs.nvir >= 40


@pytest.mark.parametrize("frozen_core", [False, True])
def test_dense_reference_matches_pyscf(solved, frozen_core):
    """The einsum formula of FORMULA.md itself reproduces PySCF (so the fast path is checked against both)."""
    s = solved("H2O", "cc-pvdz", frozen_core)
    assert abs(triples_energy_reference(*s.inputs.arrays()) - s.e_pyscf) < 1e-10


def test_from_pyscf_takes_the_active_space(solved):
    """With a frozen core the inputs cover active orbitals only; the energies are PySCF's."""
    full, fc = solved("H2O", "cc-pvdz", False), solved("H2O", "cc-pvdz", True)
    assert (full.inputs.nocc, fc.inputs.nocc) == (5, 4)
    assert full.inputs.nvir == fc.inputs.nvir == 19
    assert fc.inputs.mo_energy.shape == (23,) and fc.inputs.ovvv.shape == (4, 19, 19, 19)
    np.testing.assert_allclose(fc.inputs.mo_energy, full.inputs.mo_energy[1:], atol=1e-6)
    assert fc.inputs.e_hf == pytest.approx(fc.mycc._scf.e_tot, abs=1e-9)
    assert fc.inputs.e_ccsd == fc.mycc.e_tot and fc.inputs.meta["frozen"] == 1
    assert fc.e_pyscf != full.e_pyscf  # freezing the core changes (T)


def test_pyscf_amplitudes_are_left_untouched(solved):
    """from_pyscf copies t1/t2: computing E(T) does not modify the CCSD object's amplitudes."""
    s = solved("H2O", "cc-pvdz", True)
    t2 = s.mycc.t2.copy()
    s.inputs.t2[0, 0, 0, 0] += 1.0
    np.testing.assert_array_equal(s.mycc.t2, t2)
    s.inputs.t2[0, 0, 0, 0] -= 1.0


@pytest.fixture(scope="module")
def oh_radical():
    return gto.M(atom="O 0 0 0; H 0 0 0.97", basis="sto-3g", spin=1, verbose=0)


def test_open_shell_references_are_refused(oh_radical):
    """UHF and ROHF references (and mol.spin != 0) raise InputError instead of a wrong number."""
    for mf in (scf.UHF(oh_radical), scf.ROHF(oh_radical)):
        mf.run()
        mycc = cc.CCSD(mf).run()
        with pytest.raises(InputError, match="open-shell"):
            from_pyscf(mycc)


def test_unrestricted_ccsd_on_a_closed_shell_is_refused():
    """A UHF-based UCCSD of a closed-shell molecule is refused: the formula here is the RHF one."""
    mol = gto.M(atom=GEOMETRY["H2O"], basis="sto-3g", verbose=0)
    mycc = cc.CCSD(scf.UHF(mol).run()).run()
    with pytest.raises(InputError, match="UHF reference"):
        from_pyscf(mycc)


def test_ccsd_must_have_run_first():
    """A CCSD object without amplitudes is an InputError that says to run it."""
    mol = gto.M(atom=GEOMETRY["H2O"], basis="sto-3g", verbose=0)
    with pytest.raises(InputError, match="call mycc.kernel"):
        from_pyscf(cc.CCSD(scf.RHF(mol).run()))
