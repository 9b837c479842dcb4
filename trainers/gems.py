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
The commands live in torchhpc.ext.gems.commands, the options in torchhpc.ext.gems.config.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from torchhpc.ext.core.cli import command_group, config_command, job_main
from torchhpc.ext.gems import commands
from torchhpc.ext.gems.config import GemsConfig, GemsSimulate


def register(sub) -> None:
    """Add ``torchhpc gems train|partition|simulate``."""
    gsub = command_group(sub, "gems", description=__doc__,
                         help="GEMS: memory-aware pipeline parallelism (MAST, MASTER, Hybrid) with torchrun")
    config_command(gsub, "train", GemsConfig, commands.train, config_file=True,
                   help="train from a config (launches torchrun with stages x groups processes)")
    # partition and simulate read a training config and run in this process: its launch and run-folder keys
    # stay valid there (saved configs hold them) but do nothing, which a warning says when they are typed
    here = {"unused": ("dist.nproc", "dist.timeout_s", "run.resume", "run.run_id", "run.root"),
            "unused_why": "they set up a training run's processes and folder; this command runs here and writes none"}
    config_command(gsub, "partition", GemsConfig, commands.partition, config_file=True,
                   help="profile the blocks and print the per-stage time and memory report", **here)
    config_command(gsub, "simulate", GemsSimulate, commands.simulate, config_file=True,
                   help="discrete-event prediction of throughput and memory up to 1,024 devices", **here)


def main(argv: Sequence[str] | None = None) -> int:
    """torchrun entry: ``torchrun ... -m torchhpc.trainers.gems --config FILE [--set k=v] [--section.key v]``."""
    return job_main(commands.JOB, GemsConfig, commands.train, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
