"""Every option of sched, written once: the training job, the ``sched heuristics`` / ``sched eval`` commands
and the demo step.

The YAML files in ``configs/sched/`` load into :class:`SchedConfig`; the command-line flags and ``--help`` of
``torchhpc sched ...`` are generated from these dataclasses (:mod:`torchhpc.ext.core.cli`).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import ClassVar

from torchhpc.ext.core.config import ConfigError, DistOptions, Options, RunOptions, option

from .evaluate import PUBLISHED_STARTS
from .heuristics import HEURISTICS
from .simulator import BACKFILL_MODES, METRICS

BACKFILLS = list(BACKFILL_MODES)
METRIC_CHOICES = list(METRICS)


def _check_heuristics(names, what: str) -> None:
    for h in names:
        if h not in HEURISTICS:
            raise ConfigError(f"{what}: unknown heuristic {h!r} (available: {', '.join(HEURISTICS)})")


def _changed(options: Options, name: str) -> bool:
    """Whether ``options.name`` differs from its field's default (so the user asked for it)."""
    f = next(f for f in fields(options) if f.name == name)
    default = f.default_factory() if f.default is MISSING else f.default
    return getattr(options, name) != default


def _ignored(section: Options, keys: list[str], applies: str, prefix: str = "", flags: bool = False) -> list[str]:
    """A line for each of ``keys`` set (away from its default) in ``section`` although the setting that would
    use it is off: ``applies`` says which setting that is."""
    out = []
    for key in keys:
        if _changed(section, key):
            name = ("--" + key.replace("_", "-")) if flags else prefix + key
            value = getattr(section, key)
            shown = f"{name} {value}" if flags else f"{name}={value}"
            out.append(f"{shown} would be ignored: it applies only {applies}")
    return out


def _refuse_ignored(section: Options, keys: list[str], applies: str) -> None:
    """A :class:`ConfigError` for the first of :func:`_ignored`'s lines, options named by their flags."""
    lines = _ignored(section, keys, applies, flags=True)
    if lines:
        raise ConfigError(lines[0])


def parse_starts(text: str, key: str = "--starts") -> list[int] | None:
    """``None`` for ``published`` (the paper's windows, resolved by the command); else the comma-separated
    window starts, each >= 0.

    Raises:
        ConfigError: naming ``key``: no start, or one that is not a non-negative integer.
    """
    if text.strip() == "published":
        return None
    try:
        starts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{key} must be comma-separated job indices or 'published', got {text!r}") from None
    if not starts:
        raise ConfigError(f"{key} gives no window start ({text!r}); give job indices or 'published'")
    if min(starts) < 0:
        raise ConfigError(f"{key}: window starts are job indices >= 0, got {min(starts)}")
    return starts


# ----------------------------------------------------------------------------- training job


@dataclass
class TraceOptions(Options):
    """Which jobs to schedule."""

    path: str | None = option(None, input_file=True, help="SWF trace file; null = a generated Lublin–Feitelson trace")
    procs: int | None = option(None, help="machine size override; null = the size the trace header gives", ge=1)
    strict: bool = option(True, help="fail on malformed SWF lines (false: skip and count them)")
    generate_jobs: int = option(10_000, help="jobs of the generated trace", ge=100)
    generate_seed: int = option(0, help="seed of the generated trace", ge=0)


