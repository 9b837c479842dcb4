"""PPO pieces of sched: GAE, rollouts through the vector episodes, the update with KL backtracking, checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchhpc.ext.core.config import ConfigError
from torchhpc.ext.core.errors import InputError
from torchhpc.ext.sched.checkpoints import agent_settings, from_checkpoint, load_checkpoint, new_agent
from torchhpc.ext.sched.episodes import VecBatchScheduling
from torchhpc.ext.sched.ppo import (
    backtrack_step,
    collect_rollout,
    gae,
    make_batch,
    minibatches,
    policy_update,
)
from torchhpc.ext.sched.traces import load_sched_trace

TRACE = load_sched_trace(None, None, 1500, 0)


def _gae_by_trajectory(r, v, gamma, lam):
    """The textbook recursion over one finished trajectory (value 0 after its end)."""
    adv, ret = np.zeros(len(r)), np.zeros(len(r))
    a = g = 0.0
    for t in range(len(r) - 1, -1, -1):
        nv = v[t + 1] if t + 1 < len(r) else 0.0
        a = r[t] + gamma * nv - v[t] + gamma * lam * a
        g = r[t] + gamma * g
        adv[t], ret[t] = a, g
    return adv, ret


def test_gae_equals_the_per_trajectory_recursion():
    """Over (T, N) storage with several trajectories per env and padding, GAE equals each trajectory's own
    recursion, and nothing leaks across a trajectory's end."""
    rng = np.random.default_rng(0)
    T, N = 12, 3
    ends = {0: [3, 7, 11], 1: [5, 9], 2: [11]}  # env 1 is padding after round 9
    r, v = rng.normal(size=(T, N)), rng.normal(size=(T, N))
    dones = np.zeros((T, N), dtype=bool)
    for i, es in ends.items():
        dones[es, i] = True
    adv, ret = gae(r, v, dones, 0.9, 0.8)
    for i, es in ends.items():
        first = 0
        for e in es:
            a, g = _gae_by_trajectory(r[first:e + 1, i], v[first:e + 1, i], 0.9, 0.8)
            np.testing.assert_allclose(adv[first:e + 1, i], a, rtol=1e-12)
            np.testing.assert_allclose(ret[first:e + 1, i], g, rtol=1e-12)
            first = e + 1
    with pytest.raises(ValueError, match="same"):
        gae(r, v[:-1], dones, 1.0, 1.0)


def test_gae_with_gamma_and_lambda_one_is_return_minus_value():
    """γ = λ = 1 with a terminal reward: every step's advantage is that reward minus the step's value."""
    r = np.zeros((4, 1))
    r[-1] = -7.0
    v = np.arange(4.0).reshape(4, 1)
    adv, ret = gae(r, v, np.array([[0], [0], [0], [1]], dtype=bool), 1.0, 1.0)
    np.testing.assert_allclose(ret[:, 0], -7.0)
    np.testing.assert_allclose(adv[:, 0], -7.0 - v[:, 0])


def test_minibatches_cover_every_sample_once():
    """0 or a size >= n gives the full batch; otherwise a permutation cut into pieces."""
    g = torch.Generator().manual_seed(0)
    assert list(minibatches(10, 0, g)) == [slice(None)] and list(minibatches(10, 10, g)) == [slice(None)]
    parts = list(minibatches(10, 4, g))
    assert [len(p) for p in parts] == [4, 4, 2] and sorted(torch.cat(parts).tolist()) == list(range(10))


def test_backtrack_halves_the_step_until_the_limit_or_undoes_it():
    """With KL = x², a step 0 -> 1 is halved to 0.25 for limit 0.1, and undone when 1 halving is allowed."""
    p = [torch.tensor([1.0])]
    kl, kept = backtrack_step(p, [torch.tensor([0.0])], 0.0, lambda: float(p[0] ** 2), 0.1, 5)
    assert kept == 0.25 and p[0].item() == 0.25 and kl == 0.0625
    p = [torch.tensor([1.0])]
    kl, kept = backtrack_step(p, [torch.tensor([0.0])], 0.0, lambda: float(p[0] ** 2), 0.1, 1)
    assert kept == 0.0 and p[0].item() == 0.0 and kl == 0.0


