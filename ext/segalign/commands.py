"""The command of segalign: ``torchhpc align`` (and ``torchrun -m torchhpc.trainers.segalign``).

:func:`align` owns what the library does not: the output file, ``--stats`` on standard error, the
CPU thread count and the processes.  In one process it aligns and writes; under torchrun the ranks
share the query intervals (filter) and the strands (gapped stage) and rank 0 writes the merged
output, the same bytes as one process; ``--nproc N`` relaunches the command on N torchrun ranks.
The alignment itself is :func:`torchhpc.ext.segalign.align.align_files`.
"""

from __future__ import annotations

import json
import sys

from .config import AUTO_DEVICE, AlignCommand

MODULE = "torchhpc.trainers.segalign"
"""The module torchrun runs for ``--nproc N`` (the command's ``python -m`` / ``torchrun -m`` entry)."""


def align(cmd: AlignCommand) -> int:
    """``torchhpc align TARGET QUERY``: align ``cmd.target`` against ``cmd.query`` and write the alignments.

    Returns:
        0 (the exit status).

    Raises:
        ConfigError / InputError: an unwritable ``--output`` (before any work), a device or kernel that
            cannot run here, a missing or malformed FASTA file; JobError: a rank of ``--nproc N`` failed.
    """
    from torchhpc.ext.core.distributed import distributed, launched_by_torchrun

    from . import align as pipeline
    from .output import check_output, write_alignments

    check_output(cmd.output, inputs=[cmd.target, cmd.query])  # before the alignment, not after
    if cmd.dist.nproc > 1 and not launched_by_torchrun():
        from torchhpc.ext.core.launch import relaunch

        return relaunch(cmd, MODULE, cmd.dist.nproc, [cmd.target, cmd.query])
    if not launched_by_torchrun():
        # one process on the CPU with the compiled kernels: NumPy arrays throughout, torch never imported
        plan = pipeline.plan_alignment(cmd, arrays=True)
        if plan.arrays:
            from torchhpc.ext.core.cli import say

            from .torch_numba import KERNELS, set_cpu_threads

            KERNELS.ensure_built(notice=lambda line: say(f"torchhpc: {line}"))  # once per install and CPU: later commands start without numba
            set_cpu_threads(cmd.dist.threads)
            try:
                res = pipeline.align_files(cmd.target, cmd.query, cmd, plan=plan)
            finally:  # the count is this command's, not the process's
                set_cpu_threads(0)
            write_alignments(res.alignments, cmd.format, cmd.output)
            if cmd.stats:
                print(json.dumps(res.stats, default=float), file=sys.stderr)
            return 0
    import torch

    if cmd.dist.threads:
        torch.set_num_threads(cmd.dist.threads)
    # under torchrun a rank that dies makes the others fail at the next collective (torchrun stops the job)
    with distributed(device=cmd.dist.device, timeout_s=cmd.dist.timeout_s, auto=AUTO_DEVICE) as ctx:
        plan = pipeline.plan_alignment(cmd, ctx.device, ctx)  # with CUDA under torchrun: cuda:LOCAL_RANK
        res = pipeline.align_files(cmd.target, cmd.query, cmd, plan=plan)
        if ctx.is_main:
            write_alignments(res.alignments, cmd.format, cmd.output)
            if cmd.stats:
                stats = {**res.stats, "ranks": ctx.world_size} if ctx.initialized else res.stats
                print(json.dumps(stats, default=float), file=sys.stderr)
    return 0


__all__ = ["MODULE", "align"]
