"""What every entry point shares: one-line errors, --debug, the run options block."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torchhpc.ext.core.config import option
from torchhpc.ext.core.errors import TorchHPCError


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (``torchhpc X: error: ... (see --help)``), exit 2."""

    def error(self, message: str):  # noqa: D401 - argparse API
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


@dataclass
class RunOptions:
    """Where a job writes its run folder."""

    root: str = option("runs", help="parent folder of all runs")
    run_id: str | None = option(None, help="run folder name (default: a new timestamped id)")
    resume: bool = option(False, help="continue run_id from its last checkpoint")
    progress: bool = option(True, help="show progress bars (rank 0)")


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")


def run_main(fn: Callable[[argparse.Namespace], int | None], args: argparse.Namespace, prog: str = "torchhpc") -> int:
    """Call ``fn(args)``; user errors become one line on stderr and exit status 1 (2 for usage)."""
    debug = getattr(args, "debug", False) or os.environ.get("TORCHHPC_DEBUG") == "1"
    try:
        return int(fn(args) or 0)
    except TorchHPCError as exc:
        if debug:
            raise
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # output piped into `head` or similar: stop quietly, as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
        return 0
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        if debug:
            raise
        print(f"{prog}: error: {exc.strerror or exc}: {exc.filename}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def parse_and_run(
    build: Callable[[], argparse.ArgumentParser], fn: Callable[[argparse.Namespace], int | None],
    argv: Sequence[str] | None = None,
) -> int:
    """``python -m torchhpc.trainers.<job>`` / torchrun entry: parse ``argv`` and :func:`run_main`."""
    parser = build()
    args = parser.parse_args(argv)
    return run_main(fn, args, parser.prog)
