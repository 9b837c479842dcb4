"""The gems options: one definition for the YAML files, the library and the generated flags."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from torchhpc.ext.core.cli import add_options, options_from_args
from torchhpc.ext.core.config import ConfigError, load_config
from torchhpc.ext.gems.config import GemsConfig, GemsSimulate, GemsTrain

DEBUG = str(Path(__file__).resolve().parents[3] / "configs" / "gems" / "debug.yaml")


def _parse(cls, *argv):
    p = argparse.ArgumentParser()
    add_options(p, cls, config_file=True)
    return options_from_args(cls, p.parse_args(list(argv)))


def test_flags_config_file_and_set_agree():
    """`--pipeline.stages 3` equals `--set pipeline.stages=3`; a flag beats --set, which beats the file."""
    a = _parse(GemsConfig, "--pipeline.stages", "3", "--model.depth", "20")
    b = _parse(GemsConfig, "--set", "pipeline.stages=3", "--set", "model.depth=20")
    assert a == b and a.pipeline.stages == 3
    c = _parse(GemsConfig, "--config", DEBUG, "--set", "train.steps=7", "--train.steps", "9")
    assert c.train.steps == 9 and c.model.depth == 11


def test_simulate_options_keep_their_spellings_and_checks():
    """`gems simulate` keeps --devices, --latency, --overhead-ms ...; bad values are errors naming the flag."""
    cfg = _parse(GemsSimulate, "--devices", "2,8,64,1024", "--latency", "50", "--overhead-ms", "3", "--json")
    assert cfg.simulate.device_counts == [2, 8, 64, 1024] and cfg.simulate.latency == 50.0
    assert cfg.simulate.overhead_ms == 3.0 and cfg.simulate.json is True
    assert _parse(GemsSimulate, "--devices", "1024").simulate.device_counts == [1024]
    with pytest.raises(ConfigError, match="--devices must be comma-separated integers"):
        _parse(GemsSimulate, "--devices", "2,x")
    with pytest.raises(ConfigError, match="--schedules"):
        _parse(GemsSimulate, "--schedules", "mast,zero-bubble")
    with pytest.raises(ConfigError, match="--overhead-ms"):
        _parse(GemsSimulate, "--overhead-ms", "-1")


def test_train_command_checks_nproc_and_saves_the_job_alone():
    """--nproc must equal stages x groups; the job() a run saves has no launcher section."""
    cfg = _parse(GemsTrain, "--config", DEBUG, "--nproc", "2")
    assert cfg.launch.nproc == 2 and type(cfg.job()) is GemsConfig
    assert cfg.job() == load_config(GemsConfig, DEBUG)
    with pytest.raises(ConfigError, match="--nproc 3 does not fit the config"):
        _parse(GemsTrain, "--config", DEBUG, "--nproc", "3")


def test_benchmark_options_keep_their_spellings():
    """benchmarks/gems.py's flags come from GemsBench: --micro-batches 1,2 as before; a bad depth names --depth."""
    from torchhpc.ext.gems.config import GemsBench

    cfg = _parse(GemsBench, "--micro-batches", "1,2,4", "--depth", "20", "--deepspeed", "no")
    assert cfg.micro_batch_counts == [1, 2, 4] and cfg.depth == 20 and cfg.deepspeed == "no"
    assert _parse(GemsBench, "--micro-batches", "2").micro_batch_counts == [2]
    with pytest.raises(ConfigError, match="--depth 12"):
        _parse(GemsBench, "--depth", "12")
