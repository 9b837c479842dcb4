"""PPO for RLScheduler: rollouts through :class:`~torchhpc.ext.sched.episodes.VecBatchScheduling`, GAE, and
the clipped update with KL early stop (and optional backtracking).  The training job that runs them epoch after
epoch (run folder, checkpoints, evaluation) is ``torchhpc sched train``, :func:`torchhpc.ext.sched.commands.train`.

PPO follows the paper's settings (SpinningUp style): one epoch = ``ppo.trajectories`` sampled sequences;
full-batch updates, up to ``pi_iters`` policy steps with early stop when the approximate KL exceeds
1.5 × ``target_kl``, ``v_iters`` value steps; γ = 1 and GAE λ = 0.97, so with the terminal reward every
step's return is the sequence's −bsld.  Under torchrun each rank collects its share of the trajectories and
gradients are averaged over ranks (gloo on CPU): every function that reduces over ranks takes the job's
:class:`~torchhpc.ext.core.distributed.DistContext` as ``ctx`` (``None``: this process alone).

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

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from torchhpc.ext.core.distributed import DistContext

from .episodes import VecBatchScheduling
from .evaluate import leave_one_out_advantage
from .modules import SchedulingAgent

#: the ranks of a job that runs in this one process (what ``ctx=None`` means)
ONE_PROCESS = DistContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), backend=None)


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
    agent: SchedulingAgent, vec: VecBatchScheduling, trajectories: int, group_size: int = 1, *,
    terminal_reward: Callable[[float, dict, int], float] | None = None, device: str | torch.device = "cpu",
) -> Rollout:
    """Sample ``trajectories`` sequences with ``agent`` on the vector env ``vec`` (``autoreset=False``).

    Every env starts a sequence (so ``trajectories >= N``); a finished env starts the next sequence while fewer than
    ``trajectories`` have started.  With groups of ``G = group_size`` envs, env ``i`` with ``i % G == 0``
    (the leader) draws a window and the next ``G - 1`` envs replay it; all of them take the same number of
    decisions, so a group finishes together and its leader is restarted first.

    Args:
        agent: the policy (sampled actions, log-probs and values, one batched forward per round).
        vec: the episodes, with ``autoreset=False``, already reset.
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
    seq_len = vec.sequence_length
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
    ro: Rollout, gamma: float, lam: float, group_size: int = 1, *, ctx: DistContext | None = None,
    device: str | torch.device = "cpu",
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
    ctx = ctx or ONE_PROCESS
    n = len(b)
    mean = ctx.mean(float(b.adv.mean()), n)
    var = ctx.mean(float(((b.adv - mean) ** 2).mean()), n)
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


def approx_kl(logp_old: torch.Tensor, logp: torch.Tensor, ctx: DistContext | None = None) -> float:
    """The approximate KL of the updated policy from the sampling one, ``mean(logp_old - logp)`` over the
    samples ``(B,)`` and then over ranks: the estimate every early-stop and backtracking decision compares
    with ``1.5 * target_kl``."""
    return (ctx or ONE_PROCESS).mean(float((logp_old - logp).detach().mean()))


def policy_update(
    agent: SchedulingAgent, opt: torch.optim.Optimizer, b: Batch, *, clip: float, target_kl: float, iters: int,
    kl_backtrack: int = 0, minibatch: int = 0, gen: torch.Generator | None = None, ctx: DistContext | None = None,
) -> dict[str, float]:
    """The clipped PPO policy update, stopping early once the approximate KL (mean over ranks, :func:`approx_kl`)
    exceeds ``1.5 * target_kl``; with ``kl_backtrack`` the step before the stop is halved back within that limit.

    Returns:
        ``{"pi_steps", "approx_kl", "step_kept"}``.
    """
    ctx = ctx or ONE_PROCESS
    pi_steps, kl, kl_before, step_kept = 0, 0.0, 0.0, 1.0
    limit = 1.5 * target_kl
    params = list(agent.actor.parameters())
    before_step = None  # the actor's weights before the last step (kl_backtrack)

    def batch_kl(idx) -> float:
        with torch.no_grad():
            logp = agent.distribution(b.q[idx], b.m[idx]).log_prob(b.a[idx])
        return approx_kl(b.logp[idx], logp, ctx)

    for _ in range(iters):
        stop = False
        for idx in minibatches(len(b), minibatch, gen):
            logp = agent.distribution(b.q[idx], b.m[idx]).log_prob(b.a[idx])
            ratio = torch.exp(logp - b.logp[idx])
            adv = b.adv[idx]
            loss_pi = -torch.min(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv).mean()
            kl = approx_kl(b.logp[idx], logp, ctx)
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
            ctx.average_gradients(params)
            opt.step()
            pi_steps += 1
        if stop:
            break
    return {"pi_steps": pi_steps, "approx_kl": kl, "step_kept": step_kept}


def value_update(
    agent: SchedulingAgent, opt: torch.optim.Optimizer, b: Batch, *, iters: int, minibatch: int = 0,
    gen: torch.Generator | None = None, ctx: DistContext | None = None,
) -> float:
    """``iters`` passes of mean-squared-error steps of the critic towards the returns; the last loss."""
    ctx = ctx or ONE_PROCESS
    loss_v = torch.tensor(0.0)
    params = list(agent.critic.parameters())
    for _ in range(iters):
        for idx in minibatches(len(b), minibatch, gen):
            loss_v = ((agent.value(b.q[idx], b.m[idx]) - b.ret[idx]) ** 2).mean()
            opt.zero_grad()
            loss_v.backward()
            ctx.average_gradients(params)
            opt.step()
    return float(loss_v.detach())


__all__ = [
    "Batch", "ONE_PROCESS", "Rollout", "Trajectory", "approx_kl", "backtrack_step", "collect_rollout", "gae",
    "make_batch", "minibatches", "policy_update", "value_update",
]
