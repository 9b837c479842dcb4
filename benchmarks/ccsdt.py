"""Benchmark: the closed-shell (T) energy, torchhpc vs PySCF's ``pyscf.cc.ccsd_t.kernel``.

For each system PySCF runs RHF and CCSD (frozen core, no point-group symmetry) once; then,
on the same amplitudes and integrals, in one process and with the same thread count:

  * torchhpc ``triples_energy`` (the blocked torch path on the CPU),
  * PySCF ``ccsd_t.kernel`` (its C/OpenMP code; the anchor),

timed in interleaved repeats (median and best), after checking that both give the same
E(T) to 1e-10 Eh (the benchmark refuses to time a wrong answer). Reports the time ratio
PySCF / torchhpc (> 1: we are faster) and GFLOP/s against the ``2 o^3 v^4 + 2 o^4 v^3``
count of :func:`torchhpc.ext.ccsdt.triples_flops`. With a CUDA device a GPU section times
the fused Triton kernel and the torch path on the GPU against the same PySCF CPU time.

    python benchmarks/ccsdt.py                        # all systems, 3 repeats, torch's thread count
    python benchmarks/ccsdt.py --systems h2o-dz,h2o-tz --repeats 5 --threads 2
    python benchmarks/ccsdt.py --quick                # the two smallest systems (seconds)

Writes ``<out>/ccsdt/triples.json`` and ``triples.png``. The CCSD of the largest system is
stopped after ``--ccsd-cycles`` iterations by default: the (T) cost does not depend on how
converged the amplitudes are, and both sides get the same ones. Timings on a machine shared
with other jobs move by tens of percent between runs; the JSON records the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

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


def solve(geometry: str, basis: str, ccsd_cycles: int | None):
    """PySCF RHF + frozen-core CCSD; returns (mycc, eris, inputs, setup seconds, converged)."""
    from pyscf import cc, gto, scf

    from torchhpc.ext.ccsdt import from_pyscf

    t0 = time.perf_counter()
    mol = gto.M(atom=geometry, basis=basis, verbose=0, symmetry=False)
    mf = scf.RHF(mol).run(conv_tol=1e-10)
    mycc = cc.CCSD(mf).set_frozen()
    if ccsd_cycles:
        mycc.max_cycle = ccsd_cycles
    mycc.kernel()
    eris = mycc.ao2mo()
    inputs = from_pyscf(mycc, eris)
    return mycc, eris, inputs, time.perf_counter() - t0, bool(mycc.converged)


def bench_system(name: str, args) -> dict:
    from pyscf.cc import ccsd_t

    from torchhpc.ext.ccsdt import triples_energy, triples_flops

    label, geometry, basis = SYSTEMS[name]
    cycles = args.ccsd_cycles if name == "benzene-dz" else None
    mycc, eris, inputs, setup_s, converged = solve(geometry, basis, cycles)
    o, v = inputs.nocc, inputs.nvir
    arrays = [torch.from_numpy(a) for a in inputs.arrays()]
    impls = {
        "torchhpc": lambda: triples_energy(*arrays, backend="torch", num_threads=args.threads),
        "pyscf": lambda: float(ccsd_t.kernel(mycc, eris, mycc.t1.copy(), mycc.t2.copy(), verbose=0)),
    }
    # correctness first
    energies = {k: fn() for k, fn in impls.items()}
    diff = abs(energies["torchhpc"] - energies["pyscf"])
    if diff > 1e-10:
        raise SystemExit(f"{label}: torchhpc and PySCF disagree on E(T) by {diff:.3e} Eh")
    times: dict[str, list[float]] = {k: [] for k in impls}
    for _ in range(args.repeats):
        for k, fn in impls.items():  # interleaved, so load changes hit both alike
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    flops = triples_flops(o, v)
    med = {k: statistics.median(ts) for k, ts in times.items()}
    best = {k: min(ts) for k, ts in times.items()}
    row = {
        "system": label, "nocc": o, "nvir": v, "nao": inputs.meta.get("nao"), "ccsd_converged": converged,
        "setup_seconds": round(setup_s, 2), "e_t": energies["torchhpc"], "e_t_pyscf": energies["pyscf"],
        "abs_diff": diff, "gflop": flops / 1e9, "seconds_median": med, "seconds_best": best,
        "seconds_all": times,
        "ratio_pyscf_over_torchhpc_median": med["pyscf"] / med["torchhpc"],
        "ratio_pyscf_over_torchhpc_best": best["pyscf"] / best["torchhpc"],
        "gflops_median": {k: flops / t / 1e9 for k, t in med.items()},
    }
    if torch.cuda.is_available() and not args.no_gpu:
        row["gpu"] = bench_gpu(arrays, flops, med["pyscf"], args.repeats)
    return row


def bench_gpu(arrays, flops: float, pyscf_seconds: float, repeats: int) -> dict:
    """Fused Triton kernel and the torch path on CUDA, against PySCF's CPU time."""
    from torchhpc.ext.ccsdt import triples_energy

    dev = torch.device("cuda")
    gpu_arrays = [a.to(dev) for a in arrays]
    out = {"device": torch.cuda.get_device_name()}
    ref = triples_energy(*arrays, backend="torch")
    for backend in ("triton", "torch"):
        e = triples_energy(*gpu_arrays, backend=backend)  # warm-up (Triton compiles here)
        ts = []
        for _ in range(repeats):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            triples_energy(*gpu_arrays, backend=backend)
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
        t = statistics.median(ts)
        out[backend] = {"seconds_median": t, "gflops": flops / t / 1e9, "abs_diff_vs_cpu": abs(e - ref),
                        "speedup_vs_pyscf_cpu": pyscf_seconds / t}
    return out


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['system']}\no={r['nocc']} v={r['nvir']}" for r in rows]
    x = range(len(rows))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8), dpi=110)
    w = 0.38
    ax1.bar([i - w / 2 for i in x], [r["seconds_median"]["torchhpc"] for r in rows], w, label="torchhpc", color="C0")
    ax1.bar([i + w / 2 for i in x], [r["seconds_median"]["pyscf"] for r in rows], w, label="PySCF", color="C7")
    ax1.set_yscale("log")
    ax1.set_ylabel("(T) seconds (median)")
    ax1.set_xticks(list(x), labels, fontsize=7)
    ax1.legend()
    ax2.bar([i - w / 2 for i in x], [r["gflops_median"]["torchhpc"] for r in rows], w, label="torchhpc", color="C0")
    ax2.bar([i + w / 2 for i in x], [r["gflops_median"]["pyscf"] for r in rows], w, label="PySCF", color="C7")
    ax2.set_ylabel("GFLOP/s (2o³v⁴ + 2o⁴v³)")
    ax2.set_xticks(list(x), labels, fontsize=7)
    fig.suptitle(f"closed-shell (T), {rows[0]['threads']} CPU thread(s), same inputs", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated from: {', '.join(SYSTEMS)}")
    p.add_argument("--quick", action="store_true", help="only h2o-dz and h2o-adz, 2 repeats")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats per implementation")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for both (default: torch's)")
    p.add_argument("--ccsd-cycles", type=int, default=6, help="CCSD iterations for benzene (0: converge)")
    p.add_argument("--no-gpu", action="store_true", help="skip the GPU section even with CUDA")
    p.add_argument("--out", default="runs/bench", help="output root")
    args = p.parse_args(argv)
    try:
        import pyscf  # noqa: F401
    except ImportError:
        print("benchmarks/ccsdt.py needs PySCF (pip install 'torchhpc[chem]')", file=sys.stderr)
        return 1
    from pyscf import lib

    names = ["h2o-dz", "h2o-adz"] if args.quick else [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        p.error(f"unknown system {unknown[0]!r} (choose from {', '.join(SYSTEMS)})")
    if args.quick:
        args.repeats = min(args.repeats, 2)
    args.threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(args.threads)
    lib.num_threads(args.threads)
    out_dir = Path(args.out) / "ccsdt"
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    print(f"{'system':<18} {'o':>3} {'v':>4} {'GFLOP':>8} {'PySCF s':>9} {'ours s':>9} {'PySCF/ours':>10} "
          f"{'ours GF/s':>9} {'PySCF GF/s':>10} {'|dE| Eh':>9}")
    for name in names:
        load = os.getloadavg()[0]
        row = bench_system(name, args)
        row["threads"] = args.threads
        row["load_average_1min_before"] = load
        rows.append(row)
        m = row["seconds_median"]
        print(f"{row['system']:<18} {row['nocc']:>3} {row['nvir']:>4} {row['gflop']:>8.1f} {m['pyscf']:>9.3f} "
              f"{m['torchhpc']:>9.3f} {row['ratio_pyscf_over_torchhpc_median']:>9.2f}x "
              f"{row['gflops_median']['torchhpc']:>9.1f} {row['gflops_median']['pyscf']:>10.1f} "
              f"{row['abs_diff']:>9.1e}", flush=True)
        if "gpu" in row:
            g = row["gpu"]
            print(f"  GPU {g['device']}: triton {g['triton']['seconds_median']:.4f} s "
                  f"({g['triton']['gflops']:.0f} GF/s, {g['triton']['speedup_vs_pyscf_cpu']:.1f}x PySCF CPU), "
                  f"torch {g['torch']['seconds_median']:.4f} s ({g['torch']['gflops']:.0f} GF/s)", flush=True)
    summary = {
        "what": "closed-shell (T): torchhpc triples_energy vs pyscf.cc.ccsd_t.kernel on the same inputs",
        "threads": args.threads, "repeats": args.repeats, "torch": torch.__version__,
        "pyscf": pyscf.__version__, "cpu_count": os.cpu_count(), "cuda": torch.cuda.is_available(),
        "rows": rows,
    }
    (out_dir / "triples.json").write_text(json.dumps(summary, indent=1))
    plot(rows, out_dir / "triples.png")
    print(f"wrote {out_dir / 'triples.json'} and {out_dir / 'triples.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
