"""``torchhpc pliner``: isolate the ops whose precision makes two configurations of a model disagree.

    torchhpc pliner find --model examples.py:build --problem autocast-bf16            # report
    torchhpc pliner find --model torchhpc.ext.pliner.examples:tiny_transformer --problem tf32 --json
    torchhpc pliner find --model m.py:build --problem compile --tol 1e-4 --search ddmin

``build()`` returns ``(model, inputs)``.  The reference (default fp32 eager) and the problem
configuration run the same model on the same inputs; PLiNER's search (enhance everything to
float64, then bisect: modules, source lines, FX nodes) returns the smallest set whose float64
enhancement makes them agree, checked minimal, and a mixed-precision recipe.  One progress line
per search level goes to stderr; --json prints one object (status found / no_divergence /
not_fixable / spread).  The command is torchhpc.ext.pliner.commands.find_command; every option is
defined in torchhpc.ext.pliner.config.FindOptions.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from torchhpc.ext.core.cli import command_group, config_command, subcommands_main
from torchhpc.ext.pliner import commands
from torchhpc.ext.pliner.config import FindOptions


def _add(sub) -> None:
    config_command(sub, "find", FindOptions, commands.find_command, config_file=True,
                   help="find the ops/modules/lines whose float64 enhancement makes the configurations agree")


def register(sub) -> None:
    _add(command_group(sub, "pliner", description=__doc__,
                       help="isolate the ops behind bf16 / TF32 / compile divergence (PLiNER)"))


def main(argv: Sequence[str] | None = None) -> int:
    return subcommands_main("torchhpc.trainers.pliner", _add, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
