"""A torchrun smoke test of the distributed set-up: all-reduce and an uneven all-to-all.

Each rank checks what it received against what the protocol says it must be.  Uneven all-to-all:
rank ``s`` sends ``s + d + 1`` elements to rank ``d``, each encoding ``1000 * s + 100 * d + k`` so
that a receiver can tell exactly who sent what in which order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .config import DistOptions, Options, option


@dataclass
class DistcheckDist(DistOptions):
    """The shared ``dist`` section, with distcheck's defaults: two processes, a one-minute timeout."""

    nproc: int = option(2, flag="--nproc", help="processes to launch with torchrun (the torchhpc command only)",
                        ge=1, le=256)
    device: str = option("auto", flag="--device", help="gloo on cpu, NCCL on cuda; auto picks cuda when present",
                         choices=["auto", "cpu", "cuda"])
    timeout_s: float = option(60.0, flag="--timeout-s", gt=0, le=86400,
                              help="collective timeout in seconds: a dead peer fails the job after this")


@dataclass
class DistcheckOptions(Options):
    """Options of ``torchhpc distcheck``: the ``dist`` section every job has (``--config``/``--set`` too)."""

    RENAMED: ClassVar[dict[str, str]] = {"nproc": "dist.nproc", "device": "dist.device", "timeout": "dist.timeout_s"}

    dist: DistcheckDist = option(default_factory=DistcheckDist)


def check_collectives(device: str = "auto", timeout_s: float = 60.0) -> dict:
    """Run the checks in this process (one rank of a torchrun job).

    Returns:
        ``{"rank", "world_size", "all_ranks_ok", "ranks": [every rank's report]}``.

    Raises:
        DistributedError: not launched by torchrun.
    """
    import torch
    import torch.distributed as dist

    from .distributed import distributed
    from .errors import DistributedError

    with distributed(device=device, timeout_s=timeout_s) as ctx:
        if not ctx.initialized:
            raise DistributedError("distcheck must be launched by torchrun (RANK/WORLD_SIZE are not set)")
        r, w, dev = ctx.rank, ctx.world_size, ctx.device
        # all-reduce: the sum of (rank + 1) over ranks is w (w + 1) / 2
        t = torch.tensor([float(r + 1)], device=dev)
        dist.all_reduce(t)
        allreduce_ok = float(t.item()) == w * (w + 1) / 2
        # uneven all-to-all
        send_splits = [r + d + 1 for d in range(w)]
        recv_splits = [s + r + 1 for s in range(w)]
        send = torch.cat([
            torch.arange(n, device=dev, dtype=torch.int64) + 1000 * r + 100 * d for d, n in enumerate(send_splits)
        ])
        recv = torch.empty(sum(recv_splits), dtype=torch.int64, device=dev)
        dist.all_to_all_single(recv, send, output_split_sizes=recv_splits, input_split_sizes=send_splits)
        expect = torch.cat([
            torch.arange(n, device=dev, dtype=torch.int64) + 1000 * s + 100 * r for s, n in enumerate(recv_splits)
        ])
        alltoall_ok = bool(torch.equal(recv, expect))
        report = {
            "rank": r, "world_size": w, "backend": ctx.backend, "device": str(dev),
            "all_reduce": allreduce_ok, "all_to_all_uneven": alltoall_ok, "received": recv.numel(),
        }
        # every rank learns whether every other rank passed
        ok = torch.tensor([int(allreduce_ok and alltoall_ok)], device=dev)
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        report["all_ranks_ok"] = bool(ok.item())
        reports = [None] * w
        dist.all_gather_object(reports, report)
    return {"rank": r, "world_size": w, "all_ranks_ok": report["all_ranks_ok"], "ranks": reports}
