"""``torchhpc foresight``: choose how hard to compress by what compression does to the analyses you run.

    torchhpc foresight run --config configs/foresight/debug.yaml          # a sweep -> Cinema DB + table + HTML
    torchhpc foresight run --config configs/foresight/nyx.yaml --nproc 2  # the sweep sliced over 2 torchrun ranks
    torchhpc foresight compress field.npy field.fsz --compressor sz3 --mode rel --bound 1e-3 [--json]
    torchhpc foresight decompress field.fsz restored.npy [--original field.npy] [--json]

`run` writes runs/foresight/<id>/: <name>.cdb/data.csv (Foresight's columns + FILE_* plots), best.csv
(the most compressing setting per compressor that passes every analysis), index.html, summary.json.
Every option is defined in torchhpc.ext.foresight.config (SweepConfig, CompressOptions, DecompressOptions).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from torchhpc.ext.core.cli import command_group, config_command, subcommands_main
from torchhpc.ext.foresight.config import CompressOptions, DecompressOptions, SweepConfig

MODULE = "torchhpc.trainers.foresight"


def run_sweep_job(cfg: SweepConfig) -> int:
    """``foresight run``: the sweep in this process, its slice under torchrun, or torchrun for ``--nproc N``."""
    from torchhpc.ext.core.distributed import distributed, launched_by_torchrun

    if cfg.nproc > 1 and not launched_by_torchrun():
        from torchhpc.ext.core.launch import relaunch

        return relaunch(cfg, MODULE, cfg.nproc, ["run"])  # the resolved config, flags included, for every rank
    from torchhpc.ext.core.runs import open_run
    from torchhpc.ext.foresight.sweep import run_sweep

    with distributed(device="cpu") as ctx:
        run = open_run("foresight", cfg, cfg.run, ctx if ctx.initialized else None)
        summary = run_sweep(cfg, run, ctx if ctx.initialized else None)
    if summary:
        best = "; ".join(f"{b['compressor']} {b['params']}" + (f" ({b['ratio']:.1f}x)" if b["ratio"] else "")
                         for b in summary["best"])
        print(f"{summary['rows']} rows, {summary['failed']} failed -> {run.dir}")
        print(f"best passing setting per compressor: {best}")
    return 0


def run_compress(opts: CompressOptions) -> int:
    from torchhpc.ext.foresight.api import compress_file, report_text

    rep = compress_file(opts)
    print(json.dumps(rep) if opts.json else report_text(rep))
    return 0


def run_decompress(opts: DecompressOptions) -> int:
    from torchhpc.ext.foresight.api import decompress_file, report_text

    rep = decompress_file(opts)
    print(json.dumps(rep) if opts.json else report_text(rep))
    return 0


def _add_commands(s) -> None:
    config_command(s, "run", SweepConfig, run_sweep_job, config_file=True,
                   help="sweep compressors x settings x fields; write a Cinema database, a table and an HTML page")
    config_command(s, "compress", CompressOptions, run_compress,
                   help="compress one array with one setting; print ratio, max error and throughput")
    config_command(s, "decompress", DecompressOptions, run_decompress,
                   help="restore a file written by `foresight compress` to .npy")


def register(sub) -> None:
    _add_commands(command_group(sub, "foresight", description=__doc__,
                                help="lossy compression judged by the analyses that matter (Foresight)"))


def main(argv: Sequence[str] | None = None) -> int:
    return subcommands_main(MODULE, _add_commands, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
