"""PPO for RLScheduler: rollouts through :class:`~torchhpc.envs.sched.VecBatchScheduling`, GAE, the clipped
update with KL early stop (and optional backtracking), checkpoints, and the training loop.

PPO follows the paper's settings (SpinningUp style): one epoch = ``ppo.trajectories`` sampled sequences;
full-batch updates, up to ``pi_iters`` policy steps with early stop when the approximate KL exceeds
1.5 × ``target_kl``, ``v_iters`` value steps; γ = 1 and GAE λ = 0.97, so with the terminal reward every
step's return is the sequence's −bsld.  Under torchrun each rank collects its share of the trajectories and
gradients are averaged over ranks (gloo on CPU).

``ppo.advantage=group`` (not in the paper) replaces the critic: ``ppo.group_size`` trajectories schedule the
same job window, and each one's advantage (at every step) is its reward minus the mean reward of the others
in its group, so the difficulty of the window cancels and only the effect of the sampled actions is left.

``ppo.kl_backtrack=K`` (not in the paper) makes the KL early stop a bound: the step that took the approximate
KL past 1.5 × ``target_kl`` is halved up to K times until the KL is back under it, or undone.  Without it that
step is kept, and with a large ``pi_lr`` one Adam step can reach a KL of 0.5 and start a collapse.

Storage follows CleanRL: index ``[t, i]`` is env ``i``'s decision in round ``t`` (all active envs decide
together in a round); the update's batch lists the finished trajectories in the order they finished, each
one's decisions in order (``b_`` prefixes).
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from torchhpc.ext.core.config import ConfigError
from torchhpc.ext.core.errors import InputError

from .config import SchedConfig
from .evaluate import (
    draw_starts,
    draw_validation_starts,
    evaluate_agent,
    evaluate_heuristic,
    leave_one_out_advantage,
    log_ratio_reward,
    summarise,
)
from .heuristics import make_key
from .modules import SchedulingAgent
from .observation import empty_slot, feature_count
from .simulator import ClusterSimulator

# ----------------------------------------------------------------------------- ranks


def global_mean(x: float, n: int = 1, ctx: Any = None) -> float:
    """The mean of ``x`` over ranks, each weighted by its ``n`` samples (``x`` itself in one process)."""
    if ctx is None or not ctx.initialized:
        return x
    import torch.distributed as dist

    t = torch.tensor([x * n, float(n)], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t[0] / t[1])


def average_gradients(params: Sequence[torch.nn.Parameter], ctx: Any = None) -> None:
    """Replace each gradient by its mean over ranks (nothing in one process)."""
    if ctx is None or not ctx.initialized:
        return
    import torch.distributed as dist

    for p in params:
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= ctx.world_size


# ----------------------------------------------------------------------------- checkpoints

#: what a checkpoint records about the agent, with the value assumed when an older checkpoint lacks it
AGENT_SETTINGS = {"policy": "kernel", "queue_slots": 128, "time_scale": "linear", "prior": None, "context": False}


def agent_settings(state: Mapping[str, Any]) -> dict[str, Any]:
    """The policy and observation settings a checkpoint ``state`` was trained with (see :data:`AGENT_SETTINGS`)."""
    return {k: state.get(k, default) for k, default in AGENT_SETTINGS.items()}


def new_agent(policy: str, queue_slots: int, prior: str | None, context: bool, **_: Any) -> SchedulingAgent:
    """An untrained agent for the observation these settings shape (``(queue_slots, features)``)."""
    return SchedulingAgent(policy, queue_slots, feature_count(prior is not None, context), prior=prior is not None,
                           empty_slot=empty_slot(prior is not None, bool(context)))


def from_checkpoint(
    state: Mapping[str, Any], *, expect: Mapping[str, Any] | None = None, run_id: str | None = None,
    device: str | torch.device = "cpu",
) -> SchedulingAgent:
    """The agent a checkpoint ``state`` holds: built for its recorded settings, with its weights.

    Args:
        state: a checkpoint's state (``Run.load_checkpoint(...)[1]``), with ``agent`` and the settings of
            :data:`AGENT_SETTINGS`.
        expect: settings the caller will use the agent with (resuming a run): each must equal the recorded one.
        run_id: names the run in the error.
        device: where the agent goes.

    Raises:
        ConfigError: a setting in ``expect`` differs from the checkpoint's, naming the option
            (``env.context``, ``ppo.policy``, ...) — instead of a state_dict shape mismatch.
    """
    saved = agent_settings(state)
    for k, now in (expect or {}).items():
        if saved[k] != now:
            section = "ppo" if k == "policy" else "env"
            was, now_ = (v if isinstance(v, str) else json.dumps(v) for v in (saved[k], now))
            raise ConfigError(f"run {run_id} was trained with {section}.{k}={was}; resume it with the same "
                              f"setting (not {now_}) or start a new run")
    agent = new_agent(**saved)
    try:
        agent.load_state_dict(state["agent"])
    except (RuntimeError, KeyError, TypeError, AttributeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        raise InputError(f"checkpoint{f' of run {run_id}' if run_id else ''}: the agent weights do not fit "
                         f"its recorded settings ({first})") from None
    return agent.to(device)


_CKPT_NAME = re.compile(r"^(?P<name>ckpt|best)-(?P<step>\d{8})(?:\.rank(?P<shard>\d+))?\.pt$")


def warn(message: str) -> None:
    """One warning line on stderr (``torchhpc: warning: ...``)."""
    print(f"torchhpc: warning: {message}", file=sys.stderr, flush=True)


def read_checkpoint(path: str | Path) -> tuple[int, dict[str, Any]]:
    """``(epoch, state)`` of one sched checkpoint file.

    Raises:
        InputError: naming the file and what is wrong with it: empty, not a checkpoint at all, truncated or
            damaged, a checkpoint of something else.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such checkpoint file")
    with open(p, "rb") as fh:
        head = fh.read(4)
    if not head:
        raise InputError(f"{p}: empty file, not a checkpoint")
    try:
        blob = torch.load(p, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's input, not our bug
        if head.startswith(b"PK"):  # torch's zip format: the file was cut short or overwritten
            raise InputError(f"{p}: checkpoint is truncated or damaged ({exc.__class__.__name__})") from None
        raise InputError(f"{p}: not a checkpoint (torch cannot read it: {exc.__class__.__name__})") from None
    if not isinstance(blob, dict) or "step" not in blob or not isinstance(blob.get("state"), dict):
        raise InputError(f"{p}: not a torchhpc checkpoint (expected keys 'step' and 'state')")
    if "agent" not in blob["state"]:
        raise InputError(f"{p}: not a sched checkpoint (no agent weights in it)")
    return int(blob["step"]), blob["state"]


def checkpoint_files(folder: Path, name: str = "ckpt", shard: int | None = None) -> list[tuple[int, Path]]:
    """``(epoch, file)`` of the checkpoints ``name`` (``ckpt`` or ``best``) of ``shard`` in ``folder``,
    newest first."""
    if not folder.is_dir():
        return []
    found = []
    for f in folder.iterdir():
        m = _CKPT_NAME.match(f.name)
        if m and m["name"] == name and (int(m["shard"]) if m["shard"] is not None else None) == shard:
            found.append((int(m["step"]), f))
    return sorted(found, reverse=True)


def newest_intact(
    folder: Path, name: str = "ckpt", shard: int | None = None, *, report: bool = True,
) -> tuple[int, dict[str, Any], Path] | None:
    """The newest checkpoint of ``folder`` that reads (``(epoch, state, file)``), skipping damaged newer
    ones with one warning line (``report``); ``None`` when there is none.

    Raises:
        InputError: checkpoints exist but none of them reads.
    """
    damaged: list[str] = []
    for _, f in checkpoint_files(folder, name, shard):
        try:
            step, state = read_checkpoint(f)
        except InputError as exc:
            damaged.append(str(exc))
            continue
        if damaged and report:
            more = f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""
            warn(f"{damaged[0]}{more}; using {f.name} (epoch {step}), the newest intact checkpoint")
        return step, state, f
    if damaged:
        raise InputError(f"{damaged[0]}; no intact checkpoint in {folder}" if len(damaged) == 1 else
                         f"no intact checkpoint in {folder}: {damaged[0]} (and {len(damaged) - 1} more)")
    return None


def load_checkpoint(path: str | Path, which: str = "best") -> tuple[int, dict[str, Any], Path]:
    """``(epoch, state, run folder)`` of a run folder's checkpoint (``which``: ``best`` on the held-out
    windows, the last one when the run kept none; or ``last``) or of a checkpoint file.

    In a run folder a damaged newest checkpoint is reported (one warning line) and the newest intact one is used;
    a damaged ``best`` checkpoint falls back to the newest intact last one, also with a warning.

    Raises:
        InputError: no such folder or file, no checkpoint in the folder, or a file that is not a checkpoint.
    """
    ck = Path(path)
    if ck.is_dir():
        folder = ck / "checkpoints"
        loaded = None
        if which == "best":
            try:
                loaded = newest_intact(folder, "best")
            except InputError as exc:
                warn(f"{exc}; using the newest intact last checkpoint instead")
        if loaded is None:  # no held-out selection in this run (or it is damaged): its last checkpoint
            loaded = newest_intact(folder)
        if loaded is None:
            raise InputError(f"{ck}: no checkpoint in this folder (expected a sched run folder with "
                             f"checkpoints/ckpt-*.pt, or a checkpoint file)")
        return loaded[0], loaded[1], ck
    if ck.is_file():  # runs/sched/<id>/checkpoints/<file>: plots go to the run folder
        step, state = read_checkpoint(ck)
        return step, state, ck.parent.parent if ck.parent.name == "checkpoints" else ck.parent
    raise InputError(f"{ck}: no such run folder or checkpoint file")


# ----------------------------------------------------------------------------- rollout


@dataclass
class Trajectory:
    """One finished sequence: env ``env`` decided in rounds ``first .. last`` (inclusive)."""

    env: int
    first: int
    last: int
    group: int
    start: int
    metrics: dict[str, float]
    reward: float

    @property
    def length(self) -> int:
        return self.last - self.first + 1


@dataclass
class Rollout:
    """One epoch's decisions on one rank; ``T`` rounds of ``N`` envs, ``S`` slots of ``F`` features.

    Arrays (index ``[t, i]``: env ``i`` in round ``t``; entries where ``valid`` is false are padding):
        queue (T, N, S, F) float32, mask (T, N, S) bool, actions (T, N) int64, logp (T, N) float32,
        values (T, N) float32, rewards (T, N) float64 (the terminal reward at a trajectory's last round,
        0 elsewhere), dones (T, N) bool (a trajectory ended at this round), valid (T, N) bool.
    """

    queue: np.ndarray
    mask: np.ndarray
    actions: np.ndarray
    logp: np.ndarray
    values: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    valid: np.ndarray
    trajectories: list[Trajectory] = field(default_factory=list)  # in the order they finished
    starts: list[int] = field(default_factory=list)  # every window started, in order
    decisions: int = 0

    @classmethod
    def empty(cls, rounds: int, envs: int, slots: int, features: int) -> Rollout:
        T, N = rounds, envs
        return cls(np.zeros((T, N, slots, features), np.float32), np.zeros((T, N, slots), bool),
                   np.zeros((T, N), np.int64), np.zeros((T, N), np.float32), np.zeros((T, N), np.float32),
                   np.zeros((T, N), np.float64), np.zeros((T, N), bool), np.zeros((T, N), bool))

    def _grow(self) -> None:
        """Double the number of rounds (a rank whose envs take more decisions than planned)."""
        for name in ("queue", "mask", "actions", "logp", "values", "rewards", "dones", "valid"):
            a = getattr(self, name)
            setattr(self, name, np.concatenate([a, np.zeros_like(a)]))

    def batch_index(self) -> tuple[np.ndarray, np.ndarray]:
        """``(t, i)`` index arrays ``(B,)`` of every decision: trajectories in finishing order, rounds in order."""
        ts = [np.arange(tr.first, tr.last + 1) for tr in self.trajectories]
        es = [np.full(tr.length, tr.env) for tr in self.trajectories]
        return np.concatenate(ts), np.concatenate(es)


def collect_rollout(
    agent: SchedulingAgent, vec: Any, trajectories: int, group_size: int = 1, *,
    terminal_reward: Callable[[float, dict, int], float] | None = None, device: str | torch.device = "cpu",
) -> Rollout:
    """Sample ``trajectories`` sequences with ``agent`` on the vector env ``vec`` (``autoreset=False``).

    Every env starts a sequence (so ``trajectories >= N``); a finished env starts the next sequence while fewer than
    ``trajectories`` have started.  With groups of ``G = group_size`` envs, env ``i`` with ``i % G == 0``
    (the leader) draws a window and the next ``G - 1`` envs replay it; all of them take the same number of
    decisions, so a group finishes together and its leader is restarted first.

    Args:
        agent: the policy (sampled actions, log-probs and values, one batched forward per round).
        vec: a :class:`~torchhpc.envs.sched.VecBatchScheduling` with ``autoreset=False``, already seeded.
        trajectories: sequences to finish.
        group_size: ``G`` (1: every env draws its own windows).
        terminal_reward: ``(reward, metrics, window start) -> reward`` stored at a sequence's last decision
            (default: the env's reward).
        device: where the agent runs.

    Returns:
        the :class:`Rollout`.

    Raises:
        ValueError: fewer ``trajectories`` than envs.
    """
    N, G = vec.n, group_size
    if trajectories < N:
        raise ValueError(f"{trajectories} trajectories cannot keep {N} envs busy")
    slots, features = vec.queue.shape[1:]
    seq_len = vec.envs[0].sequence_length
    ro = Rollout.empty(-(-trajectories // N) * seq_len, N, slots, features)
    group = np.zeros(N, dtype=np.int64)  # each env's current group
    groups = 0
    first = np.zeros(N, dtype=np.int64)  # the round in which each env's current sequence began

    def begin(done: np.ndarray, at: int) -> None:
        """Start the next windows on the envs of ``done`` (ascending) from round ``at``, while sequences are owed."""
        nonlocal groups
        restart = np.flatnonzero(done)[:max(trajectories - len(ro.starts), 0)]
        if not len(restart):
            return
        leaders, followers = np.zeros(N, dtype=bool), np.zeros(N, dtype=bool)
        leaders[restart[restart % G == 0]] = True
        followers[restart[restart % G != 0]] = True
        if leaders.any():  # leaders first: a follower replays its leader's new window
            vec.reset(options={"reset_mask": leaders})
            for i in np.flatnonzero(leaders):
                group[i] = groups
                groups += 1
        if followers.any():
            lead = np.arange(N) - np.arange(N) % G
            vec.reset(options={"reset_mask": followers, "start": vec.starts[lead]})
            group[followers] = group[lead[followers]]
        ro.starts.extend(int(vec.starts[i]) for i in restart)
        first[restart] = at

    begin(np.ones(N, dtype=bool), 0)
    t = 0
    while vec.active.any():
        if t == len(ro.valid):
            ro._grow()
        active = np.flatnonzero(vec.active)
        q = torch.from_numpy(vec.queue[active]).to(device)
        m = torch.from_numpy(vec.mask[active]).to(device)
        actions, logps, values = (x.cpu().numpy() for x in agent.act(q, m))
        ro.queue[t, active] = vec.queue[active]
        ro.mask[t, active] = vec.mask[active]
        ro.actions[t, active] = actions
        ro.logp[t, active] = logps
        ro.values[t, active] = values
        ro.valid[t, active] = True
        step_actions = np.zeros(N, dtype=np.int64)
        step_actions[active] = actions
        _, _, rewards, dones, infos = vec.step(step_actions)
        ro.decisions += len(active)
        for i in np.flatnonzero(dones):
            metrics = infos[i]["metrics"]
            r = rewards[i] if terminal_reward is None else terminal_reward(float(rewards[i]), metrics,
                                                                          int(vec.starts[i]))
            ro.rewards[t, i], ro.dones[t, i] = r, True
            ro.trajectories.append(Trajectory(int(i), int(first[i]), t, int(group[i]), int(vec.starts[i]), metrics,
                                              float(r)))
        begin(dones, t + 1)
        t += 1
    return ro


# ----------------------------------------------------------------------------- advantages


def gae(
    rewards: np.ndarray, values: np.ndarray, dones: np.ndarray, gamma: float, lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation over rollout storage (Schulman et al. 2016, eq. 16).

    Args:
        rewards: ``(T, N)`` float64, the reward of each decision.
        values: ``(T, N)`` the critic's value of each decision's observation.
        dones: ``(T, N)`` bool, a sequence ended at this decision (nothing is bootstrapped past it: the value
            after the last decision is 0).
        gamma, lam: discount and GAE λ.

    Returns:
        ``(advantages, returns)``, each ``(T, N)`` float64; returns are the discounted rewards-to-go.

    Raises:
        ValueError: shapes differ or are not 2-D.
    """
    r = np.asarray(rewards, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if r.shape != v.shape or r.shape != np.shape(dones) or r.ndim != 2:
        raise ValueError(f"rewards {r.shape}, values {v.shape} and dones {np.shape(dones)} must be the same (T, N)")
    nonterminal = 1.0 - np.asarray(dones, dtype=np.float64)
    adv, ret = np.zeros_like(r), np.zeros_like(r)
    last_adv, last_ret, next_v = np.zeros(r.shape[1]), np.zeros(r.shape[1]), np.zeros(r.shape[1])
    for t in range(len(r) - 1, -1, -1):
        delta = r[t] + gamma * next_v * nonterminal[t] - v[t]
        last_adv = delta + gamma * lam * nonterminal[t] * last_adv
        last_ret = r[t] + gamma * nonterminal[t] * last_ret
        adv[t], ret[t], next_v = last_adv, last_ret, v[t]
    return adv, ret


@dataclass
class Batch:
    """An epoch's samples on one rank (``B`` decisions): ``q (B, S, F)``, ``m (B, S)``, ``a (B,)``,
    ``logp (B,)`` (at sampling), ``adv (B,)`` (normalised over ranks), ``ret (B,)``."""

    q: torch.Tensor
    m: torch.Tensor
    a: torch.Tensor
    logp: torch.Tensor
    adv: torch.Tensor
    ret: torch.Tensor

    def __len__(self) -> int:
        return self.a.numel()


def make_batch(
    ro: Rollout, gamma: float, lam: float, group_size: int = 1, *, ctx: Any = None, device: str | torch.device = "cpu",
) -> Batch:
    """Advantages (GAE, or the leave-one-out group baseline with ``group_size > 1``), normalised to mean 0
    and standard deviation 1 over all ranks, and the flat batch in trajectory order."""
    adv, ret = gae(ro.rewards, ro.values, ro.dones, gamma, lam)
    ti, ei = ro.batch_index()
    b_adv = adv[ti, ei].astype(np.float32)
    if group_size > 1:  # every step of a trajectory gets its trajectory's advantage
        traj_adv = leave_one_out_advantage([tr.reward for tr in ro.trajectories],
                                           [tr.group for tr in ro.trajectories])
        b_adv = np.repeat(traj_adv, [tr.length for tr in ro.trajectories]).astype(np.float32)
    b = Batch(*(torch.from_numpy(x).to(device) for x in (
        ro.queue[ti, ei], ro.mask[ti, ei], ro.actions[ti, ei], ro.logp[ti, ei], b_adv,
        ret[ti, ei].astype(np.float32))))
    n = len(b)
    mean = global_mean(float(b.adv.mean()), n, ctx)
    var = global_mean(float(((b.adv - mean) ** 2).mean()), n, ctx)
    b.adv = (b.adv - mean) / (var**0.5 + 1e-8)
    return b


# ----------------------------------------------------------------------------- update


def minibatches(n: int, size: int, gen: torch.Generator) -> Iterator[slice | torch.Tensor]:
    """Index sets of one pass over ``n`` samples: the full batch when ``size`` is 0 or ``>= n``, else a random
    permutation (from ``gen``) cut into pieces of ``size``."""
    if not size or size >= n:
        yield slice(None)
        return
    perm = torch.randperm(n, generator=gen)
    for s in range(0, n, size):
        yield perm[s:s + size]


def backtrack_step(
    params: Sequence[torch.Tensor], before: Sequence[torch.Tensor], kl_before: float, batch_kl: Callable[[], float],
    limit: float, halvings: int,
) -> tuple[float, float]:
    """Shrink the last step (``before`` → the current ``params``) by halves until ``batch_kl()`` is within
    ``limit``; undo it when ``halvings`` halvings are not enough.

    Returns:
        ``(KL, fraction of the step kept)``; ``(kl_before, 0.0)`` when the step was undone.
    """
    after = [p.detach().clone() for p in params]
    frac = 1.0
    kl = kl_before
    for _ in range(halvings):
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


def policy_update(
    agent: SchedulingAgent, opt: torch.optim.Optimizer, b: Batch, *, clip: float, target_kl: float, iters: int,
    kl_backtrack: int = 0, minibatch: int = 0, gen: torch.Generator | None = None, ctx: Any = None,
) -> dict[str, float]:
    """The clipped PPO policy update, stopping early once the approximate KL (mean over ranks) exceeds
    ``1.5 * target_kl``; with ``kl_backtrack`` the step before the stop is halved back within that limit.

    Returns:
        ``{"pi_steps", "approx_kl", "step_kept"}``.
    """
    pi_steps, kl, kl_before, step_kept = 0, 0.0, 0.0, 1.0
    limit = 1.5 * target_kl
    params = list(agent.actor.parameters())
    before_step = None  # the actor's weights before the last step (kl_backtrack)

    def batch_kl(idx) -> float:
        with torch.no_grad():
            logp = agent.distribution(b.q[idx], b.m[idx]).log_prob(b.a[idx])
        return global_mean(float((b.logp[idx] - logp).mean()), 1, ctx)

    for _ in range(iters):
        stop = False
        for idx in minibatches(len(b), minibatch, gen):
            logp = agent.distribution(b.q[idx], b.m[idx]).log_prob(b.a[idx])
            ratio = torch.exp(logp - b.logp[idx])
            adv = b.adv[idx]
            loss_pi = -torch.min(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv).mean()
            kl = global_mean(float((b.logp[idx] - logp).detach().mean()), 1, ctx)
            if kl > limit:
                stop = True
                if kl_backtrack and before_step is not None:
                    kl, step_kept = backtrack_step(params, before_step, kl_before, lambda idx=idx: batch_kl(idx),
                                                   limit, kl_backtrack)
                break
            if kl_backtrack:
                before_step, kl_before = [p.detach().clone() for p in params], kl
            opt.zero_grad()
            loss_pi.backward()
            average_gradients(params, ctx)
            opt.step()
            pi_steps += 1
        if stop:
            break
    return {"pi_steps": pi_steps, "approx_kl": kl, "step_kept": step_kept}


def value_update(
    agent: SchedulingAgent, opt: torch.optim.Optimizer, b: Batch, *, iters: int, minibatch: int = 0,
    gen: torch.Generator | None = None, ctx: Any = None,
) -> float:
    """``iters`` passes of mean-squared-error steps of the critic towards the returns; the last loss."""
    loss_v = torch.tensor(0.0)
    params = list(agent.critic.parameters())
    for _ in range(iters):
        for idx in minibatches(len(b), minibatch, gen):
            loss_v = ((agent.value(b.q[idx], b.m[idx]) - b.ret[idx]) ** 2).mean()
            opt.zero_grad()
            loss_v.backward()
            average_gradients(params, ctx)
            opt.step()
    return float(loss_v.detach())


# ----------------------------------------------------------------------------- training


def evaluate_policy(
    agent: SchedulingAgent, trace, starts: Sequence[int], length: int, backfill: str, *, greedy: bool, samples: int,
    seed: int, settings: Mapping[str, Any], device: str | torch.device = "cpu",
) -> list[dict[str, float]]:
    """Per-window metrics of ``agent``: one greedy pass, or ``samples`` sampled passes (seeds ``seed + k``)
    concatenated; ``settings`` are the agent's :func:`agent_settings`."""
    obs = {k: settings[k] for k in ("queue_slots", "time_scale", "prior", "context")}
    return [row for k in range(1 if greedy else samples)
            for row in evaluate_agent(agent, trace, starts, length, backfill, greedy=greedy, seed=seed + k,
                                      device=device, **obs)]


def build_trace(cfg: SchedConfig):
    """The trace of ``cfg.trace`` (an SWF file, or the generated Lublin trace)."""
    from .swf import load_sched_trace

    t = cfg.trace
    return load_sched_trace(t.path, t.procs, t.generate_jobs, t.generate_seed, t.strict)


def check_trace_fits(cfg: SchedConfig, trace) -> None:
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


def resume_point(run, settings: Mapping[str, Any], n_envs: int, ctx: Any = None) -> tuple[int, dict] | None:
    """``(epoch, state)`` to resume ``run`` from on this rank: the newest epoch whose checkpoint reads on every
    rank (a damaged newer one is reported in one warning line), after checking that the checkpoint fits this
    job; ``None`` when the run has no checkpoint yet. Reads only.

    Raises:
        ConfigError: the checkpoint was trained with other agent settings, environments per rank or ranks.
        InputError: checkpoints exist but none reads on every rank.
    """
    world = ctx.world_size if ctx is not None and ctx.initialized else 1
    rank = ctx.rank if ctx is not None and ctx.initialized else 0
    shard = rank if world > 1 else None
    intact: dict[int, tuple[dict, Path]] = {}
    damaged: list[tuple[int, str]] = []
    for epoch, f in checkpoint_files(run.ckpt_dir, "ckpt", shard):
        try:
            intact[epoch] = (read_checkpoint(f)[1], f)
        except InputError as exc:
            damaged.append((epoch, str(exc)))
    other_layout = bool(checkpoint_files(run.ckpt_dir, "ckpt", None)) if world > 1 and not intact else False
    gathered = [(sorted(intact), damaged, other_layout)]
    if world > 1:
        import torch.distributed as dist

        gathered = [None] * world
        dist.all_gather_object(gathered, (sorted(intact), damaged, other_layout))
    common = set.intersection(*(set(g[0]) for g in gathered))
    if not common:
        if any(g[2] for g in gathered):
            raise ConfigError(f"run {run.run_id} was trained in one process; resume it with the same number of "
                              f"ranks (not {world}) or start a new run")
        if any(g[0] for g in gathered):
            raise ConfigError(f"run {run.run_id} was trained with another number of ranks; resume it with the "
                              f"same number (not {world}) or start a new run")
        if any(g[1] for g in gathered):
            first = next(g[1][0][1] for g in gathered if g[1])
            raise InputError(f"{first}; no intact checkpoint to resume run {run.run_id} from")
        return None
    epoch = max(common)
    state, f = intact[epoch]
    newer = [msg for g in gathered for e, msg in g[1] if e > epoch]
    if newer and rank == 0:
        more = f" (and {len(newer) - 1} more)" if len(newer) > 1 else ""
        warn(f"{newer[0]}{more}; resuming from epoch {epoch}, the newest intact checkpoint")
    was = state.get("world_size", world)
    if was != world:
        raise ConfigError(f"run {run.run_id} was trained on {was} rank(s); resume it with the same number "
                          f"(not {world}) or start a new run")
    from_checkpoint(state, expect=settings, run_id=run.run_id)  # other agent settings: a one-line ConfigError
    if len(state["env_rng"]) != n_envs:
        raise ConfigError(f"run {run.run_id} was trained with {len(state['env_rng'])} environments per rank "
                          f"(ppo.num_envs, ppo.trajectories); resume it with the same settings (not {n_envs}) "
                          f"or start a new run")
    return epoch, state


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
    from torchhpc.envs.sched import VecBatchScheduling
    from torchhpc.ext.core.distributed import distributed
    from torchhpc.ext.core.runs import open_run

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    with distributed(device=cfg.device, timeout_s=600) as ctx:
        rank, world, device = ctx.rank, ctx.world_size, ctx.device
        trace = build_trace(cfg)
        check_trace_fits(cfg, trace)  # before the run folder exists, and long before any training
        P, E, metric = cfg.ppo, cfg.eval, cfg.env.metric
        settings = {"policy": P.policy, "queue_slots": cfg.env.queue_slots, **cfg.env.observation()}
        n_envs = min(P.num_envs, max(1, P.trajectories // world))
        G = P.groups_of
        if G > 1 and P.trajectories % (G * world):
            raise ConfigError(f"ppo.trajectories ({P.trajectories}) must split into whole groups of "
                              f"{G} on each of the {world} ranks")
        val_starts = (draw_validation_starts(trace, E.validate, E.validate_length, E.validate_seed, E.starts,
                                             E.length) if E.validate else [])
        # a resumed run is read and checked before anything in its folder is written
        run = open_run("sched", None if cfg.run.resume else cfg, cfg.run, ctx)
        loaded = resume_point(run, settings, n_envs, ctx) if cfg.run.resume else None
        start_epoch, env_states, best = 0, None, {}  # best: {"epoch", "value"} of the best held-out score
        if loaded is not None:
            start_epoch, state = loaded
            agent = from_checkpoint(state, expect=settings, run_id=run.run_id, device=device)
            summary_path = run.dir / "summary.json"
            if start_epoch >= P.epochs and summary_path.exists():
                if rank == 0 and verbose:
                    print(f"run {run.run_id} is already finished (epoch {start_epoch}, ppo.epochs={P.epochs}); "
                          f"nothing to do (raise ppo.epochs to train it further)")
                return json.loads(summary_path.read_text())
        if cfg.run.resume:
            run.save_config(cfg)
            run.truncate_metrics(start_epoch)
        vec = VecBatchScheduling(n_envs, seed=cfg.seed + 1000 * rank, autoreset=False, trace=trace,
                                 **cfg.env.env_kwargs())
        torch.manual_seed(cfg.seed)
        fresh = new_agent(**settings).to(device)
        if loaded is None:
            agent = fresh
        pi_opt = torch.optim.Adam(agent.actor.parameters(), lr=P.pi_lr)
        v_opt = torch.optim.Adam(agent.critic.parameters(), lr=P.vf_lr)
        if loaded is not None:
            pi_opt.load_state_dict(state["pi_opt"])
            v_opt.load_state_dict(state["v_opt"])
            torch.set_rng_state(state["torch_rng"])
            env_states, best = state["env_rng"], dict(state.get("best", {}))
        if P.imitate and start_epoch == 0 and rank == 0:
            _imitate(cfg, agent, trace, run, device, verbose)
        if ctx.initialized:
            import torch.distributed as dist

            for p in agent.parameters():
                dist.broadcast(p.data, src=0)
        baseline_sim = ClusterSimulator(trace, cfg.env.backfill)
        per_rank = P.trajectories // world + (1 if rank < P.trajectories % world else 0)

        def reference_metric(start: int, heuristic: str, key: str) -> float:
            baseline_sim.reset(start, cfg.env.sequence_length)
            return baseline_sim.run_policy(make_key(heuristic, baseline_sim)).get(key)

        def terminal_reward(reward: float, metrics: dict, start: int) -> float:
            """``raw``: the env's reward; ``log_ratio``: log of how much better than the reference heuristic
            on the same jobs (positive = better), so every sequence's return has one scale."""
            if cfg.env.reward == "raw":
                return reward
            return log_ratio_reward(metric, metrics[metric], reference_metric(start, cfg.env.reward_reference,
                                                                               metric))

        def mean_over(values: list[float]) -> float:
            return global_mean(float(np.mean(values)), len(values), ctx)

        def evaluate(a: SchedulingAgent) -> dict[str, float]:
            return summarise(evaluate_policy(a, trace, E.starts, E.length, cfg.env.backfill, greedy=E.greedy,
                                             samples=E.samples, seed=cfg.seed, settings=settings, device=device))

        def checkpoint_state() -> dict:
            return {"agent": agent.state_dict(), "pi_opt": pi_opt.state_dict(), "v_opt": v_opt.state_dict(),
                    "torch_rng": torch.get_rng_state(), "env_rng": vec.rng_states(), **settings, "best": best,
                    "world_size": world}

        vec.reset()  # the first reset seeds each env's window draws; later resets continue its stream
        if env_states is not None:
            vec.set_rng_states(env_states)
        if P.epochs == 0 and start_epoch == 0:  # the imitated / untrained prior policy, for `sched eval`
            run.save_checkpoint(checkpoint_state(), 0)
        last_eval: dict = {}
        t_train0 = time.time()
        for epoch in run.progress(range(start_epoch, P.epochs), desc="PPO epochs", initial=start_epoch,
                                  total=P.epochs):
            t0 = time.time()
            agent.eval()
            ro = collect_rollout(agent, vec, per_rank, G, terminal_reward=terminal_reward, device=device)
            t_roll = time.time() - t0
            agent.train()
            b = make_batch(ro, P.gamma, P.lam, G, ctx=ctx, device=device)
            gen = torch.Generator().manual_seed(cfg.seed * 7919 + epoch * 31 + rank)
            pi = policy_update(agent, pi_opt, b, clip=P.clip, target_kl=P.target_kl, iters=P.pi_iters,
                               kl_backtrack=P.kl_backtrack, minibatch=P.minibatch, gen=gen, ctx=ctx)
            loss_v = value_update(agent, v_opt, b, iters=P.v_iters if G == 1 else 0,  # the group baseline: no critic
                                  minibatch=P.minibatch, gen=gen, ctx=ctx)
            t_epoch = time.time() - t0
            # ---------------------------------------------------------------- log
            ep_metrics = [tr.metrics for tr in ro.trajectories]
            row = {"epoch": epoch + 1, "train_bsld": mean_over([mm["bsld"] for mm in ep_metrics]),
                   "sequences": round(global_mean(float(len(set(ro.starts))), 1, ctx) * world), **pi,
                   "loss_v": global_mean(loss_v, len(b), ctx), "decisions": ro.decisions * world,
                   "decisions_per_s": ro.decisions / max(t_roll, 1e-9), "rollout_s": t_roll, "epoch_s": t_epoch}
            if metric != "bsld":
                row[f"train_{metric}"] = mean_over([mm[metric] for mm in ep_metrics])
            if cfg.log_baselines:
                for h in ("sjf", "f1"):
                    row[f"train_{h}_bsld"] = mean_over([reference_metric(s0, h, "bsld") for s0 in ro.starts])
            final = epoch + 1 == P.epochs
            if (E.every and (epoch + 1) % E.every == 0) or final:
                last_eval = evaluate(agent)
                row["eval_bsld"] = last_eval["bsld"]
            if val_starts and ((epoch + 1) % E.validate_every == 0 or final):
                val = summarise(evaluate_policy(agent, trace, val_starts, E.validate_length, cfg.env.backfill,
                                                greedy=True, samples=1, seed=0, settings=settings,
                                                device=device))[metric]
                row[f"val_{metric}"] = val
                if not best or (val > best["value"] if metric.startswith("util") else val < best["value"]):
                    best = {"epoch": epoch + 1, "value": val}
            run.log(epoch + 1, **row)
            # ---------------------------------------------------------------- checkpoint
            state = checkpoint_state()
            if best.get("epoch") == epoch + 1:
                run.save_checkpoint(state, epoch + 1, name="best", keep=1)  # rank 0 writes
            run.save_checkpoint(state, epoch + 1, shard=rank if world > 1 else None)
            if rank == 0 and world > 1:
                run.save_checkpoint(state, epoch + 1)  # rank 0's copy is what `sched eval` loads
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
            loaded = newest_intact(run.ckpt_dir, "best") if best and rank == 0 else None
            if loaded is not None:
                summary["eval"]["rl_best"] = evaluate(from_checkpoint(loaded[1], device=device))
            for h in E.heuristics:
                summary["eval"][h] = summarise(evaluate_heuristic(trace, h, E.starts, E.length, cfg.env.backfill))
        rows = run.metrics()
        if rows:
            summary["final_train_bsld"] = rows[-1].get("train_bsld")
        run.write_summary(summary)
        run.plot_metrics(["train_bsld", "train_sjf_bsld", "train_f1_bsld", "eval_bsld", "val_bsld"],
                         "learning_curve.png", x="epoch", ylabel="average bounded slowdown", logy=True)
        if rank == 0 and verbose:
            from .report import metrics_table

            print(f"run folder: {run.dir}")
            if best:
                heur = ", ".join(f"{h} {v:.2f}" for h, v in summary["best"]["validation_heuristics"].items())
                print(f"best held-out {metric} {best['value']:.2f} at epoch {best['epoch']} ({heur}); "
                      f"`sched eval` uses that checkpoint")
            if last_eval:
                print(metrics_table(summary["eval"]))
        return summary


def _imitate(cfg: SchedConfig, agent: SchedulingAgent, trace, run, device, verbose: bool) -> None:
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


__all__ = [
    "AGENT_SETTINGS", "Batch", "Rollout", "Trajectory", "agent_settings", "average_gradients", "backtrack_step",
    "build_trace", "check_trace_fits", "checkpoint_files", "collect_rollout", "evaluate_policy", "from_checkpoint",
    "gae", "global_mean", "load_checkpoint", "newest_intact", "read_checkpoint", "resume_point",
    "make_batch",
    "minibatches", "new_agent", "policy_update", "train", "value_update",
]
