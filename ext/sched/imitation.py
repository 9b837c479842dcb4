"""Warm-starting a scheduling policy by imitating a heuristic (behaviour cloning).

Not part of the paper: an option that starts PPO from a policy that already
schedules like a heuristic (e.g. F1), so that the RL epochs are spent improving
on it rather than rediscovering it from a uniform policy.  Demonstrations are
the heuristic's own decisions on training sequences: at each decision the
observation and the slot of the job the heuristic picks (forced decisions, with
one visible job, and decisions whose job is not visible are skipped).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .heuristics import make_key
from .observation import QueueObserver
from .simulator import ClusterSimulator
from .swf import SchedTrace


def collect_demonstrations(
    trace: SchedTrace, heuristic: str, starts: Sequence[int], length: int, backfill: str = "none",
    queue_slots: int = 128, time_scale: str = "linear", metric: str = "bsld", prior: str | None = None,
    context: bool = False,
) -> dict[str, np.ndarray]:
    """The heuristic's decisions on windows ``[s, s + length)``.

    Returns:
        ``queue (N, slots, features)``, ``mask (N, slots)`` bool, ``action (N,)`` slot indices and
        ``ret (N,)`` the episode's terminal reward (``-metric``) for every decision.
    """
    observer = QueueObserver(trace, queue_slots, time_scale, prior, context)
    sim = ClusterSimulator(trace, backfill)
    key = make_key(heuristic, sim)
    qs, ms, acts, rets = [], [], [], []
    q = np.zeros((queue_slots, observer.features), dtype=np.float32)
    m = np.zeros(queue_slots, dtype=np.int8)
    for s in starts:
        sim.reset(int(s), length)
        n0 = len(acts)
        while not sim.done:
            visible = observer.observe(sim, q, m)
            now = sim.now
            job = min(sim.queue, key=lambda j: key(j, now))
            if job in visible and len(visible) > 1:  # a forced choice teaches nothing
                qs.append(q.copy())
                ms.append(m.astype(bool))
                acts.append(visible.index(job))
            sim.schedule(job)
        value = sim.metrics().get(metric)
        rets.extend([value if metric.startswith("util") else -value] * (len(acts) - n0))
    return {"queue": np.stack(qs), "mask": np.stack(ms), "action": np.asarray(acts, dtype=np.int64),
            "ret": np.asarray(rets, dtype=np.float32)}


def behaviour_clone(
    agent, demos: dict[str, np.ndarray], epochs: int = 10, lr: float = 1e-3, batch: int = 256, seed: int = 0,
    device: str | torch.device = "cpu",
) -> dict[str, float]:
    """Fit the actor to the demonstrated slots (cross-entropy) and the critic to their returns.

    Returns:
        ``{"accuracy": ..., "loss": ...}`` of the actor on the demonstrations after training.
    """
    q = torch.from_numpy(demos["queue"]).to(device)
    m = torch.from_numpy(demos["mask"]).to(device)
    a = torch.from_numpy(demos["action"]).to(device)
    ret = torch.from_numpy(demos["ret"]).to(device)
    n = a.numel()
    g = torch.Generator().manual_seed(seed)
    pi_opt = torch.optim.Adam(agent.actor.parameters(), lr=lr)
    v_opt = torch.optim.Adam(agent.critic.parameters(), lr=lr)
    agent.train()
    for _ in range(epochs):
        perm = torch.randperm(n, generator=g)
        for s in range(0, n, batch):
            idx = perm[s:s + batch]
            loss = torch.nn.functional.cross_entropy(agent.actor(q[idx], m[idx]), a[idx])
            pi_opt.zero_grad()
            loss.backward()
            pi_opt.step()
            v_loss = ((agent.value(q[idx], m[idx]) - ret[idx]) ** 2).mean()
            v_opt.zero_grad()
            v_loss.backward()
            v_opt.step()
    agent.eval()
    with torch.no_grad():
        logits = torch.cat([agent.actor(q[s:s + batch], m[s:s + batch]) for s in range(0, n, batch)])
        acc = float((logits.argmax(-1) == a).float().mean())
        loss = float(torch.nn.functional.cross_entropy(logits, a))
    return {"accuracy": acc, "loss": loss, "samples": n}
