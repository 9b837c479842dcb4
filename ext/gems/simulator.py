"""A discrete-event model of the gems schedules: predicted time per update, throughput and
per-rank memory for ``P`` stages x ``D`` data-parallel groups (any number of devices).

Inputs are measured: each stage's forward and backward time per micro-batch and the
bytes it keeps and sends (:func:`~.partition.stage_infos` of a profile), and the link's
bandwidth and latency.  The model follows the runtime (:mod:`.runtime`) action by action:

* each rank is one sequential worker (one compute thread per process);
* a replica's actions run in GPipe order (all forwards, then all backwards, per
  repetition); a rank holding two replicas runs, of those whose next action has its input,
  the one with more actions waiting on it (:func:`~.partition.actions_after`), then the one
  with fewer actions done, then replica A; else it waits for the first input — exactly the
  runtime's rule;
* a message of ``b`` bytes on a directed link arrives ``latency + b / bandwidth`` after
  it was sent, messages on one link one after another;
* the update ends with a ring all-reduce of each rank's gradients over its copy group
  (``2 (g-1)/g x bytes / bandwidth + 2 (g-1) x latency``, ``g = 2D`` for MAST pairs, ``D``
  otherwise); the ``D`` groups run identical pipelines, so one group is simulated;
* a measured fixed time per update (``update_overhead_s``: batch slicing, the optimizer
  step, the loss reduction) is added.

Memory per rank = weights + gradients + optimizer state of the stages it holds, plus the
peak over the update of stashed activations and posted receive buffers.

:func:`calibrate` fits the machine constants (stage times, the time per update outside the
pipeline, the co-run slowdown) on measured updates, and :func:`calibration_from_run` on a gems
run folder (``torchhpc gems simulate --calibrate runs/gems/<id>``); :func:`predict` is
``gems simulate``: every schedule on every device count of a :class:`~.config.GemsSimulate`.
"""

from __future__ import annotations

import heapq
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from torchhpc.ext.core.errors import ConfigError, InputError, TorchHPCError

from .config import GemsSimulate
from .partition import BlockProfile, StageInfo, actions_after, stage_infos


@dataclass
class SimResult:
    """One simulated configuration."""

    schedule: str
    stages: int
    groups: int
    micro_batches: int
    eta: int
    micro_batch: int
    step_s: float
    pipeline_s: float
    allreduce_s: float
    samples_per_s: float
    peak_bytes: list[int]
    """per rank of one group (the groups are identical)."""
    busy_fraction: float
    events: list[tuple[int, int, str, int, int, float, float]] = field(default_factory=list, repr=False)
    """(rank, replica, kind, rep, micro_batch, start, end) when ``keep_events``."""

    @property
    def devices(self) -> int:
        return self.stages * self.groups

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.micro_batches * (1 if self.schedule == "gpipe" else 2) * self.eta * self.groups

    def as_dict(self) -> dict:
        d = asdict(self)
        d.pop("events")
        d["devices"], d["global_batch"] = self.devices, self.global_batch
        return d


