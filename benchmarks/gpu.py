"""``make gpu-check``: every GPU path beside its anchor, on one GPU and its host's cores, in one run.

    python benchmarks/gpu.py [--out runs/bench] [--only segalign,ccsdt] [--device cuda]
    python benchmarks/gpu.py --device cpu      # on a machine without a GPU: lists each step and its
                                               # limit, runs the steps that need no GPU
    python benchmarks/gpu.py --dry-run         # lists the steps, runs nothing

Each step runs in its own process with its own time limit (the whole run fits in 8 minutes); a step
that fails, times out or lacks what it needs (no CUDA, a missing anchor or input) is reported with the
reason and the run goes on.  The result is one JSON in the suite's schema (``<out>/core/gpu-check.json``)
and a table on stdout.

| step | ours | anchor | figure |
|---|---|---|---|
| kernels | every Triton kernel test, compiled on the GPU (``gpu``-marked ones too) | the torch twins | passed / failed / skipped |
| segalign | ``torchhpc align`` on CUDA + all cores (whole and ``--nogapped``), on all cores (whole), with ``--gapped-by triton`` (whole, and whether its MAF is the same bytes); warm, a first run apart | LASTZ 1.04 on one core, the same options | LASTZ s / ours s, and in-process s |
| ccsdt | E(T), FP64: the pair-blocked GEMMs, the fused kernel on FP64 MMA (tiles 8, 16), the fused CUDA-core kernel | the card's FP64 tensor-core peak (H100 SXM / H200: 67 TFLOP/s; ``PEAKS``); cuBLAS DGEMM | TFLOP/s, % of peak |
| ccsdt-large (only by ``--only``: up to 4 minutes) | E(T) at o=40 v=300: the pair GEMMs and the MMA kernel, one call each | the same | TFLOP/s, % of peak |
| foresight | our compressor on CUDA (its frames by the host's zstd, and by nvCOMP where installed) | SZ3, ZFP, fpzip on one CPU core | MB/s and ratio |
| kraken | table-batched pooling + fused row-wise AdaGrad (two launches) | per-table ``nn.EmbeddingBag`` + ``torch.optim.Adagrad`` | ms, GB/s, % of HBM |
| sched | the batched simulator's Triton path on CUDA (one program per window) | the per-window reference; the compiled CPU path | decisions/s |
| symnmf | Gauss-Newton SymNMF on CUDA, SBM n = 100,000 | the same on all CPU cores | s, ARI |
| pliner | the search on real TF32 (CUDA) | the fp32 reference on CUDA | runs, ops found |

Inputs it reads: the H. pylori pair from the shared data (``$TORCHHPC_SHARED_DATA/genomes``; on a GPU
machine with no ``../shared``, copy the two FASTA files and set the variable), LASTZ on ``PATH`` (or
``$LASTZ``).  On a GPU machine with no internet: ``benchmarks/gpu_machine.sh`` (``docs/core/guide.md``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
CLI = [PY, "-m", "torchhpc.trainers.cli"]
# Datasheet peaks by the name CUDA reports: (FP64 tensor-core TFLOP/s, HBM GB/s).  The first name that is
# a part of the device's name wins, so the specific ones come first.  A device not listed gets no % columns;
# so do a MIG slice (a part of the card) and a GH200 (its HBM differs between versions of the same name).
PEAKS = (
    ("H200 NVL", (60.0, 4800.0)),
    ("H200", (67.0, 4800.0)),
    ("H100 NVL", (60.0, 3900.0)),
    ("H100 PCIe", (51.0, 2000.0)),
    ("H100", (67.0, 3350.0)),  # SXM5, "NVIDIA H100 80GB HBM3"
    ("A100-SXM4-80GB", (19.5, 2039.0)),
    ("A100 80GB PCIe", (19.5, 1935.0)),
    ("A100", (19.5, 1555.0)),  # the 40 GB cards
)


def device_peaks(name: str | None) -> tuple[float, float] | None:
    """``(FP64 TFLOP/s, HBM GB/s)`` of the GPU called ``name`` (:data:`PEAKS`), None when it is not listed."""
    if not name or " MIG " in name or "GH200" in name:
        return None
    for part, peaks in PEAKS:
        if part in name:
            return peaks
    return None


def _peaks() -> tuple[float, float] | None:
    import torch

    return device_peaks(torch.cuda.get_device_name(0)) if torch.cuda.is_available() else None


@dataclasses.dataclass
class Step:
    name: str
    limit_s: int
    needs_cuda: bool
    what: str
    default: bool = True
    """part of a plain run (else only by ``--only``: longer than the 8 minutes allow)"""


STEPS = [
    Step("kernels", 100, True, "every Triton kernel test compiled on the GPU, against its torch twin"),
    Step("segalign", 140, True, "torchhpc align (CUDA / all cores) against LASTZ on one core, whole and filter"),
    Step("ccsdt", 50, True, "E(T), FP64, o=20 v=120 and o=10 v=60: pair GEMMs, fused MMA and CUDA-core kernels"),
    Step("foresight", 60, True, "our codec on CUDA against SZ3 / ZFP / fpzip on one core, 256^3; nvCOMP frames"),
    Step("kraken", 35, True, "table-batched pooling + fused AdaGrad against per-table EmbeddingBag + Adagrad"),
    Step("sched", 30, True, "the batched simulator on CUDA against the compiled CPU path"),
    Step("symnmf", 35, True, "Gauss-Newton SymNMF, SBM n = 100,000, k = 10: CUDA against all cores"),
    Step("pliner", 30, True, "PLiNER on real TF32: ops found and runs"),
    Step("ccsdt-large", 240, True, "E(T), FP64, o=40 v=300 (1.2 PFLOP): pair GEMMs and the fused MMA kernel, "
         "once each", default=False),
]


# ----------------------------------------------------------------------------- helpers for the steps


def _timed(cmd: list[str], limit: float, **kw) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, stdin=subprocess.DEVNULL, **kw)
    return time.perf_counter() - t0, res


def _timed_together(cmds: list[list[str]], limit: float, what: str) -> list[float]:
    """Wall seconds of each command, all started at once (single-threaded ones on a machine of many cores):
    each command's own time, from the common start to its exit."""
    with tempfile.TemporaryDirectory() as tmp:
        errs = [open(Path(tmp) / f"{i}.err", "w+") for i in range(len(cmds))]  # noqa: SIM115 - closed below
        t0 = time.perf_counter()
        procs: list[subprocess.Popen] = []
        took: list[float | None] = [None] * len(cmds)
        try:
            for c, e in zip(cmds, errs, strict=True):  # one that cannot start stops the ones started
                procs.append(subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=e, stdin=subprocess.DEVNULL))
            while any(t is None for t in took):
                if time.perf_counter() - t0 > limit:
                    raise subprocess.TimeoutExpired(cmds[took.index(None)], limit)
                for i, proc in enumerate(procs):
                    if took[i] is None and proc.poll() is not None:
                        took[i] = time.perf_counter() - t0
                        if proc.returncode != 0:
                            errs[i].seek(0)
                            raise RuntimeError(f"{what} exited {proc.returncode}: {errs[i].read().strip()[-300:]}")
                time.sleep(0.01)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            for e in errs:
                e.close()
    return took


