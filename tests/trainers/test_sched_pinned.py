"""Pinned results of the sched debug config: a refactor of the PPO loop must reproduce them.

The values below were produced by the code before the refactor "One shape for every system", at commit
67fa2f8 (``torchhpc sched train --config configs/sched/debug.yaml`` and ``torchhpc sched eval`` on its run,
OMP_NUM_THREADS=1, on a CPU).  Wall-clock fields (``time``, ``*_s``, ``decisions_per_s``,
``train_seconds``) are left out.

Classified by the suite's tolerance policy (tests/README.md):

* exact: steps, epochs, sequences, decisions, PPO steps taken, the fraction of a step kept, the chosen
  epoch and its windows;
* float64 arithmetic of a fixed schedule (rel 1e-12): every slowdown, wait, turnaround and utilisation;
  they follow from the jobs' start times alone;
* float32 trajectory (rel 1e-5): the critic's loss; ``approx_kl`` (a mean of differences of nearly equal
  log-probabilities) to 1e-7 absolute;
* margins, because the schedule is a discrete outcome of float probabilities: every sampled action
  (``multinomial``), every greedy one (``argmax``) and every KL-limit decision of the policy update is
  recorded while the run happens, and each is asserted to be farther from flipping than another CPU's
  rounding moves it (:data:`CHOICE_MARGIN`, :data:`KL_MARGIN`).

Bit-for-bit equality of a refactor is checked outside the suite, on one host (``tools/compare_commits.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness.margins import ChoiceMargins
from harness.tolerance import FLOAT32_TRAJECTORY, FLOAT64_FIXED, assert_close_tree

REPO = Path(__file__).resolve().parents[2]
DEBUG = str(REPO / "configs/sched/debug.yaml")
VOLATILE = {"time", "decisions_per_s", "rollout_s", "epoch_s", "train_seconds"}

#: relative margin every sampled or greedy action must keep over its runner-up: 10x the float32
#: trajectory tolerance, by which another CPU's probabilities may differ
CHOICE_MARGIN = 1e-4
#: absolute margin of every approximate KL from the policy update's limit (1.5 x target_kl): 10x the
#: tolerance of approx_kl itself
KL_MARGIN = 1e-6
RULES = {"approx_kl": (0.0, 1e-7), "loss_v": FLOAT32_TRAJECTORY}

#: the group advantage, the F1 prior, KL backtracking, minibatches, the log-ratio reward and held-out selection
VARIANT = ["--set", "ppo.advantage=group", "--set", "ppo.kl_backtrack=8", "--set", "ppo.pi_lr=0.5",
           "--set", "ppo.target_kl=0.002", "--set", "env.reward=log_ratio", "--set", "ppo.minibatch=48",
           "--set", "env.prior=f1", "--set", "eval.validate=2", "--set", "eval.validate_length=64",
           "--set", "eval.validate_every=1"]

#: the heuristics' figures on the evaluation windows (the same windows in both runs)
HEURISTIC_EVAL = {'fcfs': {'bsld': 1042.5458184336749,
                           'wait': 44725.125,
                           'turnaround': 49835.39453125,
                           'slowdown': 1728.7755152342702,
                           'util': 0.5998713224043266,
                           'util_rlscheduler': 0.6706403704588187},
                  'sjf': {'bsld': 350.25700289296947,
                          'wait': 20220.2265625,
                          'turnaround': 25330.49609375,
                          'slowdown': 572.6983099366203,
                          'util': 0.6407707520258425,
                          'util_rlscheduler': 0.7947604577883364},
                  'f1': {'bsld': 291.28533688005353,
                         'wait': 12683.90234375,
                         'turnaround': 17794.171875,
                         'slowdown': 492.23709314245434,
                         'util': 0.7576950418681543,
                         'util_rlscheduler': 0.866231323387606}}

DEBUG_METRICS = [{'step': 1,
  'epoch': 1,
  'train_bsld': 607.8732245066491,
  'sequences': 8,
  'pi_steps': 5,
  'approx_kl': 5.2478862926363945e-06,
  'step_kept': 1.0,
  'loss_v': 518751.0,
  'decisions': 512,
  'train_sjf_bsld': 315.90070012245155,
  'train_f1_bsld': 292.8052818140133},
 {'step': 2,
  'epoch': 2,
  'train_bsld': 362.5954676040743,
  'sequences': 8,
  'pi_steps': 5,
  'approx_kl': 7.023336365818977e-07,
  'step_kept': 1.0,
  'loss_v': 205024.984375,
  'decisions': 512,
  'train_sjf_bsld': 206.78569019271703,
  'train_f1_bsld': 205.59633960345687,
  'eval_bsld': 1005.9332578435705}]

DEBUG_SUMMARY = {'epochs': 2,
 'world_size': 1,
 'eval': {'rl': {'bsld': 1005.9332578435705,
                 'wait': 41448.55859375,
                 'turnaround': 46558.828125,
                 'slowdown': 1568.0876616754158,
                 'util': 0.5816003764476397,
                 'util_rlscheduler': 0.6327041050789012},
          **HEURISTIC_EVAL},
 'final_train_bsld': 362.5954676040743}

VARIANT_METRICS = [{'step': 1,
  'epoch': 1,
  'train_bsld': 489.2541020715351,
  'sequences': 2,
  'pi_steps': 1,
  'approx_kl': 0.0025012088008224964,
  'step_kept': 0.125,
  'loss_v': 0.0,
  'decisions': 512,
  'train_sjf_bsld': 489.40635692327953,
  'train_f1_bsld': 475.8974575783684,
  'val_bsld': 465.32178446464513},
 {'step': 2,
  'epoch': 2,
  'train_bsld': 101.45603709278218,
  'sequences': 2,
  'pi_steps': 1,
  'approx_kl': 0.0014547047903761268,
  'step_kept': 0.5,
  'loss_v': 0.0,
  'decisions': 512,
  'train_sjf_bsld': 96.16972111401574,
  'train_f1_bsld': 101.38735715922346,
  'eval_bsld': 291.32656519463916,
  'val_bsld': 465.32178446464513}]

VARIANT_SUMMARY = {'epochs': 2,
 'world_size': 1,
 'best': {'epoch': 1,
          'val_bsld': 465.32178446464513,
          'validation_starts': [100, 1387],
          'validation_length': 64,
          'validation_heuristics': {'fcfs': 560.984801812543, 'sjf': 465.299590924571, 'f1': 465.32178446464513}},
 'eval': {'rl': {'bsld': 291.32656519463916,
                 'wait': 13066.609375,
                 'turnaround': 18176.87890625,
                 'slowdown': 492.27832145703997,
                 'util': 0.7510574933940315,
                 'util_rlscheduler': 0.8584764742036769},
          'rl_best': {'bsld': 291.32656519463916,
                      'wait': 13066.609375,
                      'turnaround': 18176.87890625,
                      'slowdown': 492.27832145703997,
                      'util': 0.7510574933940315,
                      'util_rlscheduler': 0.8584764742036769},
          **HEURISTIC_EVAL},
 'final_train_bsld': 101.45603709278218}

EVAL_JSON = {'rl': {'bsld': 1160.1717887965285,
        'wait': 49213.412109375,
        'turnaround': 54323.681640625,
        'slowdown': 1744.8956463734135,
        'util': 0.5727602916110586,
        'util_rlscheduler': 0.6269006102446544},
 'fcfs': {'bsld': 1042.5458184336749,
          'wait': 44725.125,
          'turnaround': 49835.39453125,
          'slowdown': 1728.7755152342702,
          'util': 0.5998713224043266,
          'util_rlscheduler': 0.6706403704588187},
 'sjf': {'bsld': 350.25700289296947,
         'wait': 20220.2265625,
         'turnaround': 25330.49609375,
         'slowdown': 572.6983099366203,
         'util': 0.6407707520258425,
         'util_rlscheduler': 0.7947604577883364},
 'f1': {'bsld': 291.28533688005353,
        'wait': 12683.90234375,
        'turnaround': 17794.171875,
        'slowdown': 492.23709314245434,
        'util': 0.7576950418681543,
        'util_rlscheduler': 0.866231323387606}}


class KLDecisions:
    """Records every approximate KL that the policy update compares with its limit (``kl > 1.5 target_kl``
    stops it; with backtracking, ``kl <= limit`` ends the halving), and the limit it was compared with.

    Every such estimate is a call of ``ppo.approx_kl`` inside ``ppo.policy_update`` (the training job calls both
    through the module, so the patched ones are the ones that run)."""

    def __init__(self, monkeypatch) -> None:
        from torchhpc.ext.sched import ppo

        self.seen: list[tuple[float, float]] = []
        update, estimate = ppo.policy_update, ppo.approx_kl
        limit: list[float] = []

        def policy_update(*args, target_kl, **kwargs):
            limit.append(1.5 * target_kl)
            try:
                return update(*args, target_kl=target_kl, **kwargs)
            finally:
                limit.pop()

        def approx_kl(*args, **kwargs):
            value = estimate(*args, **kwargs)
            if limit:  # inside policy_update, where every estimate is compared with the limit
                self.seen.append((value, limit[-1]))
            return value

        monkeypatch.setattr(ppo, "policy_update", policy_update)
        monkeypatch.setattr(ppo, "approx_kl", approx_kl)

    @property
    def smallest(self) -> float:
        return min((abs(kl - lim) for kl, lim in self.seen), default=float("inf"))


def _train(torchhpc_main, monkeypatch, root: Path, run_id: str, *extra: str) -> tuple[list[dict], dict]:
    """Train in this process with every float-fed choice recorded; assert their margins."""
    kl = KLDecisions(monkeypatch)
    with ChoiceMargins() as choices:
        code, _, err = torchhpc_main("sched", "train", "--config", DEBUG, "--set", f"run.root={root}",
                                     "--set", f"run.run_id={run_id}", "--set", "run.progress=false", *extra)
    assert code == 0, err[-3000:]
    assert choices.sampled and kl.seen
    assert choices.smallest > CHOICE_MARGIN, f"an action was {choices.smallest:.2e} (relative) from flipping"
    assert kl.smallest > KL_MARGIN, f"a KL-limit decision was {kl.smallest:.2e} from flipping"
    run = root / "sched" / run_id
    rows = [{k: v for k, v in json.loads(x).items() if k not in VOLATILE}
            for x in (run / "metrics.jsonl").read_text().splitlines()]
    summary = {k: v for k, v in json.loads((run / "summary.json").read_text()).items() if k not in VOLATILE}
    return rows, summary


@pytest.fixture
def train(torchhpc_main, monkeypatch, tmp_path):
    return lambda run_id, *extra: _train(torchhpc_main, monkeypatch, tmp_path, run_id, *extra)


def test_debug_config_metrics_and_eval_are_pinned(train, torchhpc_main, tmp_path):
    """configs/sched/debug.yaml trains to the pinned per-epoch metrics and summary, and `sched eval` on its
    checkpoint (2 sampled passes) prints the pinned table; no sampled action was near a tie."""
    rows, summary = train("pin")
    assert_close_tree(rows, DEBUG_METRICS, FLOAT64_FIXED, rules=RULES, where="metrics")
    assert_close_tree(summary, DEBUG_SUMMARY, FLOAT64_FIXED, rules=RULES, where="summary")
    with ChoiceMargins() as choices:
        code, out, err = torchhpc_main("sched", "eval", "--checkpoint", str(tmp_path / "sched" / "pin"),
                                       "--generate-jobs", "3000", "--starts", "500,1500", "--length", "128",
                                       "--samples", "2", "--json")
    assert code == 0, err[-3000:]
    assert choices.sampled and choices.smallest > CHOICE_MARGIN
    assert_close_tree(json.loads(out.splitlines()[-1]), EVAL_JSON, FLOAT64_FIXED, where="eval")


def test_group_prior_backtrack_variant_is_pinned(train):
    """The debug config with the group advantage, the F1 prior, KL backtracking, minibatches, the log-ratio
    reward and held-out selection trains to the pinned metrics and summary."""
    rows, summary = train("var", *VARIANT)
    assert_close_tree(rows, VARIANT_METRICS, FLOAT64_FIXED, rules=RULES, where="metrics")
    assert_close_tree(summary, VARIANT_SUMMARY, FLOAT64_FIXED, rules=RULES, where="summary")
