"""torchhpc/BatchScheduling-v0: Gymnasium's checker, determinism, the observation encoding and rewards."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import torchhpc.envs  # noqa: F401  (registers the env ids)
from torchhpc.envs.sched import BatchSchedulingEnv, VecBatchScheduling
from torchhpc.ext.core.errors import InputError
from torchhpc.ext.sched.lublin import generate_lublin
from torchhpc.ext.sched.observation import EMPTY_SLOT, MAX_WAIT

TRACE = generate_lublin(1500, seed=2).for_scheduling()


def test_registered_and_passes_gymnasium_env_checker():
    """gym.make finds the id through its string entry point, and check_env passes."""
    env = gym.make("torchhpc/BatchScheduling-v0", trace=TRACE, sequence_length=64)
    check_env(env.unwrapped)
    assert env.observation_space["queue"].shape == (128, 8)


def rollout(env, seed, steps=10_000):
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(0)
    trail = [obs["queue"].copy()]
    for _ in range(steps):
        valid = np.flatnonzero(obs["action_mask"])
        obs, r, term, trunc, info = env.step(int(rng.choice(valid)))
        trail.append(obs["queue"].copy())
        if term:
            return trail, r, info
    raise AssertionError("episode did not end")


def test_two_envs_on_the_same_seed_give_the_same_trajectory():
    """Same seed and actions -> identical observations and reward; another seed -> another sequence."""
    a = rollout(BatchSchedulingEnv(trace=TRACE, sequence_length=64), seed=5)
    b = rollout(BatchSchedulingEnv(trace=TRACE, sequence_length=64), seed=5)
    c = rollout(BatchSchedulingEnv(trace=TRACE, sequence_length=64), seed=6)
    assert len(a[0]) == len(b[0]) and all(np.array_equal(x, y) for x, y in zip(a[0], b[0], strict=True))
    assert a[1] == b[1]
    assert not np.array_equal(a[0][0], c[0][0])


def test_terminal_reward_is_minus_the_sequence_bsld():
    """The only reward is at the end and equals minus the sequence's average bounded slowdown."""
    env = BatchSchedulingEnv(trace=TRACE, sequence_length=32)
    obs, _ = env.reset(seed=1)
    rewards = []
    while True:
        obs, r, term, _, info = env.step(int(np.flatnonzero(obs["action_mask"])[0]))
        rewards.append(r)
        if term:
            break
    assert all(x == 0.0 for x in rewards[:-1])
    assert rewards[-1] == pytest.approx(-info["metrics"]["bsld"]) and rewards[-1] <= -1.0


def test_observation_encodes_the_queue():
    """Features of the visible jobs and the empty-slot pattern, checked against the trace by hand."""
    env = BatchSchedulingEnv(trace=TRACE, sequence_length=200)
    obs, info = env.reset(seed=0, options={"start": 300})
    sim = env.sim
    # advance a few decisions so that some jobs wait
    for _ in range(30):
        obs, *_ = env.step(0)
    visible = env._visible
    k = len(visible)
    assert obs["action_mask"][:k].all() and not obs["action_mask"][k:].any()
    q = obs["queue"]
    for slot, j in enumerate(visible):
        assert q[slot, 0] == pytest.approx(min((sim.now - TRACE.submit[j]) / MAX_WAIT, 1 - 1e-5), rel=1e-5)
        assert q[slot, 1] == pytest.approx(min(TRACE.req_time[j] / TRACE.max_run_time, 1 - 1e-5), rel=1e-5)
        assert q[slot, 2] == pytest.approx(TRACE.procs[j] / TRACE.procs_total, rel=1e-5)
        fits = TRACE.procs[j] <= sim.free
        assert q[slot, 7] == pytest.approx(1 - 1e-5 if fits else 1e-5)
    assert np.array_equal(q[k:], np.tile(EMPTY_SLOT, (128 - k, 1)))
    assert [TRACE.submit[j] for j in visible] == sorted(TRACE.submit[j] for j in visible)


