"""Pinned results of the sched debug config: a refactor of the PPO loop must reproduce them exactly.

The values below were produced by the code before the refactor "One shape for every system", at commit
67fa2f8 (``torchhpc sched train --config configs/sched/debug.yaml`` and ``torchhpc sched eval`` on its run,
OMP_NUM_THREADS=1, on a CPU). Every figure is compared with ``==``: the same weights, the same draws of job
windows and actions, in the same order. Only wall-clock fields (``time``, ``*_s``, ``decisions_per_s``,
``train_seconds``) are left out.
"""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEBUG = str(REPO / "configs/sched/debug.yaml")
VOLATILE = {"time", "decisions_per_s", "rollout_s", "epoch_s", "train_seconds"}

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


def _train(cli, root: Path, run_id: str, *extra: str) -> tuple[list[dict], dict]:
    res = cli("sched", "train", "--config", DEBUG, "--set", f"run.root={root}", "--set", f"run.run_id={run_id}",
              "--set", "run.progress=false", *extra)
    assert res.returncode == 0, res.stderr[-3000:]
    run = root / "sched" / run_id
    rows = [{k: v for k, v in json.loads(x).items() if k not in VOLATILE}
            for x in (run / "metrics.jsonl").read_text().splitlines()]
    summary = {k: v for k, v in json.loads((run / "summary.json").read_text()).items() if k not in VOLATILE}
    return rows, summary


def test_debug_config_metrics_and_eval_are_pinned(cli, tmp_path):
    """configs/sched/debug.yaml trains to the pinned per-epoch metrics and summary, and `sched eval` on its
    checkpoint (2 sampled passes) prints the pinned table."""
    rows, summary = _train(cli, tmp_path, "pin")
    assert rows == DEBUG_METRICS
    assert summary == DEBUG_SUMMARY
    res = cli("sched", "eval", "--checkpoint", str(tmp_path / "sched" / "pin"), "--generate-jobs", "3000",
              "--starts", "500,1500", "--length", "128", "--samples", "2", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout.splitlines()[-1]) == EVAL_JSON


def test_group_prior_backtrack_variant_is_pinned(cli, tmp_path):
    """The debug config with the group advantage, the F1 prior, KL backtracking, minibatches, the log-ratio
    reward and held-out selection trains to the pinned metrics and summary."""
    rows, summary = _train(cli, tmp_path, "var", *VARIANT)
    assert rows == VARIANT_METRICS
    assert summary == VARIANT_SUMMARY
