"""sched: RLScheduler — PPO training of the kernel policy, evaluation, and the heuristics table.

    torchhpc sched heuristics --trace lublin_256.swf --starts published --length 1024
    torchhpc sched train --config configs/sched/lublin1.yaml [--set ppo.epochs=50]
    torchrun --standalone --nproc-per-node 2 -m torchhpc.trainers.sched --config configs/sched/debug.yaml
    torchhpc sched eval --checkpoint runs/sched/<id> --trace lublin_256.swf --starts published

PPO follows the paper's settings (SpinningUp style): one epoch = ``ppo.trajectories``
sampled sequences; full-batch updates, up to ``pi_iters`` policy steps with early
stop when the approximate KL exceeds 1.5 × ``target_kl``, ``v_iters`` value steps;
γ = 1 and GAE λ = 0.97, so with the terminal reward every step's return is
the sequence's −bsld.  Under torchrun each rank collects its share of the
trajectories and gradients are averaged over ranks (gloo on CPU).

``ppo.advantage=group`` (not in the paper) replaces the critic: ``ppo.group_size``
trajectories schedule the same job window, and each one's advantage (at every
step) is its reward minus the mean reward of the others in its group, so the
difficulty of the window cancels and only the effect of the sampled actions is left.

``ppo.kl_backtrack=K`` (not in the paper) makes the KL early stop a bound: the step
that took the approximate KL past 1.5 × ``target_kl`` is halved up to K times until
the KL is back under it, or undone. Without it that step is kept, and with a large
``pi_lr`` one Adam step can reach a KL of 0.5 and start a collapse.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from torchhpc.ext.core.config import ConfigError, add_config_arguments, load_config, option

from .common import ArgumentParser, RunOptions, add_common_arguments, parse_and_run

PUBLISHED = "1981,2756,4299,8850,3316,2714,5228,7762,4022,7085"
BACKFILLS = ["none", "rlscheduler", "easy"]
METRIC_CHOICES = ["bsld", "wait", "turnaround", "slowdown", "util", "util_rlscheduler"]


# ============================================================================ config


@dataclass
class TraceOptions:
    """Which jobs to schedule."""

    path: str | None = option(None, help="SWF trace file; null = a generated Lublin–Feitelson trace")
    procs: int | None = option(None, help="machine size override (default: the trace header)", ge=1)
    strict: bool = option(True, help="fail on malformed SWF lines (false: skip and count them)")
    generate_jobs: int = option(10_000, help="jobs of the generated trace", ge=100)
    generate_seed: int = option(0, help="seed of the generated trace", ge=0)


@dataclass
class EnvOptions:
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


@dataclass
class PPOOptions:
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


@dataclass
class EvalOptions:
    """Evaluation on fixed windows (the paper's protocol by default)."""

    every: int = option(0, help="evaluate every N epochs (0 = only at the end)", ge=0)
    starts: list[int] = option(default_factory=lambda: [int(s) for s in PUBLISHED.split(",")],
                               help="window starts (job indices)")
    length: int = option(1024, help="jobs per evaluation window", ge=2)
    heuristics: list[str] = option(default_factory=lambda: ["fcfs", "sjf", "f1"], help="heuristics shown beside RL")
    greedy: bool = option(False, help="argmax actions (the paper samples)")
    samples: int = option(1, help="sampled evaluations averaged per window (different sampling seeds)", ge=1)
    validate: int = option(0, help="held-out windows (outside the test windows) on which the greedy policy is "
                           "scored to keep the best checkpoint; 0 = off (sched eval then uses the last)", ge=0)
    validate_length: int = option(512, help="jobs per held-out window", ge=2)
    validate_every: int = option(5, help="score the held-out windows every N epochs (and at the end)", ge=1)
    validate_seed: int = option(2020, help="seed of the held-out window draw", ge=0)


@dataclass
class SchedConfig:
    """RLScheduler training job."""

    trace: TraceOptions = option(default_factory=TraceOptions, help="trace")
    env: EnvOptions = option(default_factory=EnvOptions, help="environment")
    ppo: PPOOptions = option(default_factory=PPOOptions, help="PPO")
    eval: EvalOptions = option(default_factory=EvalOptions, help="evaluation")
    seed: int = option(0, help="seed of weights, sequence draws and sampling", ge=0)
    device: str = option("cpu", help="cpu | cuda | auto (the simulator is CPU-bound; cpu is usually best)",
                         choices=["cpu", "cuda", "auto"])
    threads: int = option(0, help="torch threads per rank (0 = torch's default)", ge=0)
    log_baselines: bool = option(True, help="log SJF/F1 bsld on every training sequence (the paper's ShowRet)")
    run: RunOptions = option(default_factory=RunOptions, help="run folder")

    def __post_init__(self) -> None:
        from torchhpc.ext.sched.heuristics import HEURISTICS

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


# ============================================================================ PPO


def build_trace(cfg: SchedConfig):
    from torchhpc.ext.sched.swf import load_sched_trace

    t = cfg.trace
    return load_sched_trace(t.path, t.procs, t.generate_jobs, t.generate_seed, t.strict)


class _Windows:
    """Which job window each env schedules during one epoch's rollout.

    With groups of ``G`` envs (``ppo.advantage=group``), env ``i`` with ``i % G == 0`` draws a window
    and the next ``G - 1`` envs replay it; all of them take the same number of decisions, so a group
    finishes together and its leader (the lowest index) is restarted first.
    """

    def __init__(self, envs, group_size: int) -> None:
        self.envs, self.G = envs, group_size
        self.start = [0] * len(envs)  # each env's current window
        self.group = [0] * len(envs)  # each env's current group
        self.starts: list[int] = []  # every window started this epoch
        self.started = self.groups = 0

    def begin(self, i: int) -> None:
        if i % self.G == 0:
            _, info = self.envs[i].reset()
            self.group[i] = self.groups
            self.groups += 1
        else:
            lead = i - i % self.G
            _, info = self.envs[i].reset(options={"start": self.start[lead]})
            self.group[i] = self.group[lead]
        self.start[i] = info["start"]
        self.starts.append(info["start"])
        self.started += 1


def train(cfg: SchedConfig, verbose: bool = True) -> dict:
    """Train a policy with PPO; returns the summary (also written to the run folder)."""
    import numpy as np
    import torch
    import torch.distributed as dist

    from torchhpc.envs.sched import BatchSchedulingEnv
    from torchhpc.ext.core.distributed import distributed
    from torchhpc.ext.core.runs import Run
    from torchhpc.ext.sched.evaluate import (
        draw_validation_starts,
        evaluate_agent,
        evaluate_heuristic,
        leave_one_out_advantage,
        log_ratio_reward,
        summarise,
    )
    from torchhpc.ext.sched.heuristics import make_key
    from torchhpc.ext.sched.modules import SchedulingAgent
    from torchhpc.ext.sched.simulator import ClusterSimulator

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    with distributed(device=cfg.device, timeout_s=600) as ctx:
        rank, world, device = ctx.rank, ctx.world_size, ctx.device
        run_id_list = [cfg.run.run_id]
        if ctx.initialized:  # every rank must agree on the run folder
            if ctx.is_main and run_id_list[0] is None:
                from torchhpc.ext.core.runs import new_run_id

                run_id_list[0] = new_run_id()
            dist.broadcast_object_list(run_id_list, src=0)
        run = Run("sched", cfg, root=cfg.run.root, run_id=run_id_list[0], resume=cfg.run.resume, rank=rank,
                  progress=cfg.run.progress)
        trace = build_trace(cfg)
        # what shapes the observation: the same for the envs, evaluation, imitation and the checkpoint
        obs = dict(time_scale=cfg.env.time_scale, prior=cfg.env.prior, context=cfg.env.context)
        env_kwargs = dict(
            trace=trace, backfill=cfg.env.backfill, metric=cfg.env.metric, sequence_length=cfg.env.sequence_length,
            queue_slots=cfg.env.queue_slots, job_slice=cfg.env.job_slice, filter_heuristic=cfg.env.filter_heuristic,
            filter_range=(cfg.env.filter_low, cfg.env.filter_high), **obs,
        )
        P = cfg.ppo
        n_envs = min(P.num_envs, max(1, P.trajectories // world))
        G = P.group_size if P.advantage == "group" else 1
        if G > 1 and P.trajectories % (G * world):
            raise ConfigError(f"ppo.trajectories ({P.trajectories}) must split into whole groups of "
                              f"{G} on each of the {world} ranks")
        envs = [BatchSchedulingEnv(**env_kwargs) for _ in range(n_envs)]
        torch.manual_seed(cfg.seed)
        F = envs[0].observer.features
        agent = SchedulingAgent(P.policy, cfg.env.queue_slots, F, prior=bool(cfg.env.prior),
                                empty_slot=envs[0].observer.empty_slot).to(device)
        pi_opt = torch.optim.Adam(agent.actor.parameters(), lr=P.pi_lr)
        v_opt = torch.optim.Adam(agent.critic.parameters(), lr=P.vf_lr)
        start_epoch = 0
        env_states = None
        E = cfg.eval
        val_starts = (draw_validation_starts(trace, E.validate, E.validate_length, E.validate_seed, E.starts, E.length)
                      if E.validate else [])
        maximise = cfg.env.metric.startswith("util")
        best: dict = {}  # {"epoch", "value"} of the best held-out score so far
        if cfg.run.resume:
            loaded = run.load_checkpoint(shard=rank if world > 1 else None)
            if loaded is not None:
                start_epoch, state = loaded
                saved = {"policy": P.policy, "queue_slots": cfg.env.queue_slots, **obs}
                for k, now in saved.items():
                    was = state.get(k, {"time_scale": "linear", "context": False}.get(k))
                    if was != now:
                        section = "ppo" if k == "policy" else "env"
                        was, now = (v if isinstance(v, str) else json.dumps(v) for v in (was, now))
                        raise ConfigError(f"run {run.run_id} was trained with {section}.{k}={was}; resume it with "
                                          f"the same setting (not {now}) or start a new run")
                agent.load_state_dict(state["agent"])
                pi_opt.load_state_dict(state["pi_opt"])
                v_opt.load_state_dict(state["v_opt"])
                torch.set_rng_state(state["torch_rng"])
                env_states = state["env_rng"]
                best = dict(state.get("best", {}))
                run.truncate_metrics(start_epoch)
        if P.imitate and start_epoch == 0 and rank == 0:
            from torchhpc.ext.sched.evaluate import draw_starts
            from torchhpc.ext.sched.imitation import behaviour_clone, collect_demonstrations

            t_bc = time.time()
            demo_starts = draw_starts(trace, P.imitate_sequences, cfg.env.sequence_length, cfg.seed + 12345)
            demos = collect_demonstrations(trace, P.imitate, demo_starts, cfg.env.sequence_length,
                                           cfg.env.backfill, cfg.env.queue_slots, metric=cfg.env.metric, **obs)
            bc = behaviour_clone(agent, demos, P.imitate_epochs, lr=P.imitate_lr, seed=cfg.seed, device=device)
            bc["seconds"] = round(time.time() - t_bc, 1)
            run.write_summary({"imitation": {"heuristic": P.imitate, **bc}})
            if verbose:
                print(f"warm start: imitated {P.imitate} on {bc['samples']} decisions, "
                      f"accuracy {bc['accuracy']:.3f} ({bc['seconds']} s)")
        if ctx.initialized:
            for p in agent.parameters():
                dist.broadcast(p.data, src=0)
        baseline_sim = ClusterSimulator(trace, cfg.env.backfill)
        S = cfg.env.queue_slots
        per_rank = P.trajectories // world + (1 if rank < P.trajectories % world else 0)

        def allreduce_grads(params):
            if not ctx.initialized:
                return
            for p in params:
                if p.grad is not None:
                    dist.all_reduce(p.grad)
                    p.grad /= world

        def relative_reward(reward: float, metrics: dict, start: int) -> float:
            """``raw``: the env's reward; ``log_ratio``: log of how much better than the reference
            heuristic on the same jobs (positive = better), so every sequence's return has one scale."""
            if cfg.env.reward == "raw":
                return reward
            baseline_sim.reset(start, cfg.env.sequence_length)
            ref = baseline_sim.run_policy(make_key(cfg.env.reward_reference, baseline_sim)).get(cfg.env.metric)
            return log_ratio_reward(cfg.env.metric, metrics[cfg.env.metric], ref)

        def global_mean(x: float, n: int = 1) -> float:
            if not ctx.initialized:
                return x
            t = torch.tensor([x * n, float(n)], dtype=torch.float64)
            dist.all_reduce(t)
            return float(t[0] / t[1])

        # first reset seeds each env's np_random; later resets continue its stream
        for i, env in enumerate(envs):
            env.reset(seed=cfg.seed + 1000 * rank + i)
            if env_states is not None:
                env.np_random.bit_generator.state = env_states[i]

        def backtrack_step(params, before, kl_before, batch_kl, limit) -> tuple[float, float]:
            """Shrink the last step (``before`` -> now) by halves until ``batch_kl()`` is within ``limit``;
            undo it when ``ppo.kl_backtrack`` halvings are not enough. Returns (KL, fraction of the step kept)."""
            after = [p.detach().clone() for p in params]
            frac = 1.0
            for _ in range(P.kl_backtrack):
                frac /= 2
                with torch.no_grad():
                    for p, a, b in zip(params, before, after, strict=True):
                        p.copy_(a + frac * (b - a))
                kl = batch_kl()
                if kl <= limit:
                    return kl, frac
            with torch.no_grad():
                for p, a in zip(params, before, strict=True):
                    p.copy_(a)
            return kl_before, 0.0

        def checkpoint_state(best: dict) -> dict:
            return {"agent": agent.state_dict(), "pi_opt": pi_opt.state_dict(), "v_opt": v_opt.state_dict(),
                    "torch_rng": torch.get_rng_state(),
                    "env_rng": [env.np_random.bit_generator.state for env in envs],
                    "policy": P.policy, "queue_slots": cfg.env.queue_slots, **obs,
                    "best": best}

        if P.epochs == 0 and start_epoch == 0:  # the imitated / untrained prior policy, for `sched eval`
            run.save_checkpoint(checkpoint_state(best), 0)
        last_eval: dict = {}
        t_train0 = time.time()
        epochs = range(start_epoch, P.epochs)
        for epoch in run.progress(epochs, desc="PPO epochs", initial=start_epoch, total=P.epochs):
            t0 = time.time()
            # ---------------------------------------------------------------- rollout
            agent.eval()
            buf_q, buf_m, buf_a, buf_logp, buf_adv, buf_ret = [], [], [], [], [], []
            ep_metrics = []
            traj = [dict(q=[], m=[], a=[], logp=[], v=[]) for _ in envs]
            queue = np.zeros((n_envs, S, F), dtype=np.float32)
            mask = np.zeros((n_envs, S), dtype=np.int8)
            visible: list[list[int]] = [[] for _ in envs]
            active = []
            windows = _Windows(envs, G)
            cur_start, ep_starts = windows.start, windows.starts
            traj_group: list[int] = []  # per finished trajectory: its group (advantage=group)
            traj_reward: list[float] = []
            for i, env in enumerate(envs):
                if windows.started < per_rank:
                    windows.begin(i)
                    visible[i] = env.observer.observe(env.sim, queue[i], mask[i])
                    env._visible = visible[i]
                    active.append(i)
            decisions = 0
            while active:
                q = torch.from_numpy(queue[active]).to(device)
                m = torch.from_numpy(mask[active].astype(bool)).to(device)
                actions, logps, values = agent.act(q, m)
                actions, logps, values = actions.cpu().numpy(), logps.cpu().numpy(), values.cpu().numpy()
                still = []
                for k, i in enumerate(active):
                    tr = traj[i]
                    tr["q"].append(queue[i].copy())
                    tr["m"].append(mask[i].astype(bool))
                    tr["a"].append(int(actions[k]))
                    tr["logp"].append(float(logps[k]))
                    tr["v"].append(float(values[k]))
                    env = envs[i]
                    reward, done, info = env.apply(int(actions[k]))
                    decisions += 1
                    if done:
                        # GAE over the finished trajectory: reward only at the end
                        v = np.asarray(tr["v"] + [0.0], dtype=np.float64)
                        r = np.zeros(len(tr["v"]), dtype=np.float64)
                        r[-1] = relative_reward(reward, info["metrics"], cur_start[i])
                        traj_group.append(windows.group[i])
                        traj_reward.append(r[-1])
                        delta = r + P.gamma * v[1:] - v[:-1]
                        adv = np.zeros_like(delta)
                        ret = np.zeros_like(delta)
                        acc_a = acc_r = 0.0
                        for t in range(len(delta) - 1, -1, -1):
                            acc_a = delta[t] + P.gamma * P.lam * acc_a
                            acc_r = r[t] + P.gamma * acc_r
                            adv[t], ret[t] = acc_a, acc_r
                        buf_q.append(np.stack(tr["q"]))
                        buf_m.append(np.stack(tr["m"]))
                        buf_a.append(np.asarray(tr["a"]))
                        buf_logp.append(np.asarray(tr["logp"], dtype=np.float32))
                        buf_adv.append(adv.astype(np.float32))
                        buf_ret.append(ret.astype(np.float32))
                        ep_metrics.append(info["metrics"])
                        traj[i] = dict(q=[], m=[], a=[], logp=[], v=[])
                        if windows.started < per_rank:
                            windows.begin(i)
                        else:
                            continue
                    visible[i] = env.observer.observe(env.sim, queue[i], mask[i])
                    env._visible = visible[i]
                    still.append(i)
                active = still
            t_roll = time.time() - t0
            if G > 1:  # leave-one-out group baseline: every step of a trajectory gets the same advantage
                adv_traj = leave_one_out_advantage(traj_reward, traj_group)
                buf_adv = [np.full(len(a), adv_traj[k], dtype=np.float32) for k, a in enumerate(buf_a)]
            # ---------------------------------------------------------------- update
            agent.train()
            b_q = torch.from_numpy(np.concatenate(buf_q)).to(device)
            b_m = torch.from_numpy(np.concatenate(buf_m)).to(device)
            b_a = torch.from_numpy(np.concatenate(buf_a)).to(device)
            b_logp = torch.from_numpy(np.concatenate(buf_logp)).to(device)
            b_adv = torch.from_numpy(np.concatenate(buf_adv)).to(device)
            b_ret = torch.from_numpy(np.concatenate(buf_ret)).to(device)
            n = b_a.numel()
            mean = global_mean(float(b_adv.mean()), n)
            var = global_mean(float(((b_adv - mean) ** 2).mean()), n)
            b_adv = (b_adv - mean) / (var**0.5 + 1e-8)
            mb = P.minibatch or n
            gen = torch.Generator().manual_seed(cfg.seed * 7919 + epoch * 31 + rank)

            def batches(n=n, mb=mb, gen=gen):
                if mb >= n:
                    yield slice(None)
                    return
                perm = torch.randperm(n, generator=gen)
                for s in range(0, n, mb):
                    yield perm[s:s + mb]

            pi_steps, kl, kl_before, step_kept = 0, 0.0, 0.0, 1.0
            kl_limit = 1.5 * P.target_kl
            params = list(agent.actor.parameters())
            before_step = None  # the actor's weights before the last step (kl_backtrack)

            def batch_kl(idx, q=b_q, m=b_m, a=b_a, logp_old=b_logp) -> float:
                with torch.no_grad():
                    logp = agent.distribution(q[idx], m[idx]).log_prob(a[idx])
                return global_mean(float((logp_old[idx] - logp).mean()))

            stop = False
            for _ in range(P.pi_iters):
                for idx in batches():
                    dist_ = agent.distribution(b_q[idx], b_m[idx])
                    logp = dist_.log_prob(b_a[idx])
                    ratio = torch.exp(logp - b_logp[idx])
                    adv = b_adv[idx]
                    loss_pi = -torch.min(ratio * adv, torch.clamp(ratio, 1 - P.clip, 1 + P.clip) * adv).mean()
                    kl = global_mean(float((b_logp[idx] - logp).detach().mean()))
                    if kl > kl_limit:
                        stop = True
                        if P.kl_backtrack and before_step is not None:
                            kl, step_kept = backtrack_step(params, before_step, kl_before,
                                                           lambda idx=idx: batch_kl(idx), kl_limit)
                        break
                    if P.kl_backtrack:
                        before_step, kl_before = [p.detach().clone() for p in params], kl
                    pi_opt.zero_grad()
                    loss_pi.backward()
                    allreduce_grads(agent.actor.parameters())
                    pi_opt.step()
                    pi_steps += 1
                if stop:
                    break
            loss_v = torch.tensor(0.0)
            for _ in range(P.v_iters if G == 1 else 0):  # the group baseline needs no critic
                for idx in batches():
                    loss_v = ((agent.value(b_q[idx], b_m[idx]) - b_ret[idx]) ** 2).mean()
                    v_opt.zero_grad()
                    loss_v.backward()
                    allreduce_grads(agent.critic.parameters())
                    v_opt.step()
            t_epoch = time.time() - t0
            # ---------------------------------------------------------------- log
            bsld = global_mean(float(np.mean([mm["bsld"] for mm in ep_metrics])), len(ep_metrics))
            windows_seen = round(global_mean(float(len(set(ep_starts)))) * world)
            row = {"epoch": epoch + 1, "train_bsld": bsld, "sequences": windows_seen, "pi_steps": pi_steps, "approx_kl": kl,
                   "step_kept": step_kept,
                   "loss_v": float(loss_v.detach()), "decisions": decisions * world,
                   "decisions_per_s": decisions / max(t_roll, 1e-9), "rollout_s": t_roll, "epoch_s": t_epoch}
            if cfg.env.metric != "bsld":
                row[f"train_{cfg.env.metric}"] = global_mean(
                    float(np.mean([mm[cfg.env.metric] for mm in ep_metrics])), len(ep_metrics))
            if cfg.log_baselines:
                for h in ("sjf", "f1"):
                    vals = []
                    for s0 in ep_starts:
                        baseline_sim.reset(s0, cfg.env.sequence_length)
                        vals.append(baseline_sim.run_policy(make_key(h, baseline_sim)).bsld)
                    row[f"train_{h}_bsld"] = global_mean(float(np.mean(vals)), len(vals))
            final = epoch + 1 == P.epochs
            if (cfg.eval.every and (epoch + 1) % cfg.eval.every == 0) or final:
                res = summarise([row for k in range(1 if cfg.eval.greedy else cfg.eval.samples)
                                 for row in evaluate_agent(agent, trace, cfg.eval.starts, cfg.eval.length,
                                                           cfg.env.backfill, greedy=cfg.eval.greedy, seed=cfg.seed + k,
                                                           queue_slots=cfg.env.queue_slots, device=device,
                                                           **obs)])
                row["eval_bsld"] = res["bsld"]
                last_eval = res
            if val_starts and ((epoch + 1) % E.validate_every == 0 or final):
                val = summarise(evaluate_agent(agent, trace, val_starts, E.validate_length, cfg.env.backfill,
                                               greedy=True, queue_slots=cfg.env.queue_slots, device=device,
                                               **obs))[cfg.env.metric]
                row[f"val_{cfg.env.metric}"] = val
                improved = not best or (val > best["value"] if maximise else val < best["value"])
                if improved:
                    best = {"epoch": epoch + 1, "value": val}
            run.log(epoch + 1, **row)
            # ---------------------------------------------------------------- checkpoint
            state = checkpoint_state(best)
            if best.get("epoch") == epoch + 1:
                run.save_checkpoint(state, epoch + 1, name="best", keep=1)  # rank 0 writes
            run.save_checkpoint(state, epoch + 1, shard=rank if world > 1 else None)
            if rank == 0 and world > 1:
                run.save_checkpoint(state, epoch + 1)  # rank 0's copy is what `sched eval` loads
        summary: dict = {"epochs": P.epochs, "train_seconds": round(time.time() - t_train0, 1), "world_size": world}
        if best:
            summary["best"] = {"epoch": best["epoch"], f"val_{cfg.env.metric}": best["value"],
                               "validation_starts": val_starts, "validation_length": E.validate_length,
                               "validation_heuristics": {
                                   h: summarise(evaluate_heuristic(trace, h, val_starts, E.validate_length,
                                                                   cfg.env.backfill))[cfg.env.metric]
                                   for h in E.heuristics}}
        if last_eval:
            summary["eval"] = {"rl": last_eval}
            if best and rank == 0:
                loaded = run.load_checkpoint(name="best")
                if loaded is not None:
                    best_agent = SchedulingAgent(P.policy, cfg.env.queue_slots, F, prior=bool(cfg.env.prior),
                                                 empty_slot=envs[0].observer.empty_slot)
                    best_agent = best_agent.to(device)
                    best_agent.load_state_dict(loaded[1]["agent"])
                    summary["eval"]["rl_best"] = summarise(
                        [row for k in range(1 if E.greedy else E.samples)
                         for row in evaluate_agent(best_agent, trace, E.starts, E.length, cfg.env.backfill,
                                                   greedy=E.greedy, seed=cfg.seed + k,
                                                   queue_slots=cfg.env.queue_slots, device=device,
                                                   **obs)])
            for h in cfg.eval.heuristics:
                summary["eval"][h] = summarise(evaluate_heuristic(trace, h, cfg.eval.starts, cfg.eval.length,
                                                                  cfg.env.backfill))
        rows = run.metrics()
        if rows:
            summary["final_train_bsld"] = rows[-1].get("train_bsld")
        run.write_summary(summary)
        run.plot_metrics(["train_bsld", "train_sjf_bsld", "train_f1_bsld", "eval_bsld", "val_bsld"],
                         "learning_curve.png",
                         x="epoch", ylabel="average bounded slowdown", logy=True)
        if rank == 0 and verbose:
            print(f"run folder: {run.dir}")
            if best:
                heur = ", ".join(f"{h} {v:.2f}" for h, v in summary["best"]["validation_heuristics"].items())
                print(f"best held-out {cfg.env.metric} {best['value']:.2f} at epoch {best['epoch']} ({heur}); "
                      f"`sched eval` uses that checkpoint")
            if last_eval:
                print(_table({k: v for k, v in summary["eval"].items()}))
        return summary


# ============================================================================ CLI


def _starts(args, trace) -> tuple[list[int], int]:
    from torchhpc.ext.sched.evaluate import draw_starts

    length = args.length
    if args.start is not None:
        return [args.start], length
    if args.starts:
        text = PUBLISHED if args.starts == "published" else args.starts
        try:
            return [int(x) for x in text.split(",") if x.strip()], length
        except ValueError:
            from torchhpc.ext.core.errors import InputError

            raise InputError(
                f"--starts must be comma-separated job indices or 'published', got {args.starts!r}") from None
    return draw_starts(trace, args.sequences, length, args.seed), length


def _load_trace(args):
    from torchhpc.ext.sched.swf import load_sched_trace

    return load_sched_trace(args.trace, args.procs, args.generate_jobs, args.trace_seed, not args.lenient)


def _table(results: dict[str, dict[str, float]]) -> str:
    cols = ["bsld", "wait", "turnaround", "slowdown", "util", "util_rlscheduler"]
    lines = [f"{'policy':<20}" + "".join(f"{c:>17}" for c in cols)]
    for name, m in results.items():
        lines.append(f"{name:<20}" + "".join(f"{m[c]:>17.2f}" if c in m else f"{'':>17}" for c in cols))
    return "\n".join(lines)


def cmd_heuristics(args: argparse.Namespace) -> int:
    from torchhpc.ext.sched.evaluate import evaluate_heuristic, summarise
    from torchhpc.ext.sched.heuristics import HEURISTICS, make_key  # noqa: F401

    trace = _load_trace(args)
    starts, length = _starts(args, trace)
    names = args.policy or list(HEURISTICS)
    results = {name: summarise(evaluate_heuristic(trace, name, starts, length, args.backfill)) for name in names}
    if args.json:
        print(json.dumps(results))
    else:
        print(f"{trace.name}: {len(trace)} jobs, {trace.procs_total} procs, backfill={args.backfill}, "
              f"{len(starts)} window(s) of {length} jobs (mean over windows)")
        print(_table(results))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    cfg = load_config(SchedConfig, args.config, args.overrides)
    train(cfg)
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from pathlib import Path

    import torch

    from torchhpc.ext.core.errors import InputError
    from torchhpc.ext.core.runs import Run
    from torchhpc.ext.sched.evaluate import (
        evaluate_agent,
        evaluate_heuristic,
        mean_ratio,
        summarise,
        windows_better,
    )
    from torchhpc.ext.sched.modules import SchedulingAgent
    from torchhpc.ext.sched.observation import empty_slot, feature_count

    ck = Path(args.checkpoint)
    if ck.is_dir():
        run = Run("sched", None, root=ck.parent.parent, run_id=ck.name, resume=True)
        loaded = run.load_checkpoint(name="best") if args.which == "best" else None
        if loaded is None:  # no held-out selection in this run: its last checkpoint
            loaded = run.load_checkpoint()
        if loaded is None:
            raise InputError(f"{ck}: no checkpoint in this run folder")
        out_dir = ck
    elif ck.is_file():
        blob = torch.load(ck, map_location="cpu", weights_only=False)
        loaded = (blob["step"], blob["state"])
        out_dir = ck.parent.parent
    else:
        raise InputError(f"{ck}: no such run folder or checkpoint file")
    step, state = loaded
    if not args.json:
        print(f"checkpoint: epoch {step}" + (f" (best held-out {state['best']['value']:.2f} at epoch "
                                             f"{state['best']['epoch']})" if state.get("best") else ""))
    prior, context = state.get("prior"), bool(state.get("context", False))
    agent = SchedulingAgent(state.get("policy", "kernel"), state.get("queue_slots", 128),
                            feature_count(prior is not None, context), prior=prior is not None,
                            empty_slot=empty_slot(prior is not None, context))
    agent.load_state_dict(state["agent"])
    trace = _load_trace(args)
    starts, length = _starts(args, trace)
    rl_rows = []
    for k in range(1 if args.greedy else args.samples):
        rl_rows += evaluate_agent(agent, trace, starts, length, args.backfill, greedy=args.greedy, seed=args.seed + k,
                                  queue_slots=state.get("queue_slots", 128),
                                  time_scale=state.get("time_scale", "linear"), prior=prior, context=context)
    per_seq = {"rl": rl_rows}
    for name in args.policy or ["fcfs", "sjf", "f1"]:
        per_seq[name] = evaluate_heuristic(trace, name, starts, length, args.backfill)
    results = {k: summarise(v) for k, v in per_seq.items()}
    png = _box_plot(per_seq, out_dir / f"eval_{trace.name}_{args.backfill}.png",
                    f"{trace.name}, backfill={args.backfill}, {len(starts)} x {length} jobs")
    if args.json:
        print(json.dumps(results))
    else:
        print(_table(results))
        passes = "greedy" if args.greedy else f"mean of {args.samples} sampled pass(es) per window"
        wins = ", ".join("{} {}/{}".format(h, *windows_better(rl_rows, rows)) for h, rows in per_seq.items()
                         if h != "rl")
        print(f"windows where RL ({passes}) has the lower bsld: {wins}")
        for h, rows in per_seq.items():
            if h != "rl" and len(starts) > 1:
                r, lo, hi = mean_ratio(rl_rows, rows)
                print(f"RL bsld / {h} bsld: {r:.3f} (95% paired bootstrap interval over the {len(starts)} "
                      f"windows: {lo:.3f}-{hi:.3f})")
        print(f"box plot: {png}")
    return 0


def _box_plot(per_seq: dict[str, list[dict[str, float]]], path, title: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=110)
    names = list(per_seq)
    ax.boxplot([[r["bsld"] for r in per_seq[n]] for n in names], tick_labels=names)
    ax.set_yscale("log")
    ax.set_ylabel("average bounded slowdown")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _window_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", default=None, help="SWF file (default: a generated Lublin–Feitelson trace)")
    p.add_argument("--procs", type=int, default=None, help="machine size override")
    p.add_argument("--lenient", action="store_true", help="skip malformed SWF lines instead of failing")
    p.add_argument("--backfill", default="none", choices=BACKFILLS)
    p.add_argument("--start", type=int, default=None, help="evaluate jobs [START, START+LENGTH)")
    p.add_argument("--starts", default=None, help="comma-separated window starts, or 'published'")
    p.add_argument("--length", type=int, default=1024, help="jobs per window (default 1024)")
    p.add_argument("--sequences", type=int, default=10, help="random windows when no start is given")
    p.add_argument("--seed", type=int, default=1, help="seed of the random windows (and of RL sampling)")
    p.add_argument("--generate-jobs", type=int, default=10_000, help="jobs of the generated trace (no --trace)")
    p.add_argument("--trace-seed", type=int, default=0, help="seed of the generated trace (no --trace)")
    p.add_argument("--json", action="store_true", help="print one JSON object {policy: {metric: value}}")
    add_common_arguments(p)


def register(sub) -> None:
    p = sub.add_parser("sched", help="RLScheduler: heuristics, PPO training and evaluation of batch scheduling",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ssub = p.add_subparsers(dest="sched_command", metavar="SUBCOMMAND", parser_class=ArgumentParser)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])
    h = ssub.add_parser("heuristics", help="table of heuristic schedulers' metrics on job windows")
    _window_args(h)
    h.add_argument("--policy", action="append", help="heuristic to run (repeatable; default: all)")
    h.set_defaults(func=cmd_heuristics)
    t = ssub.add_parser("train", help="train the kernel policy with PPO from a config")
    add_config_arguments(t, default=None)
    add_common_arguments(t)
    t.set_defaults(func=cmd_train)
    e = ssub.add_parser("eval", help="a trained policy beside the heuristics, table + box plot")
    e.add_argument("--checkpoint", required=True, help="run folder (runs/sched/<id>) or checkpoint file")
    e.add_argument("--greedy", action="store_true", help="argmax actions (default: sample, as the paper)")
    e.add_argument("--samples", type=int, default=1, help="sampled runs per window, averaged (default 1)")
    e.add_argument("--which", default="best", choices=["best", "last"],
                   help="checkpoint of a run folder: best on the held-out windows (eval.validate; the last one "
                        "when the run has none) or last")
    _window_args(e)
    e.add_argument("--policy", action="append", help="heuristic shown beside RL (default: fcfs, sjf, f1)")
    e.set_defaults(func=cmd_eval)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="torchhpc.trainers.sched", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arguments(p)
    add_common_arguments(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """torchrun entry: ``torchrun ... -m torchhpc.trainers.sched --config FILE [--set k=v]``."""
    return parse_and_run(build_parser, cmd_train, argv)


if __name__ == "__main__":
    sys.exit(main())
