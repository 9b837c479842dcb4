"""Each GPU path keeps its declared budget of host syncs and launches per unit of work.

The CUDA code path runs here on CPU tensors (Triton kernels interpreted, ``backend="triton"`` where the
path dispatches on it) under :func:`torchhpc.ext.core.hostsync.count_host_work`; the counts are divided by
the units of work done and checked against ``GPU_BUDGETS`` in the system's module.  A change that adds a
sync or launches to a GPU path fails here on the CPU machine, before any GPU sees it.
"""

from __future__ import annotations

import pytest
import torch

from torchhpc.ext.core.hostsync import count_host_work


def test_foresight_codec_per_field():
    """Encoding and decoding one field on the Triton path: within foresight's budget per field."""
    from torchhpc.ext.foresight.ops import GPU_BUDGETS, lorenzo_decode, lorenzo_encode

    fields = [torch.randn(8, 9, 10, generator=torch.Generator().manual_seed(s)).cumsum(2) for s in range(3)]
    encoded = []
    with count_host_work() as enc:
        for x in fields:
            encoded.append(lorenzo_encode(x, 1e-2, backend="triton", predictor="lorenzo"))
    GPU_BUDGETS["lorenzo_encode"].check(enc, len(fields), "foresight encode")
    assert enc.launch_ops["triton:_lorenzo_quantize_kernel"] == len(fields)
    with count_host_work() as dec:
        decoded = [lorenzo_decode(sections, tuple(x.shape), x.dtype, 1e-2)
                   for x, (_, sections) in zip(fields, encoded, strict=True)]
    GPU_BUDGETS["lorenzo_decode"].check(dec, len(fields), "foresight decode")
    assert all(float((y - x).abs().max()) <= 1e-2 * (1 + 1e-9) for x, y in zip(fields, decoded, strict=True))


@pytest.mark.parametrize("predictor", ["lorenzo", "interp"])
def test_foresight_block_codec_per_field(predictor):
    """The block codec on the Triton path: the payload's size and the payload cross to the host once per field
    (two syncs), whatever the field's size and its outliers; decoding asks nothing of the host; the
    interpolation costs a bounded number of launches per step."""
    from torchhpc.ext.foresight.blocks import GPU_BUDGETS, blocks_decode, blocks_encode
    from torchhpc.ext.foresight.ops import _interp_plan

    fields = [torch.randn(n, 9, 10, generator=torch.Generator().manual_seed(n)).cumsum(2) for n in (1, 8, 40)]
    fields[1][3, 4, 5] = float("nan")  # one outlier
    steps = sum(len(_interp_plan(tuple(x.shape))[1]) for x in fields)
    units = len(fields) if predictor == "lorenzo" else steps
    suffix = "" if predictor == "lorenzo" else "_interp"
    with count_host_work() as enc:
        encoded = [blocks_encode(x, 1e-2, backend="triton", predictor=predictor) for x in fields]
    GPU_BUDGETS["blocks_encode" + suffix].check(enc, units, "foresight block encode", calls=len(fields))
    assert enc.launch_ops["triton:_block_scan_kernel"] == enc.launch_ops["triton:_block_pack_kernel"] == len(fields)
    assert enc.syncs == 2 * len(fields) and encoded[1][1]["values"] == 1
    with count_host_work() as dec:
        decoded = [blocks_decode(p, m, tuple(x.shape), x.dtype, 1e-2, "cpu", backend="triton")
                   for x, (p, m) in zip(fields, encoded, strict=True)]
    GPU_BUDGETS["blocks_decode" + suffix].check(dec, units, "foresight block decode", calls=len(fields))
    assert dec.syncs == 0
    for x, y in zip(fields, decoded, strict=True):
        assert bool(((y - x).abs() <= 1e-2).logical_or(torch.isnan(x) & torch.isnan(y)).all())


def test_foresight_block_codec_batch():
    """A batch of fields (a sweep's six fields, say) costs the host what one field costs: one concatenation,
    two kernel launches, the payloads' size and the payloads themselves."""
    from torchhpc.ext.foresight.blocks import GPU_BUDGETS, blocks_encode_many

    for count in (2, 6):
        fields = [torch.randn(5, 6, 7 + i, generator=torch.Generator().manual_seed(i)).cumsum(2) for i in range(count)]
        with count_host_work() as work:
            encoded = blocks_encode_many(fields, [0.01] * count, backend="triton")
        GPU_BUDGETS["blocks_encode_batch"].check(work, 1, f"foresight block batch of {count}")
        assert work.syncs == 2 and len(encoded) == count
        with count_host_work() as kept:  # for the device's entropy stage: the payloads stay where they are
            on_device = blocks_encode_many(fields, [0.01] * count, backend="triton", on_device=True)
        GPU_BUDGETS["blocks_encode_on_device"].check(kept, count, f"foresight block batch of {count} on the device")
        assert kept.syncs == 1 and [t.numpy().tobytes() for t, _ in on_device] == [p for p, _ in encoded]


