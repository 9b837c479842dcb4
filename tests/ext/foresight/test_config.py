"""foresight's options: every class an ``Options`` (checked when made, in Python too), the run's ``dist``
section, and the keys of before loading with a warning."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from torchhpc.ext.core.cli import add_options, options_from_args
from torchhpc.ext.core.config import DistOptions, Options, load_config
from torchhpc.ext.core.errors import ConfigError
from torchhpc.ext.foresight import config as fc


def test_every_options_class_is_checked_when_made():
    """Every dataclass of the config is an Options: a value out of range built in Python is a ConfigError."""
    for cls in (fc.InputOptions, fc.CompressorSpec, fc.AnalysisSpec, fc.OutputOptions, fc.SweepConfig,
                fc.SweepDist, fc.CompressOptions, fc.DecompressOptions, fc.ForesightTour):
        assert issubclass(cls, Options), cls
    with pytest.raises(ConfigError, match="'size' = 2 is out of range"):
        fc.InputOptions(size=2)
    with pytest.raises(ConfigError, match="'tolerance'"):
        fc.AnalysisSpec("power_spectrum", tolerance=0)
    with pytest.raises(ConfigError, match="'bound'"):
        fc.CompressOptions(input="a.npy", output="b.fsz", bound=-1.0)
    with pytest.raises(ConfigError, match="'nproc'"):
        fc.SweepDist(nproc=0)
    with pytest.raises(ConfigError, match="'device' must be one of"):
        fc.SweepDist(device="tpu")


def test_sweep_dist_section_defaults_and_flags():
    """The run's device, threads, ranks and timeout are the suite's DistOptions, on the CPU by default;
    --device, --nproc, --threads and --timeout-s set them."""
    assert issubclass(fc.SweepDist, DistOptions)
    assert {f.name for f in dataclasses.fields(fc.SweepConfig)} >= {"dist"}
    assert not {"device", "nproc"} & {f.name for f in dataclasses.fields(fc.SweepConfig)}
    d = fc.SweepConfig().dist
    assert (d.device, d.threads, d.nproc, d.timeout_s) == ("cpu", 0, 1, 300.0)
    p = argparse.ArgumentParser()
    add_options(p, fc.SweepConfig, config_file=True)
    cfg = options_from_args(fc.SweepConfig, p.parse_args(["--device", "auto", "--nproc", "2", "--threads", "3",
                                                          "--timeout-s", "60"]))
    assert (cfg.dist.device, cfg.dist.nproc, cfg.dist.threads, cfg.dist.timeout_s) == ("auto", 2, 3, 60.0)
    assert fc.CompressOptions(input="a", output="b").device == fc.DecompressOptions(input="a", output="b").device \
        == "cpu"


def test_old_keys_load_with_a_warning(tmp_path, capsys):
    """A sweep file (or --set) with the top-level device and nproc of before still loads, into ``dist``,
    with one deprecation line per key."""
    path = tmp_path / "old.yaml"
    path.write_text("device: auto\nnproc: 2\n")
    cfg = load_config(fc.SweepConfig, path)
    assert (cfg.dist.device, cfg.dist.nproc) == ("auto", 2)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("torchhpc: warning:") for line in err)
    assert "'nproc' is now 'dist.nproc'" in err[1] or "'nproc' is now 'dist.nproc'" in err[0]
    assert load_config(fc.SweepConfig, None, ["device=cuda"]).dist.device == "cuda"
    assert "'device' is now 'dist.device'" in capsys.readouterr().err