def simulate(stages: Sequence[StageInfo], schedule: str, micro_batches: int, *, eta: int = 1, groups: int = 1,
             micro_batch: int = 1, bandwidth: float = 1e10, latency: float = 2e-5,
             allreduce_bandwidth: float | None = None, optimizer_states: int = 1,
             checkpoint_stages: Sequence[int] = (), keep_events: bool = False,
             corun_slowdown: float = 1.0, update_overhead_s: float = 0.0) -> SimResult:
    """Simulate one update (see the module docstring).

    Args:
        stages: per-stage measurements for one micro-batch of ``micro_batch`` samples.
        schedule: ``gpipe``, ``mast`` or ``master``.
        bandwidth, allreduce_bandwidth: bytes per second; latency: seconds per message.
        corun_slowdown: measured or fitted factor by which a stage's compute slows while every other rank
            of the group computes at the same time (ranks sharing cores or memory bandwidth; 1 =
            independent devices). An action overlapped on average by ``b`` of the other ``P - 1``
            ranks' actions takes ``1 + (corun_slowdown - 1) * b / (P - 1)`` times its measured
            time; the overlaps come from the previous simulation, repeated to a fixed point.
        update_overhead_s: measured fixed time per update outside the pipeline's actions and the
            gradient all-reduce (slicing the batch, posting receives, the optimizer step, the loss
            reduction); added to every update.

    Raises:
        ConfigError: an unknown schedule; InputError: no stages, or a non-positive size.
    """
    kw = dict(eta=eta, groups=groups, micro_batch=micro_batch, bandwidth=bandwidth, latency=latency,
              allreduce_bandwidth=allreduce_bandwidth, optimizer_states=optimizer_states,
              checkpoint_stages=checkpoint_stages, overhead=update_overhead_s)
    if corun_slowdown <= 0:
        raise InputError("simulate: corun_slowdown must be > 0")
    if update_overhead_s < 0:
        raise InputError("simulate: update_overhead_s must be >= 0")
    if corun_slowdown == 1.0 or len(stages) < 2:
        return _simulate_once(stages, schedule, micro_batches, keep_events=keep_events, scale=None, **kw)
    res = _simulate_once(stages, schedule, micro_batches, keep_events=True, scale=None, **kw)
    for _ in range(6):
        scale = _corun_scale(res.events, len(stages), corun_slowdown)
        new = _simulate_once(stages, schedule, micro_batches, keep_events=True, scale=scale, **kw)
        done = abs(new.step_s - res.step_s) <= 1e-4 * res.step_s
        res = new
        if done:
            break
    if not keep_events:
        res.events = []
    return res


def _corun_scale(events, P: int, slowdown: float) -> dict:
    """Per action: ``1 + (slowdown - 1) x`` (time-averaged number of other ranks busy) ``/ (P - 1)``."""
    import bisect

    by_rank: dict[int, list[tuple[float, float]]] = {}
    for r, _, _, _, _, t0, t1 in events:
        by_rank.setdefault(r, []).append((t0, t1))
    starts = {}
    for r in by_rank:
        by_rank[r].sort()
        starts[r] = [a for a, _ in by_rank[r]]
    scale = {}
    for r, k, kind, e, m, t0, t1 in events:
        if t1 <= t0:
            continue
        covered = 0.0
        for r2, iv in by_rank.items():
            if r2 == r:
                continue
            i = max(0, bisect.bisect_right(starts[r2], t0) - 1)
            while i < len(iv) and iv[i][0] < t1:
                covered += max(0.0, min(t1, iv[i][1]) - max(t0, iv[i][0]))
                i += 1
        scale[(r, k, kind, e, m)] = 1.0 + (slowdown - 1.0) * covered / (t1 - t0) / (P - 1)
    return scale