def _check(res: subprocess.CompletedProcess, what: str) -> None:
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{what} exited {res.returncode}: {' | '.join(tail)[:300]}")


def _cores() -> int:
    return len(os.sched_getaffinity(0))


# ----------------------------------------------------------------------------- steps (each in a child process)


def step_kernels(device: str, work: Path) -> list[dict]:
    """The kernel tests compiled on the GPU. A bare machine compiles every Triton variant and numba twin
    afresh (one core each), so with pytest-xdist and 8+ cores four workers share the files."""
    import importlib.util

    junit = work / "kernels.xml"
    workers = ["-n", "4", "--dist", "loadfile"] if importlib.util.find_spec("xdist") and _cores() >= 8 else []
    res = subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", *workers, "tests/triton_kernels",
                          "tests/test_gpu_paths.py", "--deselect", "tests/triton_kernels/test_sm90.py",
                          f"--junitxml={junit}"],
                         capture_output=True, text=True, cwd=REPO, stdin=subprocess.DEVNULL, timeout=600)
    import xml.etree.ElementTree as ET

    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    n, f, e, s = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
    failed = [tc.get("name") for tc in suite.iter("testcase") if tc.find("failure") is not None
              or tc.find("error") is not None]
    skipped = sorted({(tc.find("skipped").get("message") or "")[:80] for tc in suite.iter("testcase")
                      if tc.find("skipped") is not None})
    return [{"name": "kernel and GPU-path tests compiled", "passed": n - f - e - s, "failed": f + e, "skipped": s,
             "failed_tests": failed[:10], "skip_reasons": skipped, "exit": res.returncode}]


