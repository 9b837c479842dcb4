"""symnmf's options: the suite's `dist` section, the old keys that still load, range checks in Python."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from torchhpc.ext.core.cli import options_from_args
from torchhpc.ext.core.config import DistOptions, load_config
from torchhpc.ext.core.errors import ConfigError
from torchhpc.ext.symnmf.config import GraphOptions, SegmentOptions, SolverOptions, SymnmfDist, SymnmfJob

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "symnmf"


def test_old_keys_load_onto_dist_with_one_warning_each(tmp_path, capsys):
    """A file with the old `solver.device` and `dist.timeout` loads them as `dist.device` and
    `dist.timeout_s`, one warning line each; `--set` with an old key warns too."""
    f = tmp_path / "old.yaml"
    f.write_text("graph:\n  dataset: digits\nsolver:\n  k: 4\n  device: cpu\ndist:\n  timeout: 60\n  nproc: 2\n")
    cfg = load_config(SymnmfJob, f)
    assert (cfg.dist.device, cfg.dist.timeout_s, cfg.dist.nproc, cfg.solver.k) == ("cpu", 60.0, 2, 4)
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"torchhpc: warning: {f}: key 'dist.timeout' is now 'dist.timeout_s' (the old name still loads; "
                   "please rename it)",
                   f"torchhpc: warning: {f}: key 'solver.device' is now 'dist.device' (the old name still loads; "
                   "please rename it)"]
    cfg = load_config(SymnmfJob, None, ["graph.dataset=digits", "solver.device=cpu", "dist.timeout=5"])
    assert (cfg.dist.device, cfg.dist.timeout_s) == ("cpu", 5.0)
    assert len(capsys.readouterr().err.strip().splitlines()) == 2


def test_shipped_configs_load_without_warnings(capsys):
    """Every YAML in configs/symnmf uses the current keys."""
    files = sorted(CONFIGS.glob("*.yaml"))
    assert len(files) >= 4
    for f in files:
        load_config(SymnmfJob, f)
    assert capsys.readouterr().err == ""
    assert load_config(SymnmfJob, CONFIGS / "debug.yaml").dist.device == "cpu"


def test_dist_flags_are_the_suites():
    """`--device`, `--threads`, `--nproc`, `--timeout-s` (DistOptions' spellings) and `--dist.grid` fill `dist`."""
    from torchhpc.trainers import symnmf as trainer

    parser = argparse.ArgumentParser(prog="torchhpc")
    trainer.register(parser.add_subparsers())
    args = parser.parse_args(["symnmf", "run", "--dataset", "digits", "--device", "cpu", "--threads", "2",
                              "--nproc", "3", "--timeout-s", "7", "--dist.grid", "2d"])
    dist = options_from_args(SymnmfJob, args).dist
    assert isinstance(dist, DistOptions)
    assert (dist.device, dist.threads, dist.nproc, dist.timeout_s, dist.grid) == ("cpu", 2, 3, 7.0, "2d")
    assert SymnmfDist().timeout_s == DistOptions().timeout_s and SymnmfDist().threads == 0


@pytest.mark.parametrize("build, message", [
    (lambda: SolverOptions(k=0), "SolverOptions: key 'k' = 0 is out of range"),
    (lambda: SolverOptions(algo="svd"), "SolverOptions: key 'algo' must be one of"),
    (lambda: GraphOptions(dataset="digits", sbm_mixing=1.5), "GraphOptions: key 'sbm_mixing' = 1.5 is out of range"),
    (lambda: SymnmfDist(timeout_s=0), "SymnmfDist: key 'timeout_s' = 0 is out of range"),
    (lambda: SymnmfDist(nproc=0), "SymnmfDist: key 'nproc' = 0 is out of range"),
    (lambda: SegmentOptions(size=4), "SegmentOptions: key 'size' = 4 is out of range"),
])
def test_options_built_in_python_are_range_checked(build, message):
    """An options object made in Python is checked as a loaded file is: one ConfigError naming the key."""
    with pytest.raises(ConfigError, match=message):
        build()


def test_relations_between_fields_are_still_checked():
    """Two inputs at once, or none, is an error naming the flags (after the range checks)."""
    with pytest.raises(ConfigError, match="give one of --graph, --features, --dataset"):
        GraphOptions(path="g.txt", dataset="digits")
    with pytest.raises(ConfigError, match="no input"):
        SymnmfJob()
