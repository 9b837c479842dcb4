"""Every algorithm (direct, LAG-H, LAW-H, auto, async, persistent, LAW-H on the emulated slow path) on 4 gloo ranks,
with node-mates' messages through the shared-memory outboxes and through gloo, receives exactly what Open MPI's
``Neighbor_alltoallv`` (mpi4py, under mpirun) and a brute-force construction of each message say it must; the
shared-memory files never outlive their set-up, and an absent node-mate fails its peer within the timeout."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from torchhpc.ext.collectives.graphs import edge_rows, moore_graph, neighbours, payload, random_graph

ALGOS = ["direct", "lag-h", "law-h", "auto", "async", "async1st", "async2nd", "persistent", "emulated",
         "direct-gloo", "lag-h-gloo", "law-h-gloo", "auto-gloo"]

NPROC = 4  # as in conftest.py's launch
SEEDS = [0, 11]

pytestmark = pytest.mark.distributed


def _load(path: Path) -> dict[int, np.ndarray]:
    z = np.load(path)
    return {int(s): z[f"from{s}"] for s in z["sources"]}


def test_every_algorithm_receives_the_brute_force_messages(torch_run):
    """Each rank gets, from each source s, exactly payload(s, rank) with the rows s chose (zero rows too)."""
    for seed in SEEDS:
        src, dst = random_graph(NPROC, 0.6, seed)
        rows = edge_rows(src, dst, 7, seed)
        key = {(int(s), int(d)): int(r) for s, d, r in zip(src, dst, rows, strict=True)}
        for rank in range(NPROC):
            sources, _ = neighbours(src, dst, rank)
            for algo in ALGOS:
                got = _load(torch_run / f"{algo}-{seed}-rank{rank}.npz")
                assert sorted(got) == sorted(sources)
                for s in sources:
                    want = payload(s, rank, key[(s, rank)], 3)
                    assert got[s].dtype == np.int32 and np.array_equal(got[s], want), (algo, seed, rank, s)


def test_emulated_tails_go_in_the_batch_their_peer_sends_them_in(torch_run):
    """On the emulated slow path each message's tail is sent after the sender's injection time, in a second
    batch.  NCCL ignores tags and runs each batch as one group: the k-th batch of a rank that involves a peer
    must receive, in order and size, what the peer's k-th batch involving it sends (a first batch that also
    waited for the tails, which come in the peer's second, would never end: both ranks hang)."""
    for seed in SEEDS:
        batches = [json.loads((torch_run / f"emulated-batches-{seed}-rank{r}.json").read_text()) for r in range(NPROC)]

        def with_peer(rank, peer, kind, batches=batches):  # per batch of `rank` involving `peer`: its `kind` ops
            return [[n for k, p, n in b if p == peer and k == kind] for b in batches[rank]
                    if any(p == peer for _, p, _ in b)]

        pairs = [(a, b) for a in range(NPROC) for b in range(NPROC) if a != b and with_peer(a, b, "isend")]
        assert pairs and any(len(with_peer(a, b, "isend")) > 1 for a, b in pairs)  # some tails were paced
        for a, b in pairs:
            assert with_peer(a, b, "isend") == with_peer(b, a, "irecv"), (seed, a, b)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed (make setup)")