def _align_stats(res: subprocess.CompletedProcess) -> dict:
    """The in-process seconds of a ``torchhpc align --stats`` run (its last standard-error line)."""
    for line in reversed(res.stderr.strip().splitlines()):
        if line.startswith("{"):
            try:
                stats = json.loads(line)
            except ValueError:
                continue
            return {k: round(float(stats[k]), 2) for k in ("index_seconds", "filter_seconds", "gapped_seconds",
                                                            "total_seconds") if k in stats}
    return {}


def step_segalign(device: str, work: Path) -> list[dict]:
    """H. pylori against LASTZ on one core: the whole alignment (ours on ``device`` and on the CPU's cores, and
    with the gapped stage on the GPU too) and ``--nogapped`` (ours on ``device``), wall seconds of the command as a shell sees it beside the in-process seconds of ``--stats``.
    A bare machine compiles the numba kernels (12-28 s) and the Triton kernels on first use, so each
    configuration first aligns a small simulated pair (its wall time is the ``first run`` row: what a
    user's very first call costs) and only the runs after it are timed."""
    from torchhpc.ext.core.data import shared_data_dir
    from torchhpc.ext.segalign.simulate import simulate_pair

    genomes = shared_data_dir() / "genomes"
    a, b = genomes / "Hpylori_ELS37.fa", genomes / "Hpylori_SJM180.fa"
    if not (a.is_file() and b.is_file()):
        raise FileNotFoundError(f"the H. pylori pair is not in {genomes} (set TORCHHPC_SHARED_DATA)")
    lastz = os.environ.get("LASTZ") or shutil.which("lastz")
    if not lastz:
        raise FileNotFoundError("LASTZ is not on PATH (or $LASTZ)")
    cores = _cores()
    small_t, small_q = work / "warm_t.fa", work / "warm_q.fa"
    simulate_pair(50_000, seed=0).write(small_t, small_q)
    configs = [(device, [])]  # --nogapped runs the same filter kernels
    if device != "cpu":
        configs += [("cpu", []), (device, ["--gapped-by", "triton"])]
    warm = {}
    for dev, extra in configs:
        t, res = _timed([*CLI, "align", str(small_t), str(small_q), "--device", dev, "--threads", str(cores),
                         "--output", str(work / "warm.maf"), *extra], 300, cwd=work)
        _check(res, f"torchhpc align --device {dev} {' '.join(extra)} (warm-up)")
        warm[(dev, tuple(extra))] = round(t, 2)
    rows = [{"name": "first run (50 kbp pair: compiles kernels)",
             **{"_".join([dev, *(x.lstrip("-").replace("-", "_") for x in extra), "s"]): s
                for (dev, extra), s in warm.items()}}]
    # LASTZ whole and --nogapped side by side, each on its own core, while nothing else runs
    cases = (("whole alignment", [], ["--ydrop=9430"]), ("filter (--nogapped)", ["--nogapped"], ["--nogapped"]))
    lastz_s = _timed_together([[lastz, str(a), str(b), *lastz_extra, "--format=maf-"]
                               for _, _, lastz_extra in cases], 300, "lastz")
    for (label, ours_extra, _), t_lastz in zip(cases, lastz_s, strict=True):
        row = {"name": label, "lastz_1core_s": round(t_lastz, 2)}
        # the CPU's filter alone is measured elsewhere (docs/segalign/results.md): here the whole alignment
        for dev, threads in [(device, cores)] + ([("cpu", cores)] if device != "cpu" and not ours_extra else []):
            out = work / f"ours-{dev}-{len(ours_extra)}.maf"
            t, res = _timed([*CLI, "align", str(a), str(b), "--device", dev, "--threads", str(threads),
                             "--output", str(out), "--stats", *ours_extra], 300, cwd=work)
            _check(res, f"torchhpc align --device {dev}")
            key = f"ours_{dev}_{threads}t"
            row[f"{key}_s"] = round(t, 2)
            row[f"{key}_vs_lastz"] = round(t_lastz / t, 2)
            row[f"{key}_in_process"] = _align_stats(res)
        if not ours_extra and device != "cpu":  # the gapped stage's Y-drop sweep on the GPU too: same bytes?
            out = work / "ours-gapped-triton.maf"
            t, res = _timed([*CLI, "align", str(a), str(b), "--device", device, "--threads", str(cores),
                             "--gapped-by", "triton", "--output", str(out), "--stats"], 300, cwd=work)
            _check(res, "torchhpc align --gapped-by triton")
            row["ours_gapped_triton_s"] = round(t, 2)
            row["ours_gapped_triton_vs_lastz"] = round(t_lastz / t, 2)
            row["ours_gapped_triton_in_process"] = _align_stats(res)
            row["gapped_triton_same_maf"] = out.read_bytes() == (work / f"ours-{device}-0.maf").read_bytes()
        rows.append(row)
    return rows


