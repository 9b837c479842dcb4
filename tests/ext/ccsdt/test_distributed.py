"""The distributed and out-of-core (T): equal to one in-core process and to PySCF, with the plan checked.

The 2-rank cases run on gloo under torchrun (``ccsdt_dist_worker.py``, ``dead_peer_worker.py``); the cost-sorted
assignment, the cache prediction and the out-of-core path are checked in-process against brute force.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch
from harness.multiproc import torchrun

from torchhpc.ext.ccsdt import occupied_triples, save_inputs, triples_energy
from torchhpc.ext.ccsdt.distributed import assign_work, exchange_plan, owner
from torchhpc.ext.ccsdt.reference import random_inputs
from torchhpc.ext.ccsdt.slices import (
    SliceCache,
    cache_misses,
    cached_slice_bytes,
    plan_blocks,
    replicated_bytes,
    triple_bytes,
    triple_flops,
)
from torchhpc.ext.core.errors import InputError

HERE = Path(__file__).resolve().parent
WORKER = HERE / "ccsdt_dist_worker.py"
DEAD_PEER_WORKER = HERE / "dead_peer_worker.py"
WATER = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"


@pytest.fixture(scope="module")
def water(tmp_path_factory):
    """Water/cc-pVDZ (o=5, v=19) solved by PySCF once: saved inputs, PySCF's E(T), one in-core process's E(T)."""
    pytest.importorskip("pyscf")
    from pyscf import gto

    from torchhpc.ext.ccsdt import prepare_triples

    prepared = prepare_triples(gto.M(atom=WATER, basis="cc-pvdz", verbose=0))
    path = tmp_path_factory.mktemp("ccsdt") / "water.npz"
    save_inputs(path, prepared.inputs)
    return {"npz": path, "inputs": prepared.inputs, "pyscf": prepared.pyscf_triples_energy(),
            "single": triples_energy(*prepared.inputs.arrays(), num_threads=1)}


# ----------------------------------------------------------------------------- the plan, against brute force


def test_assignment_covers_every_triple_once_and_balances_cost():
    """Every occupied triple lands on exactly one rank with its weight, and the cost-sorted (LPT) loads
    stay within the greedy bound: max load <= mean + the largest item."""
    o, v = 9, 12
    idx, wts = occupied_triples(o)
    want = {tuple(t): w for t, w in zip(idx.tolist(), wts.tolist(), strict=True)}
    for world in (1, 2, 3, 5):
        work = assign_work(o, v, world)
        got = [(t, w) for ts, ws in zip(work.triples, work.weights, strict=True) for t, w in zip(ts, ws, strict=True)]
        assert len(got) == len(want) and dict(got) == want
        loads = [sum(triple_flops(*t, o, v) for t in ts) for ts in work.triples]
        assert loads == pytest.approx(work.flops)
        items = {}
        for t in want:
            items[t[:2]] = items.get(t[:2], 0.0) + triple_flops(*t, o, v)
        assert max(loads) <= sum(loads) / world + max(items.values()) + 1e-6
    assert assign_work(o, v, 2).predicted_imbalance < 1.05


def _lru_brute(needs, capacity):
    """A plain LRU over slice indices that evicts the least recently used slice not needed now."""
    cache: list[int] = []  # most recent last
    out = []
    for need in needs:
        miss = [x for x in need if x not in cache]
        cache = [x for x in cache if x not in need] + [x for x in need if x in cache]
        for x in miss:
            if len(cache) >= capacity:
                cache.pop(next(n for n, y in enumerate(cache) if y not in need))
            cache.append(x)
        out.append(miss)
    return out


def test_cache_prediction_matches_the_cache_and_a_brute_force_lru():
    """cache_misses (what every rank predicts of its peers) equals SliceCache's misses and a brute-force
    LRU on random block sequences; plan_blocks never gives a block more slices than the cache holds."""
    rng = random.Random(0)
    for _ in range(30):
        capacity = rng.randint(3, 6)
        triples = [tuple(sorted(rng.sample(range(8), 3), reverse=True)) for _ in range(25)]
        blocks = plan_blocks(triples, capacity, rng.randint(1, 4))
        needs = [sorted({x for n in b for x in triples[n]}) for b in blocks]
        assert all(len(n) <= capacity for n in needs)
        assert [n for b in blocks for n in b] == list(range(len(triples)))
        cache = SliceCache(capacity, 2, 2, torch.device("cpu"))
        real = [[x for x, _ in cache.admit(n)] for n in needs]
        assert cache_misses(needs, capacity) == real == _lru_brute(needs, capacity)


def test_exchange_plan_fetches_only_misses_from_owners():
    """The plan's fetches per rank are exactly its cache misses, and slices are owned round-robin."""
    work = assign_work(6, 5, 2)
    misses, rounds = exchange_plan(work, 6, 3, 2)
    assert rounds == max(len(m) for m in misses)
    assert [owner(x, 2) for x in range(6)] == [0, 1, 0, 1, 0, 1]
    for ts, m in zip(work.triples, misses, strict=True):
        blocks = plan_blocks(ts, 3, 2)
        assert m == cache_misses([sorted({x for n in b for x in ts[n]}) for b in blocks], 3)


