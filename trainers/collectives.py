"""Neighbourhood collectives: benchmark direct / LAG-H / LAW-H on a process graph; predict them at scale.

    torchhpc collectives bench --nproc 4 --graph random:0.5 --ranks-per-node 2 --sizes 4K,64K,1M \\
        --algo direct,lag-h,law-h            # launches torchrun for you
    torchrun --standalone --nproc-per-node 4 -m torchhpc.trainers.collectives --sizes 256K
    torchhpc collectives model --nodes 512 --ranks-per-node 56 --graph moore:3:1

`bench` prints time per call (largest median over ranks), the speed-up over direct and the bytes each
rank injects between nodes; "nodes" are blocks of --ranks-per-node ranks, and --inter-node-mbps
makes the path between them a slow, per-rank rate-limited one (0: off); node-mates exchange through
shared memory (--intra-node shm, the default on one host) or the process group (group); --stats adds the
time of each phase.  `model` evaluates the cost
model on the real routing plans of nodes x ranks-per-node ranks.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from torchhpc.ext.collectives.config import BenchOptions, ModelOptions
from torchhpc.ext.core.cli import command_group, config_command, job_main


def run_rank(opts: BenchOptions) -> int:
    """One torchrun rank of `bench`; rank 0 prints and writes the results."""
    from torchhpc.ext.collectives.bench import format_table, run_bench
    from torchhpc.ext.core.runs import atomic_write_text

    result = run_bench(opts)
    if result is not None:
        if opts.output:
            atomic_write_text(opts.output, json.dumps(result) + "\n")
        print(json.dumps(result) if opts.json else format_table(result), flush=True)
        return 0 if all(r["identical"] for r in result["rows"]) else 1
    return 0


def launch(opts: BenchOptions) -> int:
    """`torchhpc collectives bench`: the rank job on --nproc local ranks under torchrun."""
    from torchhpc.ext.core.launch import relaunch

    return relaunch(opts, "torchhpc.trainers.collectives", opts.nproc)


def model(opts: ModelOptions) -> int:
    """`torchhpc collectives model`: predicted time per call of each algorithm at scale."""
    from torchhpc.ext.collectives.model import format_prediction, predict

    res = predict(opts)
    print(json.dumps(res) if opts.json else format_prediction(res))
    return 0


def register(sub) -> None:
    csub = command_group(sub, "collectives", description=__doc__,
                         help="neighbourhood collectives (Neighbor_alltoallv): bench, scale model")
    config_command(csub, "bench", BenchOptions, launch, config_file=True,
                   help="time direct / LAG-H / LAW-H per message size under torchrun (--nproc ranks)")
    config_command(csub, "model", ModelOptions, model, config_file=True,
                   help="predict each algorithm's time per call at scale with the cost model")


def main(argv: Sequence[str] | None = None) -> int:
    return job_main("torchhpc.trainers.collectives", BenchOptions, run_rank, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
