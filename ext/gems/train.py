"""The gems training job: build the blocks and the data from a :class:`~.config.GemsConfig`, profile and split
them into stages, train under torchrun, and launch torchrun when a command needs more than one process.

A run writes ``runs/gems/<id>/``: ``config.yaml``, ``metrics.jsonl`` (loss, samples/s, step time, tracked peak
memory per update), ``summary.json`` (per-rank peak memory, median samples/s, the stage split and the measured
action times that :func:`~.simulator.calibration_from_run` fits the simulator on), ``loss.png``,
``timeline.png`` (the last update) and one checkpoint shard per rank; ``run.resume`` continues from the last.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import torch
from torch import nn

from torchhpc.ext.core.config import ConfigError, dump_config
from torchhpc.ext.core.errors import DistributedError

from .config import GemsConfig
from .partition import BlockProfile


def sample_shape(cfg: GemsConfig) -> tuple[int, int, int]:
    """One input image's shape ``(C, H, W)``."""
    return (cfg.data.channels, cfg.data.image_size, cfg.data.image_size)


def build_model(cfg: GemsConfig) -> list[nn.Module]:
    """The configured network as its list of blocks (seeded by ``cfg.seed``)."""
    from .modules import build_blocks

    m = cfg.model
    return build_blocks(m.kind, depth=m.depth, width=m.width, in_shape=sample_shape(cfg),
                        num_classes=m.num_classes, norm=m.norm, seed=cfg.seed)


def build_data(cfg: GemsConfig):
    """The configured images: :class:`~.data.SyntheticImages` or :class:`~.data.ImageFolder`.

    Raises:
        ConfigError: the folder has more classes than ``model.num_classes``.
    """
    from .data import ImageFolder, SyntheticImages

    if cfg.data.source == "folder":
        src = ImageFolder(cfg.data.folder, sample_shape(cfg), cfg.data.seed,
                          slices_per_step=cfg.replicas * cfg.pipeline.eta * cfg.pipeline.groups)
        if src.num_classes > cfg.model.num_classes:
            raise ConfigError(f"data.folder has {src.num_classes} classes but model.num_classes = "
                              f"{cfg.model.num_classes}")
        return src
    return SyntheticImages(sample_shape(cfg), cfg.model.num_classes, cfg.data.seed)


def profile(cfg: GemsConfig, blocks: list[nn.Module] | None = None) -> BlockProfile:
    """Profile every block on one micro-batch ``(micro_batch, C, H, W)`` of the configured data (one process;
    the global RNG state is left as it was)."""
    from .partition import profile_blocks

    blocks = blocks if blocks is not None else build_model(cfg)
    x, _ = build_data(cfg).slice(0, 0, cfg.micro_batch)
    with torch.random.fork_rng():
        return profile_blocks(blocks, x, cfg.pipeline.profile_repeats)


def stage_bounds(cfg: GemsConfig, prof: BlockProfile | None = None, n_blocks: int | None = None):
    """The ``(first, end)`` block range of every stage: ``pipeline.balance`` if given, else the split that
    balances ``pipeline.balance_by`` over the profile ``prof``."""
    from .partition import balanced_bounds, block_costs, bounds_from_balance

    p = cfg.pipeline
    if p.balance is not None:
        return bounds_from_balance(p.balance, n_blocks if n_blocks is not None else len(prof.forward_s))
    return balanced_bounds(block_costs(prof, p.balance_by), p.stages)


def make_optimizer(cfg: GemsConfig) -> Callable:
    """``params -> SGD`` with the configured learning rate, momentum and weight decay."""
    t = cfg.train
    return lambda params: torch.optim.SGD(params, lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)


def partition_report(cfg: GemsConfig) -> str:
    """Profile the configured blocks and report the split: per stage blocks, times, parameter and activation
    MiB and the peak with ``pipeline.micro_batches`` micro-batches stashed."""
    from .partition import stage_infos, stage_report

    torch.set_num_threads(cfg.threads or torch.get_num_threads())
    prof = profile(cfg)
    bounds = stage_bounds(cfg, prof)
    head = (f"{cfg.model.kind} depth {cfg.model.depth}: {len(prof.forward_s)} blocks, micro-batch {prof.micro_batch} "
            f"of {sample_shape(cfg)}; {cfg.pipeline.stages} stages balanced by "
            f"{'manual balance' if cfg.pipeline.balance else cfg.pipeline.balance_by}")
    return head + "\n" + stage_report(stage_infos(prof, bounds), cfg.pipeline.micro_batches)


