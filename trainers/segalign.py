"""``torchhpc align``: LASTZ-compatible pairwise whole-genome alignment (SegAlign).

Seeds (spaced, one transition, both strands) and the ungapped X-drop filter run as
tensor ops (Triton on CUDA); the HSPs are then extended with gaps, natively
(torchhpc's Y-drop DP, compiled by numba where installed) or by an installed ``lastz --segments=...`` (SegAlign's way).
Option names and defaults are LASTZ's (ydrop as SegAlign: 9430); every option is a
field of :class:`torchhpc.ext.segalign.config.AlignCommand`.

    torchhpc align MT-human.fa MT-orang.fa --output human_orang.maf
    torchhpc align target.fa query.fa --nogapped --format segments --output hsps.segments
    torchhpc align target.fa.gz query.fa --gapped-by lastz --format general
    torchhpc align target.fa query.fa --seed 14of22 --notransition --strand plus --device cuda
    torchhpc align target.fa query.fa --threads 2 --stats
    torchhpc align target.fa query.fa --nproc 2 --output out.maf        # 2 torchrun ranks
    torchrun --nproc-per-node 2 -m torchhpc.trainers.segalign target.fa query.fa --output out.maf

Under torchrun (or with ``--nproc N``) the ranks share the query intervals (filter) and the strands
(gapped stage) and rank 0 writes the merged output, the same bytes as one process.  The output goes to
--output (default: standard output).  --stats prints counters, timings and the kernels that ran (JSON)
on standard error.  The command is :func:`torchhpc.ext.segalign.commands.align`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from torchhpc.ext.core.cli import config_command, job_main
from torchhpc.ext.segalign import commands
from torchhpc.ext.segalign.config import AlignCommand


def register(sub) -> None:
    config_command(sub, "align", AlignCommand, commands.align, config_file=True, description=__doc__,
                   help="LASTZ-compatible whole-genome alignment (SegAlign): FASTA pair -> MAF")


def main(argv: Sequence[str] | None = None) -> int:
    return job_main(commands.MODULE, AlignCommand, commands.align, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
