"""Every option of the collectives system, once, as documented dataclass fields.

* :class:`BenchOptions`: ``torchhpc collectives bench`` / ``python -m torchhpc.trainers.collectives``;
* :class:`ModelOptions`: ``torchhpc collectives model`` (the cost model's predictions at scale);
* :class:`CollectivesTour`: the system's step of ``make demo``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torchhpc.ext.core.config import DistOptions, Options, option
from torchhpc.ext.core.errors import ConfigError

ALGO_CHOICES = ("direct", "lag-h", "law-h", "auto")
INTRA_NODE_CHOICES = ("auto", "shm", "group")
INTRA_NODE_DEFAULT = "auto"
INTRA_NODE_HELP = ("transport of the messages between ranks of one node: shm (each rank's outbox in a /dev/shm "
                   "segment its node-mates map, CPU tensors only), group (the process group's own send/recv: gloo "
                   "or NCCL), auto (shm on CPU where all ranks of a node share a host name, else group); the "
                   "inter-node messages always take the process group")
SHM_TIMEOUT_S = 300.0


def _split(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _check_graph(spec: str, key: str, seed: int) -> None:
    """The whole ``--graph`` value, parsed here (in the process that reads the command line, before any
    rank starts), and a ``--seed`` it would ignore."""
    from .graphs import parse_graph_spec

    if not parse_graph_spec(spec, key).seeded and seed != 0:
        raise ConfigError(f"--seed {seed} has no effect on {key} {spec} (a moore grid is not random): leave "
                          f"--seed out, or choose a random: or powerlaw: graph")


def _check_sizes(text: str, key: str) -> list[int]:
    from .graphs import parse_size

    try:
        sizes = [parse_size(s) for s in _split(text)]
    except ConfigError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    if not sizes:
        raise ConfigError(f"{key}: give at least one message size, e.g. 4K,64K,1M")
    return sizes


def _check_algos(text: str, key: str) -> list[str]:
    algos = _split(text)
    bad = [a for a in algos if a not in ALGO_CHOICES]
    if bad or not algos:
        raise ConfigError(f"{key}: unknown algorithm {bad[0] if bad else text!r}; choose from {', '.join(ALGO_CHOICES)}")
    return algos


@dataclass
class BenchDist(DistOptions):
    """Where the bench's ranks run: the device, torch's threads, how many ranks, how long a rank waits."""

    device: str = option("cpu", flag="--device", help="cpu (gloo), cuda (NCCL) or auto (cuda when present)",
                         choices=["auto", "cpu", "cuda"])
    nproc: int = option(4, flag="--nproc", ge=1, le=256,
                        help="processes to launch with torchrun (the torchhpc command only)")
    timeout_s: float = option(120.0, flag="--timeout-s", gt=0, le=86400,
                              help="seconds a rank waits for its peers (collectives, node-mates' shared-memory "
                              "outboxes) before the job fails")


@dataclass
class BenchOptions(Options):
    """Options of ``torchhpc collectives bench`` (time per call and bytes crossing nodes, per algorithm)."""

    RENAMED: ClassVar[dict[str, str]] = {"device": "dist.device", "timeout": "dist.timeout_s", "nproc": "dist.nproc"}

    graph: str = option("random:0.5", help="process graph: random:DENSITY (each ordered pair an edge with that "
                        "probability), powerlaw:MEAN_DEGREE:EXPONENT (power-law out-degrees) or moore:D:R "
                        "(periodic D-dimensional grid, Chebyshev radius R)")
    ranks_per_node: int = option(2, help="consecutive ranks forming one (emulated) node; 0: from torchrun's "
                                 "GROUP_RANK or the host name", ge=0)
    sizes: str = option("4K,64K,256K,1M", help="message size per edge in bytes, comma-separated (K, M suffixes)")
    algo: str = option("direct,lag-h,law-h", help="algorithms to time, comma-separated: direct, lag-h, law-h, auto")
    repeats: int = option(5, help="timed calls per algorithm and size (interleaved; the median is reported)",
                          ge=1, le=10000)
    inter_node_mbps: float = option(100.0, help="emulated injection bandwidth of one rank between nodes, MB/s "
                                    "(10^6 B/s); 0 turns the emulation off (real transport only)", ge=0)
    intra_node: str = option(INTRA_NODE_DEFAULT, help=INTRA_NODE_HELP, choices=list(INTRA_NODE_CHOICES))
    seed: int = option(0, help="seed of the random graph", ge=0)
    output: str | None = option(None, help="write the results as JSON here (rank 0)")
    json: bool = option(False, help="print the results as one JSON line instead of a table")
    stats: bool = option(False, help="also report where each algorithm's time goes: seconds per phase (gather, "
                         "inter-node, scatter), the largest median over ranks")
    max_minutes: float = option(10.0, help="refuse, before torchrun starts, a benchmark whose emulated transfers "
                                "alone (at least the busiest rank's inter-node bytes over --inter-node-mbps, every "
                                "call) would take longer than this", gt=0)
    dist: BenchDist = option(default_factory=BenchDist, help="where and on how many ranks it runs")

    def __post_init__(self):
        super().__post_init__()
        _check_graph(self.graph, "--graph", self.seed)
        _check_sizes(self.sizes, "--sizes")
        _check_algos(self.algo, "--algo")
        if self.output is not None and not str(self.output).strip():
            raise ConfigError("--output: an empty path writes nothing; give a file, or leave --output out")
        if self.intra_node == "shm" and self.dist.device == "cuda":
            raise ConfigError("--intra-node shm exchanges CPU tensors through /dev/shm, but --device cuda puts them "
                              "on the GPU: use --intra-node group (or auto)")

    @property
    def size_list(self) -> list[int]:
        return _check_sizes(self.sizes, "--sizes")

    @property
    def algo_list(self) -> list[str]:
        return _check_algos(self.algo, "--algo")


ALPHA_US = 2.0
"""``collectives model``'s per-message latency (microseconds) without ``--alpha-us`` or a calibration"""
INTRA_GBPS = 10.0
"""its intra-node copy bandwidth of one rank (GB/s) without ``--intra-gbps`` or a calibration"""


