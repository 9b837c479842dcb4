"""Molecule input for ccsdt: ``--atom`` strings, XYZ files, geometry checks and the PySCF ``Mole``.

Everything here runs before PySCF does, so that a malformed geometry is one line naming the
entry (the file and line, or the ``--atom`` entry) instead of a traceback from inside PySCF::

    atoms = parse_atom_string("O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692")
    atoms = read_xyz("water.xyz")
    mol = build_molecule(atoms, "cc-pvdz")        # checks distances, charge and basis first
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Sequence
from pathlib import Path

from torchhpc.ext.core.errors import InputError

Atoms = list[tuple[str, tuple[float, float, float]]]
"""``[(symbol, (x, y, z)), ...]``: element symbol (or atomic number as text) and coordinates."""

#: two atoms closer than this (Angstrom) are refused: nothing bonds that tightly (H2 is 0.74 A), and
#: PySCF fails on coinciding atoms with a singular-matrix traceback or returns meaningless energies
MIN_DISTANCE_ANGSTROM = 0.1

#: Angstrom per Bohr (CODATA 2018, as PySCF's ``param.BOHR``)
BOHR_ANGSTROM = 0.529177210903


def require_pyscf() -> None:
    """Raise :class:`InputError` (saying how to install it, and the way around) when PySCF is missing."""
    try:
        import pyscf  # noqa: F401
    except ImportError:
        raise InputError(
            "PySCF is not installed (pip install 'torchhpc[chem]'); without it use --inputs FILE.npz"
        ) from None


def _check_symbol(symbol: str, where: str) -> None:
    from pyscf.data import elements

    if symbol.isdigit():
        if not 1 <= int(symbol) < len(elements.ELEMENTS):
            raise InputError(f"{where}: atomic number {symbol} is out of range")
        return
    m = re.match(r"[A-Za-z]+", symbol)
    name = m.group(0).capitalize() if m else ""
    if name not in elements.ELEMENTS[1:]:
        raise InputError(f"{where}: unknown element {symbol!r}")


def _atom_line(text: str, where: str) -> tuple[str, tuple[float, float, float]]:
    parts = text.replace(",", " ").split()
    if len(parts) != 4:
        raise InputError(f"{where}: expected 'symbol x y z', got {text.strip()!r}")
    try:
        xyz = tuple(float(p) for p in parts[1:])
    except ValueError:
        raise InputError(f"{where}: coordinates must be numbers, got {text.strip()!r}") from None
    if not all(math.isfinite(c) for c in xyz):
        raise InputError(f"{where}: coordinates must be finite, got {text.strip()!r}")
    _check_symbol(parts[0], where)
    return parts[0], xyz  # type: ignore[return-value]


def parse_atom_string(spec: str) -> Atoms:
    """``"O 0 0 0; H 0 0.76 0.59; ..."`` (``;`` or newlines between atoms) -> ``[(symbol, (x, y, z)), ...]``.

    Raises:
        InputError: an entry that is not ``symbol x y z``, an unknown element, or no atoms.
    """
    entries = [e for e in re.split(r"[;\n]", spec) if e.strip()]
    if not entries:
        raise InputError("--atom: no atoms given (expected e.g. \"O 0 0 0; H 0 0.76 0.59; H 0 -0.76 0.59\")")
    return [_atom_line(e, f"--atom entry {n}") for n, e in enumerate(entries, start=1)]


def read_xyz(path: str | Path) -> Atoms:
    """Read a standard XYZ file: the atom count, a comment line, then ``symbol x y z`` per atom.

    Raises:
        InputError: a missing file, a bad count, too few or too many atom lines (one frame
            only), a malformed line or an unknown element — naming the file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: xyz file not found")
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read as text ({exc})") from exc
    if not lines or not lines[0].strip():
        raise InputError(f"{path}:1: expected the atom count on the first line")
    try:
        natoms = int(lines[0].split()[0])
    except ValueError:
        raise InputError(f"{path}:1: expected the atom count on the first line, got {lines[0].strip()!r}") from None
    if natoms < 1:
        raise InputError(f"{path}:1: the atom count must be >= 1, got {natoms}")
    body = lines[2:2 + natoms]
    if len(body) < natoms or any(not line.strip() for line in body):
        found = sum(1 for line in body if line.strip())
        raise InputError(f"{path}: the first line says {natoms} atoms but {found} atom lines follow the comment line")
    extra = [n for n, line in enumerate(lines[2 + natoms:], start=3 + natoms) if line.strip()]
    if extra:
        raise InputError(f"{path}:{extra[0]}: more lines than the {natoms} atoms announced "
                         "(one geometry per file; multi-frame XYZ is not supported)")
    return [_atom_line(line, f"{path}:{n}") for n, line in enumerate(body, start=3)]