def _simulate_once(stages, schedule, micro_batches, *, eta, groups, micro_batch, bandwidth, latency,
                   allreduce_bandwidth, optimizer_states, checkpoint_stages, keep_events, scale,
                   overhead=0.0) -> SimResult:
    if schedule not in ("gpipe", "mast", "master"):
        raise ConfigError(f"schedule {schedule!r}: must be gpipe, mast or master")
    P = len(stages)
    if P < 1 or micro_batches < 1 or eta < 1 or groups < 1 or bandwidth <= 0:
        raise InputError("simulate: need at least one stage, micro-batch, repetition and group, and bandwidth > 0")
    K = 1 if schedule == "gpipe" else 2
    M = micro_batches
    ar_bw = allreduce_bandwidth or bandwidth
    ckpt = set(checkpoint_stages)

    def stage_of(r: int, k: int) -> int:
        return r if k == 0 else P - 1 - r

    def rank_of(s: int, k: int) -> int:
        return s if k == 0 else P - 1 - s

    actions = [(e, kind, m) for e in range(eta) for kind in ("F", "B") for m in range(M)]
    nxt = [[0] * K for _ in range(P)]
    free = [0.0] * P
    busy = [0.0] * P
    arrival: dict[tuple[int, int, str, int], float] = {}  # (replica, rep, kind, mb) at the receiving stage
    link_free: dict[tuple[int, int], float] = {}
    static = []
    for r in range(P):
        held = {stage_of(r, k) for k in range(K)}
        copies = [stage_of(r, k) for k in range(K)]
        static.append(sum(stages[s].param_bytes for s in copies) * (2 + optimizer_states) if held else 0)
    live = [0] * P
    peak = list(static)
    events: list = []
    version = [0] * P
    heap: list = []

    def dependency(r: int, k: int):
        e, kind, m = actions[nxt[r][k]]
        s = stage_of(r, k)
        if kind == "F" and s > 0:
            return arrival.get((k, e, "F", m, s), float("inf"))
        if kind == "B" and s < P - 1:
            return arrival.get((k, e, "B", m, s), float("inf"))
        return 0.0

    def push(r: int) -> None:
        version[r] += 1
        best = None
        for k in range(K):
            if nxt[r][k] < len(actions):
                start = max(free[r], dependency(r, k))
                _, kind, _ = actions[nxt[r][k]]
                # the runtime's rule: ready first, then more actions waiting on it, then fewer done, then A
                key = (start, -actions_after(kind == "F", stage_of(r, k), P), nxt[r][k], k)
                if start < float("inf") and (best is None or key < best):
                    best = key
        if best is not None:
            heapq.heappush(heap, (best[0], r, best[3], version[r]))

    def send(src: int, dst: int, nbytes: int, t: float) -> float:
        start = max(t, link_free.get((src, dst), 0.0))
        done = start + nbytes / bandwidth
        link_free[(src, dst)] = done
        return done + latency

    for r in range(P):
        push(r)
    while heap:
        start, r, k, ver = heapq.heappop(heap)
        if ver != version[r]:
            continue
        e, kind, m = actions[nxt[r][k]]
        s = stage_of(r, k)
        st = stages[s]
        if kind == "F" and m == 0:  # receive buffers of this repetition are posted
            bufs = (0 if s == 0 else stages[s - 1].output_bytes) + (0 if s == P - 1 else st.output_bytes)
            live[r] += bufs * M
        dur = st.forward_s if kind == "F" else st.backward_s + (st.forward_s if s in ckpt else 0.0)
        if scale is not None:
            dur *= scale.get((r, k, kind, e, m), 1.0)
        end = start + dur
        in_bytes = 0 if s == 0 else stages[s - 1].output_bytes
        kept = in_bytes if s in ckpt else st.activation_bytes
        if kind == "F":
            live[r] += kept - in_bytes  # the received buffer becomes part of the stash
            if s < P - 1:
                dst = rank_of(s + 1, k)
                arrival[(k, e, "F", m, s + 1)] = send(r, dst, st.output_bytes, end)
                push(dst) if dst != r else None
        else:
            live[r] -= kept + (0 if s == P - 1 else st.output_bytes)
            if s > 0:
                dst = rank_of(s - 1, k)
                arrival[(k, e, "B", m, s - 1)] = send(r, dst, in_bytes, end)
                push(dst) if dst != r else None
        peak[r] = max(peak[r], static[r] + live[r])
        busy[r] += dur
        free[r] = end
        nxt[r][k] += 1
        if keep_events:
            events.append((r, k, kind, e, m, start, end))
        push(r)
    pipeline_s = max(free)
    # gradient all-reduce over each rank's copy group, then the update
    ar = []
    for r in range(P):
        mirror_pair = K == 2 and stage_of(r, 1) != r
        g = groups * (2 if mirror_pair else 1)
        nbytes = sum(stages[s].param_bytes for s in {stage_of(r, k) for k in range(K)})
        ar.append(0.0 if g == 1 else 2 * (g - 1) / g * nbytes / ar_bw + 2 * (g - 1) * latency)
    step = max(f + a for f, a in zip(free, ar, strict=True)) + overhead
    res = SimResult(schedule, P, groups, M, eta, micro_batch, step, pipeline_s, max(ar), 0.0, peak,
                    sum(busy) / (P * step) if step > 0 else 0.0, events)
    res.samples_per_s = res.global_batch / step if step > 0 else float("inf")
    return res


