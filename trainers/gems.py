"""gems: memory-aware pipeline model parallelism (GEMS, SC20) — MAST, MASTER and Hybrid.

    torchrun --standalone --nproc-per-node 2 -m torchhpc.trainers.gems --config configs/gems/mast_resnet.yaml
    torchhpc gems train --config configs/gems/debug.yaml [--set pipeline.schedule=master]   # launches torchrun
    torchhpc gems partition --config configs/gems/mast_resnet.yaml      # profile + per-stage memory report
    torchhpc gems simulate --config configs/gems/mast_resnet.yaml --devices 2,8,64,1024

World size = pipeline.stages x pipeline.groups.  One update processes
``train.batch_size x (2 for mast/master) x pipeline.eta x pipeline.groups`` samples.
A run writes runs/gems/<id>/: config.yaml, metrics.jsonl (loss, samples/s, peak memory),
summary.json (per-rank peak memory, median samples/s), timeline.png, loss.png and one
checkpoint shard per rank (resume with --set run.resume=true --set run.run_id=<id>).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from torchhpc.ext.core.config import ConfigError, add_config_arguments, load_config, option
from torchhpc.ext.gems import SCHEDULES

from .common import ArgumentParser, RunOptions, add_common_arguments, parse_and_run

# ============================================================================ config


@dataclass
class ModelOptions:
    """The network, as a list of blocks the partitioner splits into stages."""

    kind: str = option("resnet_v2", help="resnet_v2 (pre-activation bottleneck, depth 9n+2) | mlp",
                       choices=["resnet_v2", "mlp"])
    depth: int = option(110, help="ResNet-v2 layers (9n+2: 110, 1001, ...) or MLP hidden layers", ge=1)
    width: int = option(16, help="ResNet base channels / MLP hidden units", ge=1)
    norm: str = option("group", help="group (exactly pipeline-invariant) | batch (the paper's BN) | none",
                       choices=["group", "batch", "none"])
    num_classes: int = option(10, help="output classes", ge=2)


@dataclass
class DataOptions:
    """Input images."""

    source: str = option("synthetic", help="synthetic | folder", choices=["synthetic", "folder"])
    folder: str | None = option(None, help="image folder root/<class>/<image> (source: folder)")
    image_size: int = option(32, help="images are image_size x image_size", ge=4)
    channels: int = option(3, help="image channels", ge=1)
    seed: int = option(0, help="seed of the synthetic data and of the folder's order", ge=0)


@dataclass
class PipelineOptions:
    """Stages, schedule and data-parallel groups."""

    schedule: str = option("mast", help="gpipe (baseline) | mast | master", choices=list(SCHEDULES))
    stages: int = option(2, help="pipeline stages P (one rank each)", ge=1)
    groups: int = option(1, help="data-parallel groups D (Hybrid when > 1); world size = stages x groups", ge=1)
    micro_batches: int = option(1, help="micro-batches per replica per repetition", ge=1)
    eta: int = option(1, help="MASTER: MAST repetitions per update, gradients accumulated", ge=1)
    balance: list[int] | None = option(None, help="manual split: blocks per stage (default: measured balance)")
    balance_by: str = option("time", help="measured balance of: time | memory | both",
                             choices=["time", "memory", "both"])
    checkpoint_stages: list[int] = option(default_factory=list,
                                          help="stages that recompute activations in backward instead of storing")
    profile_repeats: int = option(2, help="timed repeats per block when profiling", ge=1)


@dataclass
class TrainOptions:
    """Optimisation and logging."""

    batch_size: int = option(2, help="samples per replica per repetition (the paper's BS)", ge=1)
    steps: int = option(20, help="updates", ge=1)
    lr: float = option(0.05, help="SGD learning rate", gt=0)
    momentum: float = option(0.9, help="SGD momentum", ge=0, lt=1)
    weight_decay: float = option(1e-4, help="SGD weight decay", ge=0)
    warmup_steps: int = option(1, help="updates left out of the samples/s median", ge=0)
    checkpoint_every: int = option(10, help="save a checkpoint every N updates (and at the end)", ge=1)
    timeline: bool = option(True, help="write timeline.png of the last update")


@dataclass
class GemsConfig:
    """A gems pipeline-parallel training job."""

    model: ModelOptions = option(default_factory=ModelOptions, help="model")
    data: DataOptions = option(default_factory=DataOptions, help="data")
    pipeline: PipelineOptions = option(default_factory=PipelineOptions, help="pipeline")
    train: TrainOptions = option(default_factory=TrainOptions, help="training")
    seed: int = option(0, help="seed of the initial weights", ge=0)
    device: str = option("cpu", help="cpu | cuda | auto (gloo on cpu, NCCL on cuda)", choices=["cpu", "cuda", "auto"])
    threads: int = option(1, help="torch threads per rank (0 = torch's default)", ge=0)
    timeout_s: float = option(120.0, help="a rank fails after waiting this long for a peer", gt=0)
    run: RunOptions = option(default_factory=RunOptions, help="run folder")

    def __post_init__(self) -> None:
        from torchhpc.ext.gems.modules import count_blocks

        m, p, t = self.model, self.pipeline, self.train
        if m.kind == "resnet_v2" and (m.depth < 11 or (m.depth - 2) % 9):
            raise ConfigError(f"model.depth = {m.depth}: a ResNet-v2 depth must be 9n + 2 (11, 20, 110, 1001, ...)")
        n_blocks = count_blocks(m.kind, m.depth)
        if p.stages > n_blocks:
            raise ConfigError(f"pipeline.stages = {p.stages} but the model has only {n_blocks} blocks "
                              f"(use at most {n_blocks} stages, or a deeper model)")
        if t.batch_size % p.micro_batches:
            raise ConfigError(f"train.batch_size = {t.batch_size} is not divisible into "
                              f"pipeline.micro_batches = {p.micro_batches}")
        if p.eta > 1 and p.schedule != "master":
            raise ConfigError(f"pipeline.eta = {p.eta} applies to schedule master only (schedule is {p.schedule})")
        if p.balance is not None and (len(p.balance) != p.stages or sum(p.balance) != n_blocks
                                      or min(p.balance) < 1):
            raise ConfigError(f"pipeline.balance = {p.balance}: needs {p.stages} positive block counts "
                              f"adding up to the model's {n_blocks} blocks")
        bad = [s for s in p.checkpoint_stages if not 0 <= s < p.stages]
        if bad:
            raise ConfigError(f"pipeline.checkpoint_stages = {p.checkpoint_stages}: stages are 0..{p.stages - 1}")
        if self.data.source == "folder" and not self.data.folder:
            raise ConfigError("data.folder is required when data.source is folder")

    @property
    def world_size(self) -> int:
        return self.pipeline.stages * self.pipeline.groups

    @property
    def replicas(self) -> int:
        return 1 if self.pipeline.schedule == "gpipe" else 2

    @property
    def global_batch(self) -> int:
        return self.train.batch_size * self.replicas * self.pipeline.eta * self.pipeline.groups


# ============================================================================ building blocks


def build_model(cfg: GemsConfig):
    from torchhpc.ext.gems.modules import build_blocks

    m = cfg.model
    return build_blocks(m.kind, depth=m.depth, width=m.width, in_shape=sample_shape(cfg),
                        num_classes=m.num_classes, norm=m.norm, seed=cfg.seed)


def sample_shape(cfg: GemsConfig) -> tuple[int, int, int]:
    return (cfg.data.channels, cfg.data.image_size, cfg.data.image_size)


def build_data(cfg: GemsConfig):
    from torchhpc.ext.gems.data import ImageFolder, SyntheticImages

    if cfg.data.source == "folder":
        src = ImageFolder(cfg.data.folder, sample_shape(cfg), cfg.data.seed,
                          slices_per_step=cfg.replicas * cfg.pipeline.eta * cfg.pipeline.groups)
        if src.num_classes > cfg.model.num_classes:
            raise ConfigError(f"data.folder has {src.num_classes} classes but model.num_classes = "
                              f"{cfg.model.num_classes}")
        return src
    return SyntheticImages(sample_shape(cfg), cfg.model.num_classes, cfg.data.seed)


def profile(cfg: GemsConfig, blocks=None):
    """Profile every block on one micro-batch of the configured data (single process)."""
    import torch

    from torchhpc.ext.gems.partition import profile_blocks

    blocks = blocks if blocks is not None else build_model(cfg)
    mb = cfg.train.batch_size // cfg.pipeline.micro_batches
    x, _ = build_data(cfg).slice(0, 0, mb)
    with torch.random.fork_rng():
        return profile_blocks(blocks, x, cfg.pipeline.profile_repeats)


def stage_bounds(cfg: GemsConfig, prof=None, n_blocks: int | None = None):
    from torchhpc.ext.gems.partition import balanced_bounds, block_costs, bounds_from_balance

    p = cfg.pipeline
    if p.balance is not None:
        return bounds_from_balance(p.balance, n_blocks if n_blocks is not None else len(prof.forward_s))
    return balanced_bounds(block_costs(prof, p.balance_by), p.stages)


def make_optimizer(cfg: GemsConfig):
    import torch

    t = cfg.train
    return lambda params: torch.optim.SGD(params, lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)


# ============================================================================ training


def train(cfg: GemsConfig, verbose: bool = True) -> dict:
    """Train with the configured schedule on this torchrun job; returns the summary (rank 0's view)."""
    import torch
    import torch.distributed as dist

    from torchhpc.ext.core.distributed import distributed
    from torchhpc.ext.core.errors import DistributedError
    from torchhpc.ext.core.runs import Run, new_run_id
    from torchhpc.ext.gems.partition import stage_infos, stage_report
    from torchhpc.ext.gems.runtime import PipelineEngine
    from torchhpc.ext.gems.timeline import plot_timeline

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    with distributed(device=cfg.device, timeout_s=cfg.timeout_s) as ctx:
        rank, world = ctx.rank, ctx.world_size
        if world != cfg.world_size:  # every rank sees the same sizes, so all fail here, before any message
            raise DistributedError(
                f"world size {world} does not fit the config: pipeline.stages = {cfg.pipeline.stages} x "
                f"pipeline.groups = {cfg.pipeline.groups} needs {cfg.world_size} processes "
                f"(torchrun --nproc-per-node {cfg.world_size})")
        shared = [cfg.run.run_id or new_run_id()]
        if ctx.initialized:  # every rank must agree on the run folder
            dist.broadcast_object_list(shared, src=0)
        run = Run("gems", cfg, root=cfg.run.root, run_id=shared[0], resume=cfg.run.resume, rank=rank,
                  progress=cfg.run.progress)
        blocks = build_model(cfg)
        shared = [None, None]
        if rank == 0:
            # a resumed run keeps the split it was checkpointed with; a new one measures its own
            loaded = run.load_checkpoint(shard=0) if cfg.run.resume else None
            if loaded is not None:
                shared[1] = [tuple(b) for b in loaded[1]["bounds"]]
            else:
                if cfg.pipeline.balance is None:
                    shared[0] = profile(cfg, blocks)
                shared[1] = stage_bounds(cfg, shared[0], len(blocks))
        if ctx.initialized:
            dist.broadcast_object_list(shared, src=0)
        prof, bounds = shared
        if rank == 0 and verbose:
            print(f"gems: schedule={cfg.pipeline.schedule} stages={cfg.pipeline.stages} groups={cfg.pipeline.groups} "
                  f"micro_batches={cfg.pipeline.micro_batches} eta={cfg.pipeline.eta} "
                  f"global batch={cfg.global_batch}; stage blocks {bounds}", flush=True)
            if prof is not None:
                print(stage_report(stage_infos(prof, bounds), cfg.pipeline.micro_batches), flush=True)
        data = build_data(cfg)
        engine = PipelineEngine(blocks, bounds, cfg.pipeline.schedule, sample_shape(cfg), cfg.train.batch_size,
                                cfg.pipeline.micro_batches, eta=cfg.pipeline.eta, groups=cfg.pipeline.groups,
                                rank=rank, world_size=world, optimizer=make_optimizer(cfg),
                                checkpoint_stages=cfg.pipeline.checkpoint_stages, device=ctx.device,
                                timeout_s=cfg.timeout_s)
        del blocks
        start = 0
        if cfg.run.resume:
            loaded = run.load_checkpoint(shard=rank)
            if loaded is not None:
                start, state = loaded
                engine.load_state_dict(state["engine"])
                run.truncate_metrics(start)
        step_times, losses = [], []
        for step in run.progress(range(start, cfg.train.steps), desc=f"gems {cfg.pipeline.schedule}",
                                 initial=start, total=cfg.train.steps):
            t0 = time.perf_counter()
            loss = engine.train_step(data, step)
            dt = time.perf_counter() - t0
            step_times.append(dt)
            losses.append(loss)
            run.log(step + 1, loss=loss, samples_per_s=cfg.global_batch / dt, step_s=dt,
                    peak_model_mib=engine.peak_bytes / 2**20)
            if (step + 1) % cfg.train.checkpoint_every == 0 or step + 1 == cfg.train.steps:
                run.save_checkpoint({"engine": engine.state_dict(), "bounds": [list(b) for b in bounds]}, step + 1,
                                    shard=rank)
        reports = [engine.memory_report()]
        events = [[e.__dict__ for e in engine.events]]
        if ctx.initialized:
            reports, events = [None] * world, [None] * world
            dist.all_gather_object(reports, engine.memory_report())
            dist.all_gather_object(events, [e.__dict__ for e in engine.events])
        timed = step_times[cfg.train.warmup_steps:] or step_times
        summary = {
            "schedule": cfg.pipeline.schedule, "stages": cfg.pipeline.stages, "groups": cfg.pipeline.groups,
            "world_size": world, "micro_batches": cfg.pipeline.micro_batches, "eta": cfg.pipeline.eta,
            "global_batch": cfg.global_batch, "bounds": [list(b) for b in bounds], "steps": cfg.train.steps,
            "samples_per_s": cfg.global_batch / statistics.median(timed) if timed else None,
            "final_loss": losses[-1] if losses else None, "first_loss": losses[0] if losses else None,
            "peak_memory_per_rank": reports, "run_dir": str(run.dir),
        }
        if rank == 0:
            run.write_summary(summary)
            run.plot_metrics(["loss"], "loss.png", ylabel="mean cross-entropy")
            if cfg.train.timeline and events and any(events):
                plot_timeline([e for ev in events for e in ev], run.dir / "timeline.png",
                              f"gems {cfg.pipeline.schedule}: P={cfg.pipeline.stages} D={cfg.pipeline.groups} "
                              f"M={cfg.pipeline.micro_batches} eta={cfg.pipeline.eta}, last update")
            if verbose:
                mib = [round(r["peak_model_bytes"] / 2**20, 2) for r in reports]
                print(json.dumps({"samples_per_s": summary["samples_per_s"], "final_loss": summary["final_loss"],
                                  "peak_model_mib_per_rank": mib, "run_dir": str(run.dir)}), flush=True)
        return summary


# ============================================================================ CLI


def cmd_train(args: argparse.Namespace) -> int:
    """In-process for one rank or under torchrun; otherwise launch torchrun with the right world size."""
    from torchhpc.ext.core.distributed import launched_by_torchrun
    from torchhpc.ext.core.errors import DistributedError

    cfg = load_config(GemsConfig, args.config, args.overrides)
    nproc = getattr(args, "nproc", None)
    if nproc is not None and nproc != cfg.world_size:
        raise DistributedError(f"--nproc {nproc} does not fit the config: pipeline.stages = {cfg.pipeline.stages} "
                               f"x pipeline.groups = {cfg.pipeline.groups} = {cfg.world_size} processes")
    if launched_by_torchrun() or cfg.world_size == 1:
        train(cfg)
        return 0
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={cfg.world_size}",
           "-m", "torchhpc.trainers.gems"]
    if args.config:
        cmd += ["--config", args.config]
    for o in args.overrides:
        cmd += ["--set", o]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    return subprocess.call(cmd, env=env)


