"""``torchhpc align``: LASTZ-compatible pairwise whole-genome alignment (SegAlign).

Seeds (spaced, one transition, both strands) and the ungapped X-drop filter run as
tensor ops (Triton on CUDA); the HSPs are then extended with gaps, natively
(Y-drop DP in torch) or by an installed ``lastz --segments=...`` (SegAlign's way).
Option names and defaults are LASTZ's (ydrop as SegAlign: 9430); every option is a
field of :class:`torchhpc.ext.segalign.config.AlignCommand`.

    torchhpc align MT-human.fa MT-orang.fa --output human_orang.maf
    torchhpc align target.fa query.fa --nogapped --format segments --output hsps.segments
    torchhpc align target.fa.gz query.fa --gapped-by lastz --format general
    torchhpc align target.fa query.fa --seed 14of22 --notransition --strand plus --device cuda
    torchrun --nproc-per-node 2 -m torchhpc.trainers.segalign target.fa query.fa --output out.maf

Under torchrun the ranks share the query intervals (filter) and the strands (gapped stage) and
rank 0 writes the merged output, the same bytes as one process.  The output goes to --output
(default: standard output).  --stats prints counters,
timings and the filter kernel that ran (JSON) on standard error.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from torchhpc.ext.core.cli import config_command, job_main
from torchhpc.ext.segalign.config import AlignCommand


def run_align(cmd: AlignCommand) -> int:
    """Align ``cmd.target`` against ``cmd.query`` and write the alignments (the whole command)."""
    import torch

    from torchhpc.ext.core.distributed import distributed, launched_by_torchrun
    from torchhpc.ext.segalign.align import align_files
    from torchhpc.ext.segalign.output import check_output, write_alignments

    if cmd.threads is not None:
        torch.set_num_threads(cmd.threads)
    check_output(cmd.output)  # a path that cannot be written fails before the alignment, not after
    if not launched_by_torchrun():
        res = align_files(cmd.target, cmd.query, cmd)
        write_alignments(res.alignments, cmd.format, cmd.output)
        if cmd.stats:
            print(json.dumps(res.stats, default=float), file=sys.stderr)
        return 0
    # torchrun: the ranks share the query intervals and strands; rank 0 writes the merged output.
    # A rank that dies makes the others fail at the next collective (torchrun stops the job).
    with distributed(device=cmd.device, timeout_s=cmd.dist_timeout) as ctx:
        if ctx.device.type == "cuda":
            cmd.device = str(ctx.device)
        res = align_files(cmd.target, cmd.query, cmd)
        if ctx.is_main:
            write_alignments(res.alignments, cmd.format, cmd.output)
            if cmd.stats:
                print(json.dumps({**res.stats, "ranks": ctx.world_size}, default=float), file=sys.stderr)
    return 0


def register(sub) -> None:
    config_command(sub, "align", AlignCommand, run_align, config_file=True, description=__doc__,
                   help="LASTZ-compatible whole-genome alignment (SegAlign): FASTA pair -> MAF")


def main(argv: Sequence[str] | None = None) -> int:
    return job_main("torchhpc.trainers.segalign", AlignCommand, run_align, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