def _vec(n=4, **kw):
    vec = VecBatchScheduling(n, seed=3, autoreset=False, trace=TRACE, sequence_length=32, **kw)
    vec.reset()
    return vec


def test_rollout_replays_each_leaders_window_and_stores_every_decision():
    """Groups of 2 envs: 6 trajectories schedule 3 windows, each twice; the storage's valid entries are the
    decisions, and the batch index lists each trajectory's rounds in order."""
    torch.manual_seed(0)
    agent = new_agent("kernel", 128, None, False)
    ro = collect_rollout(agent, _vec(), 6, group_size=2)
    assert len(ro.trajectories) == 6 and len(set(ro.starts)) == 3
    by_group: dict[int, set[int]] = {}
    for tr in ro.trajectories:
        by_group.setdefault(tr.group, set()).add(tr.start)
        assert tr.length == 32 and ro.dones[tr.last, tr.env] and ro.valid[tr.first:tr.last + 1, tr.env].all()
    assert all(len(s) == 1 for s in by_group.values()) and len(by_group) == 3
    assert ro.valid.sum() == ro.decisions == 6 * 32
    ti, ei = ro.batch_index()
    assert len(ti) == ro.decisions and ro.valid[ti, ei].all()
    b = make_batch(ro, 1.0, 0.97, group_size=2)
    assert b.q.shape == (192, 128, 8) and abs(float(b.adv.mean())) < 1e-5


def test_policy_update_with_backtracking_keeps_the_kl_within_the_limit():
    """A learning rate far too large: without backtracking the last step overshoots 1.5 x target_kl; with it
    the reported KL is within the limit and part of the step is kept or undone."""
    results = {}
    for halvings in (0, 10):
        torch.manual_seed(0)
        agent = new_agent("kernel", 128, None, False)
        b = make_batch(collect_rollout(agent, _vec(), 4), 1.0, 0.97)
        opt = torch.optim.Adam(agent.actor.parameters(), lr=0.5)
        results[halvings] = policy_update(agent, opt, b, clip=0.2, target_kl=0.002, iters=20, kl_backtrack=halvings)
    assert results[0]["approx_kl"] > 0.003 and results[0]["step_kept"] == 1.0
    assert results[10]["approx_kl"] <= 0.003 and results[10]["step_kept"] < 1.0


def test_from_checkpoint_rebuilds_the_agent_and_names_a_mismatched_setting():
    """A checkpoint with the F1 prior and context rebuilds a 12-feature agent with the same weights; resuming
    it with env.context=false is a ConfigError naming the option."""
    agent = new_agent("kernel", 16, "f1", True)
    state = {"agent": agent.state_dict(), "policy": "kernel", "queue_slots": 16, "time_scale": "log",
             "prior": "f1", "context": True}
    again = from_checkpoint(state)
    assert all(torch.equal(a, b) for a, b in zip(agent.state_dict().values(), again.state_dict().values(),
                                                 strict=True))
    assert agent_settings(state)["time_scale"] == "log" and agent_settings({})["context"] is False
    with pytest.raises(ConfigError, match="run r was trained with env.context=true"):
        from_checkpoint(state, expect={**agent_settings(state), "context": False}, run_id="r")


def test_load_checkpoint_errors_are_one_line(tmp_path):
    """A missing path and an empty run folder are InputErrors."""
    with pytest.raises(InputError, match="no such run folder"):
        load_checkpoint(tmp_path / "nope")
    (tmp_path / "sched" / "empty").mkdir(parents=True)
    with pytest.raises(InputError, match="no checkpoint"):
        load_checkpoint(tmp_path / "sched" / "empty")