def cmd_partition(args: argparse.Namespace) -> int:
    from torchhpc.ext.gems.partition import stage_infos, stage_report

    cfg = load_config(GemsConfig, args.config, args.overrides)
    import torch

    torch.set_num_threads(cfg.threads or torch.get_num_threads())
    prof = profile(cfg)
    bounds = stage_bounds(cfg, prof)
    print(f"{cfg.model.kind} depth {cfg.model.depth}: {len(prof.forward_s)} blocks, micro-batch {prof.micro_batch} "
          f"of {sample_shape(cfg)}; {cfg.pipeline.stages} stages balanced by "
          f"{'manual balance' if cfg.pipeline.balance else cfg.pipeline.balance_by}")
    print(stage_report(stage_infos(prof, bounds), cfg.pipeline.micro_batches))
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from torchhpc.ext.core.errors import InputError
    from torchhpc.ext.gems.partition import stage_infos
    from torchhpc.ext.gems.simulator import simulate, simulation_table

    cfg = load_config(GemsConfig, args.config, args.overrides)
    import torch

    torch.set_num_threads(cfg.threads or torch.get_num_threads())
    try:
        devices = [int(x) for x in args.devices.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"--devices must be comma-separated integers, got {args.devices!r}") from None
    if args.corun_slowdown <= 0 or args.overhead_ms < 0:
        raise InputError("--corun-slowdown must be > 0 and --overhead-ms >= 0")
    prof = profile(cfg)
    P = cfg.pipeline.stages
    infos = stage_infos(prof, stage_bounds(cfg, prof))
    rows = []
    for n in devices:
        if n % P:
            raise InputError(f"--devices {n} is not a multiple of pipeline.stages = {P}")
        for schedule in args.schedules.split(","):
            eta = cfg.pipeline.eta if schedule == "master" else 1
            res = simulate(infos, schedule, cfg.pipeline.micro_batches, eta=max(eta, 2 if schedule == "master" else 1),
                           groups=n // P, micro_batch=cfg.train.batch_size // cfg.pipeline.micro_batches,
                           bandwidth=args.bandwidth * 1e9, latency=args.latency * 1e-6,
                           allreduce_bandwidth=(args.allreduce_bandwidth or args.bandwidth) * 1e9,
                           corun_slowdown=args.corun_slowdown, update_overhead_s=args.overhead_ms * 1e-3)
            rows.append(res)
    if args.json:
        print(json.dumps([r.as_dict() for r in rows]))
    else:
        print(f"stages from profiling {cfg.model.kind}-{cfg.model.depth} at {sample_shape(cfg)}, "
              f"micro-batch {prof.micro_batch}; link {args.bandwidth} GB/s, {args.latency} us")
        print(simulation_table(rows))
    return 0


