"""Continual training: exact resume from full + delta checkpoints (also after a SIGKILL), the
serving replica, and sharded training on 2 gloo ranks equal to one process."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from harness.multiproc import torchrun, wait_until

pytest.importorskip("torchrec")

from torchhpc.ext.core.config import load_config  # noqa: E402
from torchhpc.ext.kraken.commands import train  # noqa: E402
from torchhpc.ext.kraken.config import KrakenConfig  # noqa: E402
from torchhpc.ext.kraken.model import build_model  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
DEBUG = REPO / "configs" / "kraken" / "debug.yaml"


def _cfg(tmp_path, run_id, *extra):
    return load_config(KrakenConfig, DEBUG, [f"run.root={tmp_path}", f"run.run_id={run_id}", "run.progress=false",
                                             *extra])


def _summary(tmp_path, run_id) -> dict:
    return json.loads((tmp_path / "kraken" / run_id / "summary.json").read_text())


def _final_state(tmp_path, run_id, rank=None):
    d = tmp_path / "kraken" / run_id / "checkpoints"
    if rank is not None:
        d = d / f"rank{rank}"
    full = sorted(d.glob("full-*.pt"))[-1]
    return torch.load(full, map_location="cpu", weights_only=False)


def _rows_by_id(state: dict, table: str) -> dict[int, dict[str, torch.Tensor]]:
    p = f"sparse.tables.{table}."
    ids = state[p + "row_id"]
    out = {}
    for r in torch.nonzero(ids >= 0).squeeze(1).tolist():
        out[int(ids[r])] = {k: state[p + k][r] for k in ("weight", "state.v", "last_seen", "freq")}
    return out


def test_resume_from_full_plus_deltas_is_exact(tmp_path):
    """Stop after 45 steps, drop its final full checkpoint, resume from full-30 + delta-40 to step 60:
    the state equals an uninterrupted 60-step run, bit for bit."""
    train(_cfg(tmp_path, "whole"), verbose=False)
    train(_cfg(tmp_path, "split", "train.steps=45"), verbose=False)
    ck = tmp_path / "kraken" / "split" / "checkpoints"
    assert sorted(p.name for p in ck.iterdir()) == ["delta-00000040.pt", "full-00000030.pt", "full-00000045.pt"]
    (ck / "full-00000045.pt").unlink()
    assert train(_cfg(tmp_path, "split", "run.resume=true"), verbose=False) == 0
    assert _summary(tmp_path, "split")["steps"] == 60
    a, b = _final_state(tmp_path, "whole")["model"], _final_state(tmp_path, "split")["model"]
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_restore_up_to_a_step_drops_later_files(tmp_path):
    """What sharded ranks do after a crash: all restore to the newest step every rank has."""
    from torchhpc.ext.kraken.continual import ContinualTrainer, restorable_step

    cfg = _cfg(tmp_path, "r", "train.steps=45")
    train(cfg, verbose=False)
    ck = tmp_path / "kraken" / "r" / "checkpoints"
    assert restorable_step(ck) == 45
    t = ContinualTrainer(build_model(cfg, "cpu"))
    t.restore(ck, upto=40)
    assert t.step == 40 and restorable_step(ck) == 40  # full-30 + delta-40; full-45 removed
    assert restorable_step(tmp_path / "nowhere") == -1


def test_kill_and_resume_loses_no_row_or_optimizer_state(tmp_path):
    """SIGKILL the trainer mid-run, resume from full + deltas: the final state equals an unbroken run."""
    train(_cfg(tmp_path, "whole", "train.steps=120", "checkpoint.full_every=50"), verbose=False)
    args = [sys.executable, "-m", "torchhpc.trainers.kraken", "--config", str(DEBUG),
            "--set", f"run.root={tmp_path}", "--set", "run.run_id=killed", "--set", "run.progress=false",
            "--set", "train.steps=100000", "--set", "checkpoint.full_every=50"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    ck = tmp_path / "kraken" / "killed" / "checkpoints"
    try:
        wait_until((ck / "delta-00000070.pt").exists, timeout=300, what="the delta checkpoint of step 70",
                   proc=proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert (ck / "full-00000050.pt").exists(), proc.stderr.read().decode()[-2000:]
    assert train(_cfg(tmp_path, "killed", "run.resume=true", "train.steps=120", "checkpoint.full_every=50"),
                 verbose=False) == 0
    assert _summary(tmp_path, "killed")["steps"] == 120
    a, b = _final_state(tmp_path, "whole"), _final_state(tmp_path, "killed")
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    sa, sb = a["dense_opt"]["state"], b["dense_opt"]["state"]
    assert all(torch.equal(sa[i]["exp_avg_sq"], sb[i]["exp_avg_sq"]) for i in sa)


def test_serving_replica_follows_the_trainer(tmp_path):
    from torchhpc.ext.kraken.continual import ServingReplica

    cfg = _cfg(tmp_path, "srv")
    train(cfg, verbose=False)
    ck = tmp_path / "kraken" / "srv" / "checkpoints"
    replica = ServingReplica(build_model(cfg, "cpu"), ck)
    loaded = replica.poll()
    assert loaded[-1]["step"] == 60 and replica.poll() == []
    final = _final_state(tmp_path, "srv")["model"]
    for k, v in replica.model.state_dict().items():
        assert torch.equal(v, final[k]), k


@pytest.mark.distributed
def test_sharded_two_ranks_equals_one_process(tmp_path):
    """Rows sharded by ID hash over 2 gloo ranks (all-to-all lookups and gradient pushes) hold the same
    rows, optimizer state and dense weights as one process on the whole batch."""
    extra = ["tables.max_rows=100000", "train.steps=30", "checkpoint.full_every=30"]
    target = ["-m", "torchhpc.trainers.kraken", "--config", str(DEBUG), "--set", f"run.root={tmp_path}",
              "--set", "run.run_id=sharded", "--set", "run.progress=false"]
    for e in extra:
        target += ["--set", e]
    res = torchrun(2, target, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    train(_cfg(tmp_path, "single", *extra), verbose=False)
    single = _final_state(tmp_path, "single")["model"]
    shards = [_final_state(tmp_path, "sharded", r)["model"] for r in (0, 1)]
    summary = json.loads((tmp_path / "kraken" / "sharded" / "summary.json").read_text())
    assert summary["world"] == 2
    for table in [f"t_C{i}" for i in range(1, 5)]:
        want = _rows_by_id(single, table)
        got = {**_rows_by_id(shards[0], table), **_rows_by_id(shards[1], table)}
        assert len(got) == len(want) > 0 and got.keys() == want.keys()
        assert not set(_rows_by_id(shards[0], table)) & set(_rows_by_id(shards[1], table))  # disjoint shards
        for i in want:
            for k in want[i]:
                torch.testing.assert_close(got[i][k], want[i][k], rtol=1e-4, atol=1e-5)
    for k, v in single.items():
        if not k.startswith("sparse."):
            torch.testing.assert_close(shards[0][k], v, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(shards[1][k], v, rtol=1e-4, atol=1e-5)
    # a serving replica of the sharded run routes each ID to its shard: same predictions as one process
    from torchhpc.ext.kraken.continual import ServingReplica
    from torchhpc.ext.kraken.sharded import RoutedEmbeddingCollection
    from torchhpc.ext.kraken.stream import build_stream

    cfg = _cfg(tmp_path, "single", *extra)
    routed = build_model(cfg, "cpu")
    routed.sparse = RoutedEmbeddingCollection([build_model(cfg, "cpu").sparse for _ in range(2)])
    a = ServingReplica(routed, tmp_path / "kraken" / "sharded" / "checkpoints")
    b = ServingReplica(build_model(cfg, "cpu"), tmp_path / "kraken" / "single" / "checkpoints")
    assert {x["shard"] for x in a.poll()} == {0, 1} and a.step == 30
    b.poll()
    batch = build_stream(cfg).batch(31)
    torch.testing.assert_close(a.predict(batch), b.predict(batch), rtol=1e-4, atol=1e-5)
