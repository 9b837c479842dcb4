"""What ``torchhpc ccsdt`` does, as a library call: inputs, the timed (T), PySCF's (T) beside it.

    result = compute(CCSDTOptions(molecule=MoleculeOptions(atom="O 0 0 0.1173; ...", basis="cc-pvdz")))
    print("\\n".join(report_lines(result)))        # or json.dumps(result.as_json())

The backend printed is the one :func:`~torchhpc.ext.ccsdt.ops.triples_backend` resolved and
:func:`~torchhpc.ext.ccsdt.ops.triples_energy` ran.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from torchhpc.ext.core.device import pick_device
from torchhpc.ext.core.dispatch import check_backend

from .config import CCSDTOptions
from .io import TriplesInputs, load_inputs, prepare_triples, save_inputs
from .ops import triples_backend, triples_energy, triples_flops


@dataclass
class TriplesResult:
    """One (T) evaluation: the inputs, our E(T) and how it ran, and PySCF's E(T) when compared."""

    inputs: TriplesInputs
    e_t: float
    """our E(T), Eh"""
    seconds: float
    """wall time of our (T) alone"""
    backend: str
    """the implementation that ran: torch, triton or reference"""
    device: torch.device
    source: str
    """what was computed: the molecule's formula, or the inputs file"""
    timings: dict[str, float] = field(default_factory=dict)
    """PySCF steps, seconds: rhf, ccsd, integrals and (compared) pyscf_t"""
    e_t_pyscf: float | None = None
    """PySCF's E(T) on the same amplitudes and integrals (``compare_pyscf``)"""
    saved: Path | None = None
    """where the inputs were saved (``save_inputs``)"""
    warnings: list[str] = field(default_factory=list)

    @property
    def gflops(self) -> float:
        """GFLOP/s of our (T) against :func:`~torchhpc.ext.ccsdt.ops.triples_flops`."""
        flops = triples_flops(self.inputs.nocc, self.inputs.nvir)
        return flops / self.seconds / 1e9 if self.seconds > 0 else float("nan")

    def as_json(self) -> dict:
        """``{"e_t", "e_ccsd", "e_hf", "seconds", "gflops"}`` (+ ``e_t_pyscf``, ``abs_diff`` when compared);
        unknown energies are ``None``."""
        out = {"e_t": self.e_t, "e_ccsd": _finite(self.inputs.e_ccsd), "e_hf": _finite(self.inputs.e_hf),
               "seconds": self.seconds, "gflops": self.gflops}
        if self.e_t_pyscf is not None:
            out["e_t_pyscf"] = self.e_t_pyscf
            out["abs_diff"] = abs(self.e_t - self.e_t_pyscf)
        return out


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def compute(options: CCSDTOptions, *, progress: bool = False) -> TriplesResult:
    """Run ``torchhpc ccsdt``: the inputs (PySCF, or a saved ``.npz``), our timed E(T), PySCF's E(T).

    ``options.threads`` applies to PySCF and the (T) for the duration of the call.

    Raises:
        InputError: no CUDA device for ``--device cuda``, a backend that cannot run there (checked
            before PySCF starts), and every error of :func:`~torchhpc.ext.ccsdt.io.prepare_triples`,
            :func:`~torchhpc.ext.ccsdt.io.load_inputs` and :func:`~torchhpc.ext.ccsdt.ops.triples_energy`.
    """
    device = pick_device(options.device)
    if options.backend != "auto":
        check_backend(options.backend, device)
    previous = torch.get_num_threads()
    pyscf_threads = None
    try:
        if options.threads is not None:
            torch.set_num_threads(options.threads)
        timings: dict[str, float] = {}
        notes: list[str] = []
        prepared = None
        if options.inputs is not None:
            inputs = load_inputs(options.inputs)
        else:
            if options.threads is not None:
                from .molecule import require_pyscf

                require_pyscf()
                from pyscf import lib

                pyscf_threads = lib.num_threads()
                lib.num_threads(options.threads)
            prepared = prepare_triples(options.molecule)
            inputs, timings, notes = prepared.inputs, prepared.timings, prepared.warnings
        source = inputs.meta.get("formula") or (str(options.inputs) if options.inputs is not None else "molecule")
        saved = save_inputs(options.save_inputs, inputs) if options.save_inputs is not None else None

        backend = triples_backend(options.backend, inputs.nvir, device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        e_t = triples_energy(*inputs.arrays(), backend=backend, device=device, max_memory=options.max_memory,
                             num_threads=options.threads, progress=progress)
        seconds = time.perf_counter() - t0  # triples_energy returns a Python float: the device has finished

        e_ref = None
        if options.compare_pyscf and prepared is not None:
            t0 = time.perf_counter()
            e_ref = prepared.pyscf_triples_energy()
            timings["pyscf_t"] = time.perf_counter() - t0
    finally:
        torch.set_num_threads(previous)
        if pyscf_threads is not None:
            from pyscf import lib

            lib.num_threads(pyscf_threads)
    return TriplesResult(inputs=inputs, e_t=e_t, seconds=seconds, backend=backend, device=device, source=source,
                         timings=timings, e_t_pyscf=e_ref, saved=saved, warnings=notes)


def report_lines(result: TriplesResult) -> list[str]:
    """The human report of ``torchhpc ccsdt``: molecule, orbitals, energies, how E(T) ran, timings."""
    inputs, meta = result.inputs, result.inputs.meta
    frozen = meta.get("frozen")
    core = f"{frozen} frozen core orbital(s)" if isinstance(frozen, int) and frozen else (
        f"frozen orbitals {frozen}" if frozen else "no frozen core")
    has_hf, has_ccsd = math.isfinite(inputs.e_hf), math.isfinite(inputs.e_ccsd)
    lines = [f"inputs saved  {result.saved}"] if result.saved is not None else []
    lines.append(f"molecule      {result.source}, basis {meta.get('basis', '?')}, {core}")
    lines.append(f"orbitals      nocc={inputs.nocc} nvir={inputs.nvir} (active)")
    if has_hf:
        lines.append(f"E(HF)         {inputs.e_hf:.10f} Eh")
    if has_ccsd:
        corr = f"   (correlation {inputs.e_ccsd - inputs.e_hf:.10f})" if has_hf else ""
        lines.append(f"E(CCSD)       {inputs.e_ccsd:.10f} Eh{corr}")
    lines.append(f"E(T)          {result.e_t:.12f} Eh   ({result.backend} on {result.device.type}, "
                 f"{result.seconds:.3f} s, {result.gflops:.2f} GFLOP/s)")
    if has_ccsd:
        lines.append(f"E(CCSD(T))    {inputs.e_ccsd + result.e_t:.10f} Eh")
    if result.e_t_pyscf is not None:
        lines.append(f"E(T) PySCF    {result.e_t_pyscf:.12f} Eh   ({result.timings['pyscf_t']:.3f} s)   "
                     f"|diff| {abs(result.e_t - result.e_t_pyscf):.1e} Eh")
    parts = [f"{k.upper() if k in ('rhf', 'ccsd') else k} {v:.2f} s" for k, v in result.timings.items()
             if k != "pyscf_t"]
    if parts:
        lines.append(f"timings       {', '.join(parts)}")
    return lines


__all__ = ["TriplesResult", "compute", "report_lines"]
