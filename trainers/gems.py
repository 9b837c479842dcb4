"""gems: memory-aware pipeline model parallelism (GEMS, SC20) — MAST, MASTER and Hybrid.

    torchrun --standalone --nproc-per-node 2 -m torchhpc.trainers.gems --config configs/gems/mast_resnet.yaml
    torchhpc gems train --config configs/gems/debug.yaml [--pipeline.schedule master]   # launches torchrun
    torchhpc gems partition --config configs/gems/mast_resnet.yaml      # profile + per-stage memory report
    torchhpc gems simulate --config configs/gems/mast_resnet.yaml --devices 2,8,64,1024
    torchhpc gems simulate --config runs/gems/<id>/config.yaml --calibrate runs/gems/<id>   # fitted on a run

World size = pipeline.stages x pipeline.groups.  One update processes
``train.batch_size x (2 for mast/master) x pipeline.eta x pipeline.groups`` samples.
A run writes runs/gems/<id>/: config.yaml, metrics.jsonl (loss, samples/s, peak memory),
summary.json (per-rank peak memory, median samples/s, measured action times), timeline.png,
loss.png and one checkpoint shard per rank (resume with --run.resume --run.run-id <id>).
The job itself lives in torchhpc.ext.gems.train, the options in torchhpc.ext.gems.config.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from torchhpc.ext.core.cli import command_group, config_command, job_main
from torchhpc.ext.gems.config import GemsConfig, GemsSimulate, GemsTrain


def cmd_train(cfg: GemsTrain) -> int:
    """In-process for one rank or under torchrun; otherwise launch torchrun with the right world size."""
    from torchhpc.ext.gems.train import launch

    return launch(cfg, cfg.launch.nproc)


def cmd_partition(cfg: GemsConfig) -> int:
    from torchhpc.ext.gems.train import partition_report

    print(partition_report(cfg))
    return 0


def cmd_simulate(cfg: GemsSimulate) -> int:
    from torchhpc.ext.gems.simulator import predict, simulation_table

    rows, what = predict(cfg)
    if cfg.simulate.json:
        print(json.dumps([r.as_dict() for r in rows]))
    else:
        print(what)
        print(simulation_table(rows))
    return 0


def register(sub) -> None:
    gsub = command_group(sub, "gems", description=__doc__,
                         help="GEMS: memory-aware pipeline parallelism (MAST, MASTER, Hybrid) with torchrun")
    config_command(gsub, "train", GemsTrain, cmd_train, config_file=True,
                   help="train from a config (launches torchrun with stages x groups processes)")
    config_command(gsub, "partition", GemsConfig, cmd_partition, config_file=True,
                   help="profile the blocks and print the per-stage time and memory report")
    config_command(gsub, "simulate", GemsSimulate, cmd_simulate, config_file=True,
                   help="discrete-event prediction of throughput and memory up to 1,024 devices")


def run_rank(cfg: GemsConfig) -> int:
    """One torchrun rank of the job."""
    from torchhpc.ext.gems.train import launch

    return launch(cfg)


def main(argv: Sequence[str] | None = None) -> int:
    """torchrun entry: ``torchrun ... -m torchhpc.trainers.gems --config FILE [--set k=v] [--section.key v]``."""
    return job_main("torchhpc.trainers.gems", GemsConfig, run_rank, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