def test_foresight_sweep_bounds_share_one_batch():
    """A sweep's fields at several bounds of one mode (``compress_many`` with ``bounds``, what the sweep
    does for ours' settings that differ only in their bound) cost the host what one bound costs: the
    fields' ranges read once, one block batch."""
    from torchhpc.ext.foresight.compressors import OursCompressor

    fields = [torch.randn(6, 5, 9 - i, generator=torch.Generator().manual_seed(i)).cumsum(0) for i in range(3)]
    seen = []
    for levels in ([1e-2], [1e-3, 1e-2, 1e-1, 0.3]):
        with count_host_work() as work:
            out = OursCompressor().compress_many(fields * len(levels), bounds=[b for b in levels for _ in fields],
                                                 mode="rel", codec="blocks", backend="triton", predictor="lorenzo")
        assert len(out) == len(fields) * len(levels)
        seen.append((work.syncs, work.launches, work.summary()))
    assert seen[0][:2] == seen[1][:2], seen
    assert seen[1][0] == 3  # the ranges, the payloads' size, the payloads


def test_segalign_filter_per_strand(tmp_path):
    """The Triton filter on both strands of a 4 kbp pair: within segalign's budget per strand."""
    from torchhpc.ext.segalign.align import find_hsps
    from torchhpc.ext.segalign.config import AlignConfig
    from torchhpc.ext.segalign.fasta import read_fasta
    from torchhpc.ext.segalign.ops import GPU_BUDGETS
    from torchhpc.ext.segalign.simulate import simulate_pair

    simulate_pair(4000, seed=3).write(tmp_path / "t.fa", tmp_path / "q.fa")
    t, q = read_fasta(tmp_path / "t.fa"), read_fasta(tmp_path / "q.fa")
    with count_host_work() as work:
        hsps, stats = find_hsps(t, q, AlignConfig(gapped=False, backend="triton"))
    assert stats["backend"] == "triton" and sum(len(h) for h in hsps.values()) > 0
    GPU_BUDGETS["filter"].check(work, 2, "segalign filter")


def test_ccsdt_paths_per_block():
    """The torch path as CUDA runs it (pair blocks, fused epilogue) and the fused kernel: within ccsdt's
    budgets; no host sync inside the pair-block loop, whatever the number of blocks."""
    from torchhpc.ext.ccsdt import triples_energy
    from torchhpc.ext.ccsdt.ops import GPU_BUDGETS, triples_energy_torch
    from torchhpc.ext.ccsdt.pairs import pair_blocks
    from torchhpc.ext.ccsdt.reference import random_inputs

    args = random_inputs(4, 6, seed=1)
    for chunk in (1, 4):
        with count_host_work() as work:
            e_torch = triples_energy_torch(*args, block_triples=chunk, blocking="pair", epilogue="triton")
        GPU_BUDGETS["torch"].check(work, len(pair_blocks(4, chunk)), "ccsdt torch path (pair blocks)")
        assert work.syncs <= GPU_BUDGETS["torch"].fixed_syncs
        assert work.launch_ops["triton:_epilogue_kernel"] == len(pair_blocks(4, chunk))
    with count_host_work() as work:
        e_triton = triples_energy(*args, backend="triton")
    GPU_BUDGETS["triton"].check(work, 1, "ccsdt fused kernel")
    assert work.launch_ops["triton:_triples_energy_kernel"] == 1
    assert e_triton == pytest.approx(e_torch, rel=1e-12)
    with count_host_work() as work:
        e_mma = triples_energy(*args, backend="triton-mma")
    GPU_BUDGETS["triton-mma"].check(work, 1, "ccsdt fused kernel on FP64 MMA")
    assert work.launch_ops["triton:_triples_mma_kernel"] == 1
    assert e_mma == pytest.approx(e_torch, rel=1e-12)


