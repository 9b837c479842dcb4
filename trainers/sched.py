"""sched: RLScheduler — PPO training of the kernel policy, evaluation, and the heuristics table.

    torchhpc sched heuristics --trace lublin_256.swf --starts published --length 1024
    torchhpc sched train --config configs/sched/lublin1.yaml [--set ppo.epochs=50] [--ppo.epochs 50]
    torchhpc sched train --config configs/sched/debug.yaml --nproc 2     # 2 rollout workers under torchrun
    torchrun --standalone --nproc-per-node 2 -m torchhpc.trainers.sched --config configs/sched/debug.yaml
    torchhpc sched eval --checkpoint runs/sched/<id> --trace lublin_256.swf --starts published
    torchhpc sched eval --checkpoint pretrained:lublin1-backfill --trace lublin_256_new2 --starts published --json
    torchhpc sched export --checkpoint runs/sched/<id> --name lublin1-backfill --unseen lublin_256_new2

Each command is a function of :mod:`torchhpc.ext.sched.commands`; the algorithm (PPO with the paper's
settings, the group advantage, KL backtracking) is :mod:`torchhpc.ext.sched.ppo`; every option is a field of
:mod:`torchhpc.ext.sched.config`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from torchhpc.ext.core.cli import command_group, config_command, job_main
from torchhpc.ext.sched import commands
from torchhpc.ext.sched.config import EvalCommandOptions, ExportOptions, HeuristicsOptions, SchedConfig


def register(sub) -> None:
    ssub = command_group(sub, "sched", help="RLScheduler: heuristics, PPO training and evaluation of batch scheduling",
                         description=__doc__)
    config_command(ssub, "heuristics", HeuristicsOptions, commands.heuristics_command,
                   help="table of heuristic schedulers' metrics on job windows")
    config_command(ssub, "train", SchedConfig, commands.train_command,
                   help="train the kernel policy with PPO from a config", config_file=True)
    config_command(ssub, "eval", EvalCommandOptions, commands.eval_command,
                   help="a trained policy beside the heuristics, table + box plot")
    config_command(ssub, "export", ExportOptions, commands.export_command,
                   help="a trained run's policy as a pretrained policy (pretrained:NAME), scored, with its card")


def main(argv: Sequence[str] | None = None) -> int:
    """torchrun entry: ``torchrun ... -m torchhpc.trainers.sched --config FILE [--set k=v] [--ppo.epochs N]``."""
    return job_main("torchhpc.trainers.sched", SchedConfig, commands.train_command, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
