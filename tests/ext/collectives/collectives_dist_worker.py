"""torchrun worker of the exactness and bad-input tests (4 gloo ranks, one launch for all checks).

    torchrun --standalone --nproc-per-node 4 collectives_dist_worker.py OUT_DIR SEED [SEED ...]

Per seed: a random graph (density 0.6) with random rows per edge (zero included), int32 messages
of width 3; every algorithm's received messages go to ``OUT_DIR/<algo>-<seed>-rank<r>.npz`` (node-mates
through the shared-memory outboxes, the default on one host) and ``<algo>-gloo-<seed>-rank<r>.npz``
(node-mates through gloo).  Then the bad inputs, each of which must raise the same InputError on every rank; the messages go
to ``OUT_DIR/errors-rank<r>.json``; 2 MB messages that make the outboxes grow; and a node-mate that
never calls (its peer must fail within the shared-memory timeout).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from torchhpc.ext.collectives.apps import HaloSpMM, MooreHalo, block_bounds
from torchhpc.ext.collectives.graphs import edge_rows, moore_graph, neighbours, payload, random_graph
from torchhpc.ext.collectives.ops import (
    EmulatedNetwork,
    PersistentNeighborAlltoallv,
    ProcessGraph,
    neighbor_allgather,
    neighbor_alltoallv,
)
from torchhpc.ext.collectives.shm import leftover_files
from torchhpc.ext.core.errors import DistributedError, InputError

ALGOS = ["direct", "lag-h", "law-h", "auto"]
DENSITY = 0.6


def exchange(out: Path, seed: int, rank: int, size: int) -> None:
    src, dst = random_graph(size, DENSITY, seed)
    sources, destinations = neighbours(src, dst, rank)
    rows = edge_rows(src, dst, 7, seed)
    key = {(int(s), int(d)): int(r) for s, d, r in zip(src, dst, rows, strict=True)}
    send = [torch.from_numpy(payload(rank, d, key[(rank, d)], 3)) for d in destinations]
    # tiny pieces, so that LAW-H splits these small messages over relays as it does large ones
    graph = ProcessGraph(sources, destinations, ranks_per_node=2, min_split_bytes=8)
    for algo in ALGOS:
        got = neighbor_alltoallv(send, graph, algo=algo)
        np.savez(out / f"{algo}-{seed}-rank{rank}.npz", sources=np.array(sources, dtype=np.int64),
                 **{f"from{s}": g.numpy() for s, g in zip(sources, got, strict=True)})
    # the same calls with node-mates' messages over gloo instead of the shared-memory outboxes
    on_gloo = ProcessGraph(sources, destinations, ranks_per_node=2, min_split_bytes=8, intra_node="group")
    for algo in ALGOS:
        got = neighbor_alltoallv(send, on_gloo, algo=algo)
        np.savez(out / f"{algo}-gloo-{seed}-rank{rank}.npz", sources=np.array(sources, dtype=np.int64),
                 **{f"from{s}": g.numpy() for s, g in zip(sources, got, strict=True)})
    transports = {"default": graph.intra_node_transport, "group": on_gloo.intra_node_transport,
                  "token": graph._shm.token, "files_after_calls": leftover_files(graph._shm.token)}
    (out / f"transport-{seed}-rank{rank}.json").write_text(json.dumps(transports))
    work = neighbor_alltoallv(send, graph, algo="law-h", async_op=True)
    got = work.wait()
    np.savez(out / f"async-{seed}-rank{rank}.npz", sources=np.array(sources, dtype=np.int64),
             **{f"from{s}": g.numpy() for s, g in zip(sources, got, strict=True)})
    # two asynchronous calls in flight on one graph: the second completes the first before using the outboxes
    first = neighbor_alltoallv(send, graph, algo="direct", async_op=True)
    second = neighbor_alltoallv(send, graph, algo="law-h", async_op=True)
    for name, work in (("async2nd", second), ("async1st", first)):
        np.savez(out / f"{name}-{seed}-rank{rank}.npz", sources=np.array(sources, dtype=np.int64),
                 **{f"from{s}": g.numpy() for s, g in zip(sources, work.wait(), strict=True)})
    exchange = PersistentNeighborAlltoallv([t.shape for t in send], torch.int32, graph, algo="lag-h")
    exchange(send)
    got = exchange(send)  # the second call of the same request
    np.savez(out / f"persistent-{seed}-rank{rank}.npz", sources=np.array(sources, dtype=np.int64),
             **{f"from{s}": g.numpy() for s, g in zip(sources, got, strict=True)})
    # the emulated slow path paces inter-node messages as bulk + tail: a 5-byte tail cuts rows mid-element
    paced = ProcessGraph(sources, destinations, ranks_per_node=2, min_split_bytes=8,
                         emulate=EmulatedNetwork(1e9, tail_bytes=5))
    import torch.distributed as dist

    batches, real = [], dist.batch_isend_irecv  # what each batch posts: NCCL matches batches, not tags

    def recorded(ops):
        batches.append([(op.op.__name__, int(op.peer), int(op.tensor.numel())) for op in ops])
        return real(ops)

    dist.batch_isend_irecv = recorded
    try:
        got = neighbor_alltoallv(send, paced, algo="law-h")
    finally:
        dist.batch_isend_irecv = real
    (out / f"emulated-batches-{seed}-rank{rank}.json").write_text(json.dumps(batches))
    np.savez(out / f"emulated-{seed}-rank{rank}.npz", sources=np.array(sources, dtype=np.int64),
             **{f"from{s}": g.numpy() for s, g in zip(sources, got, strict=True)})


def big_ring(out: Path, rank: int, size: int) -> None:
    """2 MB messages around a ring after 8-byte ones: the outboxes grow (remapped) between calls."""
    graph = ProcessGraph([(rank - 1) % size], [(rank + 1) % size], ranks_per_node=2, min_split_bytes=8)
    for n in (8, 2 << 20):
        msg = ((torch.arange(n, dtype=torch.int64) * 7 + rank) % 251).to(torch.uint8)
        for algo in ("direct", "law-h"):
            got = neighbor_alltoallv([msg], graph, algo=algo)[0]
            np.save(out / f"ring-{algo}-{n}-rank{rank}.npy", got.numpy())
    leftovers = leftover_files(graph._shm.token)
    graph.close()
    (out / f"ring-files-rank{rank}.json").write_text(json.dumps(leftovers))


def absent_node_mate(out: Path, rank: int, size: int) -> None:
    """Ranks 0 -> 1 and 2 -> 3 inside nodes; rank 0 never calls: rank 1 must fail within the timeout."""
    dests = {0: [1], 2: [3]}.get(rank, [])
    sources = {1: [0], 3: [2]}.get(rank, [])
    graph = ProcessGraph(sources, dests, ranks_per_node=2, shm_timeout_s=1.0)
    exchange = PersistentNeighborAlltoallv([(3,)] * len(dests), torch.float32, graph, algo="direct")
    result = None
    if rank != 0:
        try:
            got = exchange([torch.full((3,), float(rank))] * len(dests))
            result = [t.tolist() for t in got]
        except DistributedError as exc:
            result = str(exc)
    dist.barrier()
    (out / f"absent-rank{rank}.json").write_text(json.dumps(result))


def allgather_moore(out: Path, rank: int, size: int) -> None:
    src, dst = moore_graph(size, 2, 1)
    sources, destinations = neighbours(src, dst, rank)
    graph = ProcessGraph(sources, destinations, ranks_per_node=2)
    x = torch.full((rank + 1, 2), float(rank), dtype=torch.float64)
    res = {algo: [g.tolist() for g in neighbor_allgather(x, graph, algo=algo)] for algo in ("direct", "lag-h")}
    (out / f"allgather-rank{rank}.json").write_text(json.dumps({"sources": sources, **res}))


def subgroup(out: Path, rank: int, size: int) -> None:
    """A ring on the subgroup of world ranks 1..3 (group ranks 0..2), rank 0 outside; LAW-H over 2 nodes."""
    group = dist.new_group([1, 2, 3])
    got = None
    if rank >= 1:
        g = rank - 1
        graph = ProcessGraph([(g - 1) % 3], [(g + 1) % 3], group, ranks_per_node=2)
        got = [t.tolist() for t in neighbor_alltoallv([torch.full((g + 1,), 10.0 * rank)], graph, algo="law-h")]
    (out / f"subgroup-rank{rank}.json").write_text(json.dumps(got))


def bad_inputs(out: Path, rank: int, size: int) -> None:
    errors = {}

    def expect(name, fn):
        try:
            fn()
            errors[name] = None
        except InputError as exc:
            errors[name] = str(exc)

    ring_dest = [(rank + 1) % size]
    ring_src = [(rank - 1) % size]
    # rank 0 sends to 1, but rank 1 does not expect 0 (it lists 3 instead... 3 does not send to it)
    bad_src = [(rank + 2) % size] if rank == 1 else ring_src
    expect("inconsistent", lambda: ProcessGraph(bad_src, ring_dest))
    expect("out_of_range", lambda: ProcessGraph(ring_src, ring_dest + ([size] if rank == 2 else [])))
    graph = ProcessGraph(ring_src, ring_dest)
    good = [torch.ones(3, 2)]
    expect("count", lambda: neighbor_alltoallv(good * (2 if rank == 3 else 1), graph))
    expect("dtype", lambda: neighbor_alltoallv([torch.ones(3, 2, dtype=torch.float64)] if rank == 2 else good, graph))
    expect("shape", lambda: neighbor_alltoallv([torch.ones(3, 5)] if rank == 0 else good, graph))
    # after all that, the graph still works
    got = neighbor_alltoallv([torch.full((2,), float(rank))], graph)
    errors["after"] = got[0].tolist()
    (out / f"errors-rank{rank}.json").write_text(json.dumps(errors))


def spmm_problem(n: int = 37, k: int = 3):
    """The SpMM test problem: a seeded random sparse A (about 15% non-zeros) and a dense X, float64."""
    rng = np.random.default_rng(5)
    a = np.where(rng.random((n, n)) < 0.15, rng.standard_normal((n, n)), 0.0)
    return a, rng.standard_normal((n, k))


def spmm(out: Path, rank: int, size: int) -> None:
    a, x = spmm_problem()
    b = block_bounds(a.shape[0], size)
    with warnings.catch_warnings():  # nothing printed on each rank (torch's sparse-tensor notices included)
        warnings.simplefilter("error", UserWarning)
        op = HaloSpMM(torch.from_numpy(a[b[rank]:b[rank + 1]]), b, ranks_per_node=2, min_split_bytes=8)
        xs = torch.from_numpy(x[b[rank]:b[rank + 1]])
        res = {algo: op(xs, algo=algo).tolist() for algo in ("direct", "lag-h", "law-h")}
    (out / f"spmm-rank{rank}.json").write_text(json.dumps({"rows": [b[rank], b[rank + 1]], **res}))


def halo(out: Path, rank: int, size: int) -> None:
    glob = np.arange(6 * 8, dtype=np.float64).reshape(6, 8)
    i, j = divmod(rank, 2)
    res = {}
    for algo in ("direct", "law-h"):
        block = torch.full((5, 6), -1.0, dtype=torch.float64)
        block[1:-1, 1:-1] = torch.from_numpy(glob[3 * i:3 * i + 3, 4 * j:4 * j + 4])
        res[algo] = MooreHalo((2, 2), 1, ranks_per_node=2)(block, algo=algo).tolist()
    (out / f"halo-rank{rank}.json").write_text(json.dumps({"origin": [3 * i, 4 * j], **res}))


def main() -> None:
    out = Path(sys.argv[1])
    seeds = [int(s) for s in sys.argv[2:]]
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    try:
        for seed in seeds:
            exchange(out, seed, rank, size)
        allgather_moore(out, rank, size)
        spmm(out, rank, size)
        halo(out, rank, size)
        subgroup(out, rank, size)
        bad_inputs(out, rank, size)
        big_ring(out, rank, size)
        absent_node_mate(out, rank, size)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