def test_ccsdt_out_of_core_has_no_sync_per_block():
    """The out-of-core (T) (what a GPU whose memory cannot hold the integrals runs, and every rank of a
    distributed run): no host sync inside the block loop, whatever the block size (it read each block's
    triples back from the device before)."""
    from torchhpc.ext.ccsdt.blocks import check_inputs
    from torchhpc.ext.ccsdt.ops import GPU_BUDGETS
    from torchhpc.ext.ccsdt.reference import random_inputs, triples_energy_reference
    from torchhpc.ext.ccsdt.slices import triples_energy_out_of_core

    args = check_inputs(*random_inputs(6, 5, seed=1))
    ref = triples_energy_reference(*args)
    for block, epilogue in ((1, "torch"), (3, "torch"), (3, "triton")):  # triton: what CUDA runs
        with count_host_work() as work:
            run = triples_energy_out_of_core(*args, max_memory=0.03, block_triples=block, epilogue=epilogue)
        assert run.stats.capacity < 6 and run.stats.blocks >= 50 // block  # out of core, many blocks
        GPU_BUDGETS["out_of_core"].check(work, run.stats.triples, f"ccsdt out of core, {block} triple(s) a block")
        assert work.syncs <= GPU_BUDGETS["out_of_core"].fixed_syncs
        assert work.launch_ops["triton:_epilogue_kernel"] == (run.stats.blocks if epilogue == "triton" else 0)
        assert run.energy == pytest.approx(ref, rel=1e-12)


def test_kraken_table_batched_step():
    """One pooling launch and one fused backward + AdaGrad launch per step, within kraken's budget."""
    from torchhpc.ext.kraken.ops import GPU_BUDGETS
    from torchhpc.triton_kernels.kraken import tbe_backward_rowwise_adagrad, tbe_pool

    g = torch.Generator().manual_seed(0)
    K, B, N, D = 3, 8, 50, 16
    lengths = torch.randint(0, 4, (K * B,), generator=g)
    offsets = torch.zeros(K * B + 1, dtype=torch.int64)
    offsets[1:] = lengths.cumsum(0)
    rows = torch.randint(-1, K * N, (int(offsets[-1]),), generator=g)
    store, v = torch.randn(K * N, D, generator=g), torch.zeros(K * N)
    steps = 3
    with count_host_work() as work:
        for _ in range(steps):
            out = tbe_pool(store, rows, offsets)
            tbe_backward_rowwise_adagrad(torch.ones_like(out), store, v, rows, offsets, 0.1, 1e-8)
    GPU_BUDGETS["tbe_step"].check(work, steps, "kraken table-batched step")
    assert work.launch_ops["triton:_tbe_pool_kernel"] == steps


@pytest.mark.parametrize("mode,budget", [("none", "schedule"), ("easy", "schedule_easy")])
def test_sched_batched_simulator_per_decision_step(mode, budget):
    """The batched simulator's torch path (what CUDA runs) over 4 windows: within sched's budget per step."""
    import numpy as np

    from torchhpc.ext.sched.batched import GPU_BUDGETS, BatchedClusterSimulator
    from torchhpc.ext.sched.swf import SchedTrace

    rng = np.random.default_rng(1)
    n, total = 400, 8
    arr = lambda x: np.asarray(x, dtype=np.int64)  # noqa: E731
    run = rng.choice([10, 20, 30], n)
    trace = SchedTrace(name="ties", procs_total=total, job_id=np.arange(1, n + 1),
                       submit=arr(np.sort(rng.integers(0, n * 6, n))), run=arr(run),
                       req_time=arr(run + rng.choice([0, 0, 10], n)), procs=arr(rng.integers(1, total + 1, n)),
                       req_mem=-np.ones(n), user=-np.ones(n), group=-np.ones(n), executable=-np.ones(n),
                       max_run_time=60.0)
    sim = BatchedClusterSimulator(trace, mode, backend="torch")
    sim.reset([0, 40, 90, 150], 64)
    g = torch.Generator().manual_seed(0)
    steps = 0
    with count_host_work() as work:
        while not bool(sim.done.all()):
            sim.schedule(sim.random_valid(g))
            steps += 1
    assert steps >= 16
    GPU_BUDGETS[budget].check(work, steps, f"sched batched simulator ({mode})")


@pytest.mark.parametrize("mode", ["none", "rlscheduler", "easy"])
def test_sched_batched_simulator_triton_per_decision(mode):
    """The batched simulator's Triton path (what CUDA runs by default) over 4 windows: one check and one
    windows kernel per decision and one host sync (the flags), whatever the backfilling."""
    from torchhpc.ext.core.budgets import HostWork
    from torchhpc.ext.core.data import shared_data_dir
    from torchhpc.ext.sched.batched import GPU_BUDGETS, BatchedClusterSimulator
    from torchhpc.ext.sched.swf import read_swf

    trace = read_swf(shared_data_dir() / "swf" / "lublin_256.swf").for_scheduling()
    sim = BatchedClusterSimulator(trace, mode, backend="triton")
    sim.reset([300, 1981, 4000, 5500], 24)
    g = torch.Generator().manual_seed(0)
    total, steps = HostWork(), 0
    while not bool(sim.done.all()):
        jobs = sim.random_valid(g)
        with count_host_work() as work:
            sim.schedule(jobs)
        total.sync_ops += work.sync_ops
        total.launch_ops += work.launch_ops
        steps += 1
    assert steps >= 16
    GPU_BUDGETS["schedule_triton"].check(total, steps, f"sched batched simulator, Triton ({mode})")
    assert total.launch_ops["triton:_schedule_windows_kernel"] == total.launch_ops["triton:_check_jobs_kernel"] == steps


