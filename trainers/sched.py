"""sched: RLScheduler — PPO training of the kernel policy, evaluation, and the heuristics table.

    torchhpc sched heuristics --trace lublin_256.swf --starts published --length 1024
    torchhpc sched train --config configs/sched/lublin1.yaml [--set ppo.epochs=50] [--ppo.epochs 50]
    torchrun --standalone --nproc-per-node 2 -m torchhpc.trainers.sched --config configs/sched/debug.yaml
    torchhpc sched eval --checkpoint runs/sched/<id> --trace lublin_256.swf --starts published
    torchhpc sched eval --checkpoint pretrained:lublin1-backfill --trace lublin_256_new2 --starts published --json
    torchhpc sched export --checkpoint runs/sched/<id> --name lublin1-backfill --unseen lublin_256_new2

The algorithm (PPO with the paper's settings, the group advantage, KL backtracking, checkpoints) is
:mod:`torchhpc.ext.sched.ppo`; every option is a field of :mod:`torchhpc.ext.sched.config`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from torchhpc.ext.core.cli import command_group, config_command, job_main
from torchhpc.ext.sched.config import EvalCommandOptions, ExportOptions, HeuristicsOptions, SchedConfig


def cmd_train(cfg: SchedConfig) -> int:
    from torchhpc.ext.sched.ppo import train

    train(cfg)
    return 0


def cmd_heuristics(opts: HeuristicsOptions) -> int:
    from torchhpc.ext.sched.report import heuristics

    heuristics(opts)
    return 0


def cmd_eval(opts: EvalCommandOptions) -> int:
    from torchhpc.ext.sched.report import evaluate_checkpoint

    evaluate_checkpoint(opts)
    return 0


def cmd_export(opts: ExportOptions) -> int:
    from torchhpc.ext.sched.zoo import export_command

    export_command(opts)
    return 0


def register(sub) -> None:
    ssub = command_group(sub, "sched", help="RLScheduler: heuristics, PPO training and evaluation of batch scheduling", description=__doc__)
    config_command(ssub, "heuristics", HeuristicsOptions, cmd_heuristics,
                   help="table of heuristic schedulers' metrics on job windows")
    config_command(ssub, "train", SchedConfig, cmd_train, help="train the kernel policy with PPO from a config",
                   config_file=True)
    config_command(ssub, "eval", EvalCommandOptions, cmd_eval,
                   help="a trained policy beside the heuristics, table + box plot")
    config_command(ssub, "export", ExportOptions, cmd_export,
                   help="a trained run's policy as a pretrained policy (pretrained:NAME), scored, with its card")


def main(argv: Sequence[str] | None = None) -> int:
    """torchrun entry: ``torchrun ... -m torchhpc.trainers.sched --config FILE [--set k=v] [--ppo.epochs N]``."""
    return job_main("torchhpc.trainers.sched", SchedConfig, cmd_train, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
