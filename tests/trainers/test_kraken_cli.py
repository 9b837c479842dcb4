"""``torchhpc kraken``: train from a config, serve from its checkpoints, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torchrec")

REPO = Path(__file__).resolve().parents[2]
DEBUG = str(REPO / "configs" / "kraken" / "debug.yaml")


def test_train_then_serve(cli_here, tmp_path):
    """A replica started beside the trainer, before the run exists (as the README shows it), waits for the
    run's files and follows it to the last step (it used to stop at once: no config.yaml yet); then a
    replica started on the finished run loads it and serves it."""
    import subprocess

    from conftest import torchhpc_cli

    run = tmp_path / "kraken" / "r"
    beside = subprocess.Popen([*torchhpc_cli(), "kraken", "serve", "--checkpoint-dir", str(run / "checkpoints"),
                               "--until-step", "60", "--duration", "240", "--poll", "0.05", "--requests", "1"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        res = cli_here("kraken", "train", "--config", DEBUG, "--set", f"run.root={tmp_path}",
                       "--set", "run.run_id=r", "--set", "run.progress=false")
        assert res.returncode == 0, res.stderr
        served, err = beside.communicate(timeout=240)
    finally:
        if beside.poll() is None:
            beside.kill()
            beside.wait()
    assert beside.returncode == 0, err
    follow = [json.loads(x) for x in served.splitlines() if x.startswith("{")]
    assert follow[-1]["summary"]["step"] == 60 and follow[-1]["summary"]["loads"] >= 1
    run = tmp_path / "kraken" / "r"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 60 and 0.0 <= summary["auc"] <= 1.0
    assert (run / "learning_curve.png").is_file()
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [10, 20, 30, 40, 50, 60] and all("auc" in r for r in rows)
    # every table stayed within its 300 rows
    assert all(t["rows"] <= 300 for t in summary["tables"].values())
    res = cli_here("kraken", "serve", "--checkpoint-dir", str(run / "checkpoints"), "--until-step", "60",
                   "--duration", "60", "--poll", "0.05")
    assert res.returncode == 0, res.stderr
    out = [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]
    assert out[-1]["summary"]["step"] == 60 and out[-1]["summary"]["batches_served"] >= 1
    assert 0.0 <= out[-1]["summary"]["served_auc"] <= 1.0


@pytest.mark.distributed
def test_train_with_nproc_shards_over_torchrun_ranks(cli, tmp_path):
    """`kraken train --nproc 2` relaunches the job on 2 torchrun ranks: one checkpoint folder per rank, a
    summary of world 2; a resume with another number of processes is refused in one line, one with 2 goes on
    from the step every rank has (agreed by a reduction on the job's device)."""
    args = ["kraken", "train", "--config", DEBUG, "--run.root", str(tmp_path), "--run.run-id", "s",
            "--set", "run.progress=false", "--train.steps", "10", "--set", "tables.max_rows=100000"]
    res = cli(*args, "--nproc", "2", timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "kraken" / "s"
    assert json.loads((run / "summary.json").read_text())["world"] == 2
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["rank0", "rank1"]
    res = cli(*args, "--run.resume", "--train.steps", "20", timeout=120)
    assert res.returncode == 1 and "written by 2 rank(s)" in res.stderr and "--nproc 2" in res.stderr
    res = cli(*args, "--nproc", "2", "--run.resume", "--train.steps", "14", timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads((run / "summary.json").read_text())["steps"] == 14


@pytest.mark.parametrize("args,words", [
    (["train", "--config", "nope.yaml"], "nope.yaml"),
    (["train", "--config", DEBUG, "--set", "tables.eviction=fifo"], "tables.eviction"),
    (["train", "--config", DEBUG, "--set", "stream.source=criteo"], "stream.path"),
    (["train", "--config", DEBUG, "--stream.source", "criteo", "--stream.path", "/nonexistent/day_0.tsv"],
     "--stream.path /nonexistent/day_0.tsv: no such file"),
    (["train", "--config", DEBUG, "--set", "tables.max_rows=0", "--set", "tables.memory_budget_mb=0.0001"],
     "too small for one row"),
    (["serve", "--checkpoint-dir", "/nonexistent/checkpoints", "--duration", "0"], "no such folder, and no kraken run"),
    (["bench", "--steps", "0"], "--steps: key 'steps' = 0 is out of range (must be >= 2)"),
])
def test_bad_input_is_one_line(cli, tmp_path, args, words):
    extra = {"train": ["--set", f"run.root={tmp_path}"], "serve": ["--poll", "0.01"]}.get(args[0], [])
    res = cli("kraken", *args, *extra)
    assert res.returncode != 0
    assert words in res.stderr and "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_help_lists_subcommands(cli):
    res = cli("kraken", "--help")
    assert res.returncode == 0 and all(w in res.stdout for w in ("train", "serve", "bench"))


def test_train_flags_are_generated_from_the_config():
    """Every option of KrakenConfig is a flag; flags beat --set, which beats the file."""
    from torchhpc.ext.core.cli import job_parser, options_from_args
    from torchhpc.ext.kraken.config import KrakenConfig

    args = job_parser("torchhpc.trainers.kraken", KrakenConfig, config_file=True).parse_args(["--config", DEBUG, "--set", "tables.max_rows=5", "--tables.max-rows", "7",
                                      "--stream.zipf", "1.2", "--run.resume", "--model.bottom", "[8,4]"])
    cfg = options_from_args(KrakenConfig, args)
    assert cfg.tables.max_rows == 7 and cfg.stream.zipf == 1.2 and cfg.run.resume and cfg.model.bottom == [8, 4]
    assert cfg.train.steps == 60  # from the file



def test_bench_on_a_criteo_file_end_to_end(torchhpc_main, tmp_path):
    """`kraken bench --stream criteo --path FILE` runs the four variants on the user's log and writes
    criteo.json and criteo.png; ebc_full's per-feature vocabulary is the count of distinct hex values
    in each column of the file's first steps x batch-size lines (counted here from the text)."""
    import random

    rng = random.Random(0)
    lines = []
    for _ in range(200):
        cats = [f"{rng.randrange(1 + 10 * c):08x}" if rng.random() > 0.1 else "" for c in range(26)]
        lines.append("\t".join([str(rng.randint(0, 1)), *[str(rng.randint(0, 30)) for _ in range(13)], *cats]))
    log = tmp_path / "day_0.tsv.gz"
    import gzip

    log.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    rc, out, err = torchhpc_main("kraken", "bench", "--stream", "criteo", "--path", str(log), "--steps", "6",
                             "--batch-size", "32", "--dim", "4", "--out", str(tmp_path / "bench"), "--json")
    assert rc == 0, err
    res = json.loads(out.strip().splitlines()[-1])
    assert [r["variant"] for r in res["results"]] == ["ebc_full", "ebc_hashed", "mc_ebc", "kraken"]
    assert res["steps"] == 6 and res["stream"] == "criteo" and res["bayes_auc"] is None
    fields = [x.split("\t") for x in lines[:6 * 32]]
    assert res["vocab_per_feature"] == [max(1, len({f[14 + c] for f in fields if f[14 + c]})) for c in range(26)]
    doc = json.loads((tmp_path / "bench" / "kraken" / "criteo.json").read_text())
    assert [r["name"] for r in doc["rows"]][:4] == ["ebc_full", "ebc_hashed", "mc_ebc", "kraken"]
    assert all(0.0 <= r["auc"] <= 1.0 for r in doc["rows"][:4]) and (tmp_path / "bench" / "kraken" / "criteo.png").is_file()


@pytest.mark.parametrize("args,words", [
    (["--stream", "criteo"], "path: give the Criteo-format log"),
    (["--path", "x.tsv"], "add --stream criteo"),
    (["--stream", "criteo", "--path", "/nonexistent/day_0.tsv"], "--path /nonexistent/day_0.tsv: no such file"),
    (["--stream", "criteo", "--path", "x.tsv", "--vocab", "20000"], "vocab 20000 would be ignored"),
])
def test_bench_stream_options_are_checked(torchhpc_main, args, words):
    """A Criteo bench without a file, a file without --stream criteo, a missing file, a vocabulary size for a log
    (it sizes only the synthetic stream; even the default's value, given, is refused): one line, exit 1."""
    rc, _, err = torchhpc_main("kraken", "bench", "--steps", "2", "--out", "", *args)
    assert rc != 0 and words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
