"""Open MPI's ``MPI_Neighbor_alltoallv`` (through mpi4py) on the same graph and messages: the anchor.

    mpirun -np 4 python -m torchhpc.ext.collectives.mpi_reference dump OUT --graph random:0.5 --seed 3
    mpirun -np 4 python -m torchhpc.ext.collectives.mpi_reference bench OUT.json --sizes 4K,1M

``dump`` writes each rank's received messages (in the order of its sources) to ``OUT/rank<r>.npz``
for the exactness tests; ``bench`` times ``Neighbor_alltoallv`` per message size (max over ranks
of the median of ``--repeats`` calls) and rank 0 writes one JSON file.  The graph is built with
``Create_dist_graph_adjacent`` from the same generator the torch side uses.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np


def _graph(comm, spec: str, seed: int):
    from .graphs import neighbours, parse_graph

    src, dst = parse_graph(spec, comm.Get_size(), seed)
    sources, destinations = neighbours(src, dst, comm.Get_rank())
    topo = comm.Create_dist_graph_adjacent(sources, destinations, reorder=False)
    return src, dst, sources, destinations, topo


def alltoallv(topo, sources, send: list[np.ndarray], recv_counts: list[int], dtype=np.int32):
    """One ``Neighbor_alltoallv`` of ``send`` (one array per destination); returns one array per source."""
    from mpi4py import MPI

    sendbuf = np.concatenate([m.ravel() for m in send]) if send else np.zeros(0, dtype)
    scounts = [m.size for m in send]
    sdispl = np.r_[0, np.cumsum(scounts)[:-1]].astype(int).tolist() if send else []
    recvbuf = np.empty(int(sum(recv_counts)), dtype)
    rdispl = np.r_[0, np.cumsum(recv_counts)[:-1]].astype(int).tolist() if recv_counts else []
    mpitype = MPI.INT32_T if dtype == np.int32 else MPI.BYTE
    topo.Neighbor_alltoallv([sendbuf, (scounts, sdispl), mpitype], [recvbuf, (list(recv_counts), rdispl), mpitype])
    return [recvbuf[o:o + n] for o, n in zip(rdispl, recv_counts, strict=True)]


def dump(args) -> None:
    from mpi4py import MPI

    from .graphs import edge_rows, payload

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    src, dst, sources, destinations, topo = _graph(comm, args.graph, args.seed)
    rows = edge_rows(src, dst, args.max_rows, args.seed)
    key = {(int(s), int(d)): int(r) for s, d, r in zip(src, dst, rows, strict=True)}
    send = [payload(rank, d, key[(rank, d)], args.width) for d in destinations]
    counts = [key[(s, rank)] * args.width for s in sources]
    got = alltoallv(topo, sources, send, counts)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / f"rank{rank}.npz", sources=np.array(sources, dtype=np.int64),
             **{f"from{s}": g.reshape(-1, args.width) for s, g in zip(sources, got, strict=True)})
    comm.Barrier()


def bench(args) -> None:
    from mpi4py import MPI

    from .graphs import parse_size

    comm = MPI.COMM_WORLD
    src, dst, sources, destinations, topo = _graph(comm, args.graph, args.seed)
    rows = []
    for size in [parse_size(s) for s in args.sizes.split(",")]:
        send = [np.full(size, 7, np.uint8) for _ in destinations]
        times = []
        for i in range(args.repeats + 1):
            comm.Barrier()
            t0 = time.perf_counter()
            alltoallv(topo, sources, send, [size] * len(sources), np.uint8)
            comm.Barrier()
            if i:  # the first call warms up
                times.append(time.perf_counter() - t0)
        med = comm.allreduce(statistics.median(times), op=MPI.MAX)
        rows.append({"size": size, "median_s": med, "min_s": comm.allreduce(min(times), op=MPI.MAX)})
    if comm.Get_rank() == 0:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"nranks": comm.Get_size(), "graph": args.graph, "rows": rows}) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="torchhpc.ext.collectives.mpi_reference", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["dump", "bench"])
    ap.add_argument("out")
    ap.add_argument("--graph", default="random:0.5")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-rows", type=int, default=7)
    ap.add_argument("--width", type=int, default=3)
    ap.add_argument("--sizes", default="4K,64K")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    (dump if args.mode == "dump" else bench)(args)
    return 0


def mpirun_command(nproc: int, argv: list[str]) -> list[str]:
    """``mpirun`` for this module on ``nproc`` local ranks (root allowed, oversubscribed, loopback only)."""
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(nproc), "--mca", "btl", "self,vader,tcp",
            "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo",
            sys.executable, "-m", "torchhpc.ext.collectives.mpi_reference", *argv]


if __name__ == "__main__":
    sys.exit(main())
