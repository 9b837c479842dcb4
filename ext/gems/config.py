"""Every option of gems, defined once: the training job, the ``gems train/partition/simulate`` commands and
the demo step.

:class:`GemsConfig` is the training job and the config of ``gems train`` and ``gems partition``
(``configs/gems/*.yaml`` load into it); ``gems simulate`` adds its own section (:class:`GemsSimulate`).
Where and on how many processes the job runs is the ``dist:`` section (:class:`GemsDist`, core's
:class:`~torchhpc.ext.core.config.DistOptions` with gems' defaults).  The CLI flags and ``--help`` are
generated from these fields (:mod:`torchhpc.ext.core.cli`); the library (:mod:`.training`,
:mod:`.simulator`) takes the dataclasses themselves.  Every class is an
:class:`~torchhpc.ext.core.config.Options`: a dataclass built in Python is range-checked like one read
from a file.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from torchhpc.ext.core.config import ConfigError, DistOptions, Options, RunOptions, option

from . import SCHEDULES


@dataclass
class ModelOptions(Options):
    """The network, as a list of blocks the partitioner splits into stages."""

    kind: str = option("resnet_v2", help="resnet_v2 (pre-activation bottleneck, depth 9n+2) | mlp",
                       choices=["resnet_v2", "mlp"])
    depth: int = option(110, help="ResNet-v2 layers (9n+2: 110, 1001, ...) or MLP hidden layers", ge=1)
    width: int = option(16, help="ResNet base channels / MLP hidden units", ge=1)
    norm: str = option("group", help="group (exactly pipeline-invariant) | batch (the paper's BN) | none",
                       choices=["group", "batch", "none"])
    num_classes: int = option(10, help="output classes", ge=2)


@dataclass
class DataOptions(Options):
    """Input images."""

    source: str = option("synthetic", help="synthetic | folder", choices=["synthetic", "folder"])
    folder: str | None = option(None, help="image folder root/<class>/<image> (source: folder)")
    image_size: int = option(32, help="images are image_size x image_size", ge=4)
    channels: int = option(3, help="image channels", ge=1)
    seed: int = option(0, help="seed of the synthetic data and of the folder's order", ge=0)


@dataclass
class PipelineOptions(Options):
    """Stages, schedule and data-parallel groups."""

    schedule: str = option("mast", help="gpipe (baseline) | mast | master", choices=list(SCHEDULES))
    stages: int = option(2, help="pipeline stages P (one rank each)", ge=1)
    groups: int = option(1, help="data-parallel groups D (Hybrid when > 1); world size = stages x groups", ge=1)
    micro_batches: int = option(1, help="micro-batches per replica per repetition", ge=1)
    eta: int | None = option(None, help="MASTER: MAST repetitions per update, gradients accumulated (null: 2 for "
                                        "master, whose eta 1 would be MAST; 1 otherwise)", ge=1)
    balance: list[int] | None = option(None, help="manual split: blocks per stage (null: measured balance)")
    balance_by: str = option("time", help="measured balance of: time | memory | both",
                             choices=["time", "memory", "both"])
    checkpoint_stages: list[int] = option(default_factory=list,
                                          help="stages that recompute activations in backward instead of storing")
    profile_repeats: int = option(2, help="timed repeats per block when profiling", ge=1)


    def __post_init__(self) -> None:
        super().__post_init__()
        if self.eta is None:
            self.eta = 2 if self.schedule == "master" else 1


@dataclass
class TrainOptions(Options):
    """Optimisation and logging."""

    batch_size: int = option(2, help="samples per replica per repetition (the paper's BS)", ge=1)
    steps: int = option(20, help="updates", ge=1)
    lr: float = option(0.05, help="SGD learning rate", gt=0)
    momentum: float = option(0.9, help="SGD momentum", ge=0, lt=1)
    weight_decay: float = option(1e-4, help="SGD weight decay", ge=0)
    warmup_steps: int = option(1, help="updates left out of the samples/s median and of the measured stage times",
                               ge=0)
    checkpoint_every: int = option(10, help="save a checkpoint every N updates (and at the end)", ge=1)
    timeline: bool = option(True, help="write timeline.png of the last update")


@dataclass
class GemsDist(DistOptions):
    """Where and on how many processes the job runs: the CPU, 1 thread and 1 process per pipeline rank, 120 s.

    The ``dist:`` section: core's :class:`~torchhpc.ext.core.config.DistOptions` with gems' defaults.
    """

    device: str = option("cpu", flag="--device", help="cpu | cuda | auto: where the stages run and the blocks are "
                         "profiled for the split (several processes: cpu, over gloo)", choices=["cpu", "cuda", "auto"])
    threads: int = option(1, flag="--threads", help="torch threads per rank (0: torch's default)", ge=0)
    nproc: int | None = option(None, flag="--nproc", ge=1,
                               help="processes under torchrun (must equal pipeline.stages x pipeline.groups; "
                                    "null: that)")
    timeout_s: float = option(120.0, flag="--timeout-s", gt=0,
                              help="seconds a rank waits for its peers before the job fails")


@dataclass
class GemsConfig(Options):
    """A gems pipeline-parallel training job.

    World size = ``pipeline.stages x pipeline.groups``; one update processes :attr:`global_batch` samples.

    Raises:
        ConfigError: naming the option, for a ResNet depth that is not 9n + 2, more stages than blocks, a batch
            not divisible into micro-batches, ``eta`` without MASTER, a manual balance that does not add up,
            checkpoint stages out of range, or a folder source without a folder.
    """

    model: ModelOptions = option(default_factory=ModelOptions, help="model")
    data: DataOptions = option(default_factory=DataOptions, help="data")
    pipeline: PipelineOptions = option(default_factory=PipelineOptions, help="pipeline")
    train: TrainOptions = option(default_factory=TrainOptions, help="training")
    seed: int = option(0, help="seed of the initial weights", ge=0)
    dist: GemsDist = option(default_factory=GemsDist,
                            help="device, threads per rank, processes (stages x groups) and peer timeout")
    run: RunOptions = option(default_factory=RunOptions, help="run folder")

    RENAMED: ClassVar[dict[str, str]] = {"device": "dist.device", "threads": "dist.threads",
                                         "timeout_s": "dist.timeout_s", "launch.nproc": "dist.nproc"}

    def __post_init__(self) -> None:
        from .modules import count_blocks

        super().__post_init__()

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
        if self.dist.nproc is not None and self.dist.nproc != self.world_size:
            raise ConfigError(f"--nproc {self.dist.nproc} does not fit the config: pipeline.stages = {p.stages} x "
                              f"pipeline.groups = {p.groups} = {self.world_size} processes")

    @property
    def world_size(self) -> int:
        """Processes of the job: ``stages x groups``."""
        return self.pipeline.stages * self.pipeline.groups

    @property
    def replicas(self) -> int:
        """Pipeline replicas per group: 1 for the GPipe baseline, 2 (the mirrored pair) for MAST/MASTER."""
        return 1 if self.pipeline.schedule == "gpipe" else 2

    @property
    def global_batch(self) -> int:
        """Samples per update: ``batch_size x replicas x eta x groups``."""
        return self.train.batch_size * self.replicas * self.pipeline.eta * self.pipeline.groups

    @property
    def micro_batch(self) -> int:
        """Samples per micro-batch."""
        return self.train.batch_size // self.pipeline.micro_batches

    def job(self) -> GemsConfig:
        """The training job alone (a command's config less its own section), as saved in a run folder."""
        if type(self) is GemsConfig:
            return self
        return GemsConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(GemsConfig)})


