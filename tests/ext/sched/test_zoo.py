"""Pretrained policies: the export/load round trip, and every shipped policy on a trace it was not trained on."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.sched import pretrained, zoo
from torchhpc.ext.sched.checkpoints import agent_settings, new_agent
from torchhpc.ext.sched.evaluate import evaluate_heuristic, evaluate_policy, summarise
from torchhpc.ext.sched.swf import read_swf

TRACES = {"lublin_256.swf", "lublin_256_new2"}


def test_export_and_load_round_trip(tmp_path):
    """A run's checkpoint exported as a pretrained policy loads back with the same weights and settings,
    slimmed to the agent (no optimiser state), and its card carries the config, command and scores."""
    settings = {"policy": "kernel", "queue_slots": 16, "time_scale": "log", "prior": "sjf", "context": False}
    agent = new_agent(**settings)
    torch.manual_seed(0)
    for p in agent.parameters():
        p.data.normal_()
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    torch.save({"step": 7, "state": {"agent": agent.state_dict(), "pi_opt": {"big": torch.zeros(1000)}, **settings}},
               run / "checkpoints" / "ckpt-00000007.pt")
    (run / "config.yaml").write_text(yaml.safe_dump({"trace": {"path": "x/lublin_256.swf"},
                                                     "env": {"backfill": "rlscheduler", "metric": "bsld"}}))
    out = zoo.export_policy(run, "mine", which="last", folder=tmp_path / "pre", scores={"a": 1}, command="cmd")
    assert zoo.available(tmp_path / "pre") == ["mine"]
    step, state = zoo.load_pretrained("mine", tmp_path / "pre")
    assert step == 7 and "pi_opt" not in state and agent_settings(state) == settings
    for k, v in agent.state_dict().items():  # the actor as trained; the critic is not shipped
        assert torch.equal(state["agent"][k], v) == k.startswith("actor."), k
    info = zoo.card("mine", tmp_path / "pre")
    assert info["setting"] == {"trace": "lublin_256.swf", "backfill": "rlscheduler", "metric": "bsld"}
    assert info["command"] == "cmd" and info["scores"] == {"a": 1} and out.stat().st_size < 16_000
    with pytest.raises(InputError, match="shipped: mine"):
        zoo.card("nope", tmp_path / "pre")
    # the exported file itself as `sched eval --checkpoint`: its actor with an untrained critic, and the
    # backfilling from its card (it failed: "the agent weights do not fit its recorded settings")
    from torchhpc.ext.sched.checkpoints import from_checkpoint
    from torchhpc.ext.sched.commands import policy_source

    step, state, _, backfill = policy_source(str(out))
    assert step == 7 and backfill == "rlscheduler"
    got = from_checkpoint(state).state_dict()
    assert all(torch.equal(got[k], v) for k, v in agent.state_dict().items() if k.startswith("actor."))


@pytest.mark.parametrize("name", zoo.available())
def test_shipped_policy_on_a_trace_it_was_not_trained_on(shared_data, name):
    """Each shipped policy, loaded by name, scores on an unseen trace (the cross-trace table's 10 windows x 1024
    jobs) exactly what its card recorded there (the file and its settings are intact); there it beats FCFS and is
    no more than 10 % above the worse of SJF and F1 (it schedules like the good heuristics, not like a random
    policy)."""
    info = zoo.card(name)
    check = info["scores"]["unseen_check"]
    assert check["trace"] != info["setting"]["trace"] and check["trace"] in TRACES
    trace = read_swf(shared_data / "swf" / check["trace"]).for_scheduling()
    _, state = zoo.load_pretrained(name)
    agent = pretrained(name)
    backfill = info["setting"]["backfill"]
    rows = evaluate_policy(agent, trace, check["starts"], check["length"], backfill, greedy=True, samples=1, seed=1,
                           settings=agent_settings(state))
    rl = summarise(rows)["bsld"]
    heur = {h: summarise(evaluate_heuristic(trace, h, check["starts"], check["length"], backfill))["bsld"]
            for h in ("fcfs", "sjf", "f1")}
    assert rl == pytest.approx(check["rl_bsld"], rel=1e-9)
    assert np.isfinite(rl) and rl < heur["fcfs"] and rl < 1.1 * max(heur["sjf"], heur["f1"]), (rl, heur)


def test_eval_cli_with_a_shipped_policy(cli, cli_here, shared_data, tmp_path):
    """`sched eval --checkpoint pretrained:NAME --json` prints one JSON object (RL and each heuristic), scheduled
    with the backfilling the policy was trained with; an unknown name is a one-line error listing the shipped ones."""
    names = zoo.available()
    if not names:
        pytest.fail("no pretrained sched policy is shipped in ext/sched/pretrained/")
    res = cli_here("sched", "eval", "--checkpoint", f"pretrained:{names[0]}", "--trace",
                   str(shared_data / "swf/lublin_256_new2"), "--start", "3000", "--length", "96", "--greedy",
                   "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout)
    assert set(out) == {"rl", "fcfs", "sjf", "f1"} and out["rl"]["bsld"] >= 1.0
    assert list((tmp_path / "runs/sched").glob(f"pretrained-{names[0]}/eval_*.png"))  # the box plot
    trace = read_swf(shared_data / "swf/lublin_256_new2").for_scheduling()
    sjf = evaluate_heuristic(trace, "sjf", [3000], 96, zoo.card(names[0])["setting"]["backfill"])[0]["bsld"]
    assert out["sjf"]["bsld"] == pytest.approx(sjf, rel=1e-12)
    res = cli("sched", "eval", "--checkpoint", "pretrained:nope", "--start", "0", "--length", "64")
    assert res.returncode == 1 and names[0] in res.stderr and len(res.stderr.strip().splitlines()) == 1