# ----------------------------------------------------------------------------- out of core


def test_out_of_core_equals_in_core_and_pyscf(water):
    """A max_memory below the in-core operands streams the integral slices through a 3-slice cache and
    gives the in-core E(T) to 1e-12 Eh and PySCF's to 1e-10 Eh."""

    arrays = water["inputs"].arrays()
    details: dict = {}
    e = triples_energy(*arrays, max_memory=0.75, num_threads=1, details=details)
    assert details["mode"] == "out-of-core" and details["stats"].capacity == 3
    assert 0 < details["stats"].hit_rate < 1
    assert abs(e - water["single"]) < 1e-12 and abs(e - water["pyscf"]) < 1e-10


def test_out_of_core_below_the_integrals_equals_in_core():
    """With a budget smaller than the (ia|bc) array itself (o=15, v=30) the out-of-core E(T) equals the
    in-core one to 1e-12 relative."""
    o, v = 15, 30
    least = replicated_bytes(o, v) + 3 * cached_slice_bytes(o, v) + triple_bytes(o, v)
    integrals = o * v**3 * 8
    assert least < integrals
    args = random_inputs(o, v, seed=6)
    details: dict = {}
    e = triples_energy(*args, max_memory=1.02 * least / 2**20, num_threads=1, details=details)
    assert details["mode"] == "out-of-core"
    ref = triples_energy(*args, num_threads=1)
    assert abs(e - ref) <= 1e-12 * abs(ref)