@dataclass
class SimulateOptions(Options):
    """What ``gems simulate`` predicts, and the machine it predicts for."""

    devices: str = option("2,4,8,16,64,256,1024", flag="--devices",
                          help="total devices, comma-separated (multiples of pipeline.stages)")
    schedules: str = option("gpipe,mast,master", flag="--schedules", help="comma-separated schedules")
    bandwidth: float = option(10.0, flag="--bandwidth", gt=0, help="point-to-point link bandwidth, GB/s")
    allreduce_bandwidth: float | None = option(None, flag="--allreduce-bandwidth", gt=0,
                                               help="all-reduce bandwidth, GB/s (null: --bandwidth)")
    latency: float = option(20.0, flag="--latency", ge=0, help="per-message latency, microseconds")
    corun_slowdown: float = option(1.0, flag="--corun-slowdown", gt=0,
                                   help="how much a stage's compute slows while the other ranks compute too "
                                        "(1 = separate devices; --calibrate fits it on a measured run)")
    overhead_ms: float = option(0.0, flag="--overhead-ms", ge=0,
                                help="fixed time per update outside the pipeline (optimizer step, loss reduction), ms")
    calibrate: str | None = option(None, flag="--calibrate",
                                   help="a measured gems run folder (runs/gems/<id>): its stage times, time per "
                                        "update outside the pipeline and co-run slowdown replace the profile's, "
                                        "--overhead-ms and --corun-slowdown")
    json: bool = option(False, flag="--json", help="print JSON rows")

    def __post_init__(self) -> None:
        super().__post_init__()
        try:
            counts = self.device_counts
        except ValueError:
            raise ConfigError(f"--devices must be comma-separated integers, got {self.devices!r}") from None
        if not counts or min(counts) < 1 or any(not x.strip() for x in str(self.devices).split(",")):
            raise ConfigError(f"--devices must list positive device counts, got {self.devices!r}")
        bad = [s for s in self.schedule_names if s not in SCHEDULES]
        if bad or not self.schedule_names:
            raise ConfigError(f"--schedules {self.schedules!r}: each must be one of {', '.join(SCHEDULES)}")

    @property
    def device_counts(self) -> list[int]:
        """``devices`` as integers."""
        return [int(x) for x in str(self.devices).split(",") if x.strip()]

    @property
    def schedule_names(self) -> list[str]:
        """``schedules`` as a list."""
        return [s.strip() for s in self.schedules.split(",") if s.strip()]


