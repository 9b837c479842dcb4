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
    python benchmarks/ccsdt.py --scaling              # 1 -> 2 processes beside PySCF, and the cost model

``--scaling`` runs one 2-rank torchrun job that times, in turns on the same inputs, PySCF's (T) on 1
and 2 threads, ours in one process (in core, and the sliced path the ranks run) and ours on 2
processes (gloo); it calibrates the cost model (:mod:`torchhpc.ext.ccsdt.costmodel`) on those runs and
a measured loopback exchange, compares its 2-process prediction with the measurement, and prints its
prediction for 1 -> 1,024 GPUs of Summit-like nodes (``scaling.json``).

Writes ``<out>/ccsdt/triples.json`` (the suite's results schema), ``triples.png`` (seconds) and
``triples_gflops.png``. The CCSD of the largest system is stopped after ``--ccsd-cycles``
iterations by default: the (T) cost does not depend on how converged the amplitudes are, and both
sides get the same ones. Timings on a machine shared with other jobs move by tens of percent
between runs; each row records the load average before it.
"""

from __future__ import annotations

import argparse
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


# ----------------------------------------------------------------------------- strong scaling 1 -> 2 processes

#: the problem the cost model predicts on Summit-like nodes: large enough for 1,024 GPUs, and one (T) slice
#: set (three slices and a triple's buffers) still fits a 16 GB V100
SUMMIT_PROBLEM = (60, 500)
SUMMIT_RANKS = (1, 6, 24, 96, 384, 1024)


def scaling_worker(args) -> int:
    """One torchrun rank of ``--scaling``: every candidate timed in turns inside one 2-rank job.

    Rank 0 solves the molecule (PySCF) and saves the inputs; per round, rank 0 alone times PySCF's (T)
    on 1 and 2 threads and ours in one process (rank 1 waits at a barrier), then both ranks time the
    distributed (T). A point-to-point exchange of one slice measures the loopback bandwidth and latency.
    """
    import json
    import time

    import torch.distributed as dist

    from torchhpc.ext.ccsdt import load_inputs, prepare_triples, save_inputs, triples_energy
    from torchhpc.ext.ccsdt.config import MoleculeOptions
    from torchhpc.ext.ccsdt.distributed import triples_energy_distributed
    from torchhpc.ext.ccsdt.slices import triples_energy_out_of_core
    from torchhpc.ext.core.distributed import distributed

    torch.set_num_threads(1)
    npz, out = Path(args.scaling_worker[0]), Path(args.scaling_worker[1])
    with distributed(device="cpu", timeout_s=1800) as ctx:
        rank = ctx.rank
        prepared = None
        if rank == 0:
            label, geometry, basis = SYSTEMS[args.scaling_system]
            prepared = prepare_triples(MoleculeOptions(atom=geometry, basis=basis, frozen_core=True))
            save_inputs(npz, prepared.inputs)
        dist.barrier()
        inputs = load_inputs(npz)
        arrays = [torch.from_numpy(a) for a in inputs.arrays()]
        o, v = inputs.nocc, inputs.nvir
        # loopback point-to-point: one (v, v, v) slice and one 8-byte message, 5 round trips each
        link = {}
        for name, n in (("slice", v**3), ("latency", 1)):
            buf = torch.zeros(n, dtype=torch.float64)
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(5):
                if rank == 0:
                    dist.send(buf, 1)
                    dist.recv(buf, 1)
                else:
                    dist.recv(buf, 0)
                    dist.send(buf, 0)
            link[name] = (time.perf_counter() - t0) / 10  # one way
        from pyscf import lib

        def alone(fn):
            def call():
                if rank == 0:
                    fn()
                dist.barrier()
            return call

        def pyscf_threads(n):
            def call():
                lib.num_threads(n)
                try:
                    prepared.pyscf_triples_energy()
                finally:  # PySCF's OpenMP setting is torch's too: back to one thread per rank
                    lib.num_threads(1)
                    torch.set_num_threads(1)
            return call

        last = {}

        def two_ranks():
            run = triples_energy_distributed(*arrays, max_memory=DEFAULT_MEMORY)
            last["run"] = run

        candidates = {
            "pyscf_1thread": alone(pyscf_threads(1)),
            "pyscf_2threads": alone(pyscf_threads(2)),
            "torchhpc_1process": alone(lambda: triples_energy(*arrays, num_threads=1)),
            "torchhpc_1process_sliced": alone(lambda: triples_energy_out_of_core(*arrays, max_memory=DEFAULT_MEMORY)),
            "torchhpc_2processes": two_ranks,
        }
        checks = {}
        if rank == 0:
            checks = {"pyscf": prepared.pyscf_triples_energy(), "one": triples_energy(*arrays, num_threads=1)}
        dist.barrier()
        two_ranks()
        timings = time_interleaved(candidates, repeats=args.repeats, warmup=0, sync=dist.barrier)
        if rank == 0:
            run = last["run"]
            row = {"name": SYSTEMS[args.scaling_system][0], "nocc": o, "nvir": v,
                   "timings": {k: t.times for k, t in timings.items()}, "e_t_pyscf": checks["pyscf"],
                   "e_t_one_process": checks["one"], "e_t_two_processes": run.energy,
                   "two_processes": run.summary(), "link_slice_s": link["slice"], "link_latency_s": link["latency"],
                   "slice_bytes": 8 * v**3}
            out.write_text(json.dumps(row))
    return 0


#: per-rank budget (MB) of the scaling runs: every slice cached (as in core)
DEFAULT_MEMORY = 4000.0


def run_scaling(args) -> int:
    """``--scaling``: 1 -> 2 processes beside PySCF 1 -> 2 threads on the same inputs, the cost model
    calibrated on them, and its prediction for 1 -> 1,024 GPUs of Summit-like nodes."""
    import json
    import subprocess
    import tempfile

    from torchhpc.ext.ccsdt.costmodel import SUMMIT_V100, calibrate, predict, scaling_table
    from torchhpc.ext.ccsdt.ops import triples_flops
    from torchhpc.ext.core.bench import Timing

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "scaling.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", __file__,
               "--scaling-system", args.scaling_system, "--repeats", str(args.repeats),
               "--scaling-worker", str(Path(tmp) / "inputs.npz"), str(out)]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        res = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if res.returncode != 0:
            print(res.stderr[-4000:], file=sys.stderr)
            raise SystemExit("the 2-process scaling job failed")
        got = json.loads(out.read_text())
    timings = {k: Timing(v) for k, v in got.pop("timings").items()}
    o, v = got.pop("nocc"), got.pop("nvir")
    name = got.pop("name")
    for key in ("e_t_one_process", "e_t_two_processes"):
        if abs(got[key] - got["e_t_pyscf"]) > 1e-10:
            raise SystemExit(f"{key} differs from PySCF's E(T) by {abs(got[key] - got['e_t_pyscf']):.2e} Eh")
    med = {k: t.median for k, t in timings.items()}
    bandwidth = got["slice_bytes"] / max(got["link_slice_s"] - got["link_latency_s"], 1e-9)
    machine = calibrate("this VM, gloo loopback", med["torchhpc_1process_sliced"], o, v, bandwidth,
                        got["link_latency_s"])
    model2 = predict(o, v, 2, machine, max_memory_mb=DEFAULT_MEMORY)
    gflop = triples_flops(o, v) / 1e9
    row = result_row(
        name, timings, anchor="pyscf_1thread", nocc=o, nvir=v, gflop=gflop,
        scaling_torchhpc=med["torchhpc_1process"] / med["torchhpc_2processes"],
        scaling_torchhpc_sliced=med["torchhpc_1process_sliced"] / med["torchhpc_2processes"],
        scaling_pyscf=med["pyscf_1thread"] / med["pyscf_2threads"],
        torchhpc_2p_vs_pyscf_2t=med["pyscf_2threads"] / med["torchhpc_2processes"],
        model_2p_seconds=model2.seconds, model_2p_error=model2.seconds / med["torchhpc_2processes"] - 1,
        loopback_bandwidth_gbs=bandwidth / 1e9, loopback_latency_us=got["link_latency_s"] * 1e6,
        abs_diff_2p_vs_1p=abs(got["e_t_two_processes"] - got["e_t_one_process"]),
        abs_diff_2p_vs_pyscf=abs(got["e_t_two_processes"] - got["e_t_pyscf"]), **got,
    )
    print_rows([row])
    summit = {g: scaling_table(*SUMMIT_PROBLEM, SUMMIT_V100, SUMMIT_RANKS, granularity=g) for g in ("pair", "triple")}
    print(f"\ncost model, (T) of o={SUMMIT_PROBLEM[0]}, v={SUMMIT_PROBLEM[1]} "
          f"({triples_flops(*SUMMIT_PROBLEM) / 1e15:.1f} PFLOP) on {SUMMIT_V100.name}")
    print(f"  {'GPUs':>5} {'nodes':>5} | {'work items: occupied pairs (as run)':^38} | {'work items: triples':^38}")
    print(f"  {'':>5} {'':>5} | {'s':>8} {'eff':>6} {'imbal':>6} {'TB fetched':>10} {'hits':>5} | "
          f"{'s':>8} {'eff':>6} {'imbal':>6} {'TB fetched':>10} {'hits':>5}")
    for a, b in zip(summit["pair"], summit["triple"], strict=True):
        cells = [f"{r['seconds']:8.1f} {r['efficiency']:6.1%} {r['imbalance']:6.2f} {r['fetched_gb'] / 1e3:10.1f} "
                 f"{r['hit_rate']:5.0%}" for r in (a, b)]
        print(f"  {a['ranks']:>5} {a['nodes']:>5} | {cells[0]} | {cells[1]}")
    params = {"what": "strong scaling 1 -> 2 processes (ours) beside PySCF 1 -> 2 threads, same inputs; cost model",
              "repeats": args.repeats, "summit_problem": SUMMIT_PROBLEM, "summit_machine": SUMMIT_V100.__dict__,
              "calibrated_machine": machine.__dict__, "summit_prediction": summit}
    write_results("ccsdt", "scaling", [row], out=args.out, params=params)
    return 0


def main(argv=None) -> int:
    p = benchmark_parser(__doc__, repeats=3)
    p.add_argument("--scaling", action="store_true",
                   help="strong scaling 1 -> 2 processes beside PySCF 1 -> 2 threads, and the cost model")
    p.add_argument("--scaling-system", default="h2o-atz", choices=list(SYSTEMS), help="the system of --scaling")
    p.add_argument("--scaling-worker", nargs=2, metavar=("NPZ", "OUT"), help=argparse.SUPPRESS)
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
    if args.scaling_worker:
        return scaling_worker(args)
    if args.scaling:
        return run_scaling(args)
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
