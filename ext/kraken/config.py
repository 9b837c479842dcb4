"""Every option of kraken, defined once: the library, the YAML files and the CLI all use these.

* :class:`KrakenConfig` — ``torchhpc kraken train`` / ``torchrun -m torchhpc.trainers.kraken``
  (``configs/kraken/*.yaml``): sections ``stream``, ``model``, ``tables``, ``optim``, ``train``,
  ``checkpoint``, ``run``.
* :class:`StreamOptions` is also what :class:`~torchhpc.ext.kraken.stream.SyntheticClickStream`
  takes, so ``SyntheticClickStream()`` from Python is the stream the CLI trains on.
* :class:`TableOptions` is the per-table part of
  :class:`~torchhpc.ext.kraken.embedding.DynamicTableConfig` (which adds the name, dim and features).
* :class:`KrakenDist` is the ``dist:`` section (core's :class:`~torchhpc.ext.core.config.DistOptions`:
  device, threads, nproc, timeout_s; kraken trains on the CPU unless told otherwise).
* :class:`ServeOptions` — ``torchhpc kraken serve``; :class:`BenchOptions` — ``torchhpc kraken bench``;
  :class:`KrakenTour` — the kraken step of ``torchhpc demo``.

Every class is an :class:`~torchhpc.ext.core.config.Options`: its ranges are checked whenever an instance is
made (a :class:`ConfigError` naming the option), so a dataclass built in Python is checked like one read
from a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torchhpc.ext.core.config import DistOptions, Options, RunOptions, option
from torchhpc.ext.core.errors import ConfigError


@dataclass
class StreamOptions(Options):
    """Click stream: the synthetic one (Zipf IDs with drift, a known click model) or a Criteo TSV file."""

    source: str = option("synthetic", help="synthetic (Zipf IDs with drift, known click model) | criteo (TSV)",
                         choices=["synthetic", "criteo"])
    path: str | None = option(None, help="Criteo-format log when source=criteo: TSV, gzip'd TSV (.gz) or Parquet")
    reader: str = option("auto", help="criteo: arrow (pyarrow, ~25x faster) | python (the readable reference) | "
                                      "auto (arrow when pyarrow is installed)", choices=["auto", "arrow", "python"])
    batch_size: int = option(512, help="samples per batch (global, over all ranks)", ge=1)
    num_sparse: int = option(8, help="synthetic: categorical features", ge=1)
    num_dense: int = option(13, help="synthetic: dense features (a Criteo file has 13)", ge=1)
    vocab: int = option(20_000, help="synthetic: popularity ranks per feature", ge=1)
    zipf: float = option(1.05, help="synthetic: Zipf exponent of ID popularity", gt=0)
    new_ids_per_batch: float = option(4.0, help="synthetic: new IDs entering the top of each feature per batch",
                                      ge=0)
    effect_scale: float = option(3.0, help="synthetic: spread of the hidden per-ID click effects", ge=0)
    dense_scale: float = option(0.5, help="synthetic: spread of the dense features' weights in the click model",
                                ge=0)
    bias: float = option(-1.0, help="synthetic: logit of the click model with no features (sets the CTR)")
    seed: int = option(0, help="synthetic: stream seed", ge=0)


@dataclass
class ModelOptions(Options):
    """DLRM: bottom MLP over the dense features, dot interactions, top MLP."""

    dim: int = option(16, help="embedding dimension", ge=1)
    bottom: list[int] = option(default_factory=lambda: [64], help="bottom MLP hidden sizes")
    top: list[int] = option(default_factory=lambda: [64], help="top MLP hidden sizes")


@dataclass(kw_only=True)
class TableOptions(Options):
    """Dynamic embedding tables (one per feature): budget, admission, eviction.

    Both bounds apply: a table holds at most ``max_rows`` rows (when non-zero) and at most what
    fits in ``memory_budget_mb`` (when non-zero); at least one must be given.
    """

    max_rows: int = option(0, help="rows per table (0: from memory_budget_mb)", ge=0)
    memory_budget_mb: float = option(2.0, help="bytes per table for rows, optimizer state, index and sketch (MB)",
                                     ge=0)
    admit_count: int = option(1, help="sightings before an ID gets a row", ge=1)
    admit_prob: float = option(1.0, help="probability an eligible new ID is admitted per batch", gt=0, le=1)
    admit_window: int = option(100, help="admission counts halve every N batches (0: never)", ge=0)
    eviction: str = option("lru", help="lru | lfu | none (when a table is full)", choices=["lru", "lfu", "none"])
    ttl: int = option(0, help="evict rows unseen for this many batches (0: never)", ge=0)
    pooling: str = option("sum", help="sum | mean", choices=["sum", "mean"])
    init_rows: int = option(1024, help="rows allocated at first (tables double up to the budget)", ge=1)
    init_scale: float = option(0.01, help="new rows are uniform in [-init_scale, init_scale]", ge=0)
    sketch_width: int = option(0, help="counters per row of the admission sketch (0: one per table row, >= 1024)",
                               ge=0)


    @property
    def memory_budget(self) -> int:
        """The budget in bytes (``int(memory_budget_mb * 2**20)``; 0: none)."""
        return int(self.memory_budget_mb * 2**20)


@dataclass
class OptimOptions(Options):
    """Optimizers: a sparse row optimizer for the embeddings, Adam/AdamW for the MLPs."""

    sparse: str = option("rowwise_adagrad", help="embedding rows: rowwise_adagrad | rowwise_adam | adam | sgd",
                         choices=["rowwise_adagrad", "rowwise_adam", "adam", "sgd"])
    sparse_lr: float = option(0.1, help="embedding learning rate", gt=0)
    dense: str = option("adam", help="MLPs: adam | adamw", choices=["adam", "adamw"])
    dense_lr: float = option(1e-3, help="MLP learning rate", gt=0)
    weight_decay: float = option(0.0, help="AdamW weight decay of the MLPs", ge=0)


@dataclass
class TrainOptions(Options):
    """The training loop: steps, logging, the progressive-validation window."""

    steps: int = option(1000, help="batches to train on (the stream's first batch is 0)", ge=1)
    log_every: int = option(50, help="log metrics every N steps", ge=1)
    window: int = option(50_000, help="samples in the progressive-validation window", ge=1)


@dataclass
class CheckpointOptions(Options):
    """Checkpoint schedule: deltas (changed rows) often, full checkpoints now and then."""

    delta_every: int = option(50, help="write the rows changed since the last checkpoint every N steps (0: off)",
                              ge=0)
    full_every: int = option(500, help="write a full checkpoint every N steps", ge=1)
    keep_full: int = option(2, help="full checkpoints kept (with the deltas after the oldest)", ge=1)


@dataclass
class KrakenDist(DistOptions):
    """Where and on how many processes training runs; kraken trains on the CPU unless told otherwise.

    The ``dist:`` section: core's :class:`~torchhpc.ext.core.config.DistOptions`.  With ``nproc > 1`` the
    embedding rows are sharded over the torchrun ranks by ID hash.
    """

    device: str = option("cpu", flag="--device", help="cpu | cuda | auto (CUDA when present)",
                         choices=["cpu", "cuda", "auto"])


@dataclass
class KrakenConfig(Options):
    """Continual training of a DLRM with dynamic embeddings (Kraken)."""

    stream: StreamOptions = option(default_factory=StreamOptions, help="click stream")
    model: ModelOptions = option(default_factory=ModelOptions, help="DLRM")
    tables: TableOptions = option(default_factory=TableOptions, help="dynamic embedding tables (one per feature)")
    optim: OptimOptions = option(default_factory=OptimOptions, help="optimizers")
    train: TrainOptions = option(default_factory=TrainOptions, help="training loop")
    checkpoint: CheckpointOptions = option(default_factory=CheckpointOptions, help="checkpoints")
    seed: int = option(0, help="seed of the weights", ge=0)
    dist: KrakenDist = option(default_factory=KrakenDist,
                              help="device, threads, processes (torchrun ranks) and peer timeout")
    run: RunOptions = option(default_factory=RunOptions, help="run folder")

    RENAMED: ClassVar[dict[str, str]] = {"device": "dist.device", "threads": "dist.threads"}

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.stream.source == "criteo" and not self.stream.path:
            raise ConfigError("stream.path: give the Criteo TSV file when stream.source is criteo")
        if not self.tables.max_rows and not self.tables.memory_budget_mb:
            raise ConfigError("tables: give max_rows or memory_budget_mb")


@dataclass
class ServeOptions(Options):
    """A serving replica that follows a training run's checkpoints (``torchhpc kraken serve``)."""

    checkpoint_dir: str = option(help="the run's checkpoints folder: runs/kraken/<id>/checkpoints")
    duration: float = option(30.0, help="seconds to serve", ge=0)
    poll: float = option(0.5, help="seconds between looks for new checkpoint files", ge=0)
    requests: int = option(512, help="batches of requests answered per poll, from the run's stream (0: none)",
                           ge=0)
    until_step: int | None = option(None, help="stop once this training step is loaded (null: serve on)", ge=0)
    idle: float = option(0.0, help="stop after this many seconds without a new file (0: never)", ge=0)
    verbose: bool = option(True, help="print one JSON line per load and the summary")


