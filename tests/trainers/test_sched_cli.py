"""torchhpc sched: the heuristics table, training from a config (resume included), evaluation, torchrun."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness.multiproc import torchrun

REPO = Path(__file__).resolve().parents[2]
DEBUG = str(REPO / "configs/sched/debug.yaml")


def test_heuristics_json_reproduces_published_columns(cli, shared_data):
    """The CLI's JSON for Lublin-1 with the paper's windows gives the published SJF and F1 numbers."""
    res = cli("sched", "heuristics", "--trace", str(shared_data / "swf/lublin_256.swf"), "--starts", "published",
              "--length", "1024", "--policy", "sjf", "--policy", "f1", "--backfill", "rlscheduler", "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout)
    assert round(out["sjf"]["bsld"], 2) == 73.31 and round(out["f1"]["bsld"], 2) == 75.07
    assert set(out["sjf"]) >= {"bsld", "wait", "util"}


def test_heuristics_table_on_a_generated_trace(cli):
    """Without --trace the command runs on a generated Lublin trace and prints a table."""
    res = cli("sched", "heuristics", "--sequences", "2", "--length", "200", "--generate-jobs", "2000")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "sjf" in res.stdout and "wfp3_rlscheduler" in res.stdout and "bsld" in res.stdout


def test_too_big_jobs_and_bad_windows_are_one_line_errors(cli, tmp_path):
    """A job larger than the machine suggests --procs; a window outside the trace names it."""
    swf = tmp_path / "small.swf"
    swf.write_text("; MaxNodes: 4\n" + "\n".join(
        f"{i} {i * 10} -1 50 {8 if i == 3 else 2} -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1" for i in range(1, 6)) + "\n")
    res = cli("sched", "heuristics", "--trace", str(swf), "--start", "0", "--length", "3")
    assert res.returncode == 1 and "--procs 8" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    res = cli("sched", "heuristics", "--trace", str(swf), "--procs", "8", "--start", "3", "--length", "3")
    assert res.returncode == 1 and "outside" in res.stderr and "Traceback" not in res.stderr


def test_train_resume_and_eval(cli, cli_here, tmp_path):
    """Train the debug config, resume it for one more epoch from its checkpoint, then evaluate it."""
    common = ["--config", DEBUG, "--set", f"run.root={tmp_path}", "--set", "run.run_id=r", "--set", "run.progress=false"]
    res = cli_here("sched", "train", *common, "--set", "ppo.epochs=1")
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "sched" / "r"
    assert (run / "checkpoints" / "ckpt-00000001.pt").exists()
    res = cli_here("sched", "train", *common, "--set", "ppo.epochs=2", "--set", "run.resume=true")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2]
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary["eval"]) >= {"rl", "sjf", "f1"} and (run / "learning_curve.png").exists()
    # a run whose checkpoints are gone: resuming says it starts over (it did so without a word)
    import shutil

    shutil.copytree(run, tmp_path / "sched" / "bare", ignore=shutil.ignore_patterns("checkpoints"))
    bare = [a if a != "run.run_id=r" else "run.run_id=bare" for a in common]
    res = cli_here("sched", "train", *bare, "--set", "ppo.epochs=1", "--set", "run.resume=true")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "torchhpc: warning: run bare has no checkpoint to resume from: training starts at epoch 0" in res.stderr
    res = cli_here("sched", "eval", "--checkpoint", str(run), "--generate-jobs", "3000", "--trace-seed", "0",
                   "--starts", "500,1500", "--length", "128", "--samples", "2", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert set(out) == {"rl", "fcfs", "sjf", "f1"} and out["rl"]["bsld"] >= 1.0
    # the checkpoint records the backfilling it was trained with, so a copy away from its run still knows it;
    # one that does not (older, or no config.yaml beside it) is unknown, and eval says so instead of guessing
    import torch

    from torchhpc.ext.sched.commands import policy_source

    (tmp_path / "cp").mkdir()
    blob = torch.load(run / "checkpoints" / "ckpt-00000002.pt", weights_only=False)
    assert blob["state"]["backfill"] == "none"
    torch.save(blob, tmp_path / "cp" / "mine.pt")
    assert policy_source(str(tmp_path / "cp" / "mine.pt"))[3] == "none"
    del blob["state"]["backfill"]
    torch.save(blob, tmp_path / "cp" / "old.pt")
    assert policy_source(str(tmp_path / "cp" / "old.pt"))[3] is None
    res = cli_here("sched", "eval", "--checkpoint", str(run), "--generate-jobs", "3000", "--starts", "500,1500",
                   "--length", "128", "--greedy")
    assert res.returncode == 0 and "has the lower bsld: fcfs " in res.stdout and "/2" in res.stdout
    ratio = [x for x in res.stdout.splitlines() if x.startswith("RL bsld / f1 bsld: ")]
    assert len(ratio) == 1 and "paired bootstrap interval over the 2 windows" in ratio[0]
    assert list(run.glob("eval_*_best.png"))
    # no trace option: the trace the run was trained on (its config.yaml: generated, 3000 jobs), not the
    # default generated one (10,000 jobs); the same scores as naming it, and the box plot where --plot says
    window = ["--starts", "500,1500", "--length", "128", "--greedy"]
    named = cli_here("sched", "eval", "--checkpoint", str(run), "--generate-jobs", "3000", *window, "--json")
    res = cli_here("sched", "eval", "--checkpoint", str(run), *window, "--json", "--plot",
                   str(tmp_path / "p" / "e.svg"))
    assert named.returncode == res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout) == json.loads(named.stdout) and (tmp_path / "p" / "e.svg").stat().st_size > 0
    default = cli_here("sched", "eval", "--checkpoint", str(run), "--generate-jobs", "10000", *window, "--json")
    assert json.loads(default.stdout) != json.loads(res.stdout)
    res = cli_here("sched", "eval", "--checkpoint", str(run), *window)
    assert res.returncode == 0 and "(the one it was trained on)" in res.stdout.splitlines()[0]
    res = cli("sched", "eval", "--checkpoint", str(run), *window, "--plot", str(tmp_path / "e.txt"))
    assert res.returncode == 1 and res.stderr.strip().splitlines() == [res.stderr.strip()]
    assert "must end in one of" in res.stderr and ".png" in res.stderr


def test_eval_of_a_shipped_policy_reads_the_trace_it_was_trained_on(shared_data, tmp_path, monkeypatch):
    """A shipped policy's card records the SWF file it was trained on (as a path from the repository): it is the
    file of that name in the shared data, whatever lies at that path from the current folder. A run's relative
    path stays relative to where it runs; a malformed section is no record."""
    from torchhpc.ext.sched.commands import trained_trace

    decoy = tmp_path / "shared" / "data" / "swf" / "lublin_256.swf"  # what the card's ../shared/... names from a/
    decoy.parent.mkdir(parents=True)
    decoy.write_text("; not the trace\n")
    (tmp_path / "a").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    trace = trained_trace("pretrained:lublin1", tmp_path / "a")
    assert Path(trace["path"]).resolve() == (shared_data / "swf" / "lublin_256.swf").resolve() != decoy.resolve()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.yaml").write_text("trace:\n  path: nowhere/mine.swf\n  strict: false\n")
    assert trained_trace(str(tmp_path), tmp_path) == {"path": "nowhere/mine.swf", "strict": False}
    (tmp_path / "config.yaml").write_text("trace: [1, 2]\n")
    assert trained_trace(str(tmp_path), tmp_path) is None


def test_eval_finds_the_trained_trace_or_says_why_not(cli, cli_here, tmp_path, shared_data):
    """A run trained on an SWF file read leniently is evaluated on that file, leniently, from another folder (its
    absolute path on the first line); a run whose relative trace is not found from here is one line that
    says so (not a file of the same name elsewhere); the unset generated setting comes from the training;
    --which on a single file and --lenient with a generated trace are refused."""
    import shutil

    swf = tmp_path / "t" / "lublin_256.swf"
    swf.parent.mkdir()
    lines = (shared_data / "swf" / "lublin_256.swf").read_text().splitlines()
    swf.write_text("\n".join(lines[:3000] + ["this is not an SWF line"] + lines[3000:3400]) + "\n")
    common = ["--config", DEBUG, "--set", f"run.root={tmp_path}", "--set", "run.progress=false", "--set",
              "ppo.epochs=1", "--set", "trace.strict=false", "--set", "eval.starts=[100]"]
    res = cli_here("sched", "train", *common, "--set", "run.run_id=file", "--set", f"trace.path={swf}")
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "sched" / "file"
    window = ["--start", "100", "--length", "64", "--greedy"]
    res = cli_here("sched", "eval", "--checkpoint", str(run), *window)
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"(the one it was trained on: {swf.resolve()})" in res.stdout.splitlines()[0]
    # the same run with its trace given relative to the folder it was trained in, evaluated from elsewhere
    shutil.copytree(run, tmp_path / "sched" / "rel")
    config = (tmp_path / "sched" / "rel" / "config.yaml")
    config.write_text(config.read_text().replace(str(swf), "t/lublin_256.swf"))
    res = cli("sched", "eval", "--checkpoint", str(tmp_path / "sched" / "rel"), *window)
    assert res.returncode == 1 and res.stderr.strip().splitlines() == [
        "torchhpc: error: the policy was trained on the trace t/lublin_256.swf (a path from the folder it was "
        "trained in), which is not here: give --trace FILE, or --generate-jobs N to evaluate on a generated trace"]
    res = cli_here("sched", "eval", "--checkpoint", str(run / "checkpoints" / "ckpt-00000001.pt"), *window,
                   "--which", "last")
    assert res.returncode == 1 and "--which last would be ignored" in res.stderr
    res = cli_here("sched", "eval", "--checkpoint", str(run), *window, "--generate-jobs", "3000", "--lenient")
    assert res.returncode == 1 and "--lenient would be ignored" in res.stderr
    # trained on a generated trace of 3000 jobs: --trace-seed alone keeps its 3000 jobs
    res = cli_here("sched", "train", *common[:-4], "--set", "run.run_id=gen", "--set", "eval.starts=[100]")
    assert res.returncode == 0, res.stderr[-3000:]
    res = cli_here("sched", "eval", "--checkpoint", str(tmp_path / "sched" / "gen"), *window, "--trace-seed", "5")
    assert res.returncode == 0 and "trace lublin(seed=5, jobs=3000)" in res.stdout.splitlines()[0]
    assert list((tmp_path / "sched" / "gen").glob("eval_lublin_seed_5_jobs_3000_none_best.png"))

def test_train_with_the_relative_reward(cli_here, tmp_path):
    """env.reward=log_ratio trains (one epoch); an unknown reference heuristic is a one-line error."""
    common = ["--config", DEBUG, "--set", f"run.root={tmp_path}", "--set", "run.run_id=rel",
              "--set", "run.progress=false", "--set", "ppo.epochs=1", "--set", "env.reward=log_ratio"]
    res = cli_here("sched", "train", *common)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "sched" / "rel" / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["train_bsld"] >= 1.0
    res = cli_here("sched", "train", *common, "--set", "env.reward_reference=nope")
    assert res.returncode == 1 and "unknown heuristic 'nope'" in res.stderr


def test_group_advantage_replays_each_sequence_and_checks_group_sizes(cli, cli_here, tmp_path):
    """ppo.advantage=group: 8 trajectories in groups of 4 schedule 2 distinct job windows per epoch; a group
    size that does not divide the trajectories is a one-line error."""
    common = ["--config", DEBUG, "--set", f"run.root={tmp_path}", "--set", "run.run_id=grp",
              "--set", "run.progress=false", "--set", "ppo.advantage=group", "--set", "ppo.group_size=4"]
    res = cli_here("sched", "train", *common)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "sched" / "grp" / "metrics.jsonl").read_text().splitlines()]
    assert [r["sequences"] for r in rows] == [2, 2] and all(r["pi_steps"] > 0 for r in rows)
    res = cli("sched", "train", *common, "--set", "ppo.group_size=3")
    assert res.returncode == 1 and "multiples of ppo.group_size (3)" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    res = cli_here("sched", "train", *common, "--set", "env.prior=f1", "--set", "ppo.policy=flat")
    assert res.returncode == 1 and "env.prior needs ppo.policy=kernel" in res.stderr
    res = cli_here("sched", "train", *common, "--set", "env.prior=nope")
    assert res.returncode == 1 and "unknown heuristic 'nope'" in res.stderr


def test_kl_backtrack_keeps_each_epoch_within_the_kl_limit(cli_here, tmp_path):
    """With a learning rate far too large, the step before PPO's early stop overshoots the KL limit; with
    ppo.kl_backtrack that step is halved (or undone) until the KL is back within 1.5 x target_kl."""
    common = ["--config", DEBUG, "--set", f"run.root={tmp_path}", "--set", "run.progress=false",
              "--set", "ppo.epochs=3", "--set", "ppo.pi_lr=0.5", "--set", "ppo.target_kl=0.002"]
    limit = 1.5 * 0.002

    def rows(run_id, *extra):
        res = cli_here("sched", "train", *common, "--set", f"run.run_id={run_id}", *extra)
        assert res.returncode == 0, res.stderr[-3000:]
        return [json.loads(x) for x in (tmp_path / "sched" / run_id / "metrics.jsonl").read_text().splitlines()]

    plain = rows("plain")
    assert any(r["approx_kl"] > limit for r in plain)
    guarded = rows("guard", "--set", "ppo.kl_backtrack=10")
    assert all(r["approx_kl"] <= limit for r in guarded)
    assert any(r["step_kept"] < 1 for r in guarded)


def test_imitation_only_keeps_the_cloned_policy(cli_here, tmp_path):
    """ppo.epochs=0 with ppo.imitate saves the behaviour-cloned policy as epoch 0 for `sched eval`; without
    ppo.imitate it is a one-line error."""
    common = ["--config", DEBUG, "--set", f"run.root={tmp_path}", "--set", "run.run_id=bc",
              "--set", "run.progress=false", "--set", "ppo.epochs=0"]
    res = cli_here("sched", "train", *common, "--set", "ppo.imitate=f1")
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "sched" / "bc"
    assert json.loads((run / "summary.json").read_text())["imitation"]["accuracy"] > 0.3
    res = cli_here("sched", "eval", "--checkpoint", str(run), "--generate-jobs", "3000", "--starts", "500,1500",
                   "--length", "128", "--greedy")
    assert res.returncode == 0 and "checkpoint: epoch 0" in res.stdout, res.stderr[-2000:]
    res = cli_here("sched", "train", *common, "--set", "run.run_id=none")
    assert res.returncode == 1 and "trains nothing without ppo.imitate or env.prior" in res.stderr


def test_context_features_train_and_evaluate_from_the_checkpoint(cli_here, tmp_path):
    """env.context=true (with the F1 prior) trains, records itself in the checkpoint, and `sched eval` rebuilds
    the 12-column observation: the untrained prior policy schedules exactly as F1 does."""
    common = ["--config", DEBUG, "--set", f"run.root={tmp_path}", "--set", "run.progress=false",
              "--set", "env.context=true", "--set", "env.prior=f1", "--set", "ppo.advantage=group"]
    res = cli_here("sched", "train", *common, "--set", "run.run_id=ctx", "--set", "ppo.epochs=1")
    assert res.returncode == 0, res.stderr[-3000:]
    res = cli_here("sched", "train", *common, "--set", "run.run_id=ctx0", "--set", "ppo.epochs=0")
    assert res.returncode == 0, res.stderr[-3000:]
    for run_id in ("ctx", "ctx0"):
        res = cli_here("sched", "eval", "--checkpoint", str(tmp_path / "sched" / run_id), "--generate-jobs", "3000",
                       "--starts", "500,1500", "--length", "128", "--greedy", "--policy", "f1", "--json")
        assert res.returncode == 0, res.stderr[-2000:]
        out = json.loads(res.stdout.splitlines()[-1])
        assert out["rl"]["bsld"] >= 1
    assert out["rl"]["bsld"] == out["f1"]["bsld"]  # ctx0: untrained, so its greedy choice is F1's
    # resuming with another observation is a one-line error, not a state_dict shape mismatch
    res = cli_here("sched", "train", *common, "--set", "run.run_id=ctx", "--set", "ppo.epochs=2",
                   "--set", "run.resume=true", "--set", "env.context=false")
    assert res.returncode == 1 and "run ctx was trained with env.context=true; resume it with the same" in res.stderr
    assert "Traceback" not in res.stderr


def test_held_out_selection_keeps_the_best_checkpoint(cli_here, tmp_path):
    """With eval.validate the run keeps the checkpoint of its best held-out score, reports it, scores it on
    the test windows, and `sched eval` loads it unless --which last."""
    common = ["--config", DEBUG, "--set", f"run.root={tmp_path}", "--set", "run.run_id=val",
              "--set", "run.progress=false", "--set", "ppo.epochs=3", "--set", "eval.validate=3",
              "--set", "eval.validate_length=64", "--set", "eval.validate_every=1"]
    res = cli_here("sched", "train", *common)
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "sched" / "val"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    vals = [r["val_bsld"] for r in rows]
    summary = json.loads((run / "summary.json").read_text())
    best_epoch = summary["best"]["epoch"]
    assert summary["best"]["val_bsld"] == min(vals) == vals[best_epoch - 1]
    for s in summary["best"]["validation_starts"]:  # no job shared with the test windows [500, 628), [1500, 1628)
        assert s + 64 <= 500 or s >= 628
        assert s + 64 <= 1500 or s >= 1628
    assert set(summary["eval"]) >= {"rl", "rl_best", "sjf"} and summary["best"]["validation_heuristics"]["sjf"] >= 1
    assert [p.name for p in (run / "checkpoints").glob("best-*.pt")] == [f"best-{best_epoch:08d}.pt"]
    args = ["sched", "eval", "--checkpoint", str(run), "--generate-jobs", "3000", "--starts", "500,1500",
            "--length", "128", "--greedy"]
    res = cli_here(*args)
    assert res.returncode == 0 and f"checkpoint: epoch {best_epoch}" in res.stdout, res.stderr[-2000:]
    res = cli_here(*args, "--which", "last")
    assert res.returncode == 0 and "checkpoint: epoch 3" in res.stdout, res.stderr[-2000:]


def test_unknown_config_key_is_one_line(cli_here, tmp_path):
    """A typo in a sched config key fails before training, naming the key."""
    res = cli_here("sched", "train", "--config", DEBUG, "--set", "ppo.epoch=3")
    assert res.returncode == 1 and "unknown key 'ppo.epoch'" in res.stderr


@pytest.mark.distributed
@pytest.mark.parametrize("extra", [[], ["--set", "ppo.advantage=group", "--set", "env.prior=f1",
                                         "--set", "ppo.kl_backtrack=8", "--set", "ppo.pi_lr=0.5",
                                         "--set", "ppo.target_kl=0.002"]],
                         ids=["gae", "group-prior-backtrack"])
def test_torchrun_two_rollout_workers(tmp_path, extra):
    """torchrun with 2 workers trains the debug config (critic + GAE, or the shipped config's group advantage
    and F1 prior, with a step size that makes KL backtracking act) with synchronised gradients and one run
    folder; with GAE its first epoch equals one process's PPO update on the union of the two ranks' rollouts
    (:func:`one_process_epoch`): the same windows, metrics, and weights up to round-off."""
    res = torchrun(2, ["-m", "torchhpc.trainers.sched", "--config", DEBUG, "--set", f"run.root={tmp_path}",
                       "--set", "run.run_id=dist", "--set", "run.progress=false", *extra], timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "sched" / "dist"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and rows[0]["decisions"] > 0
    # both ranks wrote their shard and ended with identical weights (gradients were averaged)
    import torch

    w = [torch.load(run / "checkpoints" / f"ckpt-00000002.rank{r}.pt", weights_only=False)["state"]["agent"]
         for r in (0, 1)]
    assert all(torch.equal(w[0][k], w[1][k]) for k in w[0])
    if extra:
        assert any(r["step_kept"] < 1 for r in rows) and all(r["approx_kl"] <= 0.003 for r in rows)
        return  # the ranks halved the same steps, on the KL averaged over both
    # ... and they equal one process: the first epoch is one PPO update on the union of both ranks' rollouts
    first = [torch.load(run / "checkpoints" / f"ckpt-00000001.rank{r}.pt", weights_only=False)["state"]
             for r in (0, 1)]
    one = one_process_epoch(run / "config.yaml", world=2)
    assert [s["env_rng"] for s in first] == one["env_rng"]  # each rank drew the windows its seeds give
    assert rows[0]["decisions"] == one["decisions"] and rows[0]["sequences"] == one["sequences"]
    assert rows[0]["train_bsld"] == pytest.approx(one["train_bsld"], rel=1e-12)
    assert rows[0]["pi_steps"] == one["pi_steps"] and rows[0]["step_kept"] == one["step_kept"]
    assert rows[0]["approx_kl"] == pytest.approx(one["approx_kl"], abs=1e-7)  # a mean of float32 differences
    assert rows[0]["loss_v"] == pytest.approx(one["loss_v"], rel=1e-4)
    # The weights agree to float32 round-off (the sums run in another order), except where a gradient is zero
    # up to round-off (the shift of the logits, dead units): there Adam's normalised step turns round-off into up
    # to one learning rate per step. So: the difference is < 1% of how far the epoch moved the weights (another
    # batch moves them as far again), and no entry differs by more than pi_iters Adam steps.
    diff = sum(float((first[0]["agent"][k] - v).pow(2).sum()) for k, v in one["agent"].items()) ** 0.5
    moved = sum(float((first[0]["agent"][k] - v).pow(2).sum()) for k, v in one["initial"].items()) ** 0.5
    assert diff <= 1e-2 * moved, (diff, moved)
    bound = one["pi_iters"] * one["pi_lr"] * 1.01
    assert all(float((first[0]["agent"][k] - v).abs().max()) <= bound for k, v in one["agent"].items())


@pytest.mark.distributed
def test_nproc_relaunches_the_job_under_torchrun(cli, tmp_path):
    """`sched train --nproc 2` runs the job on 2 torchrun ranks itself: one run folder, a checkpoint shard per
    rank with the same weights, and the run's config records the 2 ranks (so a resume from it uses them)."""
    res = cli("sched", "train", "--config", DEBUG, "--set", f"run.root={tmp_path}", "--set", "run.run_id=np",
              "--set", "run.progress=false", "--set", "ppo.epochs=1", "--nproc", "2")
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "sched" / "np"
    import torch
    import yaml

    w = [torch.load(run / "checkpoints" / f"ckpt-00000001.rank{r}.pt", weights_only=False)["state"] for r in (0, 1)]
    assert w[0]["world_size"] == w[1]["world_size"] == 2
    assert all(torch.equal(w[0]["agent"][k], w[1]["agent"][k]) for k in w[0]["agent"])
    assert yaml.safe_load((run / "config.yaml").read_text())["dist"]["nproc"] == 2
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 1


