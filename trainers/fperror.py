"""``torchhpc fperror``: rigorous bounds on the round-off error of straight-line floating-point code.

    torchhpc fperror analyze doppler1.txt                      # Satire / FPTaylor / FPCore, format detected
    torchhpc fperror analyze fft_1024pt_sat.txt --json         # one JSON object
    torchhpc fperror analyze kepler0.txt --inputs rounded      # FPTaylor's convention: inputs rounded
    torchhpc fperror analyze lorentz_70_sat.txt --abstraction 100:200   # Satire's abstraction, one cut
    torchhpc fperror analyze fdtd1d_100_32.txt --linear on     # closed-form ranges for a linear kernel
    torchhpc fperror trace mymodule:step --ranges u=0:1 --shapes u=64 --dtype float32

Prints per output the absolute and relative bound, the value range, the part of the bound beyond
first order, and the operations contributing most (with their line). Every option is defined in
torchhpc.ext.fperror.config (AnalyzeOptions, TraceOptions); --config FILE takes them as YAML. The
commands are run_analyze and run_trace in torchhpc.ext.fperror.commands.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from torchhpc.ext.core.cli import command_group, config_command, subcommands_main
from torchhpc.ext.fperror.commands import run_analyze, run_trace
from torchhpc.ext.fperror.config import AnalyzeOptions, TraceOptions


def _add_commands(group) -> None:
    config_command(group, "analyze", AnalyzeOptions, run_analyze, config_file=True,
                   help="bound every output of a Satire, FPTaylor or FPCore file")
    config_command(group, "trace", TraceOptions, run_trace, config_file=True,
                   help="bound a PyTorch function's round-off over input ranges")


def register(sub) -> None:
    _add_commands(command_group(sub, "fperror", description=__doc__,
                                help="rigorous round-off error bounds (Satire/FPTaylor/FPCore files, torch code)"))


def main(argv: Sequence[str] | None = None) -> int:
    return subcommands_main("torchhpc.trainers.fperror", _add_commands, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