def test_out_of_core_blocks_are_sized_by_the_device():
    """On the CPU a block's buffers stay within the last-level cache; on a GPU the block takes what the memory
    leaves (the cache rule gave one triple a block there, each a round of small launches)."""
    from torchhpc.ext.ccsdt.blocks import CACHE_BLOCK_BYTES
    from torchhpc.ext.ccsdt.slices import sliced_layout, triple_bytes

    o, v, n = 10, 60, 210
    cpu = sliced_layout(o, v, n, 2000.0)
    gpu = sliced_layout(o, v, n, 2000.0, device_type="cuda")
    assert cpu.block_triples == max(1, CACHE_BLOCK_BYTES // triple_bytes(o, v))
    assert gpu.capacity == cpu.capacity and gpu.block_triples > 4 * cpu.block_triples
    assert gpu.bytes <= 2000.0 * 2**20
    tight = sliced_layout(o, v, n, 300.0, device_type="cuda")
    assert 1 <= tight.block_triples < gpu.block_triples and tight.bytes <= 300.0 * 2**20


def test_out_of_core_report_and_too_small_budget(water, tmp_path, capsys):
    """`torchhpc ccsdt --max-memory` below the in-core need prints the out-of-core line and the same E(T);
    below three slices it is one clear error naming the least budget."""
    from torchhpc.trainers.ccsdt import main

    assert main(["--inputs", str(water["npz"]), "--max-memory", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mode"] == "out-of-core" and abs(out["e_t"] - water["pyscf"]) < 1e-10
    assert main(["--inputs", str(water["npz"]), "--max-memory", "1"]) == 0
    assert "out of core   " in capsys.readouterr().out
    with pytest.raises(InputError, match=r"too small .* even out of core: the \(T\) needs at least ") as err:
        triples_energy(*water["inputs"].arrays(), max_memory=0.3)
    # the least budget it names is enough, and a little less is not (it was rounded up to a whole MB)
    import re

    least = float(re.search(r"needs at least ([0-9.]+) MB", str(err.value))[1])
    assert least < 1.0
    assert abs(triples_energy(*water["inputs"].arrays(), max_memory=least) - water["pyscf"]) < 1e-10
    with pytest.raises(InputError, match="needs at least"):
        triples_energy(*water["inputs"].arrays(), max_memory=least * 0.98)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: host-to-device streams")
def test_out_of_core_on_cuda_streams_from_host_memory():
    """On CUDA a budget below the in-core need keeps (ia|bc) on the host, streams slices on a side
    stream, and equals the in-core CUDA E(T)."""
    args = random_inputs(8, 24, seed=2)
    details: dict = {}
    e = triples_energy(*args, device="cuda", backend="torch", max_memory=2.0, details=details)
    assert details["mode"] == "out-of-core" and details["stats"].bytes_loaded > 0
    assert abs(e - triples_energy(*args, device="cuda", backend="torch")) < 1e-12


# ----------------------------------------------------------------------------- 2 gloo ranks


@pytest.mark.distributed
def test_two_gloo_ranks_equal_one_process_and_pyscf(water, tmp_path):
    """On 2 gloo ranks (torchrun) the library call with a process group, a 3-slice cache, ranks holding
    only their own integral slices, and `torchrun -m torchhpc.trainers.ccsdt` all give every rank the
    one-process E(T) to 1e-12 Eh and PySCF's to 1e-10 Eh, with the load imbalance reported."""
    out = tmp_path / "out.json"
    res = torchrun(2, [str(WORKER), str(out), str(water["npz"])], timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(out.read_text())
    for case in ("library", "tight"):
        for e in got[case]["energies"]:
            assert abs(e - water["single"]) < 1e-12 and abs(e - water["pyscf"]) < 1e-10, case
    assert got["library"]["mode"] == "distributed"
    tight = got["tight"]
    assert tight["capacity"] == 3 and tight["bytes_fetched"] > 0 and 0 < tight["hit_rate"] < 1
    assert tight["imbalance"] >= 1 and len(tight["rank_seconds"]) == 2 and tight["predicted_imbalance"] < 1.2
    ref = triples_energy(*random_inputs(7, 9, seed=4), num_threads=1)
    assert all(abs(e - ref) <= 1e-12 * max(1.0, abs(ref)) for e in got["owned"]["energies"])
    # the cost model replays the run's plan: the bytes it moved and the hits it had, exactly
    from torchhpc.ext.ccsdt.costmodel import SUMMIT_V100, predict

    model = predict(5, 19, 2, SUMMIT_V100, max_memory_mb=0.75)
    assert model.bytes_fetched == tight["bytes_fetched"] and model.hit_rate == pytest.approx(tight["hit_rate"])
    cli = got["cli"]
    assert cli["rc"] == 0 and cli["mode"] == "distributed" and cli["ranks"] == 2 and cli["backend"] == "gloo"
    assert abs(cli["e_t"] - water["pyscf"]) < 1e-10 and cli["imbalance"] >= 1


@pytest.mark.distributed
def test_a_dead_peer_fails_within_the_timeout(water, tmp_path):
    """A rank that dies after joining makes its peer fail with one DistributedError within the timeout,
    instead of hanging."""
    # rank 1 joins and ends with os._exit(3); rank 0 runs the (T) with timeout_s=5 (see dead_peer_worker.py)
    res = torchrun(2, [str(DEAD_PEER_WORKER), str(tmp_path), str(water["npz"]), "5"], timeout=300)
    assert res.returncode != 0
    assert (tmp_path / "rank0.txt").is_file(), res.stderr[-3000:]  # rank 0 ended by itself, with a line
    got = (tmp_path / "rank0.txt").read_text()
    assert got.count("\n") == 1, got
    assert got.startswith("DistributedError: rank 0: a peer rank died or did not answer within 5 s "), got
    assert re.search(r"exitcode\s*:\s*3\b", res.stderr), res.stderr[-3000:]  # torchrun saw rank 1 die


def test_nproc_checks_the_input_before_launching(water, tmp_path, monkeypatch, capsys):
    """`torchhpc ccsdt --nproc 2` refuses a bad geometry in one line before any rank starts, and launches
    torchrun with 2 ranks and the resolved options otherwise."""
    from torchhpc.ext.core import launch as launch_mod
    from torchhpc.ext.core.config import load_config
    from torchhpc.trainers.cli import main

    calls = []

    def fake_torchrun(module, nproc, argv, **kwargs):
        from torchhpc.ext.ccsdt.config import CCSDTOptions

        calls.append((module, nproc, load_config(CCSDTOptions, argv[1])))
        return 0

    monkeypatch.setattr(launch_mod, "torchrun", fake_torchrun)
    bad = tmp_path / "bad.xyz"
    bad.write_text("2\n\nH 0 0 0\nH 0 0 0\n")
    assert main(["ccsdt", "--xyz", str(bad), "--basis", "sto-3g", "--nproc", "2"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "0 Angstrom apart" in err[0] and not calls
    assert main(["ccsdt", "--inputs", str(water["npz"]), "--nproc", "2", "--max-memory", "3"]) == 0
    (module, nproc, cfg), = calls
    assert module == "torchhpc.trainers.ccsdt" and nproc == 2 and cfg.max_memory == 3 and cfg.inputs == water["npz"]


# ----------------------------------------------------------------------------- the cost model


def test_cost_model_compute_bound_and_saturation():
    """With free communication the model's time is the largest rank's flops over the rate, P = 1 is the
    whole (T); with more ranks than occupied pairs only the pairs' ranks work and the speed-up stops."""
    from dataclasses import replace

    from torchhpc.ext.ccsdt.costmodel import SUMMIT_V100, predict, scaling_table

    free = replace(SUMMIT_V100, intra_bandwidth=float("inf"), inter_bandwidth=float("inf"), latency_s=0.0)
    o, v = 6, 20
    one = predict(o, v, 1, free)
    assert one.seconds == pytest.approx(sum(assign_work(o, v, 1).flops) / free.rank_flops)
    four = predict(o, v, 4, free)
    assert four.seconds == pytest.approx(max(assign_work(o, v, 4).flops) / free.rank_flops)
    pairs = o * (o + 1) // 2 - 1  # (0, 0) has no triple
    rows = scaling_table(o, v, free, ranks=(1, pairs, 2 * pairs))
    assert rows[2]["busy_ranks"] == pairs and rows[2]["seconds"] == pytest.approx(rows[1]["seconds"])
    assert scaling_table(o, v, free, ranks=(1, 2 * pairs), granularity="triple")[1]["busy_ranks"] == 2 * pairs


def test_nproc_checks_the_budget_before_launching(water, monkeypatch, capsys):
    """`--nproc 2 --max-memory` below the out-of-core minimum is one line before any rank starts."""
    from torchhpc.ext.core import launch as launch_mod
    from torchhpc.trainers.cli import main

    monkeypatch.setattr(launch_mod, "torchrun", lambda *a, **k: pytest.fail("torchrun must not start"))
    assert main(["ccsdt", "--inputs", str(water["npz"]), "--nproc", "2", "--max-memory", "0.3"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "even out of core" in err[0]


def test_a_rounds_slices_cross_in_one_batch(monkeypatch):
    """Two ranks that miss each other's slices in the same round: each rank's sends and receives of the round
    go in one ``batch_isend_irecv`` (NCCL ignores tags and runs a pair's traffic in posting order, so a rank that
    sent before receiving, as each did, would wait on its peer doing the same: slices of v^3 doubles do not fit
    its buffers), and a pair's slices go in the same order on both sides."""
    from types import SimpleNamespace

    import torch.distributed as dist

    from torchhpc.ext.ccsdt.distributed import RemoteSlices

    monkeypatch.setattr(dist, "P2POp", lambda op, tensor, peer, group, tag: SimpleNamespace(op=op, peer=peer, tag=tag))
    misses = [[[1, 3]], [[0, 2]]]  # rank 0 misses slices 1 and 3 (rank 1's), rank 1 misses 0 and 2 (rank 0's)
    posted = {}
    for rank in (0, 1):
        monkeypatch.setattr(dist, "get_rank", lambda group=None, r=rank: r)
        monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
        batches = []
        monkeypatch.setattr(dist, "batch_isend_irecv", lambda ops, b=batches: b.append(ops) or [])
        owned = {x: torch.full((3, 3, 3), float(x), dtype=torch.float64) for x in range(4) if x % 2 == rank}
        RemoteSlices(owned, misses, 4, 3, None, 5.0, torch.device("cpu")).prefetch(0, misses[rank][0])
        assert len(batches) == 1
        posted[rank] = [(op.op.__name__, op.peer, op.tag) for op in batches[0]]
    assert posted[0] == [("isend", 1, 0), ("isend", 1, 2), ("irecv", 1, 1), ("irecv", 1, 3)]
    assert posted[1] == [("isend", 0, 1), ("isend", 0, 3), ("irecv", 0, 0), ("irecv", 0, 2)]


def test_slices_cross_on_the_gpu_under_nccl_wherever_the_triples_run(monkeypatch):
    """NCCL moves CUDA tensors only: under NCCL the slices travel on the rank's current GPU even when the (T)
    runs on the CPU (a library call with NumPy inputs and no device sent CPU tensors); gloo: the CPU."""
    from torchhpc.ext.ccsdt.distributed import wire_device

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert wire_device("nccl", torch.device("cpu")) == torch.device("cuda", 3)
    assert wire_device("nccl", torch.device("cuda", 1)) == torch.device("cuda", 1)
    assert wire_device("gloo", torch.device("cuda", 1)) == torch.device("cpu")
    assert wire_device(None, torch.device("cpu")) == torch.device("cpu")