def _ccsdt_rows(device: str, sizes, variants: dict, budget_s: float, warm: bool) -> list[dict]:
    """Time each variant on ``random_inputs(o, v)`` for each ``(o, v, names)`` in ``sizes`` (a warm-up call
    first when ``warm``), in TFLOP/s; a variant that would start past ``budget_s`` gets a skipped row."""
    import torch

    from torchhpc.ext.ccsdt.ops import check_inputs
    from torchhpc.ext.ccsdt.reference import random_inputs

    rows, t_start = [], time.perf_counter()
    for o, v, names in sizes:
        args = check_inputs(*random_inputs(o, v, seed=0), device=device)
        flops = 2.0 * (o**3 * v**4 + o**4 * v**3)  # particle (o^3 v^4) and hole (o^4 v^3) contractions
        energies = {}
        for name, limit in names:
            left = budget_s - (time.perf_counter() - t_start)
            if left < limit:
                rows.append({"name": f"(T) o={o} v={v} {name}", "skipped": f"{left:.0f} s left, needs ~{limit} s"})
                continue
            try:  # a variant that fails (out of memory, say) is its row; the rows measured before it stay
                if warm:
                    variants[name](args)  # compile, warm caches
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                energies[name] = variants[name](args)
                torch.cuda.synchronize()
                dt = time.perf_counter() - t0
            except Exception as exc:  # noqa: BLE001 - reported in the table
                rows.append({"name": f"(T) o={o} v={v} {name}", "failed": f"{type(exc).__name__}: {exc}"[:300]})
                continue
            tf = flops / dt / 1e12
            first = next(iter(energies.values()))
            peaks = _peaks()
            rows.append({"name": f"(T) o={o} v={v} {name}", "seconds": round(dt, 3), "tflops": round(tf, 3),
                         **({"pct_fp64_peak": round(100 * tf / peaks[0], 2)} if peaks else {}),
                         "differs_from_first_by": float(f"{abs(energies[name] - first):.3g}")})
    return rows


def _ccsdt_variants() -> dict:
    from torchhpc.ext.ccsdt import triples_energy
    from torchhpc.triton_kernels import ccsdt as kernels

    def warps(kernel: str, n: int, backend: str):
        """The backend with ``kernel`` at ``n`` warps (the default is 8: fewer spills; 4 was the default before)."""
        def run(a):
            before = kernels.NUM_WARPS[kernel]
            kernels.NUM_WARPS[kernel] = n
            try:
                return triples_energy(*a, backend=backend)
            finally:
                kernels.NUM_WARPS[kernel] = before
        return run

    return {  # the torch backend on CUDA: pair-blocked cuBLAS GEMMs + fused epilogue, blocks from the GPU's memory
        "pair blocks, fused epilogue": lambda a: triples_energy(*a, backend="torch"),
        "fused MMA kernel, tile 8": lambda a: triples_energy(*a, backend="triton-mma", tile=8),
        "fused MMA kernel, tile 16": lambda a: triples_energy(*a, backend="triton-mma", tile=16),
        "fused CUDA-core kernel": lambda a: triples_energy(*a, backend="triton"),
        "pair blocks, epilogue at 4 warps": warps("epilogue", 4, "torch"),
        "fused CUDA-core kernel at 4 warps": warps("triples", 4, "triton"),
    }


