"""symnmf: symmetric nonnegative matrix factorisation for graph clustering (Eswar et al., SC20 / PLANC).

    torchhpc symnmf run --config configs/symnmf/digits.yaml
    torchhpc symnmf run --graph ../shared/data/graphs/football.gml --k 12 --algo gn --json
    torchhpc symnmf run --graph edges.txt --k 8 --labels truth.txt --output runs/my-graph
    torchhpc symnmf run --dataset sbm --k 10 --nproc 2 --dist.grid 2d       # launches torchrun
    torchrun --standalone --nproc-per-node 4 -m torchhpc.trainers.symnmf --config configs/symnmf/sbm.yaml \\
        --dist.grid 2d
    torchhpc symnmf segment --output runs/segment     # image segmentation demo (scikit-image image)

min ||A - H H^T||_F^2 over H >= 0; each node's cluster comes from H (--solver.assign: the argmax of its row,
k-means on the rows of D^-1/2 H, or auto: the better fitting of the two).  A run writes
runs/symnmf/<id>/ (or --output DIR): config.yaml, metrics.jsonl (residual and seconds per phase per
iteration), summary.json (residual, iterations, time, ARI/NMI given labels), H.pt, labels.txt,
convergence.png.  --json prints the summary as one JSON object.  --device, --threads, --nproc and
--timeout-s say where and on how many processes it runs.  The commands live in
torchhpc.ext.symnmf.commands, the options in torchhpc.ext.symnmf.config.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from torchhpc.ext.core.cli import command_group, config_command, job_main
from torchhpc.ext.symnmf import commands
from torchhpc.ext.symnmf.config import SegmentOptions, SymnmfJob


def register(sub) -> None:
    ssub = command_group(sub, "symnmf", description=__doc__,
                         help="SymNMF: symmetric NMF graph clustering (ANLS, Gauss-Newton, HALS, MU)")
    config_command(ssub, "run", SymnmfJob, commands.run, config_file=True,
                   help="cluster a graph / kNN graph: write H, labels, metrics, plot (ARI/NMI given labels)")
    config_command(ssub, "segment", SegmentOptions, commands.segment, config_file=True,
                   help="segment an image shipped by scikit-image with SymNMF on a pixel similarity graph")


def main(argv: Sequence[str] | None = None) -> int:
    """torchrun entry: ``torchrun ... -m torchhpc.trainers.symnmf --config FILE [--set k=v] [--flags]``."""
    return job_main("torchhpc.trainers.symnmf", SymnmfJob, commands.run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
