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

Times are wall seconds of one run each (LASTZ as a subprocess, ours in-process after the
FASTA is read; with ``--threads 1`` both sides use one core).  The ratio is LASTZ / ours
(> 1: we are faster).  With CUDA the ungapped stage is also timed on the GPU (Triton kernel).

    python benchmarks/segalign.py                                 # mito pairs + 2 Mbp simulated pair
    python benchmarks/segalign.py --pairs mito                    # seconds
    python benchmarks/segalign.py --pairs mito,sim,hpylori --threads 1

Writes ``<out>/segalign/bench.json`` and ``bench.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
GENOMES = REPO.parent / "shared" / "data" / "genomes"
MITO = [("MT-human.fa", "MT-orang.fa"), ("humanMito.fa", "mouseMito.fa"), ("humanMito.fa", "chickenMito.fa"),
        ("humanMito.fa", "fuguMito.fa")]


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def lastz_run(cmd: list[str]) -> tuple[str, float]:
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"lastz failed: {res.stderr[:300]}")
    return res.stdout, time.perf_counter() - t0


def bench_pair(label: str, tpath: Path, qpath: Path, args, truth=None) -> dict:
    from torchhpc.ext.segalign.align import AlignConfig, align_sequences
    from torchhpc.ext.segalign.fasta import read_fasta
    from torchhpc.ext.segalign.recall import (
        lastz_command,
        pairs_from_alignments,
        pairs_from_general,
        pairs_from_maf,
        recall,
    )

    target, query = read_fasta(tpath), read_fasta(qpath)
    size = (target.total_bases, query.total_bases)
    row: dict = {"pair": label, "target_bp": size[0], "query_bp": size[1]}

    # ---- ungapped stage
    ref_txt, t_lastz = lastz_run(lastz_command(tpath, qpath, nogapped=True, fmt="general"))
    ref_hsp = pairs_from_general(ref_txt)
    res, t_ours = timed(lambda: align_sequences(target, query, AlignConfig(gapped=False)))
    rc = recall(pairs_from_alignments(res.alignments), ref_hsp)
    row["nogapped"] = {"lastz_s": t_lastz, "ours_s": t_ours, "ratio": t_lastz / t_ours, "recall": rc[0],
                       "ref_pairs": rc[2], "ours_hsps": len(res.alignments), "lastz_hsps": ref_txt.count("\n") - 1,
                       "stats": res.stats}
    print(f"  {label:<26} nogapped  lastz {t_lastz:8.2f} s  ours {t_ours:8.2f} s  "
          f"lastz/ours {t_lastz / t_ours:6.2f}  HSP recall {rc[0]:.4f}", flush=True)

    # ---- whole alignment
    maf_txt, t_lastz_g = lastz_run(lastz_command(tpath, qpath, nogapped=False, fmt="maf-"))
    ref_maf = pairs_from_maf(maf_txt)
    row["gapped"] = {"lastz_s": t_lastz_g, "lastz_blocks": maf_txt.count("a score")}
    paths = ["lastz"]
    if max(size) <= args.native_max_bp:
        paths.append("native")
    for by in paths:
        res, t = timed(lambda by=by: align_sequences(target, query, AlignConfig(gapped_by=by), str(tpath),
                                                     str(qpath)))
        rc = recall(pairs_from_alignments(res.alignments, matching=True), ref_maf)
        row["gapped"][by] = {"ours_s": t, "ratio": t_lastz_g / t, "recall": rc[0], "ref_pairs": rc[2],
                             "blocks": len(res.alignments), "gapped_s": res.stats["gapped_seconds"]}
        print(f"  {label:<26} gapped/{by:<6} lastz {t_lastz_g:8.2f} s  ours {t:8.2f} s  "
              f"lastz/ours {t_lastz_g / t:6.2f}  MAF recall {rc[0]:.4f}", flush=True)
        if truth is not None:
            mine = pairs_from_alignments(res.alignments)
            row["gapped"][by]["truth_recall"] = recall(mine, truth)[0]
    if truth is not None:
        row["gapped"]["lastz_truth_recall"] = recall(pairs_from_maf(maf_txt, matching=False), truth)[0]
        print(f"  {label:<26} truth recall: lastz {row['gapped']['lastz_truth_recall']:.4f}  ours(lastz) "
              f"{row['gapped']['lastz']['truth_recall']:.4f}"
              + (f"  ours(native) {row['gapped']['native']['truth_recall']:.4f}" if "native" in row["gapped"]
                 else ""), flush=True)

    # ---- GPU: the ungapped stage with the Triton kernel
    if torch.cuda.is_available() and not args.no_gpu:
        cfg = AlignConfig(gapped=False, device="cuda")
        align_sequences(target, query, cfg)  # warm-up (compiles the kernel)
        torch.cuda.synchronize()
        res, t = timed(lambda: align_sequences(target, query, cfg))
        rc = recall(pairs_from_alignments(res.alignments), ref_hsp)
        row["gpu"] = {"device": torch.cuda.get_device_name(), "nogapped_s": t, "ratio": t_lastz / t,
                      "recall": rc[0]}
        print(f"  {label:<26} GPU nogapped {t:8.3f} s  lastz/ours {t_lastz / t:6.2f}  recall {rc[0]:.4f}",
              flush=True)
        # the whole alignment: filter on the GPU, gapped stage by lastz from our HSPs
        cfg = AlignConfig(gapped_by="lastz", device="cuda")
        res, t = timed(lambda: align_sequences(target, query, cfg, str(tpath), str(qpath)))
        rc = recall(pairs_from_alignments(res.alignments, matching=True), ref_maf)
        row["gpu"]["gapped_lastz"] = {"ours_s": t, "ratio": t_lastz_g / t, "recall": rc[0]}
        print(f"  {label:<26} GPU gapped/lastz {t:8.3f} s  lastz/ours {t_lastz_g / t:6.2f}  MAF recall {rc[0]:.4f}",
              flush=True)
    return row