def check_distances(atoms: Atoms, unit: str = "angstrom", min_distance: float = MIN_DISTANCE_ANGSTROM) -> None:
    """Refuse two atoms closer than ``min_distance`` Angstrom (the same position, usually a typo).

    Args:
        atoms: as from :func:`parse_atom_string` / :func:`read_xyz` (atoms numbered from 1).
        unit: ``angstrom`` or ``bohr``, the unit of the coordinates.
        min_distance: the closest allowed pair, Angstrom.

    Raises:
        InputError: naming the first such pair, e.g. ``atoms 1 (H) and 2 (H) are 0 Angstrom apart``.
    """
    scale = BOHR_ANGSTROM if unit.lower().startswith("b") else 1.0
    for n in range(len(atoms)):
        for m in range(n):
            d = math.dist(atoms[m][1], atoms[n][1]) * scale
            if d < min_distance:
                raise InputError(
                    f"atoms {m + 1} ({atoms[m][0]}) and {n + 1} ({atoms[n][0]}) are {d:.3g} Angstrom apart "
                    f"(closer than {min_distance} Angstrom): check the geometry"
                )


def build_molecule(atoms: Atoms, basis: str, charge: int = 0, unit: str = "angstrom"):
    """A PySCF ``Mole`` (no point-group symmetry, quiet) for a closed-shell molecule.

    Raises:
        InputError: two atoms at (nearly) the same position (:func:`check_distances`), an odd
            electron count (open shell), a basis PySCF does not know (or that lacks one of the
            elements), or any other geometry PySCF refuses.
    """
    from pyscf import gto
    from pyscf.data import elements

    check_distances(atoms, unit)
    nelec = sum(int(sym) if sym.isdigit() else elements.charge(sym) for sym, _ in atoms) - charge
    if nelec <= 0:
        raise InputError(f"the molecule has {nelec} electrons with charge {charge}")
    if nelec % 2:
        raise InputError(
            f"open-shell molecule ({nelec} electrons with charge {charge}): ccsdt computes the closed-shell "
            "RHF (T); change --charge or use pyscf.cc.uccsd_t"
        )
    # PySCF warns (on stderr) before failing on an unknown basis; keep its hint inside our one line instead
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            mol = gto.M(atom=[[s, xyz] for s, xyz in atoms], basis=basis, charge=charge, spin=0, unit=unit,
                        symmetry=False, verbose=0)
        except RuntimeError as exc:  # pyscf.lib.exceptions.BasisNotFoundError is a RuntimeError
            msg = " ".join(line.strip() for line in str(exc).strip().splitlines()[:2])
            if "basis" in msg.lower():
                hint = any("basis-set-exchange" in str(w.message) for w in caught)
                raise InputError(f"--basis {basis!r}: {msg}"
                                 + (" (it may be in basis-set-exchange: pip install basis-set-exchange)"
                                    if hint else "")) from exc
            raise InputError(f"PySCF refused the molecule: {msg}") from exc
        except (KeyError, ValueError, IndexError, NameError) as exc:
            raise InputError(f"PySCF refused the molecule or basis {basis!r}: {exc}") from exc
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return mol


def hill_formula(symbols: Sequence[str]) -> str:
    """``["O", "H", "H"]`` -> ``"H2O"`` (Hill order: C, H, then alphabetical; no carbon: alphabetical)."""
    counts: dict[str, int] = {}
    for s in symbols:
        counts[s] = counts.get(s, 0) + 1
    if "C" in counts:
        order = ["C", "H"] + sorted(s for s in counts if s not in ("C", "H"))
    else:
        order = sorted(counts)
    return "".join(f"{s}{counts[s] if counts[s] > 1 else ''}" for s in order if s in counts)


__all__ = ["Atoms", "MIN_DISTANCE_ANGSTROM", "build_molecule", "check_distances", "hill_formula",
           "parse_atom_string", "read_xyz", "require_pyscf"]
