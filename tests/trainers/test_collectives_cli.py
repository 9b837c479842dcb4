"""The collectives commands: generated --help, the scale model, one-line errors, and bench under torchrun."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from torchhpc.ext.core.cli import run_main
from torchhpc.trainers import collectives as trainer


def _parser():
    parser = argparse.ArgumentParser(prog="torchhpc")
    trainer.register(parser.add_subparsers())
    return parser


def _cli(argv, capsys):
    args = _parser().parse_args(argv)
    code = run_main(args.func, args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_register_adds_bench_and_model_with_generated_help(capsys):
    """`torchhpc collectives bench --help` lists the flags generated from BenchOptions."""
    with pytest.raises(SystemExit):
        _parser().parse_args(["collectives", "bench", "--help"])
    text = capsys.readouterr().out
    for flag in ("--graph", "--ranks-per-node", "--sizes", "--algo", "--inter-node-mbps", "--nproc", "--config"):
        assert flag in text


def test_model_predicts_every_algorithm(capsys):
    """`collectives model --json` on 4 nodes x 4 ranks: one row per (size, algorithm), direct's speed-up 1."""
    code, out, err = _cli(["collectives", "model", "--nodes", "4", "--ranks-per-node", "4", "--graph", "random:0.3",
                           "--sizes", "64K,1M", "--json"], capsys)
    assert code == 0, err
    res = json.loads(out)
    assert res["nranks"] == 16 and len(res["rows"]) == 6
    assert all(r["speedup_vs_direct"] == 1.0 for r in res["rows"] if r["algo"] == "direct")


@pytest.mark.parametrize("argv, words", [
    (["collectives", "bench", "--graph", "ring"], "--graph: expected random:DENSITY"),
    (["collectives", "bench", "--sizes", "4Q"], "'4Q'"),
    (["collectives", "bench", "--algo", "direct,ring"], "unknown algorithm 'ring'"),
    (["collectives", "model", "--calibration", "/nonexistent/results.json"], "/nonexistent/results.json"),
])
def test_bad_options_are_one_line_errors(argv, words, capsys):
    """Bad options exit 1 with one line naming the option or the file."""
    code, _, err = _cli(argv, capsys)
    assert code == 1 and words in err and len(err.strip().splitlines()) == 1


def test_rank_job_without_torchrun_is_one_line_error(capsys):
    """The torchrun entry run as a plain process says it needs torchrun."""
    env_backup = {k: os.environ.pop(k) for k in ("RANK", "WORLD_SIZE") if k in os.environ}
    try:
        code = trainer.main(["--sizes", "1K"])
    finally:
        os.environ.update(env_backup)
    err = capsys.readouterr().err
    assert code == 1 and "torchrun" in err and len(err.strip().splitlines()) == 1


@pytest.mark.distributed
def test_bench_under_torchrun_prints_table_with_identical_bytes(tmp_path):
    """`torchhpc collectives bench --nproc 2` (one rank per node, emulated slow path): every algorithm's bytes
    equal direct's and the JSON names the inter-node bytes per rank."""
    out = tmp_path / "res.json"
    code = ("import sys; from torchhpc.trainers.collectives import register; import argparse; "
            "from torchhpc.ext.core.cli import run_main; p = argparse.ArgumentParser(); register(p.add_subparsers()); "
            "a = p.parse_args(sys.argv[1:]); sys.exit(run_main(a.func, a))")
    res = subprocess.run([sys.executable, "-c", code, "collectives", "bench", "--nproc", "2", "--graph", "random:1",
                          "--ranks-per-node", "1", "--sizes", "1K,100K", "--repeats", "1", "--inter-node-mbps", "500",
                          "--output", str(out)], capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "law-h" in res.stdout and "ms/call" in res.stdout
    doc = json.loads(out.read_text())
    assert doc["nnodes"] == 2 and doc["cross_edges"] == 2 and len(doc["rows"]) == 6
    assert all(r["identical"] for r in doc["rows"])
    assert [r["inter_node_bytes_per_rank"] for r in doc["rows"] if r["algo"] == "direct"][1] == [102400, 102400]


def test_shipped_configs_load():
    """Every YAML in configs/collectives loads into its options dataclass without error."""
    from pathlib import Path

    from torchhpc.ext.collectives.config import BenchOptions, ModelOptions
    from torchhpc.ext.core.config import load_config

    root = Path(__file__).resolve().parents[2] / "configs" / "collectives"
    assert load_config(BenchOptions, root / "debug.yaml").nproc == 4
    assert load_config(BenchOptions, root / "two-nodes.yaml").ranks_per_node == 4
    assert load_config(ModelOptions, root / "frontera-scale.yaml").nodes * 56 == 28672
