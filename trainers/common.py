"""What every entry point shares; defined once in :mod:`torchhpc.ext.core` and re-exported here."""

from __future__ import annotations

import argparse

from torchhpc.ext.core.cli import ArgumentParser, module_main, run_main
from torchhpc.ext.core.config import RunOptions

parse_and_run = module_main


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """``--debug`` for a command whose options do not come from a dataclass."""
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")


__all__ = ["ArgumentParser", "RunOptions", "add_common_arguments", "module_main", "parse_and_run", "run_main"]