@dataclass
class EnvOptions(Options):
    """The scheduling environment."""

    backfill: str = option("none", help="none | rlscheduler | easy", choices=BACKFILLS)
    metric: str = option("bsld", help="sequence metric the reward is minus", choices=METRIC_CHOICES)
    sequence_length: int = option(256, help="jobs per training sequence", ge=2)
    queue_slots: int = option(128, help="visible queue slots", ge=1)
    time_scale: str = option("linear", help="time features: linear (the paper) | log (log1p-scaled)",
                             choices=["linear", "log"])
    job_slice: int = option(0, help="train on the first N jobs only (0 = all)", ge=0)
    reward: str = option("raw", help="raw: -metric (the paper) | log_ratio: -log(metric / the reference "
                         "heuristic's metric on the same sequence), a per-sequence baseline (not in the paper)",
                         choices=["raw", "log_ratio"])
    reward_reference: str = option("f1", help="heuristic whose metric on the same sequence is the baseline of "
                                   "reward log_ratio")
    prior: str | None = option(None, help="heuristic whose rank of each job the policy sees and corrects: the "
                               "kernel policy starts as that heuristic (not in the paper)")
    context: bool = option(False, help="the policy also sees each job's start delay, the free processors and the "
                           "queue length (not in the paper)")
    filter_heuristic: str | None = option(None, help="trajectory filtering: reference heuristic (e.g. sjf)")
    filter_low: float = option(10.0, help="keep sequences whose reference bsld is above this")
    filter_high: float = option(150.0, help="... and below this")

    def observation(self) -> dict:
        """The settings that shape the observation (and so the agent): ``time_scale``, ``prior``, ``context``."""
        return dict(time_scale=self.time_scale, prior=self.prior, context=self.context)

    def env_kwargs(self) -> dict:
        """Keyword arguments of :class:`~torchhpc.ext.sched.episodes.SchedulingEpisode` (and so of the Gymnasium
        env ``BatchSchedulingEnv``), without the trace."""
        return dict(backfill=self.backfill, metric=self.metric, sequence_length=self.sequence_length,
                    queue_slots=self.queue_slots, job_slice=self.job_slice, filter_heuristic=self.filter_heuristic,
                    filter_range=(self.filter_low, self.filter_high), **self.observation())


@dataclass
class PPOOptions(Options):
    """PPO (the paper's settings are the defaults)."""

    policy: str = option("kernel", help="kernel (RLScheduler) | flat (MLP baseline)", choices=["kernel", "flat"])
    epochs: int = option(100, help="training epochs (0: keep the imitated or the untrained prior policy)", ge=0)
    trajectories: int = option(100, help="sequences per epoch, over all ranks", ge=1)
    num_envs: int = option(16, help="environments stepped together per rank", ge=1)
    gamma: float = option(1.0, help="discount", ge=0, le=1)
    lam: float = option(0.97, help="GAE lambda", ge=0, le=1)
    clip: float = option(0.2, help="PPO clip ratio", gt=0)
    pi_lr: float = option(3e-4, help="policy learning rate", gt=0)
    vf_lr: float = option(1e-3, help="value learning rate", gt=0)
    pi_iters: int = option(80, help="policy steps per epoch (max)", ge=1)
    v_iters: int = option(80, help="value steps per epoch", ge=0)
    target_kl: float = option(0.01, help="early stop when approx KL > 1.5 x this", gt=0)
    kl_backtrack: int = option(0, help="not in the paper: when a step took the approx KL past 1.5 x target_kl, "
                               "halve it up to this many times until the KL is within that limit, else undo it "
                               "(0: keep the step, as the paper does)", ge=0)
    minibatch: int = option(0, help="samples per gradient step (0 = the full batch, as the paper)", ge=0)
    advantage: str = option("gae", help="gae: a critic and GAE (the paper) | group: group_size trajectories "
                            "schedule the same jobs and each one's advantage is its reward minus the mean of the "
                            "others' rewards, with no critic (not in the paper)", choices=["gae", "group"])
    group_size: int = option(4, help="advantage group: trajectories per job sequence", ge=2)
    imitate: str | None = option(None, help="warm start: behaviour-clone this heuristic first (not in the paper)")
    imitate_sequences: int = option(64, help="training sequences the heuristic demonstrates", ge=1)
    imitate_epochs: int = option(10, help="passes over the demonstrations", ge=1)
    imitate_lr: float = option(1e-3, help="learning rate of the behaviour cloning", gt=0)

    @property
    def groups_of(self) -> int:
        """Trajectories that schedule the same window: ``group_size`` with ``advantage=group``, else 1."""
        return self.group_size if self.advantage == "group" else 1