def step_ccsdt(device: str, work: Path) -> list[dict]:
    """(T) in TFLOP/s on the same inputs: the pair-blocked GEMMs with the fused Triton epilogue (the torch
    backend on CUDA), the fused kernel on the FP64 tensor cores (triton-mma, tiles of 8 and 16) and the
    fused kernel on CUDA cores (triton); o=20 v=120 and o=10 v=60 (where auto picks the CUDA-core kernel
    today). The epilogue and the CUDA-core kernel also at 4 warps, their default before it was 8 (which
    spills less), so one run says which is faster. Each variant starts only if the time left covers its rough need (compile + two calls), so the
    step returns its rows before its limit."""
    pair, mma8, mma16, fma, pair4, fma4 = list(_ccsdt_variants())
    sizes = ((20, 120, [(pair, 3), (pair4, 3), (mma8, 15), (fma, 12), (mma16, 30)]),
             (10, 60, [(pair, 2), (mma8, 3), (fma, 2), (fma4, 2)]))
    t0 = time.perf_counter()
    try:
        first = _dgemm_row(device)
    except Exception as exc:  # the (T) rows are what the step is for: a failed anchor is a row, not the step
        first = {"name": "cuBLAS DGEMM", "failed": f"{type(exc).__name__}: {str(exc)[:200]}"}
    budget = 44.0 - (time.perf_counter() - t0)  # CUDA's start-up and the DGEMM count against the step's limit
    return [first, *_ccsdt_rows(device, sizes, _ccsdt_variants(), budget_s=budget, warm=True)]


def _dgemm_row(device: str, n: int = 8192) -> dict:
    """cuBLAS DGEMM on this card (``n``^3, FP64): what a GEMM reaches here, beside the datasheet peak."""
    import torch
    import triton.testing

    a, b = (torch.randn(n, n, dtype=torch.float64, device=device) for _ in range(2))
    ms = triton.testing.do_bench(lambda: a @ b, warmup=20, rep=200)  # ~10 timed calls of ~20 ms
    tf = 2.0 * n**3 / (ms * 1e-3) / 1e12
    peaks = _peaks()
    return {"name": f"cuBLAS DGEMM {n}^3", "seconds": round(ms * 1e-3, 4), "tflops": round(tf, 2),
            **({"pct_fp64_peak": round(100 * tf / peaks[0], 1)} if peaks else {})}


def step_ccsdt_large(device: str, work: Path) -> list[dict]:
    """o=40 v=300 (the issue's large system, 1.18 PFLOP): the pair GEMMs and the fused MMA kernel at tile 8,
    one call each after a small warm-up system compiles the kernels (sizes are not specialised)."""
    variants = _ccsdt_variants()
    pair, mma8 = list(variants)[:2]
    _ccsdt_rows(device, ((6, 20, [(pair, 0), (mma8, 0)]),), variants, budget_s=60.0, warm=True)
    return _ccsdt_rows(device, ((40, 300, [(pair, 40), (mma8, 100)]),), variants, budget_s=220.0, warm=False)


def _benchmark_rows(system: str, args: list[str], work: Path) -> list[dict]:
    """Run ``benchmarks/<system>.py ARGS --out WORK`` and return the rows of the JSON files it wrote."""
    res = subprocess.run([PY, f"benchmarks/{system}.py", *args, "--out", str(work)], capture_output=True,
                         text=True, cwd=REPO, stdin=subprocess.DEVNULL, timeout=600)
    _check(res, f"benchmarks/{system}.py")
    return [row for f in sorted((work / system).glob("*.json")) for row in json.loads(f.read_text()).get("rows", [])]


def step_foresight(device: str, work: Path) -> list[dict]:
    import importlib.util

    rows = _benchmark_rows("foresight", ["--device", device, "--size", "256", "--repeats", "2",
                                         "--bounds", "1e-2", "1e-3", "--stages"], work)
    if importlib.util.find_spec("nvidia") is None or importlib.util.find_spec("nvidia.nvcomp") is None:
        return [*rows, {"name": "entropy nvcomp", "skipped": "nvCOMP not installed (pip install 'torchhpc[nvcomp]')"}]
    try:  # the host stage's rows stand whatever nvCOMP does on this machine
        return rows + _benchmark_rows("foresight", ["--device", device, "--size", "256", "--repeats", "1",
                                                    "--bounds", "1e-3", "--entropy", "nvcomp"], work / "nvcomp")
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return [*rows, {"name": "entropy nvcomp", "failed": str(exc)}]


