"""Benchmark: ``torchhpc align`` (segalign) against LASTZ on the same inputs, in one run, recall beside time.

Pairs (six by default): the four mitochondrial pairs of ``../shared/data/genomes`` (read there
at run time), a simulated pair of ``--sim-length`` bases each (one pair per length; made here by
:func:`torchhpc.ext.segalign.simulate.simulate_pair`, with inversions and duplications, written to a
temporary folder) and the two H. pylori strains; ``--pairs repeats``: a simulated repeat-rich pair of
strains (:data:`REPEAT_RICH`: IS families in tens of copies on both strands, rRNA operons, an inverted
prophage) of each ``--sim-length``.  Same parameters on both sides (12of19, one
transition, xdrop 910, hspthresh 3000, ydrop 9430, gappedthresh 3000, both strands, no chaining):

  * whole alignment: ``lastz --format=maf-`` vs ours with the defaults (:func:`align_files` from the
    FASTA files, as the command runs, in this warm process) on each of ``--threads``, and the command
    ``torchhpc align`` itself in a fresh process on the first of them (``ours_cli_<n>t``: interpreter,
    NumPy and numba's kernel loading included, as a user's shell sees it; on the CPU the command does not
    import torch); MAF recall = share of the matching
    base pairs of LASTZ's MAF found in ours, precision = share of the base pairs our MAF aligns that
    LASTZ's MAF aligns too; on the simulated pair also the recall of the simulator's true pairs;
  * ``--stages nogapped``: ``lastz --nogapped`` vs ours ``--nogapped`` (HSP recall);
  * ``--stages handoff``: ours with ``--gapped-by lastz`` (SegAlign's design) in the whole-alignment row;
  * with CUDA (``--device auto`` or ``cuda``): the whole alignment with the filter on the GPU.

Times are wall seconds per run, timed in turns by :func:`torchhpc.ext.core.bench.time_interleaved`
(LASTZ as a subprocess, one core); each row gives min / median / max over ``--repeats`` and the
speed-up LASTZ / ours (> 1: we are faster).

    python benchmarks/segalign.py                                  # the six pairs, ours on 1 thread
    python benchmarks/segalign.py --pairs mito                     # seconds
    python benchmarks/segalign.py --threads 1,2 --stages whole,nogapped,handoff --repeats 3

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
from torchhpc.ext.core.data import shared_data_dir
from torchhpc.ext.segalign.recall import MITO_PAIRS, run_lastz

REPO = Path(__file__).resolve().parents[1]
#: Two strains of one bacterial species: 2 % substitutions, small indels, two IS families (1.3 kb x 20 and
#: 1.8 kb x 12 copies, 0.5 % and 1 % diverged, both strands), an rRNA operon (5 kb x 5, 0.2 %), an inverted
#: prophage-sized stretch (up to 35 kb) and a 5 kb segmental duplication.
REPEAT_RICH = dict(substitution_rate=0.02, indel_rate=0.002, inversions=1, inversion_length=35_000, duplications=1,
                   duplication_length=5_000, repeats=((1300, 20, 0.005), (1800, 12, 0.01), (5000, 5, 0.002)))
GENOMES = shared_data_dir() / "genomes"


def keep_last(out: dict, key: str, fn):
    """A no-argument call for :func:`time_interleaved` that keeps its last result in ``out[key]``."""
    def call():
        out[key] = fn()
    return call


def maf_scores(ours_alns, ref_maf: str, truth=None) -> dict:
    """MAF recall (share of LASTZ's matching pairs in ours) and precision (share of our aligned pairs in LASTZ's)."""
    from torchhpc.ext.segalign.recall import pairs_from_alignments, pairs_from_maf, recall

    rc = recall(pairs_from_alignments(ours_alns, matching=True), pairs_from_maf(ref_maf))
    pr = recall(pairs_from_maf(ref_maf, matching=False), pairs_from_alignments(ours_alns))
    out = {"recall": rc[0], "ref_pairs": rc[2], "precision": pr[0], "ours_pairs": pr[2], "blocks": len(ours_alns)}
    if truth is not None:
        out["truth_recall"] = recall(pairs_from_alignments(ours_alns), truth)[0]
    return out


def bench_pair(label: str, tpath: Path, qpath: Path, args, device: torch.device, truth=None) -> list[dict]:
    """The rows of one pair: the whole alignment (ours with the defaults on each of ``--threads``, LASTZ
    beside it), and with ``--stages`` the ungapped stage, the LASTZ hand-off and (with CUDA) the GPU filter."""
    from torchhpc.ext.segalign.align import align_files, align_sequences, plan_alignment
    from torchhpc.ext.segalign.config import AlignConfig
    from torchhpc.ext.segalign.fasta import read_fasta
    from torchhpc.ext.segalign.recall import lastz_command, pairs_from_alignments, pairs_from_general, recall

    target, query = read_fasta(tpath), read_fasta(qpath)
    size = {"target_bp": target.total_bases, "query_bp": query.total_bases}
    paths = (str(tpath), str(qpath))
    stages = set(args.stages.split(","))
    rows = []

    def ours(cfg, threads):
        def call():
            torch.set_num_threads(threads)
            return align_files(tpath, qpath, cfg, plan=plan_alignment(cfg, arrays=True))  # as the command runs
        return call

    # ---- whole alignment with the defaults (FASTA reading included, as for LASTZ), LASTZ beside it
    got: dict = {}
    cands = {"lastz": keep_last(got, "ref", lambda: run_lastz(lastz_command(tpath, qpath, nogapped=False,
                                                                            fmt="maf-")))}
    for th in args.thread_list:
        cands[f"ours_{th}t"] = keep_last(got, f"{th}t", ours(AlignConfig(), th))
    # the command a user types, in a fresh process: Python, NumPy and numba's cached kernels load first
    th0 = args.thread_list[0]
    cli = [sys.executable, "-m", "torchhpc.trainers.cli", "align", str(tpath), str(qpath), "--threads", str(th0),
           "--output", os.devnull]
    cands[f"ours_cli_{th0}t"] = lambda: subprocess.run(cli, check=True, env={**os.environ, "OMP_NUM_THREADS": str(th0)})
    if "handoff" in stages:
        cands["ours_lastz_handoff"] = keep_last(got, "handoff", ours(AlignConfig(gapped_by="lastz"),
                                                                     args.thread_list[0]))
    whole = time_interleaved(cands, repeats=args.repeats, warmup=0)
    ref_text = got["ref"]
    extra: dict = {"lastz_blocks": ref_text.count("a score")}
    for key in [f"{th}t" for th in args.thread_list] + (["handoff"] if "handoff" in stages else []):
        res = got[key]
        extra[f"ours_{key}_result"] = {**maf_scores(res.alignments, got["ref"], truth),
                                       "filter_s": res.stats["filter_seconds"], "gapped_s": res.stats["gapped_seconds"],
                                       "backend": res.stats["backend"], "gapped_by": res.stats["gapped_by"]}
    if truth is not None:
        from torchhpc.ext.segalign.recall import pairs_from_maf

        extra["lastz_truth_recall"] = recall(pairs_from_maf(got["ref"], matching=False), truth)[0]
    rows.append(result_row(f"{label} whole", whole, anchor="lastz", pair=label, stage="whole", **size, **extra))
    for key, r in extra.items():
        if key.startswith("ours_"):
            print(f"  {label}, {key[5:-7]}: MAF recall {100 * r['recall']:.2f} % of LASTZ's {r['ref_pairs']:,} "
                  f"matching pairs, precision {100 * r['precision']:.2f} % of our {r['ours_pairs']:,} aligned pairs; "
                  f"{r['blocks']} blocks (LASTZ {extra['lastz_blocks']}); filter {r['filter_s']:.2f} s, gapped "
                  f"({r['gapped_by']}) {r['gapped_s']:.2f} s")

    # ---- ungapped stage
    if "nogapped" in stages:
        got = {}
        nog = time_interleaved({
            "lastz": keep_last(got, "lastz", lambda: run_lastz(lastz_command(tpath, qpath, nogapped=True,
                                                                             fmt="general"))),
            "ours": keep_last(got, "ours", lambda: align_sequences(target, query, AlignConfig(gapped=False))),
        }, repeats=args.repeats, warmup=0)
        ref_hsp = pairs_from_general(got["lastz"])
        rc = recall(pairs_from_alignments(got["ours"].alignments), ref_hsp)
        rows.append(result_row(f"{label} nogapped", nog, anchor="lastz", pair=label, stage="nogapped", **size,
                               recall=rc[0], ref_pairs=rc[2], ours_hsps=len(got["ours"].alignments),
                               lastz_hsps=got["lastz"].count("\n") - 1, stats=got["ours"].stats))

    # ---- GPU: the filter with the Triton kernel, the default gapped stage (LASTZ's time from above: the anchor)
    if device.type == "cuda":
        got = {}
        gpu = time_interleaved({
            "ours_gpu": keep_last(got, "gap", lambda: align_sequences(target, query, AlignConfig(device="cuda"),
                                                                      *paths)),
        }, repeats=args.repeats, warmup=1, sync=torch.cuda.synchronize)
        rows.append(result_row(f"{label} gpu whole", {"lastz": whole["lastz"], "ours_gpu": gpu["ours_gpu"]},
                               anchor="lastz", pair=label, stage="gpu whole", **size,
                               **maf_scores(got["gap"].alignments, ref_text),
                               device=torch.cuda.get_device_name()))
    print_rows(rows)
    return rows


def warm_up() -> float:
    """Build the command's ahead-of-time kernels where missing (once per install, as its first run does) and
    run the whole alignment once on a tiny pair, so per-pair times exclude the kernels' one-off load."""
    from torchhpc.ext.segalign.align import align_sequences
    from torchhpc.ext.segalign.config import AlignConfig
    from torchhpc.ext.segalign.fasta import from_strings
    from torchhpc.ext.segalign.simulate import simulate_pair
    from torchhpc.ext.segalign.torch_numba import KERNELS

    sim = simulate_pair(3000, seed=0)
    t0 = time.perf_counter()
    KERNELS.ensure_built(notice=print)
    align_sequences(from_strings({"t": sim.target}), from_strings({"q": sim.query}), AlignConfig())
    return time.perf_counter() - t0


