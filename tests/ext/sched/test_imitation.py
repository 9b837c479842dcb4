"""Behaviour cloning a heuristic: the warm-started kernel policy picks the heuristic's job far above chance."""

from __future__ import annotations

import numpy as np
import torch

from torchhpc.ext.sched.evaluate import draw_starts
from torchhpc.ext.sched.imitation import behaviour_clone, collect_demonstrations
from torchhpc.ext.sched.lublin import generate_lublin
from torchhpc.ext.sched.modules import SchedulingAgent


def test_cloned_policy_agrees_with_sjf_far_above_chance():
    """After cloning SJF, the policy's argmax matches SJF's choice on non-trivial decisions
    where a uniform guess would match 1/(visible jobs) of them."""
    trace = generate_lublin(3000, seed=1).for_scheduling()
    demos = collect_demonstrations(trace, "sjf", draw_starts(trace, 12, 128, 3), 128, time_scale="log")
    assert demos["mask"].sum(1).min() >= 2  # forced decisions are not demonstrations
    chance = float(np.mean(1.0 / demos["mask"].sum(1)))
    torch.manual_seed(0)
    agent = SchedulingAgent("kernel")
    stats = behaviour_clone(agent, demos, epochs=15, lr=3e-3)
    assert stats["accuracy"] > max(0.3, 4 * chance), (stats, chance)
    assert np.all(demos["ret"] <= -1.0)  # minus a bounded slowdown
