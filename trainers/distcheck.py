"""A torchrun smoke test of the distributed set-up: all-reduce and an uneven all-to-all.

    torchrun --standalone --nproc-per-node 2 -m torchhpc.trainers.distcheck
    torchhpc distcheck --nproc 2        # the same, launched for you

Each rank checks what it received against what the protocol says it must be;
rank 0 prints one JSON line with every rank's report; any mismatch exits non-zero.

Uneven all-to-all: rank ``s`` sends ``s + d + 1`` elements to rank ``d``, each
encoding ``1000 * s + 100 * d + k`` so that a receiver can tell exactly who sent
what in which order.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence

from .common import ArgumentParser, add_common_arguments, parse_and_run


def check_collectives(device: str = "auto", timeout_s: float = 60.0) -> dict:
    """Run the checks in this process (one rank of a torchrun job); returns this rank's report."""
    import torch
    import torch.distributed as dist

    from torchhpc.ext.core.distributed import distributed
    from torchhpc.ext.core.errors import DistributedError

    with distributed(device=device, timeout_s=timeout_s) as ctx:
        if not ctx.initialized:
            raise DistributedError("distcheck must be launched by torchrun (RANK/WORLD_SIZE are not set)")
        r, w, dev = ctx.rank, ctx.world_size, ctx.device
        # all-reduce: sum of (rank + 1) over ranks is w (w + 1) / 2
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


def _run_rank(args: argparse.Namespace) -> int:
    report = check_collectives(args.device, args.timeout)
    if report["rank"] == 0:  # one line for the whole job (ranks' stdout would interleave)
        print(json.dumps({k: v for k, v in report.items() if k != "rank"}), flush=True)
    return 0 if report["all_ranks_ok"] else 1


def _launch(args: argparse.Namespace) -> int:
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.nproc}",
        "-m", "torchhpc.trainers.distcheck", "--device", args.device, "--timeout", str(args.timeout),
    ]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    return subprocess.call(cmd, env=env)


def _add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="gloo on cpu, NCCL on cuda")
    p.add_argument("--timeout", type=float, default=60.0, help="collective timeout in seconds")
    add_common_arguments(p)


def register(sub) -> None:
    p = sub.add_parser("distcheck", help="check torch.distributed (all-reduce, uneven all-to-all) with torchrun",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=2, help="processes to launch (default 2)")
    _add_args(p)
    p.set_defaults(func=_launch)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="torchhpc.trainers.distcheck", description=__doc__)
    _add_args(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    return parse_and_run(build_parser, _run_rank, argv)


if __name__ == "__main__":
    sys.exit(main())