def main(argv=None) -> int:
    p = benchmark_parser(__doc__, repeats=1)
    p.add_argument("--pairs", default="mito,sim,hpylori",
                   help="comma-separated from: mito, sim, repeats, hpylori (default: mito,sim,hpylori)")
    p.add_argument("--sim-length", default="2000000",
                   help="bases of the simulated target; comma-separated for several pairs (default 2000000)")
    p.add_argument("--sim-seed", type=int, default=1, help="seed of the simulated pair (default 1)")
    p.add_argument("--threads", default="1",
                   help="comma-separated torch thread counts for ours, e.g. 1,2; lastz is single-threaded (default 1)")
    p.add_argument("--stages", default="whole",
                   help="comma-separated from: whole (always), nogapped (lastz --nogapped vs ours), handoff "
                        "(ours with --gapped-by lastz)")
    args = p.parse_args(argv)
    try:
        args.thread_list = [int(x) for x in args.threads.split(",") if x.strip()]
    except ValueError:
        p.error(f"--threads {args.threads!r}: expected comma-separated integers")
    if not args.thread_list or min(args.thread_list) < 1:
        p.error("--threads: at least one count, each >= 1")
    try:
        args.sim_lengths = [int(float(x)) for x in args.sim_length.split(",") if x.strip()]
    except ValueError:
        p.error(f"--sim-length {args.sim_length!r}: expected comma-separated base counts")
    if not args.sim_lengths or min(args.sim_lengths) < 1000:
        p.error("--sim-length: at least one length, each >= 1000")
    if set(args.stages.split(",")) - {"whole", "nogapped", "handoff"}:
        p.error(f"--stages {args.stages!r}: choose from whole, nogapped, handoff")
    from torchhpc.ext.core.device import pick_device
    from torchhpc.ext.core.dispatch import resolve_backend
    from torchhpc.ext.segalign.config import BACKENDS
    from torchhpc.ext.segalign.recall import lastz_available
    from torchhpc.ext.segalign.simulate import simulate_pair

    if not lastz_available():
        print("benchmarks/segalign.py needs lastz on PATH (apt-get install lastz)", file=sys.stderr)
        return 1
    wanted = {s.strip() for s in args.pairs.split(",") if s.strip()}
    unknown = wanted - {"mito", "sim", "repeats", "hpylori"}
    if unknown:
        p.error(f"unknown pair set {sorted(unknown)[0]!r}")
    torch.set_num_threads(args.thread_list[0])
    device = pick_device(args.device)
    cpu_backend = resolve_backend("auto", torch.device("cpu"), choices=BACKENDS)
    print(f"segalign vs lastz (ours on {args.threads} torch thread(s); CPU filter kernel: {cpu_backend}; "
          f"load average {os.getloadavg()[0]:.1f})")
    warm_s = warm_up()
    if cpu_backend == "numba":
        print(f"  numba kernels ready in {warm_s:.2f} s (compiled on first use, then loaded from the disk cache); "
              "not counted below")
    rows: list[dict] = []
    if wanted & {"mito", "hpylori"} and not GENOMES.is_dir():
        print(f"  {GENOMES} is absent: skipping the real genome pairs", file=sys.stderr)
    elif "mito" in wanted:
        for t, q in MITO_PAIRS:
            rows += bench_pair(f"{t[:-3]} vs {q[:-3]}", GENOMES / t, GENOMES / q, args, device)
    for n in args.sim_lengths if "sim" in wanted else []:
        sim = simulate_pair(n, substitution_rate=0.06, indel_rate=0.004, inversions=max(n // 100_000, 1),
                            inversion_length=20_000, duplications=max(n // 200_000, 1), duplication_length=5_000,
                            seed=args.sim_seed)
        truth = {("target", "query", s): sim.true_pairs(s) for s in "+-"}
        with tempfile.TemporaryDirectory() as tmp:
            tp, qp = Path(tmp) / "target.fa", Path(tmp) / "query.fa"
            sim.write(tp, qp)
            rows += bench_pair(f"simulated {n / 1e6:g} Mbp", tp, qp, args, device, truth)
    for n in args.sim_lengths if "repeats" in wanted else []:
        sim = simulate_pair(n, seed=args.sim_seed, **REPEAT_RICH)
        truth = {("target", "query", s): sim.true_pairs(s) for s in "+-"}
        with tempfile.TemporaryDirectory() as tmp:
            tp, qp = Path(tmp) / "target.fa", Path(tmp) / "query.fa"
            sim.write(tp, qp)
            rows += bench_pair(f"repeat-rich {n / 1e6:g} Mbp", tp, qp, args, device, truth)
    if "hpylori" in wanted and GENOMES.is_dir():
        rows += bench_pair("H.pylori SJM180 vs ELS37", GENOMES / "Hpylori_SJM180.fa", GENOMES / "Hpylori_ELS37.fa",
                           args, device)
    version_text = subprocess.run(["lastz", "--version"], capture_output=True, text=True).stdout
    lastz_version = " ".join(ln.strip(" ()") for ln in version_text.splitlines() if "version" in ln)
    path = write_results("segalign", "bench", rows, out=args.out, params={
        "pairs": sorted(wanted), "threads": args.threads, "repeats": args.repeats, "cpu_backend": cpu_backend,
        "kernel_warm_up_s": warm_s, "lastz": lastz_version, "sim_length": args.sim_length,
        "sim_seed": args.sim_seed, "stages": args.stages,
        "load_average_1min_end": os.getloadavg()[0]})
    if rows:
        whole = [r for r in rows if r["stage"] == "whole"]
        pairs = [r["pair"] for r in whole]
        series = {"lastz": [r["lastz"]["median_s"] for r in whole]}
        for th in args.thread_list:
            series[f"ours, {th} thread(s)"] = [r[f"ours_{th}t"]["median_s"] for r in whole]
        bar_plot(path.with_suffix(".png"), pairs, series, ylabel="wall seconds (median)", logy=True,
                 title="segalign vs LASTZ: whole alignment, same inputs and parameters",
                 highlight=f"ours, {args.thread_list[0]} thread(s)")
        print(f"wrote {path.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