@dataclass
class EvalOptions(Options):
    """Evaluation on fixed windows (the paper's protocol by default)."""

    every: int = option(0, help="evaluate every N epochs (0 = only at the end)", ge=0)
    starts: list[int] = option(default_factory=lambda: list(PUBLISHED_STARTS), help="window starts (job indices)")
    length: int = option(1024, help="jobs per evaluation window", ge=2)
    heuristics: list[str] = option(default_factory=lambda: ["fcfs", "sjf", "f1"], help="heuristics shown beside RL")
    greedy: bool = option(False, help="argmax actions (the paper samples)")
    samples: int = option(1, help="sampled evaluations averaged per window (different sampling seeds)", ge=1)
    validate: int = option(0, help="held-out windows (outside the test windows) on which the greedy policy is "
                           "scored to keep the best checkpoint; 0 = off (sched eval then uses the last)", ge=0)
    validate_length: int = option(512, help="jobs per held-out window", ge=2)
    validate_every: int = option(5, help="score the held-out windows every N epochs (and at the end)", ge=1)
    validate_seed: int = option(2020, help="seed of the held-out window draw", ge=0)


#: what ``--device auto`` picks: the CPU. Measured on one H200 (2026-12-04, docs/core/results.md): the
#: batched simulator's torch path on CUDA did not finish the benchmark's rows in 45 s, where the compiled
#: CPU path makes 0.3-0.9 M decisions/s (its Triton path, the CUDA default since, is not measured yet);
#: training's rollouts use the per-window simulator, and the policy network is too small to gain from the GPU.
AUTO_DEVICE = "cpu"


@dataclass
class SchedDist(DistOptions):
    """Where the training job runs: device, threads and torchrun ranks.

    sched's defaults are the CPU (the simulator is CPU-bound) and a 600 s wait for a peer rank.  With ``nproc``
    > 1 each rank collects its share of the trajectories (a job that torchrun already launched ignores it).
    """

    device: str = option("cpu", flag="--device", choices=["cpu", "cuda", "auto"],
                         help="cpu | cuda | auto (the CPU: the simulator is CPU-bound and was measured faster there)")
    timeout_s: float = option(600.0, flag="--timeout-s", gt=0,
                              help="seconds a rank waits for its peers before the job fails")


@dataclass
class SchedConfig(Options):
    """RLScheduler training job."""

    RENAMED: ClassVar[dict[str, str]] = {"device": "dist.device", "threads": "dist.threads"}

    trace: TraceOptions = option(default_factory=TraceOptions, help="trace")
    env: EnvOptions = option(default_factory=EnvOptions, help="environment")
    ppo: PPOOptions = option(default_factory=PPOOptions, help="PPO")
    eval: EvalOptions = option(default_factory=EvalOptions, help="evaluation")
    seed: int = option(0, help="seed of weights, sequence draws and sampling", ge=0)
    log_baselines: bool = option(True, help="log SJF/F1 bsld on every training sequence (the paper's ShowRet)")
    dist: SchedDist = option(default_factory=SchedDist, help="device, threads and torchrun ranks")
    run: RunOptions = option(default_factory=RunOptions, help="run folder")

    def __post_init__(self) -> None:
        super().__post_init__()
        extra = [h for h in (self.env.filter_heuristic, self.ppo.imitate, self.env.reward_reference,
                             self.env.prior) if h]
        for h in [*self.eval.heuristics, *extra]:
            if h not in HEURISTICS:
                raise ConfigError(f"unknown heuristic {h!r} (available: {', '.join(HEURISTICS)})")
        if self.env.filter_low >= self.env.filter_high:
            raise ConfigError("env.filter_low must be below env.filter_high")
        P = self.ppo
        if self.env.prior and P.policy != "kernel":
            raise ConfigError("env.prior needs ppo.policy=kernel")
        if P.epochs == 0 and not (P.imitate or self.env.prior):
            raise ConfigError("ppo.epochs=0 trains nothing without ppo.imitate or env.prior")
        if P.advantage == "group" and (P.trajectories % P.group_size or P.num_envs % P.group_size):
            raise ConfigError(f"ppo.advantage=group needs ppo.trajectories ({P.trajectories}) and ppo.num_envs "
                              f"({P.num_envs}) to be multiples of ppo.group_size ({P.group_size})")

    def ignored_options(self) -> list[str]:
        """One line per option set (away from its default) whose setting is off, naming both.

        A config is layered (a file, ``--set``, flags), so an option the file sets can be made moot by an
        override (``--config debug.yaml --set ppo.advantage=group`` leaves the file's ``ppo.v_iters`` without
        a critic): ``sched train`` says so in a warning line each rather than refusing to run.
        """
        T, env, P, E = self.trace, self.env, self.ppo, self.eval
        out = []
        if T.path:
            out += _ignored(T, ["generate_jobs", "generate_seed"], f"to the generated trace (trace.path=null), "
                            f"and trace.path={T.path} is given", "trace.")
        else:
            out += _ignored(T, ["strict"], "to an SWF trace.path (the generated trace has no malformed lines)",
                            "trace.")
        if not env.filter_heuristic:
            out += _ignored(env, ["filter_low", "filter_high"], "with env.filter_heuristic (trajectory filtering "
                            "is off)", "env.")
        if env.reward == "raw":
            out += _ignored(env, ["reward_reference"], "with env.reward=log_ratio (it is raw)", "env.")
        if P.advantage == "gae":
            out += _ignored(P, ["group_size"], "with ppo.advantage=group (it is gae)", "ppo.")
        else:
            out += _ignored(P, ["v_iters", "vf_lr"], "to the critic of ppo.advantage=gae (the group advantage has no "
                            "critic)", "ppo.")
        if not P.imitate:
            out += _ignored(P, ["imitate_sequences", "imitate_epochs", "imitate_lr"], "with ppo.imitate (the "
                            "behaviour-cloning warm start is off)", "ppo.")
        if not E.validate:
            out += _ignored(E, ["validate_length", "validate_every", "validate_seed"], "with eval.validate > 0 (the "
                            "held-out windows are off)", "eval.")
        if E.greedy:
            out += _ignored(E, ["samples"], "to sampled evaluation (eval.greedy=true makes one argmax pass)", "eval.")
        return out