def simulation_table(rows: Sequence[SimResult]) -> str:
    """Devices, schedule, predicted samples/s, time split and the largest per-rank memory (MiB)."""
    lines = [f"{'devices':>7} {'P':>4} {'D':>5} {'schedule':>8} {'M':>3} {'eta':>3} {'batch':>7} "
             f"{'step ms':>9} {'allreduce ms':>12} {'samples/s':>10} {'busy':>5} {'peak MiB/rank':>13}"]
    for r in rows:
        lines.append(f"{r.devices:>7} {r.stages:>4} {r.groups:>5} {r.schedule:>8} {r.micro_batches:>3} {r.eta:>3} "
                     f"{r.global_batch:>7} {r.step_s * 1e3:>9.2f} {r.allreduce_s * 1e3:>12.3f} "
                     f"{r.samples_per_s:>10.2f} {r.busy_fraction:>5.2f} {max(r.peak_bytes) / 2**20:>13.2f}")
    return "\n".join(lines)


# ============================================================================ calibration on measured runs


def stage_times_from_spans(stages: Sequence[StageInfo], spans: Mapping[str, Sequence[float]]) -> list[StageInfo]:
    """``stages`` with each forward and backward time replaced by the median of the measured spans.

    Args:
        stages: per-stage byte counts (e.g. :func:`~.partition.stage_infos` of a profile); their times are replaced.
        spans: ``"<stage><F|B>"`` (``"0F"``, ``"1B"``, ...) -> the compute seconds of every such action measured
            (waits for inputs are not part of a span).

    Raises:
        InputError: a stage has no measured forward or backward span.
    """
    out = []
    for info in stages:
        times = []
        for kind in "FB":
            values = list(spans.get(f"{info.stage}{kind}", []))
            if not values:
                raise InputError(f"calibrate: no measured {'forward' if kind == 'F' else 'backward'} action of "
                                 f"stage {info.stage}")
            times.append(statistics.median(values))
        out.append(replace(info, forward_s=times[0], backward_s=times[1]))
    return out


@dataclass
class Calibration:
    """The simulator's machine constants fitted on measured updates (see :func:`calibrate`)."""

    stages: list[StageInfo]
    """the stages with their measured forward and backward seconds per micro-batch."""
    overhead_s: float
    """fixed time per update outside the pipeline's actions (``simulate(update_overhead_s=...)``)."""
    corun_slowdown: float
    """factor by which a stage slows while the other ranks compute too (``simulate(corun_slowdown=...)``)."""

    def as_dict(self) -> dict:
        return {"overhead_s": self.overhead_s, "corun_slowdown": self.corun_slowdown,
                "stages": [asdict(s) for s in self.stages]}


def calibrate(stages: Sequence[StageInfo], spans: Mapping[str, Sequence[float]], overheads: Sequence[float], *,
              step_s: float | None = None, schedule: str = "mast", micro_batches: int = 1, eta: int = 1,
              groups: int = 1, micro_batch: int = 1, bandwidth: float = 1e10, latency: float = 2e-5,
              allreduce_bandwidth: float | None = None) -> Calibration:
    """Fit the simulator's machine constants on measured updates, to predict other configurations.

    Three constants: each stage's forward and backward time (the median of the measured ``spans``), the fixed
    time per update outside the actions (the median of ``overheads``), and the co-run slowdown, found by
    bisection in [1, 4] as the factor that makes the simulated update of (``schedule``, ``micro_batches``,
    ``eta``, ``groups``) as long as ``step_s``.  The spans should come from a run whose ranks never compute at
    once (GPipe with one micro-batch: benchmarks/gems.py fits on it and on MAST's update time); spans from a run
    that overlaps already hold the slowdown, and the fit then gives about 1.  Without ``step_s``, or where the
    simulated update does not depend on the slowdown (GPipe with one micro-batch, one stage), it is 1.

    Args:
        stages: per-stage bytes (their times are replaced), ``P`` entries.
        spans: ``"<stage><F|B>"`` -> measured compute seconds of each such action.
        overheads: per measured update, seconds outside the actions (time before rank 0's first action plus the
            shortest time after a rank's last action: slicing, the optimizer step, the loss reduction).
        step_s: the measured time per update of the configuration the slowdown is fitted on.
        schedule, micro_batches, eta, groups, micro_batch: that configuration.
        bandwidth, allreduce_bandwidth, latency: the link, bytes/s and seconds per message.

    Returns:
        a :class:`Calibration`.

    Raises:
        InputError: no overheads, a stage without spans, or a non-positive ``step_s``.
    """
    base = stage_times_from_spans(stages, spans)
    if not overheads:
        raise InputError("calibrate: no measured updates (overheads is empty)")
    overhead = statistics.median(overheads)
    if step_s is None:
        return Calibration(base, overhead, 1.0)
    if step_s <= 0:
        raise InputError(f"calibrate: step_s = {step_s} must be > 0")
    kw = dict(eta=eta, groups=groups, micro_batch=micro_batch, bandwidth=bandwidth, latency=latency,
              allreduce_bandwidth=allreduce_bandwidth, update_overhead_s=overhead)
    if simulate(base, schedule, micro_batches, corun_slowdown=4.0, **kw).step_s \
            <= simulate(base, schedule, micro_batches, **kw).step_s * (1 + 1e-9):
        return Calibration(base, overhead, 1.0)  # no overlap: the slowdown cannot be seen in this configuration
    lo, hi = 1.0, 4.0  # the simulated update grows with the slowdown: bisect
    if simulate(base, schedule, micro_batches, **kw).step_s >= step_s:
        hi = 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if simulate(base, schedule, micro_batches, corun_slowdown=mid, **kw).step_s < step_s:
            lo = mid
        else:
            hi = mid
    return Calibration(base, overhead, hi)