def test_invalid_action_is_flagged_not_fatal():
    """An action on an empty slot is mapped onto a visible job and flagged."""
    env = BatchSchedulingEnv(trace=TRACE, sequence_length=16)
    env.reset(seed=0)
    _, _, _, _, info = env.step(127)
    assert info["invalid_action"] is True


def test_bad_arguments():
    """Unknown backfill/metric or a sequence longer than the trace are clear errors."""
    with pytest.raises(InputError, match="backfill"):
        BatchSchedulingEnv(trace=TRACE, backfill="fifo")
    with pytest.raises(InputError, match="metric"):
        BatchSchedulingEnv(trace=TRACE, metric="speed")
    with pytest.raises(InputError, match="fewer than sequence_length"):
        BatchSchedulingEnv(trace=TRACE, sequence_length=5000)


def test_trajectory_filter_keeps_sequences_in_range():
    """With SJF filtering every drawn sequence's SJF bsld lies in the configured range."""
    env = BatchSchedulingEnv(trace=TRACE, sequence_length=64, filter_heuristic="sjf", filter_range=(2.0, 50.0))
    for seed in range(5):
        _, info = env.reset(seed=seed)
        assert 2.0 < env._reference_bsld(info["start"]) < 50.0


def test_vectorised_envs_match_single_envs():
    """The lock-step vector env gives each env exactly the single env's observations for the same seed."""
    vec = VecBatchScheduling(3, seed=10, trace=TRACE, sequence_length=32)
    q, m = vec.reset()
    singles = [BatchSchedulingEnv(trace=TRACE, sequence_length=32) for _ in range(3)]
    obs = [e.reset(seed=10 + i)[0] for i, e in enumerate(singles)]
    for _ in range(20):
        for i in range(3):
            assert np.array_equal(q[i], obs[i]["queue"]) and np.array_equal(m[i], obs[i]["action_mask"].astype(bool))
        q, m, r, d, infos = vec.step(np.zeros(3, dtype=np.int64))
        for i, e in enumerate(singles):
            o, rr, term, _, _ = e.step(0)
            obs[i] = e.reset()[0] if term else o
            assert r[i] == rr


def test_long_queue_shows_the_interleaved_sjf_and_smallest_subset():
    """With more waiting jobs than slots, the visible set is SJF, smallest, SJF interleaved (no repeats)."""
    from torchhpc.ext.sched.observation import QueueObserver
    from torchhpc.ext.sched.simulator import ClusterSimulator

    sim = ClusterSimulator(TRACE, "none")
    obs = QueueObserver(TRACE, 16)
    sim.reset(100, 600)
    checked = 0
    while not sim.done:
        if len(sim.queue) > 16:
            q = sorted(sim.queue, key=lambda j: TRACE.submit[j])
            sjf = sorted(q, key=lambda j: (TRACE.req_time[j], TRACE.submit[j]))
            small = sorted(q, key=lambda j: (TRACE.procs[j], TRACE.submit[j]))
            expect = list(dict.fromkeys(j for trio in zip(sjf, small, sjf, strict=True) for j in trio))[:16]
            assert obs.visible(sim) == expect
            checked += 1
        sim.schedule(max(sim.queue, key=lambda j: TRACE.procs[j]))  # a poor policy, so queues grow
    assert checked > 10