def test_every_algorithm_equals_open_mpi_neighbor_alltoallv(torch_run, tmp_path):
    """Byte-identical to MPI_Neighbor_alltoallv of Open MPI on the same graphs and messages."""
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (make setup)")
    from torchhpc.ext.collectives.mpi_reference import mpirun_command

    for seed in SEEDS:
        out = tmp_path / f"mpi{seed}"
        res = subprocess.run(mpirun_command(NPROC, ["dump", str(out), "--seed", str(seed),
                                                           "--graph", "random:0.6"]), capture_output=True,
                             text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert res.returncode == 0, res.stderr[-3000:]
        refs = [_load(out / f"rank{rank}.npz") for rank in range(NPROC)]
        assert sum(map(len, refs)) == 10, "the reference graph is not the one the torch side used"
        for rank, ref in enumerate(refs):
            for algo in ALGOS:
                got = _load(torch_run / f"{algo}-{seed}-rank{rank}.npz")
                assert sorted(got) == sorted(ref)
                for s in ref:
                    assert got[s].tobytes() == ref[s].tobytes(), (algo, seed, rank, s)


def test_neighbor_allgather_on_moore_grid(torch_run):
    """neighbor_allgather on the 2 x 2 periodic Moore grid: each rank gets every neighbour's (r+1, 2) block."""
    src, dst = moore_graph(NPROC, 2, 1)
    for rank in range(NPROC):
        doc = json.loads((torch_run / f"allgather-rank{rank}.json").read_text())
        assert doc["sources"] == neighbours(src, dst, rank)[0]
        for algo in ("direct", "lag-h"):
            assert doc[algo] == [[[float(s)] * 2] * (s + 1) for s in doc["sources"]]


def test_bad_input_fails_on_every_rank_with_one_message(torch_run):
    """Inconsistent neighbour lists, an out-of-range rank, a wrong tensor count, dtype and shape mismatches
    raise the same InputError on all four ranks (no hang), and the graph works afterwards."""
    docs = [json.loads((torch_run / f"errors-rank{r}.json").read_text()) for r in range(NPROC)]
    for name, words in [("inconsistent", "rank 0 sends to rank 1, but rank 1 does not list 0"),
                        ("out_of_range", "rank 2 lists destination 4"), ("count", "rank 3 passed 2 tensors"),
                        ("dtype", "dtype mismatch"), ("shape", "trailing shape mismatch")]:
        msgs = {d[name] for d in docs}
        assert len(msgs) == 1 and words in next(iter(msgs)), (name, msgs)
    assert [d["after"] for d in docs] == [[float((r - 1) % NPROC)] * 2 for r in range(NPROC)]


def test_exchange_on_a_subgroup(torch_run):
    """On the group of world ranks 1..3 (a ring in group ranks) each member receives its predecessor's
    tensor; world rank 0, outside the group, takes no part."""
    got = [json.loads((torch_run / f"subgroup-rank{r}.json").read_text()) for r in range(NPROC)]
    assert got[0] is None
    for r in (1, 2, 3):
        prev = (r - 1 - 1) % 3  # group rank of the predecessor
        assert got[r] == [[10.0 * (prev + 1)] * (prev + 1)]


def test_shared_memory_transport_is_the_default_and_leaves_no_files(torch_run):
    """On one host the default graph moves node-mates' messages through /dev/shm (gloo only when asked), and
    no file of it is left in /dev/shm, neither during the calls nor after the job."""
    from torchhpc.ext.collectives.shm import leftover_files

    for seed in SEEDS:
        docs = [json.loads((torch_run / f"transport-{seed}-rank{r}.json").read_text()) for r in range(NPROC)]
        assert {d["default"] for d in docs} == {"shm"} and {d["group"] for d in docs} == {"gloo"}
        assert all(d["files_after_calls"] == [] for d in docs)
        assert all(leftover_files(d["token"]) == [] for d in docs)
    assert all(json.loads((torch_run / f"ring-files-rank{r}.json").read_text()) == [] for r in range(NPROC))


def test_outboxes_grow_for_large_messages(torch_run):
    """After 8-byte calls, 2 MB messages (beyond the first outbox) arrive intact around the ring, direct and LAW-H."""
    for rank in range(NPROC):
        prev = (rank - 1) % NPROC
        for n in (8, 2 << 20):
            want = ((np.arange(n, dtype=np.int64) * 7 + prev) % 251).astype(np.uint8)
            for algo in ("direct", "law-h"):
                assert np.array_equal(np.load(torch_run / f"ring-{algo}-{n}-rank{rank}.npy"), want), (algo, n, rank)


def test_absent_node_mate_fails_within_the_timeout(torch_run):
    """Rank 0 never calls: its node-mate rank 1 raises a DistributedError naming the 1 s shared-memory timeout
    (no hang), while ranks 2 -> 3 on the other node exchange normally."""
    got = [json.loads((torch_run / f"absent-rank{r}.json").read_text()) for r in range(NPROC)]
    assert got[0] is None
    assert isinstance(got[1], str) and "within 1 s" in got[1] and "shared-memory" in got[1], got[1]
    assert got[2] == [] and got[3] == [[2.0, 2.0, 2.0]]