def _action_times(engine, step_s: float) -> tuple[dict[str, list[float]], float, float]:
    """One update's compute spans per stage and kind (``"0F"``, ``"1B"``, ...), the time before this rank's first
    action and the time after its last one (slicing, posting receives / synchronising, the optimizer step)."""
    acts = [ev for ev in engine.events if ev.kind in ("F", "B")]
    spans: dict[str, list[float]] = {}
    for ev in acts:
        spans.setdefault(f"{engine.copies[ev.replica].stage}{ev.kind}", []).append(ev.end - ev.start)
    if not acts:
        return spans, 0.0, 0.0
    return spans, min(ev.start for ev in acts), step_s - max(ev.end for ev in acts)


def _all_ranks(value, ctx) -> list:
    if not ctx.initialized:
        return [value]
    import torch.distributed as dist

    out = [None] * ctx.world_size
    dist.all_gather_object(out, value)
    return out


def train(cfg: GemsConfig, verbose: bool = True) -> dict:
    """Train with the configured schedule on this torchrun job (or one process); returns the summary.

    Raises:
        DistributedError: the world size is not ``stages x groups``, or a peer stops answering.
        InputError: resuming a run that does not exist, or a new run in a used folder.
    """
    import json

    from torchhpc.ext.core.distributed import distributed
    from torchhpc.ext.core.runs import agree, open_run

    from .partition import stage_infos, stage_report
    from .runtime import PipelineEngine
    from .timeline import plot_timeline

    cfg = cfg.job()
    p = cfg.pipeline
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    with distributed(device=cfg.device, timeout_s=cfg.timeout_s) as ctx:
        rank, world = ctx.rank, ctx.world_size
        if world != cfg.world_size:  # every rank sees the same sizes, so all fail here, before any message
            raise DistributedError(
                f"world size {world} does not fit the config: pipeline.stages = {p.stages} x "
                f"pipeline.groups = {p.groups} needs {cfg.world_size} processes "
                f"(torchrun --nproc-per-node {cfg.world_size})")
        run = open_run("gems", cfg, cfg.run, ctx)
        blocks = build_model(cfg)
        split = None
        if rank == 0:
            # a resumed run keeps the split it was checkpointed with; a new one measures its own
            loaded = run.load_checkpoint(shard=0) if cfg.run.resume else None
            if loaded is not None:
                split = (None, [tuple(b) for b in loaded[1]["bounds"]])
            else:
                prof = profile(cfg, blocks) if p.balance is None else None
                split = (prof, stage_bounds(cfg, prof, len(blocks)))
        prof, bounds = agree(split, ctx)
        if rank == 0 and verbose:
            print(f"gems: schedule={p.schedule} stages={p.stages} groups={p.groups} micro_batches={p.micro_batches} "
                  f"eta={p.eta} global batch={cfg.global_batch}; stage blocks {bounds}", flush=True)
            if prof is not None:
                print(stage_report(stage_infos(prof, bounds), p.micro_batches), flush=True)
        data = build_data(cfg)
        engine = PipelineEngine(blocks, bounds, p.schedule, sample_shape(cfg), cfg.train.batch_size,
                                p.micro_batches, eta=p.eta, groups=p.groups, rank=rank, world_size=world,
                                optimizer=make_optimizer(cfg), checkpoint_stages=p.checkpoint_stages,
                                device=ctx.device, timeout_s=cfg.timeout_s)
        del blocks
        start = 0
        if cfg.run.resume:
            loaded = run.load_checkpoint(shard=rank)
            if loaded is not None:
                start, state = loaded
                engine.load_state_dict(state["engine"])
                run.truncate_metrics(start)
        step_times, losses = [], []
        spans: dict[str, list[float]] = {}
        heads, tails = [], []
        for step in run.progress(range(start, cfg.train.steps), desc=f"gems {p.schedule}", initial=start,
                                 total=cfg.train.steps):
            t0 = time.perf_counter()
            loss = engine.train_step(data, step)
            dt = time.perf_counter() - t0
            step_times.append(dt)
            losses.append(loss)
            run.log(step + 1, loss=loss, samples_per_s=cfg.global_batch / dt, step_s=dt,
                    peak_model_mib=engine.peak_bytes / 2**20)
            if len(step_times) > cfg.train.warmup_steps:  # what the simulator is calibrated on
                step_spans, head, tail = _action_times(engine, dt)
                for key, values in step_spans.items():
                    spans.setdefault(key, []).extend(values)
                heads.append(head)
                tails.append(tail)
            if (step + 1) % cfg.train.checkpoint_every == 0 or step + 1 == cfg.train.steps:
                run.save_checkpoint({"engine": engine.state_dict(), "bounds": [list(b) for b in bounds]}, step + 1,
                                    shard=rank)
        reports = _all_ranks(engine.memory_report(), ctx)
        events = _all_ranks([e.__dict__ for e in engine.events], ctx)
        measured = _all_ranks({"spans": spans, "heads": heads, "tails": tails}, ctx)
        timed = step_times[cfg.train.warmup_steps:] or step_times
        summary = {
            "schedule": p.schedule, "stages": p.stages, "groups": p.groups, "world_size": world,
            "micro_batches": p.micro_batches, "eta": p.eta, "global_batch": cfg.global_batch,
            "bounds": [list(b) for b in bounds], "steps": cfg.train.steps,
            "samples_per_s": cfg.global_batch / statistics.median(timed) if timed else None,
            "final_loss": losses[-1] if losses else None, "first_loss": losses[0] if losses else None,
            "peak_memory_per_rank": reports, "run_dir": str(run.dir),
            "micro_batch": cfg.micro_batch, "update_times": _merge_update_times(measured),
        }
        if rank == 0:
            run.write_summary(summary)
            run.plot_metrics(["loss"], "loss.png", ylabel="mean cross-entropy")
            if cfg.train.timeline and events and any(events):
                plot_timeline([e for ev in events for e in ev], run.dir / "timeline.png",
                              f"gems {p.schedule}: P={p.stages} D={p.groups} M={p.micro_batches} eta={p.eta}, "
                              "last update")
            if verbose:
                mib = [round(r["peak_model_bytes"] / 2**20, 2) for r in reports]
                print(json.dumps({"samples_per_s": summary["samples_per_s"], "final_loss": summary["final_loss"],
                                  "peak_model_mib_per_rank": mib, "run_dir": str(run.dir)}), flush=True)
        return summary