@dataclass
class BenchOptions(Options):
    """AUC and memory of torchrec EBC (full, hashed), MC-EBC and kraken on one stream (``torchhpc kraken bench``).

    The stream is :class:`StreamOptions`' synthetic one (its defaults) with the vocabulary, batch
    size and seed given here, or a Criteo-format log (``stream="criteo"``, ``path``): its first
    ``steps`` batches.
    """

    stream: str = option("synthetic", help="synthetic (known click model) | criteo (your Criteo-format log: --path)",
                         choices=["synthetic", "criteo"])
    path: str | None = option(None, input_file=True, help="criteo: the log (TSV, gzip'd TSV or Parquet); its first steps x batch-size "
                                         "lines are the stream")
    steps: int = option(1500, help="batches of the stream", ge=2)
    vocab: int | None = option(None, help="synthetic: popularity ranks per feature (null: 20000; a Criteo log's are "
                               "the keys it holds)", ge=1)
    batch_size: int = option(512, help="samples per batch", ge=2)
    dim: int = option(16, help="embedding dimension", ge=1)
    fraction: float = option(1 / 3, help="memory of the small variants as a fraction of the full EBC's", gt=0, le=1)
    seed: int = option(0, help="seed of the stream and the weights", ge=0)
    out: str = option("runs/bench", help="writes <out>/kraken/stream.json and stream.png (a log: criteo.json, "
                                         "criteo.png; '': nothing)")
    json: bool = option(False, help="print one JSON object instead of the table")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.stream == "criteo" and not self.path:
            raise ConfigError("bench: path: give the Criteo-format log (--path FILE) when stream is criteo")
        if self.stream == "synthetic" and self.path:
            raise ConfigError(f"bench: path {self.path!r} is read only when stream is criteo (add --stream criteo)")
        if self.stream == "criteo" and self.vocab is not None:
            raise ConfigError(f"--vocab {self.vocab} would be ignored: it sizes the synthetic stream, and a "
                              "Criteo log's vocabulary is the keys it holds")
        if self.vocab is None:
            self.vocab = StreamOptions.vocab


@dataclass
class KrakenTour(Options):
    """The kraken step of ``torchhpc demo``: our pooling against torchrec's EmbeddingBagCollection,
    then a short continual run with dynamic tables."""

    features: int = option(3, help="sparse features (one table each)", ge=1, le=64)
    batch: int = option(512, help="samples per batch", ge=1)
    rows: int = option(20_000, help="rows per table", ge=1)
    dim: int = option(64, help="embedding dimension", ge=1)
    mean_bag: float = option(8.0, help="mean ids per sample and feature", gt=0)
    repeats: int = option(10, help="timed forward+backward passes", ge=1)
    continual_steps: int = option(200, help="batches of continual training with dynamic tables (0: skip)", ge=0)


__all__ = ["BenchOptions", "CheckpointOptions", "KrakenConfig", "KrakenDist", "KrakenTour", "ModelOptions",
           "OptimOptions", "RunOptions", "ServeOptions", "StreamOptions", "TableOptions", "TrainOptions"]