def warm_up() -> float:
    """Run the CPU filter once on a tiny pair, so per-pair times exclude the kernels' one-off load."""
    from torchhpc.ext.segalign.align import AlignConfig, find_hsps
    from torchhpc.ext.segalign.fasta import from_strings
    from torchhpc.ext.segalign.simulate import simulate_pair

    sim = simulate_pair(3000, seed=0)
    t0 = time.perf_counter()
    find_hsps(from_strings({"t": sim.target}), from_strings({"q": sim.query}), AlignConfig(gapped=False))
    return time.perf_counter() - t0


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r["pair"] for r in rows]
    x = range(len(rows))
    w = 0.2
    fig, ax = plt.subplots(figsize=(10, 4), dpi=110)
    ax.bar([i - 1.5 * w for i in x], [r["nogapped"]["lastz_s"] for r in rows], w, label="lastz --nogapped", color="C7")
    ax.bar([i - 0.5 * w for i in x], [r["nogapped"]["ours_s"] for r in rows], w, label="ours --nogapped", color="C0")
    ax.bar([i + 0.5 * w for i in x], [r["gapped"]["lastz_s"] for r in rows], w, label="lastz gapped", color="C8")
    ax.bar([i + 1.5 * w for i in x], [r["gapped"]["lastz"]["ours_s"] for r in rows], w,
           label="ours + lastz gapped", color="C1")
    ax.set_yscale("log")
    ax.set_ylabel("wall seconds")
    ax.set_xticks(list(x), labels, fontsize=7)
    ax.legend(fontsize=7)
    fig.suptitle("segalign vs LASTZ, same inputs and parameters", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", default="mito,sim", help="comma-separated from: mito, sim, hpylori")
    p.add_argument("--sim-length", type=int, default=2_000_000, help="bases of the simulated target")
    p.add_argument("--sim-seed", type=int, default=1)
    p.add_argument("--native-max-bp", type=int, default=100_000,
                   help="run the native gapped path on pairs up to this size")
    p.add_argument("--threads", type=int, default=1, help="torch threads for ours (lastz is single-threaded)")
    p.add_argument("--no-gpu", action="store_true")
    p.add_argument("--out", default="runs/bench")
    args = p.parse_args(argv)
    from torchhpc.ext.segalign.recall import lastz_available

    if not lastz_available():
        print("benchmarks/segalign.py needs lastz on PATH (apt-get install lastz)", file=sys.stderr)
        return 1
    torch.set_num_threads(args.threads)
    wanted = {s.strip() for s in args.pairs.split(",") if s.strip()}
    unknown = wanted - {"mito", "sim", "hpylori"}
    if unknown:
        p.error(f"unknown pair set {sorted(unknown)[0]!r}")
    rows = []
    from torchhpc.ext.segalign.ops import resolve_backend

    cpu_backend = resolve_backend("auto", torch.device("cpu"))
    print(f"segalign vs lastz ({args.threads} torch thread(s); CPU filter kernel: {cpu_backend}; "
          f"load average {os.getloadavg()[0]:.1f})")
    warm_s = warm_up()
    if cpu_backend == "numba":
        print(f"  numba kernels ready in {warm_s:.2f} s (compiled on first use, then loaded from the disk cache); "
              "not counted below")
    if wanted & {"mito", "hpylori"} and not GENOMES.is_dir():
        print(f"  {GENOMES} is absent: skipping the real genome pairs", file=sys.stderr)
    elif "mito" in wanted:
        for t, q in MITO:
            rows.append(bench_pair(f"{t[:-3]} vs {q[:-3]}", GENOMES / t, GENOMES / q, args))
    if "sim" in wanted:
        from torchhpc.ext.segalign.simulate import simulate_pair

        n = args.sim_length
        sim = simulate_pair(n, substitution_rate=0.06, indel_rate=0.004, inversions=max(n // 100_000, 1),
                            inversion_length=20_000, duplications=max(n // 200_000, 1), duplication_length=5_000,
                            seed=args.sim_seed)
        truth = {("target", "query", s): sim.true_pairs(s) for s in "+-"}
        with tempfile.TemporaryDirectory() as tmp:
            tp, qp = Path(tmp) / "target.fa", Path(tmp) / "query.fa"
            sim.write(tp, qp)
            rows.append(bench_pair(f"simulated {n / 1e6:g} Mbp", tp, qp, args, truth))
    if "hpylori" in wanted and GENOMES.is_dir():
        rows.append(bench_pair("H.pylori SJM180 vs ELS37", GENOMES / "Hpylori_SJM180.fa",
                               GENOMES / "Hpylori_ELS37.fa", args))
    out = Path(args.out) / "segalign"
    out.mkdir(parents=True, exist_ok=True)
    version_text = subprocess.run(["lastz", "--version"], capture_output=True, text=True).stdout
    lastz_version = [ln.strip(" ()") for ln in version_text.splitlines() if "version" in ln][:1]
    summary = {"what": "torchhpc align vs lastz, same inputs and parameters", "threads": args.threads,
               "cpu_backend": cpu_backend, "kernel_warm_up_s": warm_s, "torch": torch.__version__, "lastz": " ".join(lastz_version).strip(), "cpu_count": os.cpu_count(),
               "cuda": torch.cuda.is_available(), "load_average_1min_end": os.getloadavg()[0], "rows": rows}
    (out / "bench.json").write_text(json.dumps(summary, indent=1, default=float))
    if rows:
        plot(rows, out / "bench.png")
    print(f"wrote {out / 'bench.json'} and {out / 'bench.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