def step_kraken(device: str, work: Path) -> list[dict]:
    return [_kraken_case(*size, device) for size in ((26, 4096, 100_000, 128, 20), (8, 8192, 1_000_000, 64, 50))]


def _kraken_case(K: int, B: int, N: int, D: int, L: int, device: str) -> dict:
    """K tables of N rows x D, B bags a table of ~L values: one training step's embedding work, ours (one
    pooling launch, one fused backward + row-wise AdaGrad launch) against per-table EmbeddingBag + Adagrad."""
    import torch
    import triton.testing

    from torchhpc.triton_kernels.kraken import tbe_backward_rowwise_adagrad, tbe_pool

    g = torch.Generator(device=device).manual_seed(0)
    lengths = torch.randint(0, 2 * L + 1, (K * B,), device=device, generator=g)
    offsets = torch.zeros(K * B + 1, dtype=torch.int64, device=device)
    offsets[1:] = lengths.cumsum(0)
    nnz = int(offsets[-1])
    table_of = torch.arange(K, device=device).repeat_interleave(B).repeat_interleave(lengths, output_size=nnz)
    ids = torch.randint(0, N, (nnz,), device=device, generator=g)
    store = torch.randn(K * N, D, device=device) * 0.01
    v = torch.zeros(K * N, device=device)
    rows = table_of * N + ids
    grad = torch.randn(K * B, D, device=device)

    def ours():
        tbe_pool(store, rows, offsets)
        tbe_backward_rowwise_adagrad(grad, store, v, rows, offsets, 0.01, 1e-8)

    bags = [torch.nn.EmbeddingBag(N, D, mode="sum", device=device) for _ in range(K)]
    opt = torch.optim.Adagrad([p for bag in bags for p in bag.parameters()], lr=0.01)
    per_table = []
    for k in range(K):
        o = offsets[k * B:(k + 1) * B + 1]
        per_table.append((ids[int(o[0]):int(o[-1])], o[:-1] - o[0], grad[k * B:(k + 1) * B]))

    def anchor():
        opt.zero_grad(set_to_none=True)
        for bag, (idx, off, gk) in zip(bags, per_table, strict=True):
            bag(idx, off).backward(gk)
        opt.step()

    ms_ours = triton.testing.do_bench(ours, warmup=5, rep=50)
    ms_anchor = triton.testing.do_bench(anchor, warmup=3, rep=50)
    moved = nnz * D * 4 * 3 + K * B * D * 4 * 2  # value rows read twice (pool, update) and written; bags in, out
    gbps = moved / (ms_ours * 1e-3) / 1e9
    peaks = _peaks()
    return {"name": f"K={K} B={B} N={N} D={D} L~{L}", "ours_ms": round(ms_ours, 3),
            "embeddingbag_adagrad_ms": round(ms_anchor, 3), "speedup": round(ms_anchor / ms_ours, 2),
            "ours_GBps": round(gbps, 1), **({"pct_hbm": round(100 * gbps / peaks[1], 1)} if peaks else {})}


def step_sched(device: str, work: Path) -> list[dict]:
    return _benchmark_rows("sched", ["--device", device, "--only-simulators", "--backfill", "none", "--backfill", "easy",
                                     "--repeats", "1", "--windows", "256", "--sim-decisions", "2000"], work)


def step_symnmf(device: str, work: Path) -> list[dict]:
    rows = []
    for dev, threads in ((device, 0), ("cpu", _cores())):
        t, res = _timed([*CLI, "symnmf", "run", "--dataset", "sbm", "--graph.sbm-n", "100000", "--k", "10",
                         "--algo", "gn", "--device", dev, "--threads", str(threads), "--json",
                         "--set", f"run.root={work}"], 300, cwd=work)
        _check(res, f"symnmf run --device {dev}")
        out = json.loads(res.stdout.strip().splitlines()[-1])
        rows.append({"name": f"SBM n=100000 k=10 gn on {dev}", "wall_s": round(t, 2),
                     "iterations": out.get("iterations"), "ari": out.get("ari"), "residual": out.get("residual")})
    return rows


