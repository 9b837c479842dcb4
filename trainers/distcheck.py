"""A torchrun smoke test of the distributed set-up: all-reduce and an uneven all-to-all.

    torchrun --standalone --nproc-per-node 2 -m torchhpc.trainers.distcheck
    torchhpc distcheck --nproc 2        # the same, launched for you

Each rank checks what it received against what the protocol says it must be;
rank 0 prints one JSON line with every rank's report; any mismatch exits non-zero.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from torchhpc.ext.core.cli import config_command, job_main
from torchhpc.ext.core.distcheck import DistcheckOptions


def run_rank(opts: DistcheckOptions) -> int:
    """One rank: run the checks; rank 0 prints one line for the whole job."""
    from torchhpc.ext.core.distcheck import check_collectives

    if opts.dist.threads:
        import torch

        torch.set_num_threads(opts.dist.threads)
    report = check_collectives(opts.dist.device, opts.dist.timeout_s)
    if report["rank"] == 0:  # one line for the whole job (ranks' stdout would interleave)
        print(json.dumps({k: v for k, v in report.items() if k != "rank"}), flush=True)
    return 0 if report["all_ranks_ok"] else 1


def launch(opts: DistcheckOptions) -> int:
    """``torchhpc distcheck``: the same checks on ``opts.nproc`` local ranks."""
    from torchhpc.ext.core.launch import check_device, torchrun

    check_device(opts)  # a missing GPU is one line here, not every rank's traceback
    d = opts.dist
    return torchrun("torchhpc.trainers.distcheck", d.nproc,
                    ["--device", d.device, "--timeout-s", repr(d.timeout_s), "--threads", str(d.threads)])


def register(sub) -> None:
    config_command(sub, "distcheck", DistcheckOptions, launch, description=__doc__, config_file=True,
                   help="check torch.distributed (all-reduce, uneven all-to-all) with torchrun")


def main(argv: Sequence[str] | None = None) -> int:
    return job_main("torchhpc.trainers.distcheck", DistcheckOptions, run_rank, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
