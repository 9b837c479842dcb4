"""``torchhpc align``: LASTZ-compatible pairwise whole-genome alignment (SegAlign).

Seeds (spaced, one transition, both strands) and the ungapped X-drop filter run as
tensor ops (Triton on CUDA); the HSPs are then extended with gaps, natively
(Y-drop DP in torch) or by an installed ``lastz --segments=...`` (SegAlign's way).
Option names and defaults are LASTZ's (ydrop as SegAlign: 9430).

    torchhpc align MT-human.fa MT-orang.fa --output human_orang.maf
    torchhpc align target.fa query.fa --nogapped --format segments --output hsps.segments
    torchhpc align target.fa.gz query.fa --gapped-by lastz --format general
    torchhpc align target.fa query.fa --seed 14of22 --notransition --strand plus --device cuda

The output goes to --output (default: standard output).  --stats prints counters
and timings (JSON) on standard error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from torchhpc.ext.core.errors import InputError

from .common import ArgumentParser, add_common_arguments, parse_and_run

FORMATS = ["maf", "maf-", "general", "segments"]


def run_align(args: argparse.Namespace) -> int:
    """The body of ``torchhpc align``."""
    import torch

    from torchhpc.ext.core.device import pick_device
    from torchhpc.ext.segalign.align import AlignConfig, align_files
    from torchhpc.ext.segalign.output import WRITERS

    if args.threads is not None:
        if args.threads < 1:
            raise InputError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    cfg = AlignConfig(
        seed=args.seed, transition=args.transition, step=args.step, strand=args.strand, xdrop=args.xdrop,
        hspthresh=args.hspthresh, entropy=args.entropy, gapped=not args.nogapped, gapped_by=args.gapped_by,
        ydrop=args.ydrop, gappedthresh=args.gappedthresh, scoring=args.scoring, ambiguous=args.ambiguous,
        max_hits=args.max_hits, interval=args.interval, device=str(device), progress=args.progress,
        lastz=args.lastz, backend=args.backend, fused=args.fused,
    )
    res = align_files(args.target, args.query, cfg)
    writer = WRITERS[args.format]
    if args.output and args.output != "-":
        with open(args.output, "w") as fh:
            writer(res.alignments, fh)
    else:
        writer(res.alignments, sys.stdout)
    if args.stats:
        print(json.dumps(res.stats, default=float), file=sys.stderr)
    return 0


def _add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", help="target FASTA (.fa or .fa.gz; many records)")
    p.add_argument("query", help="query FASTA (.fa or .fa.gz; many records)")
    p.add_argument("--output", metavar="FILE", help="write here instead of standard output")
    p.add_argument("--format", choices=FORMATS, default="maf",
                   help="maf (= LASTZ maf-, no header), general (LASTZ tabular) or segments (HSPs)")
    p.add_argument("--seed", default="12of19", help="12of19 (default), 14of22, matchN or a 0/1 pattern")
    tr = p.add_mutually_exclusive_group()
    tr.add_argument("--transition", dest="transition", action="store_true", default=True,
                    help="allow one transition in a seed hit (default)")
    tr.add_argument("--notransition", dest="transition", action="store_false", help="exact seed matches only")
    p.add_argument("--step", type=int, default=1, help="index every step-th target position (default 1)")
    p.add_argument("--strand", choices=["both", "plus", "minus"], default="both", help="query strand(s)")
    p.add_argument("--xdrop", type=int, default=910, help="ungapped X-drop (default 910)")
    p.add_argument("--hspthresh", type=int, default=3000, help="HSP score threshold (default 3000)")
    en = p.add_mutually_exclusive_group()
    en.add_argument("--entropy", dest="entropy", action="store_true", default=True,
                    help="adjust low-complexity HSP scores by entropy (default)")
    en.add_argument("--noentropy", dest="entropy", action="store_false", help="no entropy adjustment")
    p.add_argument("--ydrop", type=int, default=9430, help="gapped Y-drop (default 9430)")
    p.add_argument("--gappedthresh", type=int, default=None, help="gapped score threshold (default: hspthresh)")
    p.add_argument("--nogapped", action="store_true", help="stop after the ungapped filter and write the HSPs")
    p.add_argument("--gapped-by", choices=["native", "lastz"], default="native",
                   help="gapped extension by torchhpc (native) or by lastz --segments (needs lastz)")
    p.add_argument("--scoring", metavar="FILE", help="LASTZ scoring file (default HOXD70, open 400, extend 30)")
    p.add_argument("--ambiguous", choices=["n", "iupac"], default=None,
                   help="treat N (n) or all IUPAC codes (iupac) as ambiguous bases (LASTZ's option)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda or auto")
    p.add_argument("--fused", action="store_true",
                   help="numba: seeding and filter in one compiled pass (least memory; speed depends on the CPU)")
    p.add_argument("--backend", choices=["auto", "torch", "numba", "triton"], default="auto",
                   help="ungapped-filter kernel: auto = Triton on CUDA, numba on the CPU where installed, "
                        "else the torch twin")
    p.add_argument("--max-hits", type=int, default=1 << 22,
                   help="seed hits per filter batch: bounds memory, about 200 bytes a hit (default 4194304)")
    p.add_argument("--interval", type=int, default=1 << 20, help="query positions per work interval")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    p.add_argument("--lastz", default="lastz", help="lastz executable for --gapped-by lastz")
    p.add_argument("--progress", action="store_true", help="progress bars over query intervals")
    p.add_argument("--stats", action="store_true", help="print counters and timings as JSON on stderr")
    add_common_arguments(p)


def register(sub) -> None:
    p = sub.add_parser("align", help="LASTZ-compatible whole-genome alignment (SegAlign): FASTA pair -> MAF",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_args(p)
    p.set_defaults(func=run_align)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="torchhpc.trainers.segalign", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_args(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    return parse_and_run(build_parser, run_align, argv)


if __name__ == "__main__":
    sys.exit(main())