def test_prior_column_ranks_the_jobs_as_the_heuristic_does():
    """prior="f1" adds column 8: each visible job's F1 rank / slots, 0 for the job F1 starts; check_env passes."""
    from torchhpc.ext.sched.heuristics import make_key

    env = gym.make("torchhpc/BatchScheduling-v0", trace=TRACE, sequence_length=64, prior="f1").unwrapped
    check_env(env)
    assert env.observation_space["queue"].shape == (128, 9)
    obs, _ = env.reset(seed=3)
    key = make_key("f1", env.sim)
    checked = 0
    while True:
        k = int(obs["action_mask"].sum())
        ranks = obs["queue"][:k, 8] * 128
        np.testing.assert_array_equal(np.sort(ranks), np.arange(k))  # a permutation of 0..k-1
        now = env.sim.now
        by_key = sorted(range(k), key=lambda i: key(env._visible[i], now))
        np.testing.assert_array_equal(ranks[by_key], np.arange(k))
        assert (obs["queue"][k:, 8] == 1.0).all()
        checked += k > 1
        obs, _, term, _, _ = env.step(int(ranks.argmin()))  # follow F1
        if term:
            break
    assert checked > 10
    with pytest.raises(InputError, match="unknown prior heuristic 'nope'"):
        BatchSchedulingEnv(trace=TRACE, prior="nope")


def test_context_columns_give_start_delay_free_processors_and_queue_length():
    """context=True: columns 8-10 against a by-hand release of the running jobs; the prior's rank stays last."""
    env = gym.make("torchhpc/BatchScheduling-v0", trace=TRACE, sequence_length=300, time_scale="linear", prior="f1",
                   context=True).unwrapped  # (made by its id: the checker also tests the render modes of a spec)
    check_env(env)
    assert env.observation_space["queue"].shape == (128, 12)
    obs, _ = env.reset(seed=0, options={"start": 400})
    sim = env.sim
    checked_late = 0
    for _ in range(120):
        obs, *_ = env.step(int(np.argmin(np.where(obs["action_mask"] > 0, obs["queue"][:, -1], 2.0))))
        q, visible = obs["queue"], env._visible
        for slot, j in enumerate(visible):
            need, free, delay = int(TRACE.procs[j]), sim.free, 0
            if need > free:  # release running jobs one by one in order of their requested end
                for _, req_end, p, _ in sorted(sim.running, key=lambda r: r[1]):
                    free += p
                    if free >= need:
                        delay = max(req_end - sim.now, 0)
                        break
                checked_late += 1
            assert q[slot, 8] == pytest.approx(min(delay / TRACE.max_run_time, 1 - 1e-5), rel=1e-5, abs=1e-7)
            assert (q[slot, 8] > 0) <= (q[slot, 7] < 0.5)  # a delay only for jobs that do not fit now
        k = len(visible)
        assert np.allclose(q[:k, 9], min(sim.free / TRACE.procs_total, 1 - 1e-5))
        assert np.allclose(q[:k, 10], min(len(sim.queue) / 128, 1 - 1e-5))
        assert np.array_equal(q[:k, -1] * 128, env.observer.prior_ranks(sim, visible))
        assert np.array_equal(q[k:], np.tile(env.observer.empty_slot, (128 - k, 1)))
    assert checked_late > 100  # the window is busy enough that many jobs had to wait


def test_vector_env_without_autoreset_waits_for_a_partial_reset():
    """autoreset=False: a finished env is inactive and skipped by step; reset(options=reset_mask, start) restarts
    only it, on the given window, without reseeding; rng_states/set_rng_states replay the window draws."""
    vec = VecBatchScheduling(2, seed=4, autoreset=False, trace=TRACE, sequence_length=8)
    vec.reset()
    first = vec.starts.copy()
    states = vec.rng_states()
    steps = 0
    while vec.active[0]:
        q, m, r, d, infos = vec.step(np.zeros(2, dtype=np.int64))
        steps += 1
    assert steps == 8 and d[0] and d[1] and "metrics" in infos[0] and r[0] < 0 and not vec.active.any()
    vec.step(np.zeros(2, dtype=np.int64))  # nothing active: nothing happens
    vec.reset(options={"reset_mask": np.array([False, True]), "start": np.array([0, first[0]])})
    assert vec.active.tolist() == [False, True] and vec.starts[1] == first[0]
    vec.reset(options={"reset_mask": np.array([True, False])})  # draws env 0's next window from its stream
    drawn = vec.starts[0]
    vec.set_rng_states(states)
    vec.reset(options={"reset_mask": np.array([True, False])})
    assert vec.starts[0] == drawn
