"""The collectives commands: generated --help, the scale model, one-line errors, and bench under torchrun."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from torchhpc.ext.collectives.config import BenchDist, BenchOptions, ModelOptions
from torchhpc.ext.core.cli import options_from_args, run_main
from torchhpc.ext.core.config import load_config
from torchhpc.ext.core.errors import ConfigError
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
    for flag in ("--graph", "--ranks-per-node", "--sizes", "--algo", "--inter-node-mbps", "--nproc", "--config",
                 "--device", "--threads", "--timeout-s"):
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
    (["collectives", "bench", "--output", ""], "--output: an empty path writes nothing"),
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


def test_shipped_configs_load(capsys):
    """Every YAML in configs/collectives loads into its options dataclass without error or a renamed-key
    warning."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "configs" / "collectives"
    assert load_config(BenchOptions, root / "debug.yaml").dist.nproc == 4
    assert load_config(BenchOptions, root / "two-nodes.yaml").ranks_per_node == 4
    assert load_config(ModelOptions, root / "frontera-scale.yaml").nodes * 56 == 28672
    assert capsys.readouterr().err == ""


def test_old_top_level_keys_load_into_dist_with_one_warning_each(tmp_path, capsys):
    """`timeout`, `device` and `nproc` of older bench files (and --set) land in `dist`, one warning line each."""
    f = tmp_path / "old.yaml"
    f.write_text("graph: random:0.5\ntimeout: 30\ndevice: cpu\nnproc: 2\n")
    dist = load_config(BenchOptions, f).dist
    assert (dist.timeout_s, dist.device, dist.nproc) == (30.0, "cpu", 2)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith(f"torchhpc: warning: {f}: key '") for line in err)
    assert sum("key 'timeout' is now 'dist.timeout_s'" in line for line in err) == 1
    assert load_config(BenchOptions, None, ["timeout=12"]).dist.timeout_s == 12.0
    assert "key 'timeout' is now 'dist.timeout_s'" in capsys.readouterr().err


def test_dist_flags_keep_their_spellings():
    """--device, --nproc and --timeout-s fill `dist`; the old --timeout still parses (argparse takes it as the
    unambiguous prefix of --timeout-s)."""
    for timeout in ("--timeout", "--timeout-s"):
        args = _parser().parse_args(["collectives", "bench", "--device", "cpu", "--nproc", "3", "--threads", "1",
                                     timeout, "45"])
        dist = options_from_args(BenchOptions, args).dist
        assert (dist.device, dist.nproc, dist.threads, dist.timeout_s) == ("cpu", 3, 1, 45.0)
    assert options_from_args(BenchOptions, _parser().parse_args(["collectives", "bench"])).dist.timeout_s == 120.0


@pytest.mark.parametrize("build, message", [
    (lambda: BenchOptions(repeats=0), "BenchOptions: key 'repeats' = 0 is out of range"),
    (lambda: BenchDist(nproc=300), "BenchDist: key 'nproc' = 300 is out of range"),
    (lambda: BenchDist(device="tpu"), "BenchDist: key 'device' must be one of"),
    (lambda: ModelOptions(nodes=0), "ModelOptions: key 'nodes' = 0 is out of range"),
])
def test_options_built_in_python_are_range_checked(build, message):
    """Options made in Python are range-checked as a loaded file is: one ConfigError naming the key."""
    with pytest.raises(ConfigError, match=message):
        build()
