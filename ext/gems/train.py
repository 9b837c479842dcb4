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
import sys
import time
from collections.abc import Callable

import torch
from torch import nn

from torchhpc.ext.core.config import ConfigError
from torchhpc.ext.core.errors import DistributedError, InputError, TorchHPCError
from torchhpc.ext.core.launch import relaunch

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
    rank_env, world_env = _torchrun_rank()
    try:  # every rank checks the same things before any of them waits on another
        check_job(cfg, world_env)
    except TorchHPCError:
        if rank_env != 0:  # rank 0 says it, once
            raise SystemExit(1) from None
        raise
    with distributed(device=cfg.device, timeout_s=cfg.timeout_s) as ctx:
        rank, world = ctx.rank, ctx.world_size
        # on resume nothing is written until the checkpoint is known to continue this run
        run = open_run("gems", None if cfg.run.resume else cfg, cfg.run, ctx)
        blocks = build_model(cfg)
        split = None
        if rank == 0:
            # a resumed run keeps the split it was checkpointed with; a new one measures its own
            try:
                step, state0 = intact_checkpoint(run, world) if cfg.run.resume else (None, None)
            except TorchHPCError as exc:
                split = ("error", str(exc))
            else:
                if state0 is not None:
                    split = (None, [tuple(b) for b in state0["bounds"]], step)
                else:
                    prof = profile(cfg, blocks) if p.balance is None else None
                    split = (prof, stage_bounds(cfg, prof, len(blocks)), None)
        split = agree(split, ctx)
        if split[0] == "error":
            if rank != 0:
                raise SystemExit(1)
            raise InputError(split[1])
        prof, bounds, resume_step = split
        if resume_step is not None and resume_step >= cfg.train.steps:
            if rank == 0 and verbose:
                print(f"gems: {run.dir} already finished at step {resume_step} (train.steps = {cfg.train.steps}): "
                      "nothing to do (raise --train.steps to train on)", flush=True)
            done = run.dir / "summary.json"
            return json.loads(done.read_text()) if done.is_file() else {"steps": resume_step, "run_dir": str(run.dir)}
        if cfg.run.resume:
            run.save_config(cfg)
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
        if resume_step is not None:
            start, state = run.load_checkpoint(run.checkpoint_path(resume_step, shard=rank))
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


# ----------------------------------------------------------------------------- checks before any collective

RESUME_KEYS = ("model.kind", "model.depth", "model.width", "model.norm", "model.num_classes", "data.image_size",
               "data.channels", "pipeline.schedule", "pipeline.stages", "pipeline.groups")
"""Options a resumed run must keep: they fix the shapes of the weights and of the checkpoint shards."""


def _torchrun_rank() -> tuple[int, int]:
    """``(RANK, WORLD_SIZE)`` from the torchrun environment (``(0, 1)`` outside torchrun)."""
    from torchhpc.ext.core.distributed import launched_by_torchrun

    if not launched_by_torchrun():
        return 0, 1
    try:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except ValueError as exc:
        raise DistributedError(f"malformed torchrun environment: {exc}") from None


def check_job(cfg: GemsConfig, world: int) -> None:
    """What every rank checks alone, with the same result, before the process group exists: the world size,
    the data (a folder that is missing, empty or has too many classes) and, on resume, that the run's saved
    ``config.yaml`` has the same model shape.

    Raises:
        DistributedError: the world size is not ``stages x groups``.
        InputError: the data folder, or a resume that changes the model (naming the key).
        ConfigError: as :func:`build_data`.
    """
    p = cfg.pipeline
    if world != cfg.world_size:
        raise DistributedError(
            f"world size {world} does not fit the config: pipeline.stages = {p.stages} x "
            f"pipeline.groups = {p.groups} needs {cfg.world_size} processes "
            f"(torchrun --nproc-per-node {cfg.world_size})")
    build_data(cfg)
    if cfg.run.resume:
        check_resume(cfg)
    elif cfg.run.run_id:
        from pathlib import Path

        folder = Path(cfg.run.root) / "gems" / cfg.run.run_id
        if (folder / "config.yaml").exists():
            raise InputError(f"run folder {folder} already holds a run (pass --run.resume to continue it)")


def _flat(obj, prefix: str = "") -> dict:
    import dataclasses

    out = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if dataclasses.is_dataclass(v):
            out.update(_flat(v, prefix + f.name + "."))
        else:
            out[prefix + f.name] = v
    return out


def check_resume(cfg: GemsConfig) -> None:
    """A resume must keep the run's model shape: compare with its saved ``config.yaml`` before writing anything.

    Raises:
        InputError: a key of :data:`RESUME_KEYS` differs (named, with both values), or the saved config is unreadable.
    """
    from pathlib import Path

    from torchhpc.ext.core.config import load_config

    if not cfg.run.run_id:
        raise InputError("cannot resume without --run.run-id (the run folder runs/gems/<id> to continue)")
    folder = Path(cfg.run.root) / "gems" / cfg.run.run_id
    if not folder.is_dir():
        raise InputError(f"cannot resume: run folder {folder} does not exist")
    saved_path = folder / "config.yaml"
    if not saved_path.is_file():
        return
    try:
        saved = load_config(GemsConfig, saved_path)
    except TorchHPCError as exc:
        raise InputError(f"cannot resume: the run's {saved_path} is not a gems config ({exc})") from None
    old, new = _flat(saved), _flat(cfg)
    changed = [k for k in RESUME_KEYS if old.get(k) != new.get(k)]
    if changed:
        k = changed[0]
        raise InputError(f"cannot resume with {k} = {new[k]!r}: the run's {saved_path} has {k} = {old[k]!r} "
                         f"(a resumed run keeps its model shape; start a new run to change it)")


def intact_checkpoint(run, world: int) -> tuple[int | None, dict | None]:
    """The newest step whose checkpoint shards of every rank load, and rank 0's state of it; a damaged newer
    step is reported on stderr as one warning line.  ``(None, None)`` when the run has no checkpoint.

    Raises:
        InputError: every checkpoint of the run is damaged.
    """
    shard_steps = [set(run._checkpoint_steps("ckpt", r)) for r in range(world)]
    steps = sorted(set().union(*shard_steps), reverse=True)
    damaged: list[str] = []
    for step in steps:
        state0, bad = None, None
        for r in range(world):
            path = run.checkpoint_path(step, shard=r)
            if step not in shard_steps[r]:
                bad = f"{path.name} is missing"
                break
            try:
                _, state = run.load_checkpoint(path)
            except TorchHPCError:
                bad = f"{path.name} cannot be read"
                break
            if r == 0:
                state0 = state
        if bad is None:
            if damaged:
                print(f"torchhpc: warning: checkpoint step {steps[0]} of {run.dir} is damaged ({damaged[0]}); "
                      f"resuming from step {step}, the newest intact one", file=sys.stderr, flush=True)
            return step, state0
        damaged.append(bad)
    if damaged:
        raise InputError(f"cannot resume {run.dir}: every checkpoint is damaged ({'; '.join(damaged)})")
    return None, None


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
    return relaunch(job, JOB_PROG, job.world_size)


JOB_PROG = "torchhpc.trainers.gems"


__all__ = ["build_data", "build_model", "check_job", "check_resume", "intact_checkpoint", "launch",
           "make_optimizer", "partition_report", "profile", "sample_shape", "stage_bounds", "train"]