# ----------------------------------------------------------------------------- sched heuristics / sched eval


@dataclass(kw_only=True)
class WindowOptions(Options):
    """The trace and the job windows a command schedules."""

    TRACE_MAY_BE_RECORDED: ClassVar[bool] = False
    """Whether a trace not given may come from elsewhere (``sched eval``: the one the policy was trained on)."""

    trace: str | None = option(None, input_file=True, help="SWF file; null = a generated Lublin–Feitelson trace")
    procs: int | None = option(None, help="machine size override; null = the size the trace header gives", ge=1)
    lenient: bool = option(False, help="skip malformed SWF lines instead of failing")
    backfill: str = option("none", help="none | rlscheduler | easy", choices=BACKFILLS)
    start: int | None = option(None, help="one window: jobs [START, START+LENGTH)", ge=0)
    starts: str | None = option(None, help="comma-separated window starts, or 'published' (the paper's 10)")
    length: int = option(1024, help="jobs per window", ge=1)
    sequences: int = option(10, help="random windows when neither --start nor --starts is given", ge=1)
    seed: int = option(1, help="seed of the random windows (and of RL sampling)", ge=0)
    generate_jobs: int = option(10_000, help="jobs of the generated trace (no --trace)", ge=100)
    trace_seed: int = option(0, help="seed of the generated trace (no --trace)", ge=0)
    json: bool = option(False, help="print one JSON object {policy: {metric: value}}")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.starts is not None:
            parse_starts(self.starts)
        if self.start is not None and self.starts is not None:
            raise ConfigError(f"--start {self.start} and --starts {self.starts} both choose the windows: give one")
        chosen = "--start" if self.start is not None else "--starts" if self.starts is not None else None
        if chosen:
            _refuse_ignored(self, ["sequences"], f"to random windows, and {chosen} chooses them")
        if self.trace:
            _refuse_ignored(self, ["generate_jobs", "trace_seed"], f"to the generated trace, and --trace "
                            f"{self.trace} is given")
        elif self.lenient and not self.TRACE_MAY_BE_RECORDED:
            raise ConfigError("--lenient would be ignored: it skips malformed lines of an SWF --trace, and no "
                              "--trace is given (the generated trace has none)")

    @property
    def random_windows(self) -> bool:
        """Whether the windows are drawn at random (neither ``--start`` nor ``--starts``): ``--seed`` draws them."""
        return self.start is None and self.starts is None


@dataclass(kw_only=True)
class HeuristicsOptions(WindowOptions):
    """``sched heuristics``: a table of heuristic schedulers' metrics on job windows."""

    policy: list[str] | None = option(None, help="heuristics to run (repeatable; null = all)")

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_heuristics(self.policy or [], "--policy")
        if not self.random_windows:  # the heuristics are deterministic: the seed only draws windows
            _refuse_ignored(self, ["seed"], "to random windows (the heuristics are deterministic), and "
                            f"{'--start' if self.start is not None else '--starts'} chooses them")