def step_pliner(device: str, work: Path) -> list[dict]:
    t, res = _timed([*CLI, "pliner", "find", "--model", "torchhpc.ext.pliner.examples:tiny_transformer",
                     "--reference", "fp32", "--problem", "cuda+tf32", "--tol", "1e-4", "--json"], 300, cwd=work)
    _check(res, "pliner find")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    return [{"name": "tiny_transformer, cuda+tf32 against fp32", "wall_s": round(t, 2),
             **{k: out[k] for k in ("status", "runs", "culprits", "error_before", "error_after") if k in out}}]


# ----------------------------------------------------------------------------- the runner


def run_step(name: str, device: str, out_json: Path) -> int:
    """Child process: run one step and write ``{"rows": [...]}`` or ``{"error": ...}``."""
    work = Path(tempfile.mkdtemp(prefix=f"gpu-check-{name}-"))
    try:
        rows = globals()[f"step_{name.replace('-', '_')}"](device, work)
        out_json.write_text(json.dumps({"rows": rows}, default=str))
    except Exception as exc:  # noqa: BLE001 - reported in the table, the run goes on
        out_json.write_text(json.dumps({"error": f"{type(exc).__name__}: {str(exc)[:400]}"}))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default="runs/bench", help="results go to OUT/core/gpu-check.json")
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"],
                    help="auto: CUDA when present; cpu lists the steps and runs those that need no GPU")
    ap.add_argument("--only", default="", help="comma-separated steps (default: all)")
    ap.add_argument("--dry-run", action="store_true", help="list the steps and their limits, run nothing")
    ap.add_argument("--run-step", help=argparse.SUPPRESS)
    ap.add_argument("--step-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.run_step:
        return run_step(args.run_step, args.device, Path(args.step_out))
    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if device == "cuda" and not torch.cuda.is_available():
        print("gpu-check: error: --device cuda, but no CUDA device is available", file=sys.stderr)
        return 1
    names = [n for n in args.only.split(",") if n] or [s.name for s in STEPS if s.default]
    unknown = set(names) - {s.name for s in STEPS}
    if unknown:
        print(f"gpu-check: error: unknown step(s) {sorted(unknown)}; steps: {', '.join(s.name for s in STEPS)}",
              file=sys.stderr)
        return 1
    steps = [s for s in STEPS if s.name in names]
    print(f"gpu-check on {device}: {len(steps)} steps, {sum(s.limit_s for s in steps)} s of limits")
    results = []
    for s in steps:
        head = f"{s.name:10s} limit {s.limit_s:3d} s  {s.what}"
        if args.dry_run:
            print(head)
            continue
        if s.needs_cuda and device != "cuda":
            print(f"{head}\n           skipped: needs CUDA")
            results.append({"step": s.name, "status": "skipped", "why": "needs CUDA"})
            continue
        print(head, flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "step.json"
            t0 = time.perf_counter()
            proc = subprocess.Popen([PY, __file__, "--run-step", s.name, "--device", device, "--step-out", str(out)],
                                    cwd=REPO, stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                proc.wait(timeout=s.limit_s)
                got = json.loads(out.read_text()) if out.exists() else {"error": "the step wrote no result"}
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the step and everything it started
                proc.wait()
                got = {"error": f"timed out after {s.limit_s} s"}
            took = round(time.perf_counter() - t0, 1)
        row = {"step": s.name, "seconds": took}
        if "error" in got:
            row.update(status="failed", why=got["error"])
            print(f"           FAILED ({took} s): {got['error']}")
        else:
            row.update(status="ok", rows=got["rows"])
            for r in got["rows"]:
                print("           " + json.dumps(r, default=str))
        results.append(row)
    if args.dry_run:
        return 0
    from torchhpc.ext.core.bench import write_results

    path = write_results("core", "gpu-check", results, out=args.out,
                         params={"device": device, "cores": _cores(),
                                 "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
                                 "peaks_fp64_tflops_hbm_gbps": _peaks() if device == "cuda" else None})
    print(f"-> {path}")
    return 0 if all(r["status"] != "failed" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