@dataclass
class GemsSimulate(GemsConfig):
    """``torchhpc gems simulate``: the job's stages (profiled, or measured in a run) scaled up by the simulator."""

    simulate: SimulateOptions = option(default_factory=SimulateOptions, help="simulator")


@dataclass
class GemsBench(Options):
    """``benchmarks/gems.py``: gems' schedules against torch pipelining and DeepSpeed on 2 CPU processes (its
    ``--out``, ``--repeats`` and ``--device`` are the suite's benchmark flags)."""

    depth: int = option(29, flag="--depth", ge=11, help="ResNet-v2 depth (9n+2)")
    width: int = option(8, flag="--width", ge=1, help="ResNet base channels")
    image: int = option(128, flag="--image", ge=4, help="image side, pixels")
    micro_batch: int = option(1, flag="--micro-batch", ge=1, help="images per micro-batch")
    micro_batches: str = option("1,2", flag="--micro-batches", help="micro-batches per replica, comma-separated")
    eta: int = option(2, flag="--eta", ge=1, help="MASTER repetitions")
    steps: int = option(6, flag="--steps", ge=1, help="timed updates per method")
    warmup: int = option(2, flag="--warmup", ge=0, help="untimed updates per method first")
    deepspeed: str = option("auto", flag="--deepspeed", choices=["auto", "yes", "no"],
                            help="DeepSpeed's PipelineModule too (auto: only if its CPU extensions are compiled)")
    only: str | None = option(None, flag="--only",
                              help="comma-separated subset of methods, e.g. gpipe@1,torch-gpipe@1")
    reuse: bool = option(False, flag="--reuse", help="re-analyse the repeat*.json of an earlier run in --out")

    def __post_init__(self) -> None:
        super().__post_init__()
        if (self.depth - 2) % 9:
            raise ConfigError(f"--depth {self.depth}: a ResNet-v2 depth must be 9n + 2 (11, 20, 29, 110, ...)")
        try:
            counts = self.micro_batch_counts
        except ValueError:
            counts = []
        if not counts or min(counts) < 1:
            raise ConfigError(f"--micro-batches {self.micro_batches!r}: needs comma-separated positive integers")

    @property
    def micro_batch_counts(self) -> list[int]:
        """``micro_batches`` as integers."""
        return [int(x) for x in str(self.micro_batches).split(",") if x.strip()]


@dataclass
class GemsTour(Options):
    """The demo step: the debug config's MAST run (4 updates) on 2 torchrun processes; it has no options."""


__all__ = ["DataOptions", "GemsBench", "GemsConfig", "GemsDist", "GemsSimulate", "GemsTour", "ModelOptions",
           "PipelineOptions", "SimulateOptions", "TrainOptions"]
