"""The ``torchhpc sched`` commands, one function each: ``train`` (:func:`train_command`), ``heuristics``
(:func:`heuristics_command`), ``eval`` (:func:`eval_command`) and ``export`` (:func:`export_command`).

They own what the algorithms leave out: the run folder, the printed tables and JSON, and torchrun (``sched
train --nproc N`` relaunches itself on ``N`` ranks).  :func:`train` is the training job as a library call
(the demo and the benchmark use it): it returns the run's summary.

The PPO steps are :mod:`torchhpc.ext.sched.ppo` (called through the module, ``ppo.policy_update``, so that a
test can watch them), the checkpoints :mod:`torchhpc.ext.sched.checkpoints`, the shipped policies
:mod:`torchhpc.ext.sched.zoo`.  The CLI imports this module to register the commands and ``torchhpc --help``
must not wait for torch, so the modules that import it are imported by the functions that use them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from torchhpc.ext.core.config import ConfigError
from torchhpc.ext.core.errors import InputError, warn
from torchhpc.ext.core.launch import relaunch
from torchhpc.ext.core.runs import Run, open_run

from .config import (
    AUTO_DEVICE,
    EnvOptions,
    EvalCommandOptions,
    ExportOptions,
    HeuristicsOptions,
    SchedConfig,
    WindowOptions,
)
from .episodes import VecBatchScheduling
from .evaluate import (
    draw_starts,
    draw_validation_starts,
    evaluate_heuristic,
    evaluate_policy,
    log_ratio_reward,
    mean_ratio,
    summarise,
    windows_better,
)
from .heuristics import HEURISTICS, make_key
from .report import box_plot, metrics_table, window_starts, window_trace
from .simulator import ClusterSimulator
from .swf import SchedTrace
from .traces import load_sched_trace

if TYPE_CHECKING:
    import torch

    from torchhpc.ext.core.distributed import DistContext

    from .modules import SchedulingAgent

#: the module torchrun runs for ``sched train --nproc N``
TRAIN_MODULE = "torchhpc.trainers.sched"


# ----------------------------------------------------------------------------- sched train


def train_command(cfg: SchedConfig) -> int:
    """``torchhpc sched train``: train a policy with PPO (:func:`train`); with ``--nproc N`` (N > 1) on N
    torchrun ranks of this machine, each collecting its share of the trajectories, after :func:`check_train`
    has checked in this process what the ranks would otherwise find (so a bad trace or option is one line
    before torchrun starts).  An option that the others make moot (:meth:`SchedConfig.ignored_options`) is
    one warning line each, once the job is known to start."""
    from torchhpc.ext.core.distributed import launched_by_torchrun

    if cfg.dist.nproc > 1 and not launched_by_torchrun():
        check_train(cfg, cfg.dist.nproc)
        warn_ignored_options(cfg)  # once, here, once the job is known to start (not again by each rank)
        return relaunch(cfg, TRAIN_MODULE, cfg.dist.nproc)
    train(cfg)
    return 0


def warn_ignored_options(cfg: SchedConfig) -> None:
    """One warning line for each option of ``cfg`` another setting makes moot
    (:meth:`~torchhpc.ext.sched.config.SchedConfig.ignored_options`)."""
    from torchhpc.ext.core.errors import warn

    for line in cfg.ignored_options():
        warn(line)


def check_train(cfg: SchedConfig, world: int) -> None:
    """What :func:`train` on ``world`` ranks checks before it trains, without a process group and without
    writing anything: the trace reads and its windows fit (:func:`check_trace_fits`), the trajectories split
    over the ranks (:func:`check_world`), the held-out windows can be drawn, and the run folder can be used
    (a new run's is not taken, a resumed one exists).

    Raises:
        InputError: an unreadable or malformed trace; a run folder that cannot be used.
        ConfigError: windows or groups that do not fit.
    """
    from torchhpc.ext.core.runs import already_holds_a_run, holds_a_run

    trace = build_trace(cfg)
    check_trace_fits(cfg, trace)
    check_world(cfg, world)
    E = cfg.eval
    if E.validate:
        draw_validation_starts(trace, E.validate, E.validate_length, E.validate_seed, E.starts, E.length)
    R = cfg.run
    folder = Path(R.root) / "sched" / R.run_id if R.run_id else None
    if R.resume and (folder is None or not folder.is_dir()):
        raise InputError(f"cannot resume: run folder {folder or Path(R.root) / 'sched' / '<run.run_id>'} does not "
                         f"exist" + ("" if folder else " (give run.run_id)"))
    if not R.resume and folder is not None and holds_a_run(folder):
        raise InputError(already_holds_a_run(folder))


def check_world(cfg: SchedConfig, world: int) -> None:
    """The trajectories of an epoch split into whole groups (``ppo.groups_of``) on each of ``world`` ranks.

    Raises:
        ConfigError: naming ``ppo.trajectories`` and the group size.
    """
    P = cfg.ppo
    if P.groups_of > 1 and P.trajectories % (P.groups_of * world):
        raise ConfigError(f"ppo.trajectories ({P.trajectories}) must split into whole groups of "
                          f"{P.groups_of} on each of the {world} ranks")


def build_trace(cfg: SchedConfig) -> SchedTrace:
    """The trace of ``cfg.trace`` (an SWF file, or the generated Lublin trace)."""
    t = cfg.trace
    return load_sched_trace(t.path, t.procs, t.generate_jobs, t.generate_seed, t.strict)


def check_trace_fits(cfg: SchedConfig, trace: SchedTrace) -> None:
    """The training sequences and the evaluation windows of ``cfg`` fit ``trace`` (checked before training).

    Raises:
        ConfigError: naming the option whose window does not fit, and the trace's length.
    """
    E, J = cfg.eval, len(trace)
    n = J if cfg.env.job_slice <= 0 else min(cfg.env.job_slice, J)
    has = f"the trace {trace.name} has {J} jobs"
    if cfg.env.sequence_length > n:
        used = f" (env.job_slice={cfg.env.job_slice} keeps {n})" if n < J else ""
        raise ConfigError(f"env.sequence_length={cfg.env.sequence_length} does not fit: {has}{used}")
    if not E.starts:
        raise ConfigError("eval.starts is empty: give at least one window start")
    for s0 in E.starts:
        if s0 < 0 or s0 + E.length > J:
            raise ConfigError(f"eval.starts: the window [{s0}, {s0 + E.length}) of eval.length={E.length} jobs "
                              f"does not fit: {has}")
    if E.validate and E.validate_length > J:
        raise ConfigError(f"eval.validate_length={E.validate_length} does not fit: {has}")


@dataclass
class Learner:
    """What a PPO run carries from one epoch to the next, and saves in each checkpoint."""

    agent: SchedulingAgent
    pi_opt: torch.optim.Optimizer
    v_opt: torch.optim.Optimizer
    vec: VecBatchScheduling
    settings: dict[str, Any]
    """the agent's policy and observation settings (:data:`~torchhpc.ext.sched.checkpoints.AGENT_SETTINGS`)"""
    world: int
    best: dict[str, Any] = field(default_factory=dict)
    """``{"epoch", "value"}`` of the best held-out score so far (empty: none yet)"""
    backfill: str = "none"
    """the backfilling the policy is trained with (``sched eval`` uses it, wherever the checkpoint is copied)"""

    def checkpoint_state(self) -> dict[str, Any]:
        """Everything a resumed run needs to continue exactly as this one would."""
        import torch

        return {"agent": self.agent.state_dict(), "pi_opt": self.pi_opt.state_dict(),
                "v_opt": self.v_opt.state_dict(), "torch_rng": torch.get_rng_state(),
                "env_rng": self.vec.rng_states(), **self.settings, "best": self.best, "world_size": self.world,
                "backfill": self.backfill}


def start_learner(cfg: SchedConfig, trace: SchedTrace, settings: dict[str, Any], n_envs: int, ctx: DistContext,
                  resumed: dict[str, Any] | None, run_id: str) -> Learner:
    """The agent, its optimisers and this rank's rollout episodes: new ones seeded by ``cfg.seed``, or as the
    checkpoint state ``resumed`` left them (weights, optimisers, torch's random state, best score; the episodes'
    window draws are restored after their first reset, in :func:`train`)."""
    import torch

    from .checkpoints import from_checkpoint, new_agent

    vec = VecBatchScheduling(n_envs, seed=cfg.seed + 1000 * ctx.rank, autoreset=False, trace=trace,
                             **cfg.env.env_kwargs())
    torch.manual_seed(cfg.seed)
    if resumed is None:
        agent = new_agent(**settings).to(ctx.device)
    else:
        agent = from_checkpoint(resumed, expect=settings, run_id=run_id, device=ctx.device)
    learner = Learner(agent, torch.optim.Adam(agent.actor.parameters(), lr=cfg.ppo.pi_lr),
                      torch.optim.Adam(agent.critic.parameters(), lr=cfg.ppo.vf_lr), vec, settings, ctx.world_size,
                      backfill=cfg.env.backfill)
    if resumed is not None:
        learner.pi_opt.load_state_dict(resumed["pi_opt"])
        learner.v_opt.load_state_dict(resumed["v_opt"])
        torch.set_rng_state(resumed["torch_rng"])
        learner.best = dict(resumed.get("best", {}))
    return learner


def imitation_warm_start(cfg: SchedConfig, agent: SchedulingAgent, trace: SchedTrace, run: Run,
                         device: torch.device, verbose: bool) -> None:
    """The behaviour-cloning warm start (``ppo.imitate``), recorded in the summary."""
    from .imitation import behaviour_clone, collect_demonstrations

    P = cfg.ppo
    t_bc = time.time()
    demo_starts = draw_starts(trace, P.imitate_sequences, cfg.env.sequence_length, cfg.seed + 12345)
    demos = collect_demonstrations(trace, P.imitate, demo_starts, cfg.env.sequence_length, cfg.env.backfill,
                                   cfg.env.queue_slots, metric=cfg.env.metric, **cfg.env.observation())
    bc = behaviour_clone(agent, demos, P.imitate_epochs, lr=P.imitate_lr, seed=cfg.seed, device=device)
    bc["seconds"] = round(time.time() - t_bc, 1)
    run.write_summary({"imitation": {"heuristic": P.imitate, **bc}})
    if verbose:
        print(f"warm start: imitated {P.imitate} on {bc['samples']} decisions, "
              f"accuracy {bc['accuracy']:.3f} ({bc['seconds']} s)")


def broadcast_weights(agent: SchedulingAgent, ctx: DistContext) -> None:
    """Rank 0's weights on every rank (the ranks start from one policy)."""
    if ctx.initialized:
        import torch.distributed as dist

        for p in agent.parameters():
            dist.broadcast(p.data, src=0)


def heuristic_metric(sim: ClusterSimulator, start: int, length: int, heuristic: str, metric: str) -> float:
    """``metric`` of ``heuristic``'s schedule of the ``length`` jobs from ``start`` (``sim`` is reused)."""
    sim.reset(start, length)
    return sim.run_policy(make_key(heuristic, sim)).get(metric)


def shaped_reward(env: EnvOptions, sim: ClusterSimulator, reward: float, metrics: dict, start: int) -> float:
    """A finished sequence's reward: ``env.reward=raw``, the env's own; ``log_ratio``, the log of how much better
    than ``env.reward_reference`` on the same jobs (positive = better), so every sequence's return has one
    scale."""
    if env.reward == "raw":
        return reward
    reference = heuristic_metric(sim, start, env.sequence_length, env.reward_reference, env.metric)
    return log_ratio_reward(env.metric, metrics[env.metric], reference)


def mean_over_ranks(values: list[float], ctx: DistContext) -> float:
    """The mean of every rank's ``values`` together."""
    return ctx.mean(float(np.mean(values)), len(values))


def ppo_epoch(cfg: SchedConfig, learner: Learner, epoch: int, per_rank: int, baseline_sim: ClusterSimulator,
              ctx: DistContext) -> dict[str, Any]:
    """One PPO epoch: this rank's ``per_rank`` trajectories, the policy and value updates; the epoch's training
    figures, averaged over ranks (one row of ``metrics.jsonl``)."""
    import torch

    from . import ppo

    P, metric, agent, G = cfg.ppo, cfg.env.metric, learner.agent, cfg.ppo.groups_of
    t0 = time.time()
    agent.eval()
    ro = ppo.collect_rollout(agent, learner.vec, per_rank, G,
                             terminal_reward=partial(shaped_reward, cfg.env, baseline_sim), device=ctx.device)
    t_roll = time.time() - t0
    agent.train()
    b = ppo.make_batch(ro, P.gamma, P.lam, G, ctx=ctx, device=ctx.device)
    gen = torch.Generator().manual_seed(cfg.seed * 7919 + epoch * 31 + ctx.rank)
    pi = ppo.policy_update(agent, learner.pi_opt, b, clip=P.clip, target_kl=P.target_kl, iters=P.pi_iters,
                           kl_backtrack=P.kl_backtrack, minibatch=P.minibatch, gen=gen, ctx=ctx)
    loss_v = ppo.value_update(agent, learner.v_opt, b, iters=P.v_iters if G == 1 else 0,  # the group baseline:
                              minibatch=P.minibatch, gen=gen, ctx=ctx)                    # no critic
    t_epoch = time.time() - t0
    world = ctx.world_size
    ep_metrics = [tr.metrics for tr in ro.trajectories]
    row = {"epoch": epoch + 1, "train_bsld": mean_over_ranks([mm["bsld"] for mm in ep_metrics], ctx),
           "sequences": round(ctx.mean(float(len(set(ro.starts)))) * world), **pi,
           "loss_v": ctx.mean(loss_v, len(b)), "decisions": ro.decisions * world,
           "decisions_per_s": ro.decisions / max(t_roll, 1e-9), "rollout_s": t_roll, "epoch_s": t_epoch}
    if metric != "bsld":
        row[f"train_{metric}"] = mean_over_ranks([mm[metric] for mm in ep_metrics], ctx)
    if cfg.log_baselines:
        for h in ("sjf", "f1"):
            row[f"train_{h}_bsld"] = mean_over_ranks(
                [heuristic_metric(baseline_sim, s0, cfg.env.sequence_length, h, "bsld") for s0 in ro.starts], ctx)
    return row


def eval_window_scores(cfg: SchedConfig, agent: SchedulingAgent, trace: SchedTrace, settings: dict[str, Any],
                       device: torch.device) -> dict[str, float]:
    """The agent's mean metrics on the evaluation windows (``eval.starts``), as ``eval`` samples or argmaxes."""
    E = cfg.eval
    return summarise(evaluate_policy(agent, trace, E.starts, E.length, cfg.env.backfill, greedy=E.greedy,
                                     samples=E.samples, seed=cfg.seed, settings=settings, device=device))


def held_out_score(cfg: SchedConfig, agent: SchedulingAgent, trace: SchedTrace, starts: list[int],
                   settings: dict[str, Any], device: torch.device) -> float:
    """The greedy policy's ``env.metric`` on the held-out windows (``eval.validate``)."""
    return summarise(evaluate_policy(agent, trace, starts, cfg.eval.validate_length, cfg.env.backfill, greedy=True,
                                     samples=1, seed=0, settings=settings, device=device))[cfg.env.metric]


def save_epoch_checkpoints(run: Run, learner: Learner, epoch: int, ctx: DistContext) -> None:
    """The epoch's checkpoints: this rank's (a shard per rank under torchrun, plus rank 0's copy that ``sched
    eval`` loads), and the ``best`` one when the held-out score just improved."""
    state = learner.checkpoint_state()
    if learner.best.get("epoch") == epoch:
        run.save_checkpoint(state, epoch, name="best", keep=1)  # rank 0 writes
    run.save_checkpoint(state, epoch, shard=ctx.rank if ctx.world_size > 1 else None)
    if ctx.rank == 0 and ctx.world_size > 1:
        run.save_checkpoint(state, epoch)


def train(cfg: SchedConfig, verbose: bool = True) -> dict:
    """Train a policy with PPO; returns the summary (also written to the run folder).

    Before anything is trained the training sequences and evaluation windows are checked against the trace.
    Resuming (``run.resume``) reads and checks the run before writing to it: the newest epoch whose checkpoint
    reads on every rank is used (a damaged newer one is reported in one warning line), and a finished run
    (``summary.json`` written, no epoch left) is left as it is.

    Raises:
        ConfigError: trajectories that do not split into whole groups on each rank; windows that do not fit the
            trace; resuming with other policy/observation settings, environments per rank or ranks.
        InputError: resuming a run none of whose checkpoints reads.
    """
    import torch

    from torchhpc.ext.core.distributed import distributed, launched_by_torchrun

    from .checkpoints import from_checkpoint, newest_checkpoint, resume_point

    if cfg.dist.threads:
        torch.set_num_threads(cfg.dist.threads)
    with distributed(device=cfg.dist.device, timeout_s=cfg.dist.timeout_s, auto=AUTO_DEVICE) as ctx:
        rank, world, device = ctx.rank, ctx.world_size, ctx.device
        # ---------------------------------------------------------------- check, then open (or resume) the run
        trace = build_trace(cfg)
        check_trace_fits(cfg, trace)  # before the run folder exists, and long before any training
        P, E, metric = cfg.ppo, cfg.eval, cfg.env.metric
        settings = {"policy": P.policy, "queue_slots": cfg.env.queue_slots, **cfg.env.observation()}
        n_envs = min(P.num_envs, max(1, P.trajectories // world))
        check_world(cfg, world)
        val_starts = (draw_validation_starts(trace, E.validate, E.validate_length, E.validate_seed, E.starts,
                                             E.length) if E.validate else [])
        # a resumed run is read and checked before anything in its folder is written
        run = open_run("sched", None if cfg.run.resume else cfg, cfg.run, ctx)
        loaded = resume_point(run, settings, n_envs, ctx) if cfg.run.resume else None
        if cfg.run.resume and loaded is None and rank == 0:
            warn(f"run {run.run_id} has no checkpoint to resume from: training starts at epoch 0")
        start_epoch, resumed = loaded if loaded is not None else (0, None)
        summary_path = run.dir / "summary.json"
        if resumed is not None and start_epoch >= P.epochs and summary_path.exists():
            if rank == 0 and verbose:
                print(f"run {run.run_id} is already finished (epoch {start_epoch}, ppo.epochs={P.epochs}); "
                      f"nothing to do (raise ppo.epochs to train it further)")
            return json.loads(summary_path.read_text())
        if rank == 0 and verbose and not launched_by_torchrun():  # a relaunched job's parent said it already
            warn_ignored_options(cfg)
        if cfg.run.resume:
            run.save_config(cfg)
            run.truncate_metrics(start_epoch)
        learner = start_learner(cfg, trace, settings, n_envs, ctx, resumed, run.run_id)
        if P.imitate and start_epoch == 0 and rank == 0:
            imitation_warm_start(cfg, learner.agent, trace, run, device, verbose)
        broadcast_weights(learner.agent, ctx)
        baseline_sim = ClusterSimulator(trace, cfg.env.backfill)
        per_rank = P.trajectories // world + (1 if rank < P.trajectories % world else 0)
        learner.vec.reset()  # the first reset seeds each episode's window draws; later resets continue its stream
        if resumed is not None:
            learner.vec.set_rng_states(resumed["env_rng"])
        if P.epochs == 0 and start_epoch == 0:  # the imitated / untrained prior policy, for `sched eval`
            run.save_checkpoint(learner.checkpoint_state(), 0)
        # ---------------------------------------------------------------- epochs
        last_eval: dict = {}
        t_train0 = time.time()
        for epoch in run.progress(range(start_epoch, P.epochs), desc="PPO epochs", initial=start_epoch,
                                  total=P.epochs):
            row = ppo_epoch(cfg, learner, epoch, per_rank, baseline_sim, ctx)
            final = epoch + 1 == P.epochs
            if (E.every and (epoch + 1) % E.every == 0) or final:
                last_eval = eval_window_scores(cfg, learner.agent, trace, settings, device)
                row["eval_bsld"] = last_eval["bsld"]
            if val_starts and ((epoch + 1) % E.validate_every == 0 or final):
                val = held_out_score(cfg, learner.agent, trace, val_starts, settings, device)
                row[f"val_{metric}"] = val
                best = learner.best
                if not best or (val > best["value"] if metric.startswith("util") else val < best["value"]):
                    learner.best = {"epoch": epoch + 1, "value": val}
            run.log(epoch + 1, **row)
            save_epoch_checkpoints(run, learner, epoch + 1, ctx)
        # ---------------------------------------------------------------- summary
        best = learner.best
        summary: dict = {"epochs": P.epochs, "train_seconds": round(time.time() - t_train0, 1), "world_size": world}
        if best:
            summary["best"] = {"epoch": best["epoch"], f"val_{metric}": best["value"],
                               "validation_starts": val_starts, "validation_length": E.validate_length,
                               "validation_heuristics": {
                                   h: summarise(evaluate_heuristic(trace, h, val_starts, E.validate_length,
                                                                   cfg.env.backfill))[metric]
                                   for h in E.heuristics}}
        if last_eval:
            summary["eval"] = {"rl": last_eval}
            kept = newest_checkpoint(run.ckpt_dir, "best") if best and rank == 0 else None
            if kept is not None:
                summary["eval"]["rl_best"] = eval_window_scores(cfg, from_checkpoint(kept[1], device=device), trace,
                                                                settings, device)
            for h in E.heuristics:
                summary["eval"][h] = summarise(evaluate_heuristic(trace, h, E.starts, E.length, cfg.env.backfill))
        rows = run.metrics()
        if rows:
            summary["final_train_bsld"] = rows[-1].get("train_bsld")
        run.write_summary(summary)
        run.plot_metrics(["train_bsld", "train_sjf_bsld", "train_f1_bsld", "eval_bsld", "val_bsld"],
                         "learning_curve.png", x="epoch", ylabel="average bounded slowdown", logy=True)
        if rank == 0 and verbose:
            print(f"run folder: {run.dir}")
            if best:
                heur = ", ".join(f"{h} {v:.2f}" for h, v in summary["best"]["validation_heuristics"].items())
                print(f"best held-out {metric} {best['value']:.2f} at epoch {best['epoch']} ({heur}); "
                      f"`sched eval` uses that checkpoint")
            if last_eval:
                print(metrics_table(summary["eval"]))
        return summary


# ----------------------------------------------------------------------------- sched heuristics


def heuristics_command(opts: HeuristicsOptions) -> int:
    """``torchhpc sched heuristics``: each heuristic's mean metrics over the windows, as a table (or JSON)."""
    trace = window_trace(opts)
    starts = window_starts(opts, trace)
    names = opts.policy or list(HEURISTICS)
    results = {name: summarise(evaluate_heuristic(trace, name, starts, opts.length, opts.backfill)) for name in names}
    if opts.json:
        print(json.dumps(results))
    else:
        print(f"{trace.name}: {len(trace)} jobs, {trace.procs_total} procs, backfill={opts.backfill}, "
              f"{len(starts)} window(s) of {opts.length} jobs (mean over windows)")
        print(metrics_table(results))
    return 0


# ----------------------------------------------------------------------------- sched eval


def policy_source(spec: str, which: str = "best") -> tuple[int, dict[str, Any], Path, str | None]:
    """``(epoch, state, folder for plots, backfilling it was trained with or None)`` of a ``--checkpoint`` value: a
    run folder, a checkpoint file, or ``pretrained:NAME`` (a shipped policy; plots go to
    ``runs/sched/pretrained-NAME``).  The backfilling is the checkpoint's record, else the run's config.yaml's.

    Raises:
        InputError: no such run, file or shipped policy, or an unreadable checkpoint.
    """
    import yaml

    from .checkpoints import load_checkpoint
    from .zoo import PREFIX, card, is_pretrained, load_pretrained

    if is_pretrained(spec):
        name = spec[len(PREFIX):]
        step, state = load_pretrained(name)
        info = card(name)
        return step, state, Path("runs/sched") / f"pretrained-{name}", (info.get("setting") or {}).get(
            "backfill", "none")
    step, state, out_dir = load_checkpoint(spec, which)
    backfill = state.get("backfill")  # recorded in the checkpoint; before that, only in the run's config.yaml
    if isinstance(state.get("agent"), dict) and not any(k.startswith("critic.") for k in state["agent"]):
        # a policy written by `sched export --folder DIR`: its actor, and its card beside it
        from .zoo import with_untrained_critic

        state = with_untrained_critic(state)
        card = Path(spec).with_suffix(".json")
        if backfill is None and card.is_file():
            try:
                backfill = ((json.loads(card.read_text()) or {}).get("setting") or {}).get("backfill")
            except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
                backfill = None
    cfg = Path(out_dir) / "config.yaml"
    if backfill is None and cfg.is_file():
        try:
            backfill = (yaml.safe_load(cfg.read_text()) or {}).get("env", {}).get("backfill", "none")
        except (yaml.YAMLError, AttributeError, UnicodeDecodeError):
            backfill = None
    return step, state, Path(out_dir), backfill


def trained_trace(spec: str, out_dir: Path) -> dict[str, Any] | None:
    """The ``trace`` section a policy was trained with (``path``, ``procs``, ``strict``, ``generate_jobs``,
    ``generate_seed``): from the run's config.yaml (a relative path as it was given, from the folder the run was
    trained in), or a shipped policy's card, whose file is the one of that name in the shared data's ``swf``
    folder; None where neither records it."""
    import yaml

    from .zoo import PREFIX, card, is_pretrained

    try:
        if is_pretrained(spec):
            section = (card(spec[len(PREFIX):]).get("config") or {}).get("trace")
        else:
            cfg = out_dir / "config.yaml"
            section = (yaml.safe_load(cfg.read_text()) or {}).get("trace") if cfg.is_file() else None
    except (yaml.YAMLError, AttributeError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(section, dict):
        return None
    if section.get("path") and is_pretrained(spec):
        from torchhpc.ext.core.data import shared_data_dir

        section = {**section, "path": str(shared_data_dir() / "swf" / Path(section["path"]).name)}
    return section


def eval_trace_options(opts: EvalCommandOptions, out_dir: Path) -> tuple[EvalCommandOptions, str]:
    """``opts`` with the trace the policy was trained on where none is chosen, and where the trace came from:
    ``given``, ``as trained`` or ``generated``.

    ``--trace`` chooses a file. ``--generate-jobs``/``--trace-seed`` choose a generated trace, the one left
    unset as the policy's generated trace had it (else 10,000 jobs, seed 0). Without any of them: the SWF file
    the policy was trained on (read leniently if it was), or its generated trace; with no record of either (a
    loose checkpoint file), the default generated trace, with a warning.

    Raises:
        InputError: the recorded SWF file is not there (give ``--trace``).
        ConfigError: ``--lenient`` where no SWF file is read.
    """
    import dataclasses

    if opts.trace:
        return opts, "given"
    defaults = WindowOptions()
    recorded = trained_trace(opts.checkpoint, out_dir) or {}
    path = recorded.get("path")
    asked = opts.generate_jobs is not None or opts.trace_seed is not None
    if path and not asked:
        if not Path(path).is_file():
            where = "" if Path(path).is_absolute() else " (a path from the folder it was trained in)"
            raise InputError(f"the policy was trained on the trace {path}{where}, which is not here: give "
                             "--trace FILE, or --generate-jobs N to evaluate on a generated trace")
        procs = opts.procs if opts.procs is not None else recorded.get("procs")
        lenient = opts.lenient or recorded.get("strict") is False
        return dataclasses.replace(opts, trace=str(Path(path).resolve()), procs=procs, lenient=lenient), "as trained"
    if opts.lenient:
        raise ConfigError("--lenient would be ignored: it skips malformed lines of an SWF trace, and no --trace is "
                          "given or recorded (a generated trace has none)")
    generated = {} if path else recorded
    jobs = opts.generate_jobs if opts.generate_jobs is not None else generated.get("generate_jobs")
    seed = opts.trace_seed if opts.trace_seed is not None else generated.get("generate_seed")
    source = "given" if asked else "as trained" if isinstance(jobs, int) and isinstance(seed, int) else "generated"
    jobs = jobs if isinstance(jobs, int) else defaults.generate_jobs
    seed = seed if isinstance(seed, int) else defaults.trace_seed
    if source == "generated":
        warn(f"{opts.checkpoint}: no record of the trace the policy was trained on (no config.yaml beside it): "
             f"evaluating on a generated trace of {jobs} jobs, seed {seed}; give --trace or --generate-jobs")
    return dataclasses.replace(opts, generate_jobs=jobs, trace_seed=seed), source


def eval_command(opts: EvalCommandOptions) -> int:
    """``torchhpc sched eval``: the checkpoint's policy beside the heuristics on the windows; prints the table (or
    JSON), the windows won, the paired bootstrap ratio, and writes the box plot (``--plot``, else beside the run).
    Without a trace option the windows come from the trace the policy was trained on, where that is recorded.

    Raises:
        InputError: no run folder or checkpoint file at ``opts.checkpoint``, or an unreadable one; a box plot
            path that cannot be written or is an input (checked before the windows are scheduled).
    """
    from torchhpc.ext.core.paths import check_output

    from .checkpoints import agent_settings, from_checkpoint
    from .zoo import is_pretrained

    folder = not is_pretrained(opts.checkpoint) and Path(opts.checkpoint).is_dir()
    if opts.which != "best" and not folder:
        raise ConfigError(f"--which {opts.which} would be ignored: it picks among a run folder's checkpoints, and "
                          f"{opts.checkpoint} is {'a shipped policy' if is_pretrained(opts.checkpoint) else 'one file'}")
    step, state, out_dir, trained_backfill = policy_source(opts.checkpoint, opts.which)
    if not opts.backfill and trained_backfill is None:
        warn(f"{opts.checkpoint}: the backfilling the policy was trained with is unknown (neither its checkpoint nor "
             "a readable config.yaml beside it records it): evaluating without backfilling; give --backfill")
    backfill = opts.backfill or trained_backfill or "none"
    opts, trace_from = eval_trace_options(opts, out_dir)
    agent = from_checkpoint(state)
    trace = window_trace(opts)
    starts = window_starts(opts, trace)
    # the box plot's path, checked before the windows are scheduled (nothing is created until it is written)
    if opts.plot:
        from matplotlib.backend_bases import FigureCanvasBase

        kinds = FigureCanvasBase.get_supported_filetypes()
        if Path(opts.plot).suffix.lower().lstrip(".") not in kinds:
            raise InputError(f"--plot {opts.plot}: the file name must end in one of .{', .'.join(sorted(kinds))} "
                             "(the box plot's format)")
    import re

    tag = f"_{opts.which}" if folder else "" if is_pretrained(opts.checkpoint) else f"_{Path(opts.checkpoint).stem}"
    name = re.sub(r"_+", "_", re.sub(r"[^\w.-]+", "_", f"eval_{trace.name}_{backfill}{tag}"))  # no spaces or ()
    png = check_output(Path(opts.plot) if opts.plot else out_dir / f"{name}.png",
                       inputs=[opts.trace, opts.checkpoint], what="the box plot")
    if not opts.json:
        print(f"checkpoint: epoch {step}" + (
            f" (best held-out {state['best']['value']:.2f} at epoch {state['best']['epoch']})"
            if state.get("best") else "") + f" of {opts.checkpoint}; backfill={backfill}; trace {trace.name}"
            + ((f" (the one it was trained on: {opts.trace})" if opts.trace else " (the one it was trained on)")
               if trace_from == "as trained" else ""))
    rl_rows = evaluate_policy(agent, trace, starts, opts.length, backfill, greedy=opts.greedy,
                              samples=opts.samples, seed=opts.seed, settings=agent_settings(state))
    per_seq = {"rl": rl_rows}
    for name in opts.policy:
        per_seq[name] = evaluate_heuristic(trace, name, starts, opts.length, backfill)
    results = {k: summarise(v) for k, v in per_seq.items()}
    png.parent.mkdir(parents=True, exist_ok=True)
    png = box_plot(per_seq, png, f"{trace.name}, backfill={backfill}, {len(starts)} x {opts.length} jobs")
    if opts.json:
        print(json.dumps(results))
        return 0
    print(metrics_table(results))
    passes = "greedy" if opts.greedy else f"mean of {opts.samples} sampled pass(es) per window"
    wins = ", ".join("{} {}/{}".format(h, *windows_better(rl_rows, rows)) for h, rows in per_seq.items() if h != "rl")
    print(f"windows where RL ({passes}) has the lower bsld: {wins}")
    for h, rows in per_seq.items():
        if h != "rl" and len(starts) > 1:
            r, lo, hi = mean_ratio(rl_rows, rows)
            print(f"RL bsld / {h} bsld: {r:.3f} (95% paired bootstrap interval over the {len(starts)} "
                  f"windows: {lo:.3f}-{hi:.3f})")
    print(f"box plot: {png}")
    return 0


# ----------------------------------------------------------------------------- sched export


def export_command(opts: ExportOptions) -> int:
    """``torchhpc sched export``: score a run's policy on its own test windows and on ``--unseen`` traces, then
    write it with its card (:func:`~torchhpc.ext.sched.zoo.export_policy`).  Prints where it went and the
    headline scores.

    Raises:
        InputError: not a run folder with a checkpoint and its config.yaml; an ``--unseen`` file that cannot be
            read; ``NAME.pt`` or ``NAME.json`` that cannot be written or is one of the inputs (all checked
            before anything is loaded, scored or written).
    """
    import yaml

    from torchhpc.ext.core.paths import check_input, check_output

    from .checkpoints import load_checkpoint
    from .zoo import PRETRAINED_DIR, export_policy, score

    # what it reads, then what it writes (never one of those), checked before anything is loaded or scored
    unseen = [check_input(path, what="--unseen") for path in opts.unseen]
    ck = Path(opts.checkpoint)
    run_root = ck if not ck.is_file() else ck.parent.parent if ck.parent.name == "checkpoints" else ck.parent
    run_files = [ck, run_root / "config.yaml", run_root / "summary.json",
                 *sorted((run_root / "checkpoints").glob("*.pt"))]
    folder = Path(opts.folder) if opts.folder else PRETRAINED_DIR
    for suffix in (".pt", ".json"):
        check_output(folder / f"{opts.name}{suffix}", inputs=[*run_files, *unseen], what="sched export")
    step, state, run_dir = load_checkpoint(opts.checkpoint, opts.which)
    cfg_file = Path(run_dir) / "config.yaml"
    if not cfg_file.is_file():
        raise InputError(f"{run_dir}: no config.yaml (sched export needs a run folder)")
    cfg = yaml.safe_load(cfg_file.read_text())
    backfill, ev = cfg["env"]["backfill"], cfg["eval"]
    own = load_sched_trace(cfg["trace"]["path"], cfg["trace"].get("procs"), cfg["trace"].get("generate_jobs", 10_000),
                           cfg["trace"].get("generate_seed", 0), cfg["trace"].get("strict", True))
    scores: dict[str, Any] = {"own": score(state, own, ev["starts"], ev["length"], backfill), "unseen": []}
    for i, path in enumerate(opts.unseen):
        other = load_sched_trace(path)
        scores["unseen"].append(score(state, other, ev["starts"], ev["length"], backfill))
        if i == 0:  # the check the tests replay: the first unseen trace, the table's windows, greedy
            u = scores["unseen"][0]
            scores["unseen_check"] = {"trace": other.name, "starts": u["starts"], "length": u["length"],
                                      "rl_bsld": u["rl_greedy"]["bsld"]}
    out = export_policy(run_dir, opts.name, opts.which, folder, scores, opts.command, opts.notes)
    o = scores["own"]
    print(f"wrote {out} and {out.with_suffix('.json').name} (epoch {step})")
    for label in ("greedy", "sampled"):
        r, lo, hi = o[f"rl_{label}"]["ratio_to_best"]
        print(f"{o['trace']} backfill={backfill}: RL {label} {o[f'rl_{label}']['bsld']:.2f}, best heuristic "
              f"{o['best_heuristic']} {o['heuristics'][o['best_heuristic']]:.2f}, ratio {r:.3f} [{lo:.3f}, {hi:.3f}]")
    for u in scores["unseen"]:
        r, lo, hi = u["rl_greedy"]["ratio_to_best"]
        print(f"unseen {u['trace']}: RL greedy {u['rl_greedy']['bsld']:.2f}, best heuristic {u['best_heuristic']} "
              f"{u['heuristics'][u['best_heuristic']]:.2f}, ratio {r:.3f} [{lo:.3f}, {hi:.3f}]")
    return 0


__all__ = [
    "Learner", "build_trace", "check_train", "check_trace_fits", "check_world", "eval_command", "export_command",
    "heuristics_command", "policy_source", "train", "train_command", "warn_ignored_options",
]