def _merge_update_times(per_rank: list[dict]) -> dict:
    """Every rank's spans pooled per stage and kind, and per timed update the time outside the pipeline's
    actions: rank 0's time before its first action plus the shortest time after a rank's last action."""
    spans: dict[str, list[float]] = {}
    for r in per_rank:
        for key, values in r["spans"].items():
            spans.setdefault(key, []).extend(values)
    tails = [r["tails"] for r in per_rank]
    overhead = [h + min(t) for h, *t in zip(per_rank[0]["heads"], *tails, strict=True)]
    return {"spans": dict(sorted(spans.items())), "overhead_s": overhead}


def launch(cfg: GemsConfig, nproc: int | None = None) -> int:
    """Run the job: in this process when it is already under torchrun or needs one process, else under
    ``torchrun --standalone --nproc-per-node stages x groups`` with the resolved config; returns the exit status.

    Raises:
        DistributedError: ``nproc`` is not ``stages x groups``.
    """
    from torchhpc.ext.core.distributed import launched_by_torchrun

    job = cfg.job()
    if nproc is not None and nproc != job.world_size:
        raise DistributedError(f"--nproc {nproc} does not fit the config: pipeline.stages = {job.pipeline.stages} "
                               f"x pipeline.groups = {job.pipeline.groups} = {job.world_size} processes")
    if launched_by_torchrun() or job.world_size == 1:
        train(job)
        return 0
    with tempfile.TemporaryDirectory(prefix="gems-") as tmp:
        path = os.path.join(tmp, "config.yaml")
        with open(path, "w") as fh:
            fh.write(dump_config(job))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={job.world_size}",
               "-m", "torchhpc.trainers.gems", "--config", path]
        env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        return subprocess.call(cmd, env=env)


__all__ = ["build_data", "build_model", "launch", "make_optimizer", "partition_report", "profile", "sample_shape",
           "stage_bounds", "train"]