@dataclass(kw_only=True)
class EvalCommandOptions(WindowOptions):
    """``sched eval``: a trained policy beside the heuristics, table and box plot."""

    TRACE_MAY_BE_RECORDED: ClassVar[bool] = True

    checkpoint: str = option(help="run folder (runs/sched/<id>), checkpoint file, or pretrained:NAME (a policy "
                             "shipped with the package, e.g. pretrained:lublin1-backfill)")
    trace: str | None = option(None, input_file=True, help="SWF file; null = the trace the policy was trained on (its run's "
                               "config.yaml, a shipped policy's card), else a generated Lublin–Feitelson trace")
    generate_jobs: int | None = option(None, help="jobs of a generated trace (no --trace); null = as the policy's "
                                       "generated trace had it, else 10000", ge=100)
    trace_seed: int | None = option(None, help="seed of a generated trace (no --trace); null = as the policy's "
                                    "generated trace had it, else 0", ge=0)
    backfill: str | None = option(None, help="none | rlscheduler | easy; null = as the policy was trained",
                                  choices=BACKFILLS)
    which: str = option("best", help="checkpoint of a run folder: best on the held-out windows (eval.validate; "
                        "the last one when the run has none) or last", choices=["best", "last"])
    greedy: bool = option(False, help="argmax actions instead of sampling them (the paper samples)")
    samples: int = option(1, help="sampled runs per window, averaged", ge=1)
    policy: list[str] = option(default_factory=lambda: ["fcfs", "sjf", "f1"],
                               help="heuristics shown beside RL (repeatable)")
    plot: str | None = option(None, help="the box plot's file (.png, .pdf, .svg, ...); null = beside the run, "
                              "eval_<trace>_<backfill>_<which>.png")

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_heuristics(self.policy, "--policy")
        if self.plot is not None and not str(self.plot).strip():
            raise ConfigError("--plot is empty: give the box plot's file, or leave it out to write it beside the run")
        if self.greedy:
            _refuse_ignored(self, ["samples"], "to sampled runs (--greedy makes one argmax pass per window)")
            if not self.random_windows:
                _refuse_ignored(self, ["seed"], "to random windows and sampled runs, and --greedy with "
                                f"{'--start' if self.start is not None else '--starts'} uses neither")


@dataclass(kw_only=True)
class ExportOptions(Options):
    """``sched export``: a trained run's policy as a pretrained policy (weights + card with config and scores)."""

    checkpoint: str = option(help="run folder (runs/sched/<id>)")
    name: str = option(help="name of the pretrained policy (pretrained:NAME), e.g. lublin1-backfill")
    which: str = option("best", help="checkpoint: best on the held-out windows or last", choices=["best", "last"])
    unseen: list[str] = option(default_factory=list, help="traces it was not trained on, scored on the same "
                               "windows as its own (repeatable); the first also gives the card's quick check")
    command: str | None = option(None, help="the command that trained the run (recorded on the card)")
    notes: str | None = option(None, help="a free-text note on the card")
    folder: str | None = option(None, help="where to write NAME.pt and NAME.json; null = the package's "
                                "ext/sched/pretrained/")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.name or any(c in self.name for c in "/\\: "):
            raise ConfigError(f"--name must be a plain file name, got {self.name!r}")


# ----------------------------------------------------------------------------- demo


@dataclass
class SchedTour(Options):
    """The sched demo step: heuristics on a generated Lublin trace, then a short PPO run warm-started from F1."""

    jobs: int = option(3000, help="jobs of the generated Lublin trace", ge=1000)
    windows: int = option(3, help="evaluation windows of 256 jobs", ge=1)
    epochs: int = option(2, help="PPO epochs after the warm start", ge=1)


__all__ = [
    "BACKFILLS", "METRIC_CHOICES", "EnvOptions", "EvalCommandOptions", "EvalOptions", "ExportOptions",
    "HeuristicsOptions", "PPOOptions", "SchedConfig", "SchedDist", "SchedTour", "TraceOptions", "WindowOptions",
    "parse_starts",
]
