"""``torchhpc ccsdt``: the command (:func:`run_ccsdt`) and what it runs, as library calls.

* :func:`compute` — the inputs (PySCF, or a saved ``.npz``), our timed E(T) and PySCF's E(T) beside it,
  in this process or as one rank of a torchrun job: a :class:`TriplesResult`;
* :func:`report_lines` — the human report of a result (``TriplesResult.as_json`` the JSON object);
* :func:`launch` — ``--nproc N``: the input checked here, then the job on ``N`` torchrun ranks;
* :func:`run_ccsdt` — the subcommand: launch or compute, then print on rank 0.

    result = compute(CCSDTOptions(molecule=MoleculeOptions(atom="O 0 0 0.1173; ...", basis="cc-pvdz")))
    print("\\n".join(report_lines(result)))        # or json.dumps(result.as_json())

The backend printed is the one :func:`~torchhpc.ext.ccsdt.ops.triples_backend` resolved and
:func:`~torchhpc.ext.ccsdt.ops.triples_energy` ran. torch, numpy and PySCF are imported inside the
functions, so that the CLI builds its parser (``torchhpc --help``) without them.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .config import DEFAULT_MAX_MEMORY_MB, CCSDTOptions

if TYPE_CHECKING:
    import torch

    from .io import TriplesInputs


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
    mode: str = "in-core"
    """``in-core``, ``out-of-core`` (integral slices streamed through a cache under ``max_memory``) or
    ``distributed`` (over torchrun ranks)"""
    stats: dict | None = None
    """out of core: :meth:`~torchhpc.ext.ccsdt.slices.SliceStats.as_dict`; distributed:
    :meth:`~torchhpc.ext.ccsdt.distributed.DistributedRun.summary` (+ ``backend``, the collective backend)"""

    @property
    def gflops(self) -> float:
        """GFLOP/s of our (T) against :func:`~torchhpc.ext.ccsdt.ops.triples_flops`."""
        from .ops import triples_flops

        flops = triples_flops(self.inputs.nocc, self.inputs.nvir)
        return flops / self.seconds / 1e9 if self.seconds > 0 else float("nan")

    JSON_KEYS = ("e_t", "e_ccsd", "e_hf", "e_total", "seconds", "gflops", "nocc", "nvir", "source", "basis",
                 "frozen", "triples_backend", "device", "saved")
    """What :meth:`as_json` always holds: what the text report prints."""

    def as_json(self) -> dict:
        """:data:`JSON_KEYS`: the energies (``e_total`` = E(CCSD) + E(T)), the timing, the active orbitals, what
        was computed (formula or inputs file, basis, frozen core), which (T) implementation ran where
        (``triples_backend``, ``device``) and where the inputs were saved (+ ``e_t_pyscf``, ``abs_diff`` when
        compared; out of core or distributed, the run's statistics, ``backend`` there being the collectives');
        unknown values are ``None``."""
        meta, e_ccsd = self.inputs.meta, _finite(self.inputs.e_ccsd)
        out = {"e_t": self.e_t, "e_ccsd": e_ccsd, "e_hf": _finite(self.inputs.e_hf),
               "e_total": None if e_ccsd is None else e_ccsd + self.e_t,
               "seconds": self.seconds, "gflops": self.gflops, "nocc": self.inputs.nocc, "nvir": self.inputs.nvir,
               "source": self.source, "basis": meta.get("basis"), "frozen": meta.get("frozen"),
               "triples_backend": self.backend, "device": str(self.device),
               "saved": None if self.saved is None else str(self.saved)}
        if self.e_t_pyscf is not None:
            out["e_t_pyscf"] = self.e_t_pyscf
            out["abs_diff"] = abs(self.e_t - self.e_t_pyscf)
        if self.warnings:  # e.g. CCSD did not converge
            out["warnings"] = list(self.warnings)
        if self.mode != "in-core":  # the in-core object is pinned (tests/trainers/test_ccsdt_pinned.py)
            out["mode"] = self.mode
            out.update({k: v for k, v in (self.stats or {}).items() if k not in out})
        return out


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _refuse_triton(options: CCSDTOptions) -> None:
    """The distributed (T) runs the torch path: ``--backend triton`` with several processes is one line."""
    if options.backend in ("triton", "triton-mma"):
        from torchhpc.ext.core.errors import InputError

        raise InputError(f"--backend {options.backend} runs in one process; the distributed (T) runs the torch path "
                         "(--backend auto or torch with --nproc)")


def compute(options: CCSDTOptions, *, progress: bool = False, announce: bool = False) -> TriplesResult:
    """Run ``torchhpc ccsdt``: the inputs (PySCF, or a saved ``.npz``), our timed E(T), PySCF's E(T).

    ``options.dist.threads`` (0: torch's default) applies to PySCF and the (T) for the duration of the
    call. Under torchrun with several ranks this is one rank of the distributed (T). ``announce``: before
    PySCF starts on a molecule, one line on stderr says how large the problem is (:func:`problem_line`).

    Raises:
        InputError: no CUDA device for ``--device cuda``, a backend that cannot run there (checked
            before PySCF starts), and every error of :func:`~torchhpc.ext.ccsdt.io.prepare_triples`,
            :func:`~torchhpc.ext.ccsdt.io.load_inputs` and :func:`~torchhpc.ext.ccsdt.ops.triples_energy`.
    """
    import torch

    from torchhpc.ext.core.device import pick_device
    from torchhpc.ext.core.dispatch import check_backend
    from torchhpc.ext.core.distributed import torchrun_rank

    from .io import save_inputs
    from .ops import triples_backend, triples_energy

    if torchrun_rank()[1] > 1:
        return _compute_distributed(options, progress=progress, announce=announce)
    threads = options.dist.threads
    device = pick_device(options.dist.device)
    if options.backend != "auto":
        check_backend(options.backend, device)
    previous = torch.get_num_threads()
    try:
        if threads:
            torch.set_num_threads(threads)
        inputs, timings, notes, prepared = _prepare(options, announce)
        source = inputs.meta.get("formula") or (str(options.inputs) if options.inputs is not None else "molecule")
        saved = save_inputs(options.save_inputs, inputs) if options.save_inputs is not None else None

        backend = triples_backend(options.backend, inputs.nvir, device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        details: dict = {}
        t0 = time.perf_counter()
        e_t = triples_energy(*inputs.arrays(), backend=backend, device=device, max_memory=options.max_memory,
                             num_threads=threads or None, progress=progress, details=details)
        seconds = time.perf_counter() - t0  # triples_energy returns a Python float: the device has finished

        e_ref = None
        if options.compare_pyscf and prepared is not None:
            t0 = time.perf_counter()
            with _pyscf_threads(threads):
                e_ref = prepared.pyscf_triples_energy()
            timings["pyscf_t"] = time.perf_counter() - t0
    finally:
        torch.set_num_threads(previous)
    stats = details["stats"].as_dict() if "stats" in details else None
    return TriplesResult(inputs=inputs, e_t=e_t, seconds=seconds, backend=backend, device=device, source=source,
                         timings=timings, e_t_pyscf=e_ref, saved=saved, warnings=notes,
                         mode=details.get("mode", "in-core"), stats=stats)


def check_memory_before_scf(options: CCSDTOptions, mol=None) -> None:
    """``--max-memory`` against the least the (T) needs for ``options.molecule`` (its PySCF ``mol`` where built),
    before RHF and CCSD run: nocc and nvir follow from the electrons, the basis functions and the frozen core
    (PySCF's chemical core), so a budget that cannot hold one triple fails in a second, not after the SCF and
    CCSD (hours on a large molecule). The same message the (T) gives later.

    Raises:
        InputError: the budget cannot hold the operands, three slices and one triple's buffers.
    """
    if options.max_memory is None or options.inputs is not None:
        return
    from .slices import sliced_layout

    _, nocc, nvir = _orbital_counts(options, mol if mol is not None else _molecule(options))
    if nocc >= 1 and nvir >= 1:
        sliced_layout(nocc, nvir, 1, options.max_memory)


def _molecule(options: CCSDTOptions):
    """The PySCF ``Mole`` of ``options.molecule`` (no SCF: a fraction of a second).

    Raises:
        InputError: PySCF missing, and every error of :func:`~torchhpc.ext.ccsdt.molecule.build_molecule`.
    """
    from .molecule import build_molecule, parse_atom_string, read_xyz, require_pyscf

    require_pyscf()
    m = options.molecule
    atoms = read_xyz(m.xyz) if m.xyz is not None else parse_atom_string(m.atom)
    return build_molecule(atoms, m.basis, m.charge, m.unit)


def _orbital_counts(options: CCSDTOptions, mol) -> tuple[int, int, int]:
    """``(occupied, correlated occupied, virtual)`` of ``mol`` before any SCF: the electrons, the frozen core
    (PySCF's chemical core) and the basis functions. PySCF may drop near-linear-dependent functions later;
    then there are fewer virtuals."""
    from pyscf.data import elements

    occupied = mol.nelectron // 2
    nocc = occupied - (elements.chemcore(mol) if options.molecule.frozen_core else 0)
    return occupied, nocc, mol.nao - occupied


def _announce(options: CCSDTOptions, mol) -> None:
    """:func:`problem_line` on stderr, once per job: not on the ranks of ``torchhpc ccsdt --nproc N`` (its
    launcher said it), nor where there is no (T) to run (prepare_triples says why)."""
    import os

    from torchhpc.ext.core.launch import LAUNCHER_ENV

    _, nocc, nvir = _orbital_counts(options, mol)
    if nvir >= 1 and nocc >= 1 and os.environ.get(LAUNCHER_ENV) != "1":
        print(problem_line(options, mol), file=sys.stderr, flush=True)


def problem_line(options: CCSDTOptions, mol) -> str:
    """How large the calculation of ``mol`` is, before it starts: basis functions, occupied (correlated) and
    virtual orbitals, and the (T)'s floating-point work (:func:`~torchhpc.ext.ccsdt.ops.triples_flops`)."""
    from .molecule import hill_formula
    from .ops import triples_flops

    occupied, nocc, nvir = _orbital_counts(options, mol)
    flops = triples_flops(max(nocc, 0), max(nvir, 0))
    units = ((1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP"))
    scale = next(((f, u) for f, u in units if flops >= f), (1.0, "FLOP"))
    formula = hill_formula([mol.atom_pure_symbol(n) for n in range(mol.natm)])
    return (f"ccsdt: {formula}, {options.molecule.basis}: {mol.nao} basis functions, {occupied} occupied orbitals "
            f"({nocc} correlated), {nvir} virtual; PySCF's RHF and CCSD run first, then the (T): "
            f"{flops / scale[0]:.3g} {scale[1]}")


def _prepare(options: CCSDTOptions, announce: bool = False) -> tuple[TriplesInputs, dict, list, object | None]:
    """The inputs of ``options`` (PySCF with ``options.dist.threads``, or the saved file); ``announce``:
    :func:`problem_line` on stderr before PySCF starts on a molecule."""
    from .io import load_inputs, prepare_triples

    if options.inputs is not None:
        return load_inputs(options.inputs), {}, [], None
    if (options.molecule.atom or options.molecule.xyz is not None) and options.molecule.basis:
        mol = _molecule(options)  # (no basis: prepare_triples says so)
        check_memory_before_scf(options, mol)
        if announce:
            _announce(options, mol)
    with _pyscf_threads(options.dist.threads):
        prepared = prepare_triples(options.molecule)
    return prepared.inputs, prepared.timings, prepared.warnings, prepared


@contextlib.contextmanager
def _pyscf_threads(threads: int):
    """PySCF's thread count set to ``threads`` inside the block (untouched when 0), restored after."""
    if not threads:
        yield
        return
    from .molecule import require_pyscf

    require_pyscf()
    from pyscf import lib

    before = lib.num_threads()
    lib.num_threads(threads)
    try:
        yield
    finally:
        lib.num_threads(before)


def _compute_distributed(options: CCSDTOptions, *, progress: bool, announce: bool = False) -> TriplesResult:
    """One torchrun rank: rank 0 prepares the inputs and hands every rank the replicated arrays and
    the integral slices it owns; the (T) is shared out (:mod:`~torchhpc.ext.ccsdt.distributed`)."""
    import numpy as np
    import torch
    import torch.distributed as dist

    from torchhpc.ext.core.distributed import distributed
    from torchhpc.ext.core.errors import DistributedError

    from .distributed import owner, triples_energy_distributed, wire_device
    from .io import TriplesInputs, save_inputs

    _refuse_triton(options)
    timeout_s = options.dist.timeout_s
    with distributed(device=options.dist.device, timeout_s=timeout_s) as ctx:
        rank, world = ctx.rank, ctx.world_size
        if options.dist.threads:
            torch.set_num_threads(options.dist.threads)
        failure, inputs, prepared, timings, notes, saved = None, None, None, {}, [], None
        if rank == 0:
            try:
                inputs, timings, notes, prepared = _prepare(options, announce)
                if options.save_inputs is not None:
                    saved = save_inputs(options.save_inputs, inputs)
            except Exception as exc:  # every rank must learn that rank 0 failed, or it waits for the timeout
                failure = exc
        small = None
        if inputs is not None:
            small = {name: getattr(inputs, name) for name in ("t1", "t2", "ovoo", "ovov", "fock_ov", "mo_energy")}
            small.update(e_hf=inputs.e_hf, e_ccsd=inputs.e_ccsd, meta=inputs.meta)
        box = [None if failure is None else str(failure).strip().splitlines()[0], small]
        try:
            dist.broadcast_object_list(box, src=0)
        except RuntimeError as exc:
            raise DistributedError(f"rank {rank}: rank 0 did not answer within {timeout_s:g} s "
                                   f"(--timeout-s) while preparing the inputs ({str(exc).splitlines()[0]})") from exc
        if failure is not None:
            raise failure
        if box[0] is not None:
            raise DistributedError(f"rank {rank}: rank 0 failed: {box[0]}")
        small = box[1]
        o, v = small["t1"].shape
        # the integral slices go to their owners only: no rank but 0 ever holds the whole (ia|bc)
        owned = {}
        wire = wire_device(ctx.backend, ctx.device)
        try:
            for x in range(o):
                r = owner(x, world)
                if rank == 0 and r == 0:
                    owned[x] = torch.as_tensor(inputs.ovvv[x])
                elif rank == 0:
                    dist.send(torch.as_tensor(np.ascontiguousarray(inputs.ovvv[x])).to(wire), dst=r)
                    if wire.type == "cuda":  # NCCL's send returns before the bytes left: one slice on the GPU at a time
                        torch.cuda.synchronize(wire)
                elif r == rank:
                    owned[x] = torch.empty((v, v, v), dtype=torch.float64, device=wire)
                    dist.recv(owned[x], src=0)
        except RuntimeError as exc:
            raise DistributedError(f"rank {rank}: a peer died while the integral slices were handed out "
                                   f"({str(exc).splitlines()[0]})") from exc
        if rank != 0:
            inputs = TriplesInputs(ovvv=None, **small)
        source = inputs.meta.get("formula") or (str(options.inputs) if options.inputs is not None else "molecule")
        t0 = time.perf_counter()
        run = triples_energy_distributed(small["t1"], small["t2"], owned, small["ovoo"], small["ovov"],
                                         small["fock_ov"], small["mo_energy"], device=ctx.device,
                                         max_memory=options.max_memory, timeout_s=timeout_s,
                                         progress=progress and rank == 0)
        seconds = time.perf_counter() - t0
        e_ref = None
        if options.compare_pyscf and prepared is not None:
            t0 = time.perf_counter()
            e_ref = prepared.pyscf_triples_energy()
            timings["pyscf_t"] = time.perf_counter() - t0
        stats = {**run.summary(), "backend": ctx.backend}
    return TriplesResult(inputs=inputs, e_t=run.energy, seconds=seconds, backend="torch", device=ctx.device,
                         source=source, timings=timings, e_t_pyscf=e_ref, saved=saved, warnings=notes,
                         mode="distributed", stats=stats)


def launch(options: CCSDTOptions) -> int:
    """``torchhpc ccsdt --nproc N``: check the input here (one line on bad input), then run the job on
    ``N`` torchrun ranks with the resolved options (written to a temporary YAML file).

    Raises:
        InputError: a malformed geometry or inputs file (before any rank starts).
        JobError: the job failed: the one line of the rank that failed first.
    """
    from torchhpc.ext.core.launch import check_device, relaunch

    _refuse_triton(options)
    built = None
    if options.inputs is None:
        built = _molecule(options)
        check_memory_before_scf(options, built)
    else:  # the per-rank budget, checked before any rank starts
        from .io import load_inputs
        from .slices import sliced_layout

        shape = load_inputs(options.inputs).t1.shape
        if options.max_memory is not None or options.dist.device == "cpu":
            sliced_layout(*shape, 1, options.max_memory or DEFAULT_MAX_MEMORY_MB)
    check_device(options)  # (relaunch checks it too: here so that its one line comes before the size line)
    if built is not None and not options.json:  # as the job starts: the launcher passes the ranks' lines at the end
        _announce(options, built)
    return relaunch(options, "torchhpc.trainers.ccsdt", options.dist.nproc)


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
    st = result.stats or {}
    if result.mode == "out-of-core":
        lines.append(f"out of core   {st['capacity']} of {inputs.nocc} integral slices cached on {result.device.type}, "
                     f"{st['blocks']} blocks, hit rate {st['hit_rate']:.0%}, {st['bytes_loaded'] / 2**20:.1f} MB "
                     "streamed")
    elif result.mode == "distributed":
        lines.append(f"ranks         {st['ranks']} ({st['backend']}), load imbalance {st['imbalance']:.2f} "
                     f"(max/mean rank time; {st['predicted_imbalance']:.2f} by cost), "
                     f"{st['bytes_fetched'] / 2**20:.2f} MB of integral slices fetched, "
                     f"cache hit rate {st['hit_rate']:.0%}")
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


def run_ccsdt(options: CCSDTOptions) -> int:
    """``torchhpc ccsdt``: with ``--nproc N`` (outside torchrun) :func:`launch` the job on N ranks; else
    :func:`compute` and print the report (or one JSON object, ``--json``) on rank 0, the warnings of the
    PySCF steps on stderr."""
    from torchhpc.ext.core.distributed import launched_by_torchrun, torchrun_rank
    from torchhpc.ext.core.paths import check_output

    if options.save_inputs is not None:  # before PySCF or any rank runs
        check_output(options.save_inputs, inputs=[options.inputs, options.molecule.xyz], what="--save-inputs")
    if options.dist.nproc > 1 and not launched_by_torchrun():
        return launch(options)
    result = compute(options, progress=not options.json and sys.stderr.isatty(), announce=not options.json)
    if torchrun_rank()[0] != 0:
        return 0
    from torchhpc.ext.core.errors import warn

    for line in result.warnings:
        warn(line)
    if options.json:
        print(json.dumps(result.as_json()))
    else:
        print("\n".join(report_lines(result)))
    return 0


__all__ = ["TriplesResult", "compute", "launch", "report_lines", "run_ccsdt"]
