"""Pipelined training (GPipe baseline, MAST, MASTER, Hybrid) equals single-process training.

The same blocks, initial weights and global batch go through plain training
(:func:`reference_training`) and through the pipeline engine under torchrun on gloo;
the loss of every update, the gradients of the first update and the final weights
of every stage copy on every rank must agree to float tolerance.
"""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest
import torch
from harness.multiproc import torchrun

from torchhpc.ext.gems.data import SyntheticImages
from torchhpc.ext.gems.partition import balanced_bounds, profile_blocks, stage_infos
from torchhpc.ext.gems.reference import reference_training
from torchhpc.ext.gems.runtime import PipelineEngine
from torchhpc.ext.gems.simulator import simulate

WORKER = Path(__file__).with_name("exact_worker.py")
_spec = importlib.util.spec_from_file_location("gems_exact_worker", WORKER)
worker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(worker)

RTOL, ATOL = 1e-4, 1e-6
MEMORY_RTOL = 0.07  # simulated vs tracked peak memory per rank

# name: model, schedule, P, D, M, eta, activation checkpointing
TWO_RANKS = [
    "gpipe:resnet:gpipe:2:1:2:1:0",
    "mast:resnet:mast:2:1:2:1:0",
    "master:mlp:master:2:1:2:3:0",
    "mast_ckpt:resnet:mast:2:1:2:1:1",
    "hybrid_p1:mlp:mast:1:2:1:1:0",
    "dp_gpipe:resnet:gpipe:1:2:2:1:0",
]
FOUR_RANKS = [
    "hybrid_mast:resnet:mast:2:2:2:1:0",
    "hybrid_master:mlp:master:2:2:1:2:0",
    "mast_p4:resnet:mast:4:1:2:1:0",
    "gpipe_p4:mlp:gpipe:4:1:4:1:0",
]


def _torchrun(nproc: int, args: list[str], timeout: float) -> subprocess.CompletedProcess:
    return torchrun(nproc, args, timeout=timeout)


def _reference(model: str, n_slices: int):
    data = SyntheticImages(worker.SHAPE, 5, seed=1)
    return reference_training(worker.make_blocks(model), data, worker.STEPS, n_slices, worker.BATCH,
                              worker.make_optimizer)


def _check(out_dir: Path, spec: str) -> None:
    name, model, schedule, P, D, M, eta, _ = spec.split(":")
    K = 1 if schedule == "gpipe" else 2
    P, D, eta = int(P), int(D), int(eta)
    ref_model, ref_losses, ref_grads = _reference(model, K * eta * D)
    held = set()
    for rank in range(P * D):
        blob = torch.load(out_dir / f"{name}.rank{rank}.pt", weights_only=False)
        assert blob["global_batch"] == K * eta * D * worker.BATCH
        torch.testing.assert_close(torch.tensor(blob["losses"]), torch.tensor(ref_losses), rtol=RTOL, atol=ATOL,
                                   msg=f"{name}: loss trajectory differs on rank {rank}")
        for replica, (stage, grads) in blob["grads0"].items():
            a, b = blob["bounds"][stage]
            want = [g for blk in ref_grads[a:b] for g in blk]
            assert len(grads) == len(want)
            for g, w in zip(grads, want, strict=True):
                torch.testing.assert_close(g, w, rtol=RTOL, atol=ATOL,
                                           msg=f"{name}: gradient of stage {stage} (replica {replica}) on rank {rank}")
            params = blob["params"][replica][1]
            want_p = [p.detach() for blk in list(ref_model)[a:b] for p in blk.parameters()]
            for p, w in zip(params, want_p, strict=True):
                torch.testing.assert_close(p, w, rtol=RTOL, atol=ATOL,
                                           msg=f"{name}: weights of stage {stage} after training, rank {rank}")
            held.add((replica, stage))
    assert held == {(k, s) for k in range(K) for s in range(P)}, f"{name}: not every stage copy was checked"


def test_single_process_mast_equals_reference():
    """One process holding both MAST replicas of a one-stage pipeline trains exactly like plain training."""
    torch.set_num_threads(1)
    blocks = worker.make_blocks("resnet")
    engine = PipelineEngine(blocks, balanced_bounds([1.0] * len(blocks), 1), "master", worker.SHAPE, worker.BATCH,
                            2, eta=2, optimizer=worker.make_optimizer)
    data = SyntheticImages(worker.SHAPE, 5, seed=1)
    losses = [engine.train_step(data, step) for step in range(worker.STEPS)]
    _, ref_losses, _ = _reference("resnet", 4)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=RTOL, atol=ATOL)
    assert engine.peak_bytes > engine.static_bytes() > 0