@dataclass
class ModelOptions(Options):
    """Options of ``torchhpc collectives model``: predict each algorithm's time at scale."""

    nodes: int = option(512, help="nodes of the predicted machine", ge=1, le=100000)
    ranks_per_node: int = option(56, help="ranks per node of the predicted machine", ge=1, le=1024)
    graph: str = option("random:0.002", help="process graph: random:DENSITY, powerlaw:MEAN_DEGREE:EXPONENT or moore:D:R")
    sizes: str = option("64K,256K,1M", help="message sizes per edge, comma-separated (K, M suffixes)")
    seed: int = option(0, help="seed of the random graph", ge=0)
    alpha_us: float | None = option(None, help=f"per-message latency, microseconds (null: {ALPHA_US}, or the "
                                    "calibration's)", gt=0)
    intra_gbps: float | None = option(None, help=f"intra-node copy bandwidth of one rank, GB/s (10^9 B/s) (null: "
                                      f"{INTRA_GBPS:g}, or the calibration's)", gt=0)
    rank_gbps: float = option(3.0, help="injection bandwidth one rank reaches alone, GB/s", gt=0)
    node_gbps: float = option(12.5, help="injection bandwidth of one node (its NIC), GB/s", gt=0)
    calibration: str | None = option(None, input_file=True, help="results JSON of benchmarks/collectives.py: take the calibrated "
                                     "latency and intra-node bandwidth from it instead of --alpha-us and --intra-gbps")
    json: bool = option(False, help="print one JSON line instead of a table")
    max_minutes: float = option(10.0, help="refuse, before building anything, a machine and graph whose estimated "
                                "run time (from the numbers of ranks, edges and sizes) is longer than this", gt=0)

    def __post_init__(self):
        super().__post_init__()
        _check_graph(self.graph, "--graph", self.seed)
        _check_sizes(self.sizes, "--sizes")
        for key, flag in (("alpha_us", "--alpha-us"), ("intra_gbps", "--intra-gbps")):
            if self.calibration and getattr(self, key) is not None:
                raise ConfigError(f"--calibration {self.calibration} sets the latency and the intra-node "
                                  f"bandwidth, so {flag} {getattr(self, key):g} would be ignored: give one "
                                  f"or the other")


@dataclass
class CollectivesTour(Options):
    """The collectives step of ``make demo``: the plans and the cost model on a 2-node graph (no torchrun)."""

    nranks: int = option(8, help="ranks of the demo graph", ge=2, le=4096)
    ranks_per_node: int = option(4, help="ranks per node", ge=1)
    density: float = option(0.5, help="random graph density", gt=0, le=1)
    size: str = option("1M", help="message size per edge")