def test_generated_flags_policy_lists_and_required_checkpoint(cli_here, tmp_path):
    """`--policy` collects repeated and comma-separated names alike; a generated flag (`--ppo.epochs`) overrides
    the config file; `sched eval` without --checkpoint is a usage error (exit 2)."""
    win = ["--sequences", "1", "--length", "100", "--generate-jobs", "1000", "--json"]
    a = cli_here("sched", "heuristics", "--policy", "sjf", "--policy", "f1", *win)
    b = cli_here("sched", "heuristics", "--policy", "sjf,f1", *win)
    assert a.returncode == 0 and json.loads(a.stdout) == json.loads(b.stdout)
    assert list(json.loads(a.stdout)) == ["sjf", "f1"]
    res = cli_here("sched", "train", "--config", DEBUG, "--run.root", str(tmp_path), "--run.run-id", "flag",
                   "--run.progress", "false", "--ppo.epochs", "1", "--eval.starts", "[500]")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = (tmp_path / "sched" / "flag" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 1
    res = cli_here("sched", "eval", "--length", "128")
    assert res.returncode == 2 and "--checkpoint" in res.stderr


def one_process_epoch(config: Path, world: int) -> dict:
    """What the first epoch of a ``world``-rank sched run is, computed in this one process: rank ``r``'s
    rollout is the one its env seeds (``seed + 1000 r``) and the common start (same weights, same torch
    random state) give; the update is one process's PPO update on the union of the ranks' rollouts (each
    rank's gradient is the mean over its equal share of decisions, so their average is the union's mean)."""
    import dataclasses

    import numpy as np
    import torch

    from torchhpc.ext.core.config import load_config
    from torchhpc.ext.sched.checkpoints import new_agent
    from torchhpc.ext.sched.commands import build_trace
    from torchhpc.ext.sched.config import SchedConfig
    from torchhpc.ext.sched.episodes import VecBatchScheduling
    from torchhpc.ext.sched.ppo import collect_rollout, make_batch, policy_update, value_update

    cfg = load_config(SchedConfig, config)
    P = cfg.ppo
    assert P.advantage == "gae" and not P.minibatch and not P.imitate and cfg.env.reward == "raw"
    trace = build_trace(cfg)
    settings = {"policy": P.policy, "queue_slots": cfg.env.queue_slots, **cfg.env.observation()}
    n_envs = min(P.num_envs, max(1, P.trajectories // world))
    torch.manual_seed(cfg.seed)
    agent = new_agent(**settings)
    initial = {k: v.clone() for k, v in agent.state_dict().items()}
    rng = torch.get_rng_state()
    agent.eval()
    rollouts, env_rng = [], []
    for r in range(world):
        vec = VecBatchScheduling(n_envs, seed=cfg.seed + 1000 * r, autoreset=False, trace=trace,
                                 **cfg.env.env_kwargs())
        vec.reset()
        torch.set_rng_state(rng)
        rollouts.append(collect_rollout(agent, vec, P.trajectories // world, 1))
        env_rng.append(vec.rng_states())
    assert len({ro.decisions for ro in rollouts}) == 1  # equal shares: the mean of means is the union's mean
    # the union: rank r's envs become envs r * n_envs ... of one rollout, its trajectories after rank r - 1's
    T = max(len(ro.valid) for ro in rollouts)
    union = {}
    for name in ("queue", "mask", "actions", "logp", "values", "rewards", "dones", "valid"):
        parts = [getattr(ro, name) for ro in rollouts]
        parts = [np.concatenate([a, np.zeros((T - len(a), *a.shape[1:]), a.dtype)]) for a in parts]
        union[name] = np.concatenate(parts, axis=1)
    ro = type(rollouts[0])(**union)
    for r, part in enumerate(rollouts):
        ro.trajectories += [dataclasses.replace(tr, env=tr.env + r * n_envs) for tr in part.trajectories]
        ro.starts += part.starts
    agent.train()
    pi_opt = torch.optim.Adam(agent.actor.parameters(), lr=P.pi_lr)
    v_opt = torch.optim.Adam(agent.critic.parameters(), lr=P.vf_lr)
    b = make_batch(ro, P.gamma, P.lam, 1)
    pi = policy_update(agent, pi_opt, b, clip=P.clip, target_kl=P.target_kl, iters=P.pi_iters,
                       kl_backtrack=P.kl_backtrack)
    loss_v = value_update(agent, v_opt, b, iters=P.v_iters)
    return {"agent": agent.state_dict(), "initial": initial, "env_rng": env_rng, "loss_v": loss_v, **pi,
            "pi_iters": P.pi_iters, "pi_lr": P.pi_lr,
            "decisions": sum(r.decisions for r in rollouts),
            "sequences": sum(len(set(r.starts)) for r in rollouts),
            "train_bsld": float(np.mean([tr.metrics["bsld"] for tr in ro.trajectories]))}
