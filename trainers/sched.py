"""sched: RLScheduler — PPO training of the kernel policy, evaluation, and the heuristics table.

    torchhpc sched heuristics --trace lublin_256.swf --starts published --length 1024
    torchhpc sched train --config configs/sched/lublin1.yaml [--set ppo.epochs=50] [--ppo.epochs 50]
    torchrun --standalone --nproc-per-node 2 -m torchhpc.trainers.sched --config configs/sched/debug.yaml
    torchhpc sched eval --checkpoint runs/sched/<id> --trace lublin_256.swf --starts published

The algorithm (PPO with the paper's settings, the group advantage, KL backtracking, checkpoints) is
:mod:`torchhpc.ext.sched.ppo`; every option is a field of :mod:`torchhpc.ext.sched.config`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from torchhpc.ext.core.cli import ArgumentParser, config_command, job_parser, module_main, options_from_args
from torchhpc.ext.sched.config import EvalCommandOptions, HeuristicsOptions, SchedConfig


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


def register(sub) -> None:
    p = sub.add_parser("sched", help="RLScheduler: heuristics, PPO training and evaluation of batch scheduling",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ssub = p.add_subparsers(dest="sched_command", metavar="SUBCOMMAND", parser_class=ArgumentParser)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])
    config_command(ssub, "heuristics", HeuristicsOptions, cmd_heuristics,
                   help="table of heuristic schedulers' metrics on job windows")
    config_command(ssub, "train", SchedConfig, cmd_train, help="train the kernel policy with PPO from a config",
                   config_file=True)
    config_command(ssub, "eval", EvalCommandOptions, cmd_eval,
                   help="a trained policy beside the heuristics, table + box plot")


def build_parser() -> ArgumentParser:
    return job_parser("torchhpc.trainers.sched", SchedConfig, __doc__, config_file=True)


def main(argv: Sequence[str] | None = None) -> int:
    """torchrun entry: ``torchrun ... -m torchhpc.trainers.sched --config FILE [--set k=v] [--ppo.epochs N]``."""
    return module_main(build_parser, lambda args: cmd_train(options_from_args(SchedConfig, args)), argv)


__all__ = ["build_parser", "main", "register"]

if __name__ == "__main__":
    sys.exit(main())
