"""``torchhpc foresight``: choose how hard to compress by what compression does to the analyses you run.

    torchhpc foresight run --config configs/foresight/debug.yaml          # a sweep -> Cinema DB + table + HTML
    torchhpc foresight run --config configs/foresight/nyx.yaml --nproc 2  # the sweep sliced over 2 torchrun ranks
    torchhpc foresight compress field.npy field.fsz --compressor sz3 --mode rel --bound 1e-3 [--json]
    torchhpc foresight decompress field.fsz restored.npy [--original field.npy] [--json]

`run` writes runs/foresight/<id>/: <name>.cdb/data.csv (Foresight's columns + FILE_* plots), best.csv
(the most compressing setting per compressor that passes every analysis), index.html, summary.json.
Every option is defined in torchhpc.ext.foresight.config (SweepConfig, CompressOptions, DecompressOptions);
the commands are torchhpc.ext.foresight.commands.run, compress and decompress.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from torchhpc.ext.core.cli import command_group, config_command, subcommands_main
from torchhpc.ext.foresight import commands
from torchhpc.ext.foresight.config import CompressOptions, DecompressOptions, SweepConfig


def _add_commands(s) -> None:
    config_command(s, "run", SweepConfig, commands.run, config_file=True, files_first=True,  # (its config loads torch)
                   help="sweep compressors x settings x fields; write a Cinema database, a table and an HTML page")
    config_command(s, "compress", CompressOptions, commands.compress,
                   help="compress one array with one setting; print ratio, max error and throughput")
    config_command(s, "decompress", DecompressOptions, commands.decompress,
                   help="restore a file written by `foresight compress` to .npy")


def register(sub) -> None:
    _add_commands(command_group(sub, "foresight", description=__doc__,
                                help="lossy compression judged by the analyses that matter (Foresight)"))


def main(argv: Sequence[str] | None = None) -> int:
    return subcommands_main(commands.MODULE, _add_commands, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
