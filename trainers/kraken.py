"""``torchhpc kraken``: continual training of a DLRM on a click stream with dynamic embeddings.

    torchhpc kraken train --config configs/kraken/synthetic.yaml          # one process
    torchhpc kraken train --config configs/kraken/synthetic.yaml --nproc 2   # rows sharded over 2 torchrun ranks
    torchrun --standalone --nproc-per-node 2 -m torchhpc.trainers.kraken \\
        --config configs/kraken/synthetic.yaml                          # the same, launched by hand
    torchhpc kraken serve --checkpoint-dir runs/kraken/<id>/checkpoints  # a serving replica
    torchhpc kraken bench --steps 1500                                  # vs torchrec EBC / MC-EBC
    torchhpc kraken bench --stream criteo --path day_0.gz               # the same, on your own log

Training scores every batch before learning from it (progressive validation:
windowed AUC and log-loss in ``metrics.jsonl``), writes a delta checkpoint (rows
changed since the last one) every ``checkpoint.delta_every`` steps and a full one
every ``checkpoint.full_every``; ``--run.resume --run.run-id <id>`` continues
exactly where the last checkpoint left off.  The serving replica loads those files
as they appear and answers requests from the same stream in between, printing how
stale it is.  A Criteo-format log (TSV, ``.gz`` or Parquet: ``--stream.source criteo
--stream.path FILE``) is read by pyarrow in a background thread.  Every option is a
flag (``--tables.max-rows 300``) and a key of the config file; the commands themselves
live in :mod:`torchhpc.ext.kraken.commands`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from torchhpc.ext.core.cli import command_group, config_command, job_main
from torchhpc.ext.kraken import commands
from torchhpc.ext.kraken.config import BenchOptions, KrakenConfig, ServeOptions

__all__ = ["KrakenConfig", "main", "register"]


def register(sub) -> None:
    """Add ``torchhpc kraken train|serve|bench``."""
    ksub = command_group(sub, "kraken", help="Kraken: continual training with dynamic sparse embeddings, serving, bench",
                         description=__doc__)
    config_command(ksub, "train", KrakenConfig, commands.train, config_file=True,
                   help="continual training from a config (--nproc N, or torchrun: rows sharded over the ranks)")
    config_command(ksub, "serve", ServeOptions, commands.serve, help="a serving replica that follows a run's checkpoints")
    config_command(ksub, "bench", BenchOptions, commands.bench,
                   help="AUC and memory vs torchrec EBC (full, hashed) and MC-EBC on one stream "
                        "(synthetic, or your Criteo-format log: --stream criteo --path FILE)")


def main(argv: Sequence[str] | None = None) -> int:
    """torchrun entry: ``torchrun ... -m torchhpc.trainers.kraken --config FILE [--set k=v] [--train.steps N]``."""
    return job_main("torchhpc.trainers.kraken", KrakenConfig, commands.train, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
