"""The ``torchhpc`` command.

Each system registers its subcommands through a ``register(subparsers)`` function
in its trainer module (listed in :data:`COMMANDS`); modules keep their heavy
imports inside the command functions so that ``torchhpc --help`` stays quick.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from .common import ArgumentParser, run_main

#: (command, module with ``register(subparsers)``) in the order ``--help`` lists them.
COMMANDS: list[tuple[str, str]] = [
    ("demo", "torchhpc.trainers.demo"),
    ("sched", "torchhpc.trainers.sched"),
    ("kraken", "torchhpc.trainers.kraken"),
    ("ccsdt", "torchhpc.trainers.ccsdt"),
    ("distcheck", "torchhpc.trainers.distcheck"),
    ("align", "torchhpc.trainers.segalign"),
    ("gems", "torchhpc.trainers.gems"),
    ("fperror", "torchhpc.trainers.fperror"),
    ("symnmf", "torchhpc.trainers.symnmf"),
    ("pliner", "torchhpc.trainers.pliner"),
    ("foresight", "torchhpc.trainers.foresight"),
    ("collectives", "torchhpc.trainers.collectives"),
]



def _version() -> str:
    try:
        from importlib.metadata import version

        return version("torchhpc")
    except Exception:
        return "unknown"


def build_parser(only: str | None = None) -> ArgumentParser:
    """The whole command line; with ``only``, just that command (the others' modules are not imported,
    so a command starts without the cost of every system's options)."""
    parser = ArgumentParser(
        prog="torchhpc",
        description="torchhpc: SC20 HPC research systems as PyTorch modules, Triton kernels, "
        "Gymnasium envs and torchrun trainers.",
        epilog="Every command takes --help; --debug shows tracebacks.",
    )
    parser.add_argument("--version", action="version", version=f"torchhpc {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands", parser_class=ArgumentParser)
    for name, module in COMMANDS:
        if only is None or name == only:
            importlib.import_module(module).register(sub)
    return parser


def leaf_commands(parser: argparse.ArgumentParser | None = None, path: tuple[str, ...] = ()):
    """``(("kraken", "train"), parser)`` for every runnable command of the CLI, depth first."""
    parser = parser if parser is not None else build_parser()
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
        return
    for action in subs:
        for name, child in action.choices.items():
            yield from leaf_commands(child, (*path, name))


def _leaf(parser: argparse.ArgumentParser, words: Sequence[str]) -> argparse.ArgumentParser:
    """The (sub)command parser that ``words`` name (``pliner find ...`` -> the ``find`` parser)."""
    for w in words:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or w not in subs[0].choices:
            break
        parser = subs[0].choices[w]
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``torchhpc`` console script."""
    words = list(sys.argv[1:] if argv is None else argv)
    first = words[0] if words else None
    parser = build_parser(only=first if first in dict(COMMANDS) else None)
    args, extra = parser.parse_known_args(words)
    if extra:  # said by the command that got them, so that the line points at its --help
        _leaf(parser, words).error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if args.command is None else 2
    return run_main(args.func, args, getattr(args, "prog_name", "torchhpc"))


if __name__ == "__main__":
    sys.exit(main())