def calibration_from_run(run_dir: str | Path, profile: BlockProfile, *, bandwidth: float, latency: float,
                         allreduce_bandwidth: float | None = None) -> Calibration:
    """:func:`calibrate` on a measured gems run folder (``runs/gems/<id>``, written by :func:`~.commands.train`).

    Its ``summary.json`` gives the schedule, sizes, the stage split and every timed update's action spans and
    time outside the actions; its ``metrics.jsonl`` the time of each update (the median after
    ``train.warmup_steps`` is the update time the co-run slowdown is fitted to).

    Args:
        run_dir: the run folder.
        profile: a profile of the run's model (its byte counts; the run's own split is used).

    Raises:
        InputError: the folder has no summary.json or metrics.jsonl, was written before runs recorded their
            action times, or split a model with another number of blocks than ``profile``.
    """
    import json

    run_dir = Path(run_dir)
    summary_path, metrics_path = run_dir / "summary.json", run_dir / "metrics.jsonl"
    for path in (summary_path, metrics_path):
        if not path.is_file():
            raise InputError(f"--calibrate {run_dir}: {path.name} not found (a gems run folder is runs/gems/<id>)")
    try:
        summary = json.loads(summary_path.read_text())
        rows = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"--calibrate {run_dir}: cannot read its JSON ({exc})") from None
    if not isinstance(summary, dict) or not all(isinstance(r, dict) and "step_s" in r for r in rows):
        raise InputError(f"--calibrate {run_dir}: summary.json is not a gems summary or metrics.jsonl holds a line "
                         "without step_s (the run's files are damaged)")
    times = summary.get("update_times")
    if not times or not times.get("overhead_s"):
        raise InputError(f"--calibrate {run_dir}: summary.json has no measured action times (update_times); the "
                         "run is older than calibration or had no update after train.warmup_steps")
    bounds = [tuple(b) for b in summary["bounds"]]
    if bounds[-1][1] != len(profile.forward_s):
        raise InputError(f"--calibrate {run_dir}: the run's model has {bounds[-1][1]} blocks, the config's "
                         f"{len(profile.forward_s)} (pass --config {run_dir / 'config.yaml'})")
    stages = stage_infos(profile, bounds)
    warmup = len(rows) - len(times["overhead_s"])
    if warmup < 0:  # the updates timed in summary.json are more than metrics.jsonl holds: cut or damaged
        raise InputError(f"--calibrate {run_dir}: metrics.jsonl holds {len(rows)} update(s), fewer than the "
                         f"{len(times['overhead_s'])} timed in summary.json (the file was cut or damaged)")
    step_s = statistics.median(r["step_s"] for r in rows[warmup:])
    return calibrate(stages, times["spans"], times["overhead_s"], step_s=step_s, schedule=summary["schedule"],
                     micro_batches=summary["micro_batches"], eta=summary["eta"], groups=summary["groups"],
                     micro_batch=summary["micro_batch"], bandwidth=bandwidth, latency=latency,
                     allreduce_bandwidth=allreduce_bandwidth)


