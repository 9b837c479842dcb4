"""Benchmark: ``torchhpc align`` (segalign) against LASTZ on the same inputs, in one run, recall beside time.

Pairs: the four mitochondrial pairs of ``../shared/data/genomes`` (read there at run time),
a simulated pair of ``--sim-length`` bases each (made here by
:func:`torchhpc.ext.segalign.simulate.simulate_pair`, with inversions and duplications,
written to a temporary folder) and, with ``--pairs ...,hpylori``, the two H. pylori strains.
For each pair, same parameters on both sides (12of19, one transition, xdrop 910,
hspthresh 3000, ydrop 9430, gappedthresh 3000, both strands, no chaining):

  * ungapped stage: ``lastz --nogapped`` vs ours ``--nogapped``; recall = share of LASTZ's
    HSP base pairs that our HSPs cover;
  * whole alignment: ``lastz`` (gapped) vs ours with ``--gapped-by lastz`` (our seeding and
    filter, LASTZ's gapped stage from our HSPs, SegAlign's design) and ``--gapped-by native``
    (torchhpc's Y-drop DP; by default only on pairs up to ``--native-max-bp``); recall = share
    of the matching base pairs of LASTZ's MAF found in ours;
  * on the simulated pair also the recall of the simulator's true aligned pairs, for LASTZ and us.

Times are wall seconds per run, timed in turns by :func:`torchhpc.ext.core.bench.time_interleaved`
(LASTZ as a subprocess, ours in-process after the FASTA is read; with ``--threads 1`` both sides
use one core); each row gives min / median / max over ``--repeats`` and the speed-up LASTZ / ours
(> 1: we are faster).  With CUDA (``--device auto`` or ``cuda``) the ungapped stage and the
whole alignment with ``--gapped-by lastz`` are also timed with the filter on the GPU (Triton kernel).

    python benchmarks/segalign.py                                 # mito pairs + 2 Mbp simulated pair
    python benchmarks/segalign.py --pairs mito                    # seconds
    python benchmarks/segalign.py --pairs mito,sim,hpylori --threads 1 --repeats 3

Writes ``<out>/segalign/bench.json`` (the suite's results schema) and ``bench.png``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
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

REPO = Path(__file__).resolve().parents[1]
GENOMES = REPO.parent / "shared" / "data" / "genomes"
MITO = [("MT-human.fa", "MT-orang.fa"), ("humanMito.fa", "mouseMito.fa"), ("humanMito.fa", "chickenMito.fa"),
        ("humanMito.fa", "fuguMito.fa")]


def lastz_run(cmd: list[str]) -> str:
    """Run lastz and return its standard output (exit with its error when it fails)."""
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"lastz failed: {res.stderr[:300]}")
    return res.stdout


def keep_last(out: dict, key: str, fn):
    """A no-argument call for :func:`time_interleaved` that keeps its last result in ``out[key]``."""
    def call():
        out[key] = fn()
    return call


def bench_pair(label: str, tpath: Path, qpath: Path, args, device: torch.device, truth=None) -> list[dict]:
    """The rows of one pair: ungapped stage, whole alignment and (with CUDA) the GPU filter."""
    from torchhpc.ext.segalign.align import align_sequences
    from torchhpc.ext.segalign.config import AlignConfig
    from torchhpc.ext.segalign.fasta import read_fasta
    from torchhpc.ext.segalign.recall import (
        lastz_command,
        pairs_from_alignments,
        pairs_from_general,
        pairs_from_maf,
        recall,
    )

    target, query = read_fasta(tpath), read_fasta(qpath)
    size = {"target_bp": target.total_bases, "query_bp": query.total_bases}
    paths = (str(tpath), str(qpath))
    rows = []

    # ---- ungapped stage
    got: dict = {}
    nog = time_interleaved({
        "lastz": keep_last(got, "lastz", lambda: lastz_run(lastz_command(tpath, qpath, nogapped=True, fmt="general"))),
        "ours": keep_last(got, "ours", lambda: align_sequences(target, query, AlignConfig(gapped=False))),
    }, repeats=args.repeats, warmup=0)
    ref_hsp = pairs_from_general(got["lastz"])
    rc = recall(pairs_from_alignments(got["ours"].alignments), ref_hsp)
    rows.append(result_row(f"{label} nogapped", nog, anchor="lastz", pair=label, stage="nogapped", **size,
                           recall=rc[0], ref_pairs=rc[2], ours_hsps=len(got["ours"].alignments),
                           lastz_hsps=got["lastz"].count("\n") - 1, stats=got["ours"].stats))

    # ---- whole alignment
    got = {}
    cands = {"lastz": keep_last(got, "ref", lambda: lastz_run(lastz_command(tpath, qpath, nogapped=False,
                                                                            fmt="maf-")))}
    bys = ["lastz"] + (["native"] if max(size.values()) <= args.native_max_bp else [])
    for by in bys:
        cands[f"ours_{by}"] = keep_last(got, by, lambda by=by: align_sequences(target, query,
                                                                               AlignConfig(gapped_by=by), *paths))
    gap = time_interleaved(cands, repeats=args.repeats, warmup=0)
    ref_maf = pairs_from_maf(got["ref"])
    extra: dict = {"lastz_blocks": got["ref"].count("a score")}
    for by in bys:
        res = got[by]
        rc = recall(pairs_from_alignments(res.alignments, matching=True), ref_maf)
        extra[f"ours_{by}_result"] = {"recall": rc[0], "ref_pairs": rc[2], "blocks": len(res.alignments),
                                      "gapped_s": res.stats["gapped_seconds"], "backend": res.stats["backend"]}
        if truth is not None:
            extra[f"ours_{by}_result"]["truth_recall"] = recall(pairs_from_alignments(res.alignments), truth)[0]
    if truth is not None:
        extra["lastz_truth_recall"] = recall(pairs_from_maf(got["ref"], matching=False), truth)[0]
    rows.append(result_row(f"{label} gapped", gap, anchor="lastz", pair=label, stage="gapped", **size, **extra))

    # ---- GPU: the filter with the Triton kernel (LASTZ's times from above are the anchor)
    if device.type == "cuda":
        got = {}
        gpu = time_interleaved({
            "ours_gpu": keep_last(got, "nog", lambda: align_sequences(target, query,
                                                                       AlignConfig(gapped=False, device="cuda"))),
            "ours_gpu_lastz": keep_last(got, "gap", lambda: align_sequences(
                target, query, AlignConfig(gapped_by="lastz", device="cuda"), *paths)),
        }, repeats=args.repeats, warmup=1, sync=torch.cuda.synchronize)
        rc_nog = recall(pairs_from_alignments(got["nog"].alignments), ref_hsp)[0]
        rc_gap = recall(pairs_from_alignments(got["gap"].alignments, matching=True), ref_maf)[0]
        rows.append(result_row(f"{label} gpu nogapped", {"lastz": nog["lastz"], "ours_gpu": gpu["ours_gpu"]},
                               anchor="lastz", pair=label, stage="gpu nogapped", **size, recall=rc_nog,
                               device=torch.cuda.get_device_name(), backend=got["nog"].stats["backend"]))
        rows.append(result_row(f"{label} gpu gapped", {"lastz": gap["lastz"], "ours_gpu": gpu["ours_gpu_lastz"]},
                               anchor="lastz", pair=label, stage="gpu gapped", **size, recall=rc_gap,
                               device=torch.cuda.get_device_name()))
    print_rows(rows)
    return rows


def warm_up() -> float:
    """Run the CPU filter once on a tiny pair, so per-pair times exclude the kernels' one-off load."""
    from torchhpc.ext.segalign.align import find_hsps
    from torchhpc.ext.segalign.config import AlignConfig
    from torchhpc.ext.segalign.fasta import from_strings
    from torchhpc.ext.segalign.simulate import simulate_pair

    sim = simulate_pair(3000, seed=0)
    t0 = time.perf_counter()
    find_hsps(from_strings({"t": sim.target}), from_strings({"q": sim.query}), AlignConfig(gapped=False))
    return time.perf_counter() - t0


