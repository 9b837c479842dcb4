"""symnmf: symmetric nonnegative matrix factorisation for graph clustering (Eswar et al., SC20 / PLANC).

    torchhpc symnmf run --config configs/symnmf/digits.yaml
    torchhpc symnmf run --graph ../shared/data/graphs/football.gml --k 12 --algo gn --json
    torchhpc symnmf run --graph edges.txt --k 8 --labels truth.txt --output runs/my-graph
    torchhpc symnmf run --dataset sbm --k 10 --dist.nproc 2 --dist.grid 2d       # launches torchrun
    torchrun --standalone --nproc-per-node 4 -m torchhpc.trainers.symnmf --config configs/symnmf/sbm.yaml \\
        --dist.grid 2d
    torchhpc symnmf segment --output runs/segment     # image segmentation demo (scikit-image image)

min ||A - H H^T||_F^2 over H >= 0; each node's cluster is the argmax of its row of H.  A run writes
runs/symnmf/<id>/ (or --output DIR): config.yaml, metrics.jsonl (residual and seconds per phase per
iteration), summary.json (residual, iterations, time, ARI/NMI given labels), H.pt, labels.txt,
convergence.png.  --json prints the summary as one JSON object.  The job lives in
torchhpc.ext.symnmf.job, the options in torchhpc.ext.symnmf.config.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from torchhpc.ext.core.cli import command_group, config_command, job_main
from torchhpc.ext.symnmf.config import SegmentOptions, SymnmfJob


def _report(summary: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary, allow_nan=False, default=str), flush=True)
        return
    scores = f"  ARI {summary['ari']:.3f}  NMI {summary['nmi']:.3f}" if "ari" in summary else ""
    print(f"symnmf {summary['algo']}: n={summary['n']} k={summary['k']} residual {summary['residual']:.6f} "
          f"after {summary['iterations']} iterations ({summary['stopped_by']}), {summary['time_s']:.2f} s"
          f"{scores}\n  -> {summary['run_dir']}", flush=True)
    for note in summary.get("warnings", []):
        print(f"  warning: {note}", file=sys.stderr)


def run_rank(cfg: SymnmfJob) -> int:
    """One process (or one rank under torchrun): solve and report on rank 0."""
    import os

    from torchhpc.ext.symnmf.job import run_job

    summary = run_job(cfg)
    if int(os.environ.get("RANK", "0")) == 0:
        _report(summary, cfg.json)
    return 0


def cmd_run(cfg: SymnmfJob) -> int:
    """In-process for one process or under torchrun; otherwise launch torchrun with dist.nproc ranks."""
    from torchhpc.ext.core.distributed import launched_by_torchrun

    if cfg.dist.nproc > 1 and not launched_by_torchrun():
        from torchhpc.ext.symnmf.job import launch

        return launch(cfg)
    return run_rank(cfg)


def cmd_segment(cfg: SegmentOptions) -> int:
    from torchhpc.ext.symnmf.segment import segment_image

    out = segment_image(cfg)
    print(json.dumps(out) if cfg.json else f"segmented {out['image']} into {out['k']} segments -> {out['picture']}")
    return 0


def register(sub) -> None:
    ssub = command_group(sub, "symnmf", description=__doc__,
                         help="SymNMF: symmetric NMF graph clustering (ANLS, Gauss-Newton, HALS, MU)")
    config_command(ssub, "run", SymnmfJob, cmd_run, config_file=True,
                   help="cluster a graph / kNN graph: write H, labels, metrics, plot (ARI/NMI given labels)")
    config_command(ssub, "segment", SegmentOptions, cmd_segment, config_file=True,
                   help="segment an image shipped by scikit-image with SymNMF on a pixel similarity graph")


def main(argv: Sequence[str] | None = None) -> int:
    """torchrun entry: ``torchrun ... -m torchhpc.trainers.symnmf --config FILE [--set k=v] [--flags]``."""
    return job_main("torchhpc.trainers.symnmf", SymnmfJob, run_rank, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
