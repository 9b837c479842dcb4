"""Benchmark: the closed-shell (T) energy, torchhpc vs PySCF's ``pyscf.cc.ccsd_t.kernel``.

For each system PySCF runs RHF and CCSD (frozen core, no point-group symmetry) once, through
:func:`torchhpc.ext.ccsdt.prepare_triples`; then, on the same amplitudes and integrals, in one
process and with the same thread count:

  * torchhpc ``triples_energy`` (the blocked torch path on the CPU),
  * PySCF ``ccsd_t.kernel`` (its C/OpenMP code; the anchor),

timed in interleaved repeats (``ext/core/bench.py``: min / median / max), after checking that both
give the same E(T) to 1e-10 Eh (the benchmark refuses to time a wrong answer). Reports the speed-up
PySCF / torchhpc (> 1: we are faster) and GFLOP/s against the ``2 o^3 v^4 + 2 o^4 v^3`` count of
:func:`torchhpc.ext.ccsdt.triples_flops`. With a CUDA device (``--device auto`` or ``cuda``) the
row also times the fused Triton kernel and the torch path on the GPU against the same PySCF CPU time.

    python benchmarks/ccsdt.py                        # all systems, 3 repeats, torch's thread count
    python benchmarks/ccsdt.py --systems h2o-dz,h2o-tz --repeats 5 --threads 2
    python benchmarks/ccsdt.py --quick                # the two smallest systems (seconds)

Writes ``<out>/ccsdt/triples.json`` (the suite's results schema), ``triples.png`` (seconds) and
``triples_gflops.png``. The CCSD of the largest system is stopped after ``--ccsd-cycles``
iterations by default: the (T) cost does not depend on how converged the amplitudes are, and both
sides get the same ones. Timings on a machine shared with other jobs move by tens of percent
between runs; each row records the load average before it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from torchhpc.ext.core.bench import (
    bar_plot,
    benchmark_parser,
    print_rows,
    result_row,
    time_interleaved,
    write_results,
)

WATER = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"
BENZENE = ("C 0.000 1.396 0; C 1.209 0.698 0; C 1.209 -0.698 0; C 0.000 -1.396 0; C -1.209 -0.698 0; "
           "C -1.209 0.698 0; H 0.000 2.479 0; H 2.147 1.240 0; H 2.147 -1.240 0; H 0.000 -2.479 0; "
           "H -2.147 -1.240 0; H -2.147 1.240 0")

#: name -> (label, geometry, basis); frozen core everywhere
SYSTEMS = {
    "h2o-dz": ("H2O cc-pVDZ", WATER, "cc-pvdz"),
    "h2o-adz": ("H2O aug-cc-pVDZ", WATER, "aug-cc-pvdz"),
    "h2o-tz": ("H2O cc-pVTZ", WATER, "cc-pvtz"),
    "h2o-atz": ("H2O aug-cc-pVTZ", WATER, "aug-cc-pvtz"),
    "benzene-dz": ("C6H6 cc-pVDZ", BENZENE, "cc-pvdz"),
}


def bench_system(name: str, args, gpu: bool) -> dict:
    """One results row: torchhpc (CPU) and PySCF timed on the same inputs, plus the GPU candidates."""
    from torchhpc.ext.ccsdt import prepare_triples, triples_energy, triples_flops
    from torchhpc.ext.ccsdt.config import MoleculeOptions

    label, geometry, basis = SYSTEMS[name]
    load = os.getloadavg()[0]
    cycles = args.ccsd_cycles if name == "benzene-dz" else None
    prepared = prepare_triples(MoleculeOptions(atom=geometry, basis=basis, frozen_core=True),
                               ccsd_max_cycle=cycles or None)
    inputs = prepared.inputs
    arrays = [torch.from_numpy(a) for a in inputs.arrays()]
    candidates = {
        "torchhpc": lambda: triples_energy(*arrays, backend="torch", num_threads=args.threads),
        "pyscf": prepared.pyscf_triples_energy,
    }
    # correctness first (these calls are also the warm-up)
    e_ours, e_pyscf = (fn() for fn in candidates.values())
    diff = abs(e_ours - e_pyscf)
    if diff > 1e-10:
        raise SystemExit(f"{label}: torchhpc and PySCF disagree on E(T) by {diff:.3e} Eh")
    timings = time_interleaved(candidates, repeats=args.repeats, warmup=0)
    extra = {}
    if gpu:
        dev = torch.device("cuda")
        gpu_arrays = [a.to(dev) for a in arrays]
        gpu_candidates = {f"{b}_cuda": (lambda b=b: triples_energy(*gpu_arrays, backend=b)) for b in ("triton", "torch")}
        extra["gpu"] = torch.cuda.get_device_name()
        extra["abs_diff_gpu_vs_cpu"] = {k: abs(fn() - e_ours) for k, fn in gpu_candidates.items()}
        timings |= time_interleaved(gpu_candidates, repeats=args.repeats, warmup=1, sync=torch.cuda.synchronize)
    flops = triples_flops(inputs.nocc, inputs.nvir)
    return result_row(
        label, timings, anchor="pyscf", nocc=inputs.nocc, nvir=inputs.nvir, nao=inputs.meta.get("nao"),
        ccsd_converged=bool(prepared.mycc.converged), setup_seconds=round(sum(prepared.timings.values()), 2),
        e_t=e_ours, e_t_pyscf=e_pyscf, abs_diff=diff, gflop=flops / 1e9,
        gflops_median={k: flops / t.median / 1e9 for k, t in timings.items()},
        threads=args.threads, load_average_1min_before=load, **extra,
    )


def main(argv=None) -> int:
    p = benchmark_parser(__doc__, repeats=3)
    p.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated from: {', '.join(SYSTEMS)}")
    p.add_argument("--quick", action="store_true", help="only h2o-dz and h2o-adz, at most 2 repeats")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for both (default: torch's)")
    p.add_argument("--ccsd-cycles", type=int, default=6, help="CCSD iterations for benzene (0: converge)")
    p.add_argument("--no-gpu", action="store_true", help="skip the GPU candidates even with CUDA")
    args = p.parse_args(argv)
    try:
        import pyscf
    except ImportError:
        print("benchmarks/ccsdt.py needs PySCF (pip install 'torchhpc[chem]')", file=sys.stderr)
        return 1
    from pyscf import lib

    from torchhpc.ext.core.device import pick_device

    names = ["h2o-dz", "h2o-adz"] if args.quick else [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        p.error(f"unknown system {unknown[0]!r} (choose from {', '.join(SYSTEMS)})")
    if args.quick:
        args.repeats = min(args.repeats, 2)
    gpu = pick_device(args.device).type == "cuda" and not args.no_gpu
    args.threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(args.threads)
    lib.num_threads(args.threads)
    rows = []
    for name in names:
        rows.append(bench_system(name, args, gpu))
        print_rows(rows[-1:])
    params = {"what": "closed-shell (T): torchhpc triples_energy vs pyscf.cc.ccsd_t.kernel on the same inputs",
              "systems": names, "threads": args.threads, "repeats": args.repeats, "ccsd_cycles": args.ccsd_cycles,
              "pyscf": pyscf.__version__}
    path = write_results("ccsdt", "triples", rows, out=args.out, params=params)
    groups = [f"{r['name']}\no={r['nocc']} v={r['nvir']}" for r in rows]
    candidates = [k for k in rows[0] if isinstance(rows[0][k], dict) and "median_s" in rows[0][k]]
    title = f"closed-shell (T), {args.threads} CPU thread(s), same inputs"
    bar_plot(Path(path).with_suffix(".png"), groups, {c: [r[c]["median_s"] for r in rows] for c in candidates},
             ylabel="(T) seconds (median)", title=title, logy=True, highlight="torchhpc")
    bar_plot(Path(path).with_name("triples_gflops.png"), groups,
             {c: [r["gflops_median"][c] for r in rows] for c in candidates},
             ylabel="GFLOP/s (2o³v⁴ + 2o⁴v³)", title=title, highlight="torchhpc")
    return 0


if __name__ == "__main__":
    sys.exit(main())
