"""The ``torchhpc collectives`` commands, one function each: :func:`bench` and :func:`model`, and
:func:`bench_rank`, the job each torchrun rank of ``bench`` runs.

``bench`` launches ``bench_rank`` on ``--nproc`` local torchrun ranks (the ranks need a process group:
``bench`` relaunches whatever ``--nproc`` is); ``torchrun -m torchhpc.trainers.collectives`` runs
``bench_rank`` directly, on one or several machines.  Rank 0 prints the table (or one JSON line), writes
the results to ``--output`` and exits 1 when an algorithm's received bytes differ from direct's.

Everything that can be checked is checked before torchrun starts (:func:`check_bench`): the options
(graph spec included, when the options are built), ``--output``, and the memory and time the sizes need.

Heavy imports (torch, numpy) stay inside the functions: ``torchhpc --help`` builds every command's
flags from :mod:`.config` without them.
"""

from __future__ import annotations

import json

from .config import BenchOptions, ModelOptions

ENTRY = "torchhpc.trainers.collectives"
"""The module torchrun runs on each rank of ``bench`` (``main()`` of the trainer: :func:`bench_rank`)."""


def check_bench(opts: BenchOptions, nranks: int) -> None:
    """What ``bench`` can check before any rank starts: ``--output`` can be written (nothing is created), and
    ``nranks`` ranks fit in memory with the sizes, and one call in ``--timeout-s``
    (:func:`~.sizing.check_bench_fits`).

    Raises:
        InputError: ``--output`` is a folder or cannot be written.
        ConfigError: the sizes do not fit.
    """
    from torchhpc.ext.core.paths import check_output

    from .sizing import check_bench_fits

    if opts.output:
        check_output(opts.output, what="--output")
    check_bench_fits(opts, nranks)


def bench(opts: BenchOptions) -> int:
    """``torchhpc collectives bench``: :func:`bench_rank` on ``opts.dist.nproc`` local torchrun ranks, after
    :func:`check_bench` (so a bad option is one line before torchrun starts).

    Returns:
        0 when every algorithm received direct's bytes; 1 when one did not.

    Raises:
        InputError, ConfigError: from :func:`check_bench`.
        JobError: a rank failed (its one line).
    """
    from torchhpc.ext.core.launch import relaunch

    check_bench(opts, opts.dist.nproc)
    return relaunch(opts, ENTRY, opts.dist.nproc)


def bench_rank(opts: BenchOptions) -> int:
    """One torchrun rank of ``bench``: time every algorithm (:func:`~.timing.time_algorithms`); rank 0
    prints the results and writes them to ``opts.output``.

    Returns:
        1 on rank 0 when an algorithm's received bytes differ from direct's, else 0.

    Raises:
        DistributedError: not launched by torchrun.
        InputError: ``--output`` cannot be written (checked before any timing).
    """
    from torchhpc.ext.core.distributed import distributed
    from torchhpc.ext.core.errors import DistributedError
    from torchhpc.ext.core.paths import check_output
    from torchhpc.ext.core.runs import atomic_write_text

    from .timing import format_table, time_algorithms

    if opts.output:  # again on the ranks: a job torchrun started by hand was not checked by `bench`
        check_output(opts.output, what="--output")

    if opts.dist.threads:
        import torch

        torch.set_num_threads(opts.dist.threads)
    with distributed(device=opts.dist.device, timeout_s=opts.dist.timeout_s) as ctx:
        if not ctx.initialized:
            raise DistributedError("collectives bench must run under torchrun (use `torchhpc collectives bench "
                                   "--nproc N`, or torchrun -m torchhpc.trainers.collectives)")
        result = time_algorithms(opts, ctx)
    if not ctx.is_main:
        return 0
    if opts.output:
        atomic_write_text(opts.output, json.dumps(result) + "\n")
    print(json.dumps(result) if opts.json else format_table(result), flush=True)
    return 0 if all(r["identical"] for r in result["rows"]) else 1


def model(opts: ModelOptions) -> int:
    """``torchhpc collectives model``: each algorithm's predicted time per call at scale (table or JSON).

    Raises:
        InputError: an unreadable ``--calibration`` file.
        ConfigError: a machine and graph that would not fit in memory or in ``--max-minutes``
            (:func:`~.sizing.check_model_fits`), or a graph without an edge.
    """
    from .model import format_prediction, predict

    res = predict(opts)
    print(json.dumps(res) if opts.json else format_prediction(res))
    return 0