@pytest.mark.distributed
def test_two_ranks_every_schedule_equals_single_process(tmp_path):
    """On 2 gloo processes: GPipe, MAST, MASTER (eta=3), MAST with activation checkpointing and the
    data-parallel (Hybrid) forms give the reference's losses, gradients and weights."""
    res = _torchrun(2, [str(WORKER), str(tmp_path), *TWO_RANKS], timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    for spec in TWO_RANKS:
        _check(tmp_path, spec)
    _check_simulated_memory(tmp_path)


def _check_simulated_memory(out_dir: Path) -> None:
    """The simulator's per-rank memory (from a single-process profile) matches what the real
    2-rank runs tracked (weights, gradients, momentum, stashed activations, receive buffers).

    The engine runs the first replica, in the simulator's priority order, whose next action has its input: when
    an input arrives late (a loaded machine), a MAST rank runs the other replica's action first, an interleaving
    the simulator did not plan, and its peak moves by what that action holds.  So the claim "within 7 %" is
    checked where the rank ran the simulator's order in every step (the usual case); where it did not, the
    peak must stay within 7 % plus one micro-batch of the largest stage (its stash and its message)."""
    blocks = worker.make_blocks("resnet")
    prof = profile_blocks(blocks, torch.randn(2, *worker.SHAPE), repeats=1)
    planned_runs = 0
    for name, schedule, ckpt in (("gpipe", "gpipe", ()), ("mast", "mast", ()), ("mast_ckpt", "mast", (0, 1))):
        blobs = [torch.load(out_dir / f"{name}.rank{r}.pt", weights_only=False) for r in range(2)]
        infos = stage_infos(prof, blobs[0]["bounds"])
        sim = simulate(infos, schedule, 2, checkpoint_stages=ckpt, keep_events=True)
        unit = max(s.activation_bytes + s.output_bytes for s in infos)
        for r in range(2):
            planned = [(k, kind, e, m) for _, k, kind, e, m, *_ in sorted((ev for ev in sim.events if ev[0] == r),
                                                                         key=lambda ev: ev[5])]
            # measured / simulated on this model: GPipe 1.062 and 1.001, MAST 1.014, MAST with activation
            # checkpointing 1.023 on both ranks (in the simulator's order); the claim is "within 7 %"
            measured = blobs[r]["memory"]["peak_model_bytes"]
            if all(order == planned for order in blobs[r]["orders"]):
                planned_runs += 1
                assert measured == pytest.approx(sim.peak_bytes[r], rel=MEMORY_RTOL), f"{name}: rank {r} memory"
            else:
                slack = MEMORY_RTOL * sim.peak_bytes[r] + unit
                assert abs(measured - sim.peak_bytes[r]) <= slack, f"{name}: rank {r} memory (another order)"
    assert planned_runs > 0  # (a machine too loaded to run any rank in the planned order would leave only the bound)


@pytest.mark.distributed
def test_four_ranks_hybrid_and_deeper_pipelines_equal_single_process(tmp_path):
    """On 4 gloo processes: Hybrid MAST and MASTER (2 stages x 2 groups), 4-stage MAST and GPipe."""
    res = _torchrun(4, [str(WORKER), str(tmp_path), *FOUR_RANKS], timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    for spec in FOUR_RANKS:
        _check(tmp_path, spec)


@pytest.mark.distributed
def test_a_hanging_rank_fails_the_pipeline_within_the_timeout(tmp_path):
    """Rank 1 hangs (alive, never sending again) in the middle of MAST training: nothing makes torchrun's agent
    stop the job, so only the engine's timeout can; rank 0 fails after ``timeout_s`` with a line naming it."""
    try:
        # the hanging rank sleeps an hour: a job that the engine's timeout does not end runs into this one
        res = _torchrun(2, [str(WORKER), str(tmp_path), "hang:resnet:hang:2:1:2:1:0"], timeout=240)
    except subprocess.TimeoutExpired:
        pytest.fail("the job did not end within 240 s: the engine's timeout did not stop the hanging rank")
    assert res.returncode != 0
    # a rank stopped by another timeout (the worker's default 60 s) would name another number
    assert f"no input from a neighbour for {worker.HANG_TIMEOUT_S} s" in res.stderr, res.stderr[-3000:]


def test_batchnorm_copies_keep_equal_running_statistics():
    """With the paper's BatchNorm the two MAST copies of a stage see different samples; their running
    statistics are averaged after each update, so both copies stay identical."""
    from torchhpc.ext.gems.modules import build_blocks

    blocks = build_blocks("resnet_v2", depth=11, width=4, in_shape=worker.SHAPE, num_classes=5, norm="batch")
    engine = PipelineEngine(blocks, [(0, len(blocks))], "mast", worker.SHAPE, 4, 2, optimizer=worker.make_optimizer)
    data = SyntheticImages(worker.SHAPE, 5, seed=1)
    for step in range(2):
        engine.train_step(data, step)
    a, b = (c.module for c in engine.copies)
    for ta, tb in zip(a.state_dict().values(), b.state_dict().values(), strict=True):
        torch.testing.assert_close(ta, tb)
    assert any(t.abs().sum() > 0 for name, t in a.state_dict().items() if "running_mean" in name)


def test_every_event_edge_is_read_from_the_engines_clock(monkeypatch):
    """Each event's start and end come from ``PipelineEngine._clock`` (on CUDA it synchronizes first, so an action
    is timed to its kernels' end, not their launch; the timeline, the summary's update times and the simulator's
    calibration read these events): with a clock that counts, every edge is a tick, and the events follow one
    another without overlap."""
    import itertools

    ticks = itertools.count()
    monkeypatch.setattr(PipelineEngine, "_clock", lambda self: float(next(ticks)))
    blocks = worker.make_blocks("resnet")
    engine = PipelineEngine(blocks, [(0, len(blocks))], "mast", worker.SHAPE, 4, 2, optimizer=worker.make_optimizer)
    engine.train_step(SyntheticImages(worker.SHAPE, 5, seed=1), 0)
    kinds = [e.kind for e in engine.events]
    assert kinds.count("F") == kinds.count("B") == 4 and kinds[-1] == "optimizer"
    edges = [t for e in engine.events for t in (e.start, e.end)]
    assert all(t == int(t) for t in edges), edges
    assert edges == sorted(edges) and all(e.end > e.start for e in engine.events)
