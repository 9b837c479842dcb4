"""``torchhpc ccsdt``: the closed-shell CCSD(T) perturbative-triples energy of a molecule.

PySCF runs RHF and CCSD; torchhpc computes the (T) correction (the blocked torch
path on the CPU, the fused Triton kernel on CUDA) and, with --compare-pyscf, PySCF's
own (T) on the same amplitudes and integrals for comparison.

    torchhpc ccsdt --atom "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692" --basis cc-pvdz
    torchhpc ccsdt --xyz water.xyz --basis aug-cc-pvdz --frozen-core --compare-pyscf
    torchhpc ccsdt --xyz water.xyz --basis cc-pvdz --json --save-inputs water.npz
    torchhpc ccsdt --inputs water.npz --json        # from saved inputs; PySCF not needed

--json prints one object: {"e_t", "e_ccsd", "e_hf", "seconds", "gflops"} (energies in
Hartree, e_ccsd the total CCSD energy, seconds and gflops of our (T) alone), plus
"e_t_pyscf" and "abs_diff" with --compare-pyscf. Closed-shell molecules only: an odd
electron count is refused. Coordinates are in Angstrom unless --unit bohr.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

from torchhpc.ext.core.errors import InputError

from .common import ArgumentParser, add_common_arguments, parse_and_run

Atoms = list[tuple[str, tuple[float, float, float]]]


# ----------------------------------------------------------------------------- geometry input


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


def build_molecule(atoms: Atoms, basis: str, charge: int = 0, unit: str = "angstrom"):
    """A PySCF ``Mole`` (no point-group symmetry, quiet) for a closed-shell molecule.

    Raises:
        InputError: an odd electron count (open shell), a basis PySCF does not know (or that
            lacks one of the elements), or any other geometry PySCF refuses.
    """
    from pyscf import gto
    from pyscf.data import elements

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


# ----------------------------------------------------------------------------- the command


def _require_pyscf() -> None:
    try:
        import pyscf  # noqa: F401
    except ImportError:
        raise InputError(
            "PySCF is not installed (pip install 'torchhpc[chem]'); without it use --inputs FILE.npz"
        ) from None


def _molecule_inputs(args: argparse.Namespace, log) -> tuple:
    """RHF + CCSD in PySCF -> (TriplesInputs, mycc, eris, timings)."""
    _require_pyscf()
    from pyscf import cc, scf

    from torchhpc.ext.ccsdt.io import from_pyscf

    if not args.basis:
        raise InputError("--basis is required with --atom/--xyz (e.g. --basis cc-pvdz)")
    atoms = read_xyz(args.xyz) if args.xyz else parse_atom_string(args.atom)
    mol = build_molecule(atoms, args.basis, args.charge, args.unit)
    timings = {}
    t0 = time.perf_counter()
    mf = scf.RHF(mol)
    mf.conv_tol = 1e-10
    mf.kernel()
    timings["rhf"] = time.perf_counter() - t0
    if not mf.converged:
        log(f"warning: RHF did not converge (E = {mf.e_tot:.10f})")
    t0 = time.perf_counter()
    mycc = cc.CCSD(mf)
    if args.frozen_core:
        mycc.set_frozen()
    mycc.conv_tol = 1e-9
    mycc.kernel()
    timings["ccsd"] = time.perf_counter() - t0
    if not mycc.converged:
        log(f"warning: CCSD did not converge (E_corr = {mycc.e_corr:.10f})")
    t0 = time.perf_counter()
    eris = mycc.ao2mo()
    inputs = from_pyscf(mycc, eris)
    timings["integrals"] = time.perf_counter() - t0
    inputs.meta["formula"] = hill_formula([mol.atom_pure_symbol(n) for n in range(mol.natm)])
    inputs.meta["natm"] = mol.natm
    inputs.meta["nelectron"] = mol.nelectron
    return inputs, mycc, eris, timings


def _fmt(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def run_ccsdt(args: argparse.Namespace) -> int:
    """Parse nothing, compute everything: the body of ``torchhpc ccsdt``."""
    quiet = args.json

    def log(msg: str) -> None:
        print(msg, file=sys.stderr)

    if args.inputs and args.compare_pyscf:
        raise InputError("--compare-pyscf needs a molecule (--atom or --xyz): saved inputs hold no PySCF object")
    if args.inputs and (args.basis or args.frozen_core):
        raise InputError("--basis and --frozen-core apply to --atom/--xyz; saved inputs already fix them")
    if args.threads is not None and args.threads < 1:
        raise InputError(f"--threads must be >= 1, got {args.threads}")
    if args.max_memory <= 0:
        raise InputError(f"--max-memory must be positive (MB), got {args.max_memory}")
    import torch

    from torchhpc.ext.ccsdt.io import load_inputs, save_inputs
    from torchhpc.ext.ccsdt.ops import triples_energy, triples_flops
    from torchhpc.ext.core.device import pick_device

    device = pick_device(args.device)
    if args.backend == "triton" and device.type != "cuda":
        raise InputError("--backend triton needs --device cuda (the fused kernel runs on CUDA; tests interpret it)")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    mycc = eris = None
    timings: dict[str, float] = {}
    if args.inputs:
        inputs = load_inputs(args.inputs)
    else:
        if args.threads is not None:
            _require_pyscf()
            from pyscf import lib

            lib.num_threads(args.threads)
        inputs, mycc, eris, timings = _molecule_inputs(args, log)
    if args.save_inputs:
        save_inputs(args.save_inputs, inputs)
        if not quiet:
            print(f"inputs saved  {args.save_inputs}")

    # ---- our (T)
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    e_t = triples_energy(*inputs.arrays(), backend=args.backend, device=device, max_memory=args.max_memory,
                         num_threads=args.threads, progress=not quiet and sys.stderr.isatty())
    seconds = time.perf_counter() - t0
    flops = triples_flops(inputs.nocc, inputs.nvir)
    gflops = flops / seconds / 1e9 if seconds > 0 else float("nan")
    result = {"e_t": e_t, "e_ccsd": _fmt(inputs.e_ccsd), "e_hf": _fmt(inputs.e_hf), "seconds": seconds,
              "gflops": gflops}

    # ---- PySCF's (T) on the same amplitudes and integrals
    if args.compare_pyscf:
        from pyscf.cc import ccsd_t

        t0 = time.perf_counter()
        # PySCF's C path transposes t2 in place and restores it: hand it copies
        e_ref = float(ccsd_t.kernel(mycc, eris, mycc.t1.copy(), mycc.t2.copy(), verbose=0))
        timings["pyscf_t"] = time.perf_counter() - t0
        result["e_t_pyscf"] = e_ref
        result["abs_diff"] = abs(e_t - e_ref)

    if quiet:
        print(json.dumps(result))
        return 0
    meta = inputs.meta
    backend = args.backend if args.backend != "auto" else ("triton" if device.type == "cuda" else "torch")
    frozen = meta.get("frozen")
    what = meta.get("formula") or (f"{args.inputs}" if args.inputs else "molecule")
    core = f"{frozen} frozen core orbital(s)" if isinstance(frozen, int) and frozen else (
        f"frozen orbitals {frozen}" if frozen else "no frozen core")
    print(f"molecule      {what}, basis {meta.get('basis', '?')}, {core}")
    print(f"orbitals      nocc={inputs.nocc} nvir={inputs.nvir} (active)")
    if result["e_hf"] is not None:
        print(f"E(HF)         {inputs.e_hf:.10f} Eh")
    if result["e_ccsd"] is not None:
        corr = f"   (correlation {inputs.e_ccsd - inputs.e_hf:.10f})" if result["e_hf"] is not None else ""
        print(f"E(CCSD)       {inputs.e_ccsd:.10f} Eh{corr}")
    print(f"E(T)          {e_t:.12f} Eh   ({backend} on {device.type}, {seconds:.3f} s, {gflops:.2f} GFLOP/s)")
    if result["e_ccsd"] is not None:
        print(f"E(CCSD(T))    {inputs.e_ccsd + e_t:.10f} Eh")
    if args.compare_pyscf:
        print(f"E(T) PySCF    {result['e_t_pyscf']:.12f} Eh   ({timings['pyscf_t']:.3f} s)   "
              f"|diff| {result['abs_diff']:.1e} Eh")
    if timings:
        parts = [f"{k.upper() if k in ('rhf', 'ccsd') else k} {v:.2f} s" for k, v in timings.items() if k != "pyscf_t"]
        print(f"timings       {', '.join(parts)}")
    return 0


def _add_args(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--atom", help='atoms as "O 0 0 0; H 0 0.76 0.59; ..." (symbol x y z, ; between atoms)')
    src.add_argument("--xyz", metavar="FILE", help="an XYZ geometry file")
    src.add_argument("--inputs", metavar="FILE.npz", help="(T) inputs saved with --save-inputs (no PySCF needed)")
    p.add_argument("--basis", help="basis set name PySCF knows (cc-pvdz, aug-cc-pvtz, 6-31g*, ...)")
    p.add_argument("--charge", type=int, default=0, help="molecular charge (default 0)")
    p.add_argument("--unit", choices=["angstrom", "bohr"], default="angstrom", help="coordinate unit")
    p.add_argument("--frozen-core", action="store_true", help="freeze core orbitals (PySCF's set_frozen)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where the (T) runs")
    p.add_argument("--backend", default="auto", choices=["auto", "torch", "triton"],
                   help="auto: the Triton kernel on CUDA, blocked torch GEMMs on the CPU")
    p.add_argument("--max-memory", type=float, default=4000.0, metavar="MB",
                   help="memory bound of the (T) work buffers (picks the block size; default 4000)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for PySCF and the (T) (default: torch's)")
    p.add_argument("--compare-pyscf", action="store_true", help="also run pyscf.cc.ccsd_t.kernel and compare")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    p.add_argument("--save-inputs", metavar="FILE.npz", help="save t1, t2, integrals and energies to an .npz")
    add_common_arguments(p)


def register(sub) -> None:
    p = sub.add_parser("ccsdt", help="CCSD(T) perturbative triples of a molecule, exact against PySCF",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_args(p)
    p.set_defaults(func=run_ccsdt)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="torchhpc.trainers.ccsdt", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_args(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    return parse_and_run(build_parser, run_ccsdt, argv)


if __name__ == "__main__":
    sys.exit(main())
