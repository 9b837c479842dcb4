"""Neighbourhood collectives: benchmark direct / LAG-H / LAW-H on a process graph; predict them at scale.

    torchhpc collectives bench --nproc 4 --graph random:0.5 --ranks-per-node 2 --sizes 4K,64K,1M \\
        --algo direct,lag-h,law-h            # launches torchrun for you
    torchrun --standalone --nproc-per-node 4 -m torchhpc.trainers.collectives --sizes 256K
    torchhpc collectives model --nodes 512 --ranks-per-node 56 --graph moore:3:1

`bench` prints time per call (largest median over ranks), the speed-up over direct and the bytes each
rank injects between nodes; "nodes" are blocks of --ranks-per-node ranks, and --inter-node-mbps
makes the path between them a slow, per-rank rate-limited one (0: off); node-mates exchange through
shared memory (--intra-node shm, the default on one host) or the process group (group); --stats adds the
time of each phase; --device, --threads, --nproc and --timeout-s say where and on how many ranks it runs.
`model` evaluates the cost model on the real routing plans of nodes x ranks-per-node ranks.  The commands
live in torchhpc.ext.collectives.commands, the options in torchhpc.ext.collectives.config.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from torchhpc.ext.collectives import commands
from torchhpc.ext.collectives.config import BenchOptions, ModelOptions
from torchhpc.ext.core.cli import command_group, config_command, job_main


def register(sub) -> None:
    csub = command_group(sub, "collectives", description=__doc__,
                         help="neighbourhood collectives (Neighbor_alltoallv): bench, scale model")
    config_command(csub, "bench", BenchOptions, commands.bench, config_file=True,
                   help="time direct / LAG-H / LAW-H per message size under torchrun (--nproc ranks)")
    config_command(csub, "model", ModelOptions, commands.model, config_file=True,
                   help="predict each algorithm's time per call at scale with the cost model")


def main(argv: Sequence[str] | None = None) -> int:
    """torchrun entry: ``torchrun ... -m torchhpc.trainers.collectives [--config FILE] [--flags]``."""
    return job_main("torchhpc.trainers.collectives", BenchOptions, commands.bench_rank, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