def test_segalign_gapped_sweep_per_launch():
    """The gapped stage's GPU sweep: one kernel launch and four copies back per window of anchors, with walls
    stacked into overflow rows or none."""
    import numpy as np

    pytest.importorskip("numba")
    from torchhpc.ext.segalign.gapped_kernels import ydrop_extend_triton
    from torchhpc.ext.segalign.ops import GPU_BUDGETS
    from torchhpc.ext.segalign.scoring import hoxd70
    from torchhpc.ext.segalign.walls import Walls

    rng = np.random.default_rng(3)
    t = rng.integers(0, 4, 40).astype(np.uint8)
    q = t.copy()
    q[rng.random(40) < 0.1] = 2
    walls = Walls(40)
    walls.add(np.arange(10, 20), np.arange(12, 22))
    walls.add(np.arange(25, 35), np.arange(12, 22))  # a second alignment on the same query bases: a row
    table = hoxd70().table(910).numpy()
    anchors = np.array([5, 30, 39]), np.array([5, 31, 39]), np.array([1, 1, -1])
    for cover in (None, walls):
        with count_host_work() as work:
            ydrop_extend_triton(t, q, *anchors, table, 400, 30, 9430, cover, boxes=True, device="cpu", cap=128,
                                block=32)
        GPU_BUDGETS["gapped"].check(work, 1, "segalign gapped sweep")
        assert work.launch_ops["triton:_ydrop_kernel"] == 1


@pytest.mark.parametrize("name", ["lorentz_20_sat", "heat1d_t32"])
def test_fperror_checked_forward_reads_the_device_once(shared_data, name):
    """The forward pass with its domain and overflow checks (once an analysis) keeps what it finds on the device
    and reads it after the last group: no host sync a group (it was 3 a group, 482 on lorentz_20)."""
    from torchhpc.ext.fperror import load
    from torchhpc.ext.fperror.adjoint import GPU_BUDGETS
    from torchhpc.ext.fperror.forward import forward, make_groups

    dag = load(shared_data / "fperror" / "satire_large" / f"{name}.txt")
    g = make_groups(dag)
    box = dag.box[dag.input_nodes]
    assert len(g.groups) > 50
    with count_host_work() as work:
        forward(dag, g, box[:, :1].clone(), box[:, 1:].clone(), check=True)
    GPU_BUDGETS["forward_checked"].check(work, len(g.groups), f"fperror checked forward {name}")
    assert work.syncs <= 2


@pytest.mark.parametrize("name", ["lorentz_20_sat", "heat1d_t32"])
def test_fperror_reverse_pass_per_group(shared_data, name):
    """fperror's reverse passes (interval adjoints, and the error bounds of many columns on their backward cone)
    read the outputs once and nothing per group: the cone is worked out on the host from the DAG's structure (it
    was 3-5 syncs a group, ~1,600 a branch-and-bound round on lorentz_20); within the launches per group."""
    from torchhpc.ext.fperror import load
    from torchhpc.ext.fperror.adjoint import GPU_BUDGETS, _backward_cone, cone_errors, reverse
    from torchhpc.ext.fperror.forward import forward, make_groups

    dag = load(shared_data / "fperror" / "satire_large" / f"{name}.txt")
    g = make_groups(dag)
    box = dag.box[dag.input_nodes]
    fw = forward(dag, g, box[:, :1].clone(), box[:, 1:].clone())
    cols = dag.output_nodes[:4]
    units = len(_backward_cone(dag, g, cols, None, "cpu").groups)
    assert units > 50
    with count_host_work() as rev:
        reverse(dag, g, (fw.wl, fw.wh, fw.pl, fw.ph), cols, None)
    GPU_BUDGETS["reverse"].check(rev, units, f"fperror reverse {name}")
    assert rev.syncs == 1
    with count_host_work() as cone:
        cone_errors(dag, g, fw, cols, None, None)
    GPU_BUDGETS["cone_errors"].check(cone, units, f"fperror cone_errors {name}")
    assert cone.syncs == 1