def _check_calibration_model(run_dir: str | Path, cfg) -> None:
    """The run calibrated on trained the model the config describes (its ``config.yaml``'s model section):
    another width or kind would mix that run's times with this model's memory.

    Raises:
        InputError: the first model option that differs, both values, and the flag that takes the run's.
    """
    import dataclasses

    from torchhpc.ext.core.config import load_config

    from .config import GemsConfig

    saved = Path(run_dir) / "config.yaml"
    if not saved.is_file():
        return
    try:
        run_model = dataclasses.asdict(load_config(GemsConfig, saved).model)
    except TorchHPCError:
        return  # calibration_from_run names what is wrong with the run
    mine = dataclasses.asdict(cfg.model)
    for key, value in run_model.items():
        if mine.get(key) != value:
            raise InputError(f"--calibrate {run_dir}: the run trained model.{key} = {value!r}, the config has "
                             f"{mine.get(key)!r} (pass --config {saved})")


def predict(cfg: GemsSimulate) -> tuple[list[SimResult], str]:
    """``gems simulate``: profile the configured blocks and simulate every schedule of ``simulate.schedules`` on
    every device count of ``simulate.devices`` (``pipeline.stages`` per group, ``devices / stages`` groups;
    MASTER with ``pipeline.eta``, at least 2).  With ``simulate.calibrate`` the stage times, the time per update
    outside the pipeline and the co-run slowdown are fitted on that run (:func:`calibration_from_run`) instead.

    Returns:
        the results and a one-line description of their inputs.

    Raises:
        InputError: a device count that is not a multiple of ``pipeline.stages``; see
            :func:`calibration_from_run`.
    """
    import torch

    from .training import profile, sample_shape, stage_bounds

    opt, p = cfg.simulate, cfg.pipeline
    torch.set_num_threads(cfg.dist.threads or torch.get_num_threads())
    for n in opt.device_counts:
        if n % p.stages:
            raise InputError(f"--devices {n} is not a multiple of pipeline.stages = {p.stages}")
    from torchhpc.ext.core.device import pick_device

    dev = pick_device(cfg.dist.device)
    prof = profile(cfg, device=dev)
    link = dict(bandwidth=opt.bandwidth * 1e9, latency=opt.latency * 1e-6,
                allreduce_bandwidth=(opt.allreduce_bandwidth or opt.bandwidth) * 1e9)
    infos = stage_infos(prof, stage_bounds(cfg, prof))
    corun, overhead = opt.corun_slowdown, opt.overhead_ms * 1e-3
    what = (f"stages from profiling {cfg.model.kind}-{cfg.model.depth} at {sample_shape(cfg)}, micro-batch "
            f"{prof.micro_batch}, on {dev}; link {opt.bandwidth} GB/s, {opt.latency} us")
    if opt.calibrate:
        _check_calibration_model(opt.calibrate, cfg)
        cal = calibration_from_run(opt.calibrate, prof, **link)
        infos, corun, overhead = cal.stages, cal.corun_slowdown, cal.overhead_s
        what = (f"stages and machine calibrated on {opt.calibrate}: forward / backward "
                + ", ".join(f"{i.forward_s * 1e3:.2f} / {i.backward_s * 1e3:.2f} ms" for i in infos)
                + f", {overhead * 1e3:.2f} ms per update outside the pipeline, co-run slowdown {corun:.3f} "
                f"(profiled on {dev}); link {opt.bandwidth} GB/s, {opt.latency} us")
    rows = []
    for n in opt.device_counts:
        for schedule in opt.schedule_names:
            eta = max(p.eta, 2) if schedule == "master" else 1
            rows.append(simulate(infos, schedule, p.micro_batches, eta=eta, groups=n // p.stages,
                                 micro_batch=cfg.micro_batch, corun_slowdown=corun, update_overhead_s=overhead,
                                 **link))
    return rows, what