def main(argv=None) -> int:
    p = benchmark_parser(__doc__, repeats=1)
    p.add_argument("--pairs", default="mito,sim", help="comma-separated from: mito, sim, hpylori (default mito,sim)")
    p.add_argument("--sim-length", type=int, default=2_000_000, help="bases of the simulated target (default 2e6)")
    p.add_argument("--sim-seed", type=int, default=1, help="seed of the simulated pair (default 1)")
    p.add_argument("--native-max-bp", type=int, default=100_000,
                   help="run the native gapped path on pairs up to this size (default 100000)")
    p.add_argument("--threads", type=int, default=1, help="torch threads for ours; lastz is single-threaded (default 1)")
    args = p.parse_args(argv)
    from torchhpc.ext.core.device import pick_device
    from torchhpc.ext.core.dispatch import resolve_backend
    from torchhpc.ext.segalign.config import BACKENDS
    from torchhpc.ext.segalign.recall import lastz_available
    from torchhpc.ext.segalign.simulate import simulate_pair

    if not lastz_available():
        print("benchmarks/segalign.py needs lastz on PATH (apt-get install lastz)", file=sys.stderr)
        return 1
    wanted = {s.strip() for s in args.pairs.split(",") if s.strip()}
    unknown = wanted - {"mito", "sim", "hpylori"}
    if unknown:
        p.error(f"unknown pair set {sorted(unknown)[0]!r}")
    torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    cpu_backend = resolve_backend("auto", torch.device("cpu"), choices=BACKENDS)
    print(f"segalign vs lastz ({args.threads} torch thread(s); CPU filter kernel: {cpu_backend}; "
          f"load average {os.getloadavg()[0]:.1f})")
    warm_s = warm_up()
    if cpu_backend == "numba":
        print(f"  numba kernels ready in {warm_s:.2f} s (compiled on first use, then loaded from the disk cache); "
              "not counted below")
    rows: list[dict] = []
    if wanted & {"mito", "hpylori"} and not GENOMES.is_dir():
        print(f"  {GENOMES} is absent: skipping the real genome pairs", file=sys.stderr)
    elif "mito" in wanted:
        for t, q in MITO:
            rows += bench_pair(f"{t[:-3]} vs {q[:-3]}", GENOMES / t, GENOMES / q, args, device)
    if "sim" in wanted:
        n = args.sim_length
        sim = simulate_pair(n, substitution_rate=0.06, indel_rate=0.004, inversions=max(n // 100_000, 1),
                            inversion_length=20_000, duplications=max(n // 200_000, 1), duplication_length=5_000,
                            seed=args.sim_seed)
        truth = {("target", "query", s): sim.true_pairs(s) for s in "+-"}
        with tempfile.TemporaryDirectory() as tmp:
            tp, qp = Path(tmp) / "target.fa", Path(tmp) / "query.fa"
            sim.write(tp, qp)
            rows += bench_pair(f"simulated {n / 1e6:g} Mbp", tp, qp, args, device, truth)
    if "hpylori" in wanted and GENOMES.is_dir():
        rows += bench_pair("H.pylori SJM180 vs ELS37", GENOMES / "Hpylori_SJM180.fa", GENOMES / "Hpylori_ELS37.fa",
                           args, device)
    version_text = subprocess.run(["lastz", "--version"], capture_output=True, text=True).stdout
    lastz_version = " ".join(ln.strip(" ()") for ln in version_text.splitlines() if "version" in ln)
    path = write_results("segalign", "bench", rows, out=args.out, params={
        "pairs": sorted(wanted), "threads": args.threads, "repeats": args.repeats, "cpu_backend": cpu_backend,
        "kernel_warm_up_s": warm_s, "lastz": lastz_version, "sim_length": args.sim_length,
        "sim_seed": args.sim_seed, "native_max_bp": args.native_max_bp,
        "load_average_1min_end": os.getloadavg()[0]})
    if rows:
        by_stage = {r["stage"]: {} for r in rows}
        for r in rows:
            by_stage[r["stage"]][r["pair"]] = r
        pairs = list(by_stage["nogapped"])
        series = {"lastz --nogapped": [by_stage["nogapped"][x]["lastz"]["median_s"] for x in pairs],
                  "ours --nogapped": [by_stage["nogapped"][x]["ours"]["median_s"] for x in pairs],
                  "lastz gapped": [by_stage["gapped"][x]["lastz"]["median_s"] for x in pairs],
                  "ours + lastz gapped": [by_stage["gapped"][x]["ours_lastz"]["median_s"] for x in pairs]}
        bar_plot(path.with_suffix(".png"), pairs, series, ylabel="wall seconds (median)", logy=True,
                 title="segalign vs LASTZ, same inputs and parameters", highlight="ours --nogapped")
        print(f"wrote {path.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
