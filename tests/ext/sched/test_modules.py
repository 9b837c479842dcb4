"""The kernel policy: packed evaluation equals the dense definition, and it is permutation-equivariant."""

from __future__ import annotations

import torch

from torchhpc.ext.sched.modules import MASKED_LOGIT, SchedulingAgent


def batch(B=6, S=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, S + 1, (B,), generator=g)
    mask = torch.arange(S)[None, :] < lengths[:, None]
    q = torch.rand(B, S, 8, generator=g)
    q[~mask] = torch.tensor([0, 1, 1, 1, 1, 1, 1, 0.0])
    return q, mask


def test_packed_kernel_networks_equal_dense_evaluation():
    """Evaluating only valid slots gives exactly the dense per-slot MLP (actor and critic)."""
    torch.manual_seed(0)
    agent = SchedulingAgent("kernel", slots=16)
    q, mask = batch()
    dense_logits = agent.actor.score(q).squeeze(-1).masked_fill(~mask, MASKED_LOGIT)
    torch.testing.assert_close(agent.actor(q, mask), dense_logits)
    dense_v = agent.critic.head(agent.critic.per_job(q).squeeze(-1)).squeeze(-1)
    torch.testing.assert_close(agent.value(q, mask), dense_v)


def test_kernel_policy_is_permutation_equivariant_and_masks():
    """Permuting the valid jobs permutes the probabilities; masked slots get probability 0."""
    torch.manual_seed(1)
    agent = SchedulingAgent("kernel", slots=16)
    q, mask = batch(B=1)
    mask[:] = False
    mask[0, :7] = True
    perm = torch.randperm(7)
    q2 = q.clone()
    q2[0, :7] = q[0, perm]
    p1 = agent.distribution(q, mask).probs
    p2 = agent.distribution(q2, mask).probs
    torch.testing.assert_close(p2[0, :7], p1[0, perm])
    assert float(p1[0, 7:].sum().detach()) == 0.0


def test_flat_baseline_and_act():
    """The flat MLP baseline produces valid actions; act() returns shapes (B,)."""
    agent = SchedulingAgent("flat", slots=16)
    q, mask = batch()
    a, logp, v = agent.act(q, mask)
    assert a.shape == logp.shape == v.shape == (6,)
    assert bool(mask[torch.arange(6), a].all())


def test_untrained_prior_policy_schedules_exactly_as_its_heuristic():
    """With a heuristic prior the kernel policy starts as that heuristic: greedy metrics equal F1's on every
    window, and it samples F1's pick most of the time; a prior on the flat policy is refused."""
    import numpy as np
    import pytest

    from torchhpc.ext.sched.evaluate import evaluate_agent, evaluate_heuristic
    from torchhpc.ext.sched.lublin import generate_lublin

    trace = generate_lublin(2000, seed=4).for_scheduling()
    torch.manual_seed(0)
    agent = SchedulingAgent("kernel", slots=128, features=9, prior=True)
    starts = [300, 900, 1500]
    ours = evaluate_agent(agent, trace, starts, 256, greedy=True, time_scale="log", prior="f1")
    f1 = evaluate_heuristic(trace, "f1", starts, 256)
    assert [r["bsld"] for r in ours] == [r["bsld"] for r in f1]
    with_context = SchedulingAgent("kernel", slots=128, features=12, prior=True)  # the rank stays last
    ours = evaluate_agent(with_context, trace, starts, 256, greedy=True, time_scale="log", prior="f1", context=True)
    assert [r["bsld"] for r in ours] == [r["bsld"] for r in f1]
    q = torch.zeros(1, 128, 9)
    q[0, :5, 8] = torch.tensor([3, 0, 4, 1, 2]) / 128
    with torch.no_grad():
        p = agent.distribution(q, torch.arange(128)[None] < 5).probs[0, :5].numpy()
    assert p.argmax() == 1 and 0.9 < p[1] < 0.99 and np.all(np.diff(p[[1, 3, 4, 0, 2]]) < 0)
    with pytest.raises(ValueError, match="kernel policy"):
        SchedulingAgent("flat", slots=128, features=9, prior=True)
