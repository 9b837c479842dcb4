"""Geometry input: atoms on top of each other are one InputError naming them, checked before PySCF runs."""

from __future__ import annotations

import pytest

from torchhpc.ext.ccsdt.molecule import (
    BOHR_ANGSTROM,
    MIN_DISTANCE_ANGSTROM,
    check_distances,
    parse_atom_string,
)
from torchhpc.ext.core.errors import InputError


@pytest.mark.parametrize(
    "spec, unit, named",
    [
        ("H 0 0 0; H 0 0 0", "angstrom", "atoms 1 (H) and 2 (H)"),
        ("O 0 0 0; H 0 0 0.97; H 0 0.97 0.05; H 0 0.97 0", "angstrom", "atoms 3 (H) and 4 (H)"),
        ("O 0 0 0; H 0 0 0.15", "bohr", "atoms 1 (O) and 2 (H)"),  # 0.08 Angstrom
    ],
)
def test_atoms_too_close_are_named(spec, unit, named):
    """Two atoms closer than MIN_DISTANCE_ANGSTROM (in either unit) raise one line naming both atoms."""
    with pytest.raises(InputError, match=r"Angstrom apart") as exc:
        check_distances(parse_atom_string(spec), unit)
    assert named in str(exc.value) and "\n" not in str(exc.value)


def test_real_bonds_pass():
    """Water, H2 at its bond length and a pair just above the limit (in Bohr) are accepted."""
    check_distances(parse_atom_string("O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"))
    check_distances(parse_atom_string("H 0 0 0; H 0 0 0.74"))
    check_distances([("H", (0.0, 0.0, 0.0)), ("H", (0.0, 0.0, 1.01 * MIN_DISTANCE_ANGSTROM / BOHR_ANGSTROM))], "bohr")


def test_coinciding_atoms_are_refused_before_pyscf(monkeypatch):
    """build_molecule checks distances before calling PySCF (which would fail with a LinAlgError later)."""
    pytest.importorskip("pyscf")
    from pyscf import gto

    from torchhpc.ext.ccsdt.molecule import build_molecule

    def never(*args, **kwargs):
        raise AssertionError("PySCF was called")

    monkeypatch.setattr(gto, "M", never)
    with pytest.raises(InputError, match="atoms 1 \\(H\\) and 2 \\(H\\)"):
        build_molecule(parse_atom_string("H 0 0 0; H 0 0 0"), "sto-3g")