def _train_args(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, default=None)
    add_common_arguments(p)


def register(sub) -> None:
    p = sub.add_parser("gems", help="GEMS: memory-aware pipeline parallelism (MAST, MASTER, Hybrid) with torchrun",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    gsub = p.add_subparsers(dest="gems_command", metavar="SUBCOMMAND", parser_class=ArgumentParser)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])
    t = gsub.add_parser("train", help="train from a config (launches torchrun with stages x groups processes)")
    _train_args(t)
    t.add_argument("--nproc", type=int, default=None, help="processes (must equal stages x groups; default: that)")
    t.set_defaults(func=cmd_train)
    pa = gsub.add_parser("partition", help="profile the blocks and print the per-stage time and memory report")
    _train_args(pa)
    pa.set_defaults(func=cmd_partition)
    s = gsub.add_parser("simulate", help="discrete-event prediction of throughput and memory up to 1,024 devices")
    _train_args(s)
    s.add_argument("--devices", default="2,4,8,16,64,256,1024", help="total devices (multiples of stages)")
    s.add_argument("--schedules", default="gpipe,mast,master", help="comma-separated schedules")
    s.add_argument("--bandwidth", type=float, default=10.0, help="point-to-point link bandwidth, GB/s")
    s.add_argument("--allreduce-bandwidth", type=float, default=None, help="all-reduce bandwidth, GB/s "
                   "(default: --bandwidth)")
    s.add_argument("--latency", type=float, default=20.0, help="per-message latency, microseconds")
    s.add_argument("--corun-slowdown", type=float, default=1.0,
                   help="how much a stage's compute slows while the other ranks compute too (1 = separate "
                        "devices; benchmarks/gems.py fits it on CPU runs)")
    s.add_argument("--overhead-ms", type=float, default=0.0,
                   help="fixed time per update outside the pipeline (optimizer step, loss reduction), ms")
    s.add_argument("--json", action="store_true", help="print JSON rows")
    s.set_defaults(func=cmd_simulate)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="torchhpc.trainers.gems", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _train_args(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """torchrun entry: ``torchrun ... -m torchhpc.trainers.gems --config FILE [--set k=v]``."""
    return parse_and_run(build_parser, cmd_train, argv)


if __name__ == "__main__":
    sys.exit(main())
