"""The pieces of gems' training job: the blocks, data, profile and stage split of a
:class:`~.config.GemsConfig`, the checks every rank makes before any collective, the newest checkpoint
every rank can resume from, and the action times a run records for the simulator.

The job itself (run folder, torchrun, printing) is :func:`~torchhpc.ext.gems.commands.train`; the
pipeline engine it drives is :class:`~.runtime.PipelineEngine`.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from torchhpc.ext.core.config import ConfigError, load_config
from torchhpc.ext.core.errors import DistributedError, InputError, TorchHPCError
from torchhpc.ext.core.runs import already_holds_a_run, holds_a_run, newest_intact

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


def profile(cfg: GemsConfig, blocks: list[nn.Module] | None = None,
            device: str | torch.device | None = None) -> BlockProfile:
    """Profile every block on one micro-batch ``(micro_batch, C, H, W)`` of the configured data (one process;
    the global RNG state is left as it was), on ``device`` (default: ``dist.device``, where training runs:
    the split balances the times of the device that will run the stages). Given ``blocks`` are profiled as
    copies where the device is not theirs, so the caller's model stays where it is.

    Raises:
        InputError: ``dist.device`` is ``cuda`` where no CUDA device is usable.
    """
    from torchhpc.ext.core.device import pick_device

    from .partition import profile_blocks

    dev = torch.device(device) if device is not None else pick_device(cfg.dist.device)
    if blocks is None:
        blocks = [b.to(dev) for b in build_model(cfg)]
    elif any(p.device != dev for b in blocks for p in b.parameters()):
        blocks = [copy.deepcopy(b).to(dev) for b in blocks]
    x, _ = build_data(cfg).slice(0, 0, cfg.micro_batch)
    with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
        return profile_blocks(blocks, x.to(dev), cfg.pipeline.profile_repeats)


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
    from torchhpc.ext.core.device import pick_device

    from .partition import stage_infos, stage_report

    torch.set_num_threads(cfg.dist.threads or torch.get_num_threads())
    dev = pick_device(cfg.dist.device)
    prof = profile(cfg, device=dev)
    bounds = stage_bounds(cfg, prof)
    head = (f"{cfg.model.kind} depth {cfg.model.depth}: {len(prof.forward_s)} blocks, micro-batch {prof.micro_batch} "
            f"of {sample_shape(cfg)}, profiled on {dev}; {cfg.pipeline.stages} stages balanced by "
            f"{'manual balance' if cfg.pipeline.balance else cfg.pipeline.balance_by}")
    return head + "\n" + stage_report(stage_infos(prof, bounds), cfg.pipeline.micro_batches)


def action_times(engine, step_s: float) -> tuple[dict[str, list[float]], float, float]:
    """One update's compute spans per stage and kind (``"0F"``, ``"1B"``, ...), the time before this rank's first
    action and the time after its last one (slicing, posting receives / synchronising, the optimizer step)."""
    acts = [ev for ev in engine.events if ev.kind in ("F", "B")]
    spans: dict[str, list[float]] = {}
    for ev in acts:
        spans.setdefault(f"{engine.copies[ev.replica].stage}{ev.kind}", []).append(ev.end - ev.start)
    if not acts:
        return spans, 0.0, 0.0
    return spans, min(ev.start for ev in acts), step_s - max(ev.end for ev in acts)


# ----------------------------------------------------------------------------- checks before any collective

RESUME_KEYS = ("model.kind", "model.depth", "model.width", "model.norm", "model.num_classes", "data.image_size",
               "data.channels", "pipeline.schedule", "pipeline.stages", "pipeline.groups", "pipeline.balance",
               "pipeline.balance_by")
"""Options a resumed run must keep: they fix the shapes of the weights and of the checkpoint shards, and the
stage split (a resumed run keeps the split it was checkpointed with: another one asked for would be
recorded in its config.yaml but not used)."""


def check_job(cfg: GemsConfig, world: int) -> None:
    """What every rank checks alone, with the same result, before the process group exists: the world size,
    the data (a folder that is missing, empty or has too many classes) and, on resume, that the run's saved
    ``config.yaml`` has the same model shape.

    Raises:
        DistributedError: the world size is not ``stages x groups``.
        InputError: the data folder, or a resume that changes the model (naming the key), or several
            processes on CUDA.
        ConfigError: as :func:`build_data`.
    """
    p = cfg.pipeline
    if world > 1 and (cfg.dist.device == "cuda" or (cfg.dist.device == "auto" and torch.cuda.is_available())):
        # the runtime pre-posts each repetition's receives and tells messages apart by their tags (gloo); NCCL
        # ignores tags and runs a pair's traffic in posting order: its ranks would wait on each other
        raise InputError("gems on several processes runs on the CPU (--device cpu, gloo): its pipeline's "
                         "point-to-point schedule relies on message tags, which NCCL does not match (the ranks "
                         "would wait on each other); on a GPU, run one process (--nproc 1)")
    if world != cfg.world_size:
        raise DistributedError(
            f"world size {world} does not fit the config: pipeline.stages = {p.stages} x "
            f"pipeline.groups = {p.groups} needs {cfg.world_size} processes "
            f"(torchrun --nproc-per-node {cfg.world_size})")
    build_data(cfg)
    if cfg.run.resume:
        check_resume(cfg)
    elif cfg.run.run_id:
        folder = Path(cfg.run.root) / "gems" / cfg.run.run_id
        if holds_a_run(folder):
            raise InputError(already_holds_a_run(folder))


def _flat(obj, prefix: str = "") -> dict:
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
                         f"(a resumed run keeps its model shape and stage split; start a new run to change it)")


def intact_checkpoint(run, world: int) -> tuple[int | None, dict | None]:
    """The newest step whose checkpoint shards of every rank load, and rank 0's state of it: core's
    :func:`~torchhpc.ext.core.runs.newest_intact` over the run's steps, a damaged newer step reported on
    stderr as one warning line.  ``(None, None)`` when the run has no checkpoint.

    Raises:
        InputError: every checkpoint of the run is damaged.
    """
    shard_steps = [set(run.checkpoint_steps("ckpt", r)) for r in range(world)]

    def load_every_shard(step: int) -> dict:
        """Rank 0's state of ``step``, once every rank's shard of it loads."""
        state0 = None
        for r in range(world):
            path = run.checkpoint_path(step, shard=r)
            if step not in shard_steps[r]:
                raise InputError(f"checkpoint step {step} is damaged: {path.name} is missing")
            try:
                _, state = run.load_checkpoint(path)
            except TorchHPCError:
                raise InputError(f"checkpoint step {step} is damaged: {path.name} cannot be read") from None
            if r == 0:
                state0 = state
        return state0

    steps = set().union(*shard_steps)
    found = newest_intact([(step, step) for step in steps], load_every_shard, where=run.ckpt_dir)
    return (None, None) if found is None else (found[0], found[2])


def merge_update_times(per_rank: list[dict]) -> dict:
    """Every rank's spans pooled per stage and kind, and per timed update the time outside the pipeline's
    actions: rank 0's time before its first action plus the shortest time after a rank's last action."""
    spans: dict[str, list[float]] = {}
    for r in per_rank:
        for key, values in r["spans"].items():
            spans.setdefault(key, []).extend(values)
    tails = [r["tails"] for r in per_rank]
    overhead = [h + min(t) for h, *t in zip(per_rank[0]["heads"], *tails, strict=True)]
    return {"spans": dict(sorted(spans.items())), "overhead_s": overhead}


__all__ = ["RESUME_KEYS", "action_times", "build_data", "build_model", "check_job", "check_resume",
           "intact_checkpoint", "make_optimizer", "merge_update_times", "partition_report", "profile", "sample_shape",
           "stage_bounds"]
