"""segalign's options: one definition for the library, YAML and ``torchhpc align``, checked once, on construction."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from torchhpc.ext.core.cli import add_options, describe_flags, options_from_args
from torchhpc.ext.core.config import load_config
from torchhpc.ext.core.errors import ConfigError
from torchhpc.ext.segalign.config import (
    MIN_SEED_WEIGHT,
    AlignCommand,
    AlignConfig,
    AlignDist,
    PipelineOptions,
    SegalignTour,
)


def test_defaults_are_lastz_and_segalign():
    """The defaults are LASTZ's (12of19, one transition, xdrop 910, hspthresh 3000) and SegAlign's ydrop."""
    cfg = AlignConfig()
    assert (cfg.seed, cfg.transition, cfg.xdrop, cfg.hspthresh, cfg.ydrop, cfg.strand) == (
        "12of19", True, 910, 3000, 9430, "both")


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"max_hits": 0}, ["'max_hits'", "out of range", "> 0"]),
        ({"xdrop": -1}, ["'xdrop'", "> 0"]),
        ({"step": 0}, ["'step'", ">= 1"]),
        ({"gappedthresh": 0}, ["'gappedthresh'", "> 0"]),
        ({"strand": "up"}, ["'strand'", "'plus'"]),
        ({"gapped_by": "blast"}, ["'gapped_by'", "'native'"]),
        ({"backend": "cuda-magic"}, ["'backend'", "'numba'"]),
        ({"seed": "match0"}, ["--seed", f"between {MIN_SEED_WEIGHT} and 31"]),
        ({"seed": "match99"}, ["--seed", f"between {MIN_SEED_WEIGHT} and 31"]),
        ({"seed": "1101"}, ["--seed", "too few"]),
        ({"seed": "11x1"}, ["--seed", "0s and 1s"]),
        ({"seed": "0111111111"}, ["--seed", "start and end with 1"]),
    ],
)
def test_impossible_values_name_the_option(kwargs, words):
    """Building a config in Python with an impossible value is a ConfigError whose one line names the option
    (the seed's messages name --seed)."""
    with pytest.raises(ConfigError) as exc:
        AlignConfig(**kwargs)
    msg = str(exc.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, msg


def test_config_is_checked_once_and_never_changed():
    """A config is frozen: what was checked when it was made is what runs; a changed copy is checked again."""
    cfg = AlignConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.interval = 0
    with pytest.raises(ConfigError, match="'interval'"):
        dataclasses.replace(cfg, interval=0)
    assert dataclasses.replace(cfg, interval=5000).interval == 5000


def test_flags_keep_lastz_spellings():
    """The generated flags are the ones LASTZ users type."""
    flags = {f for f, _, _ in describe_flags(AlignCommand)}
    assert {"--seed", "--step", "--strand", "--xdrop", "--hspthresh", "--ydrop", "--gappedthresh", "--gapped-by",
            "--max-hits", "--format", "--output", "--scoring", "--ambiguous", "--device", "--fused", "--backend",
            "--interval", "--threads", "--lastz", "--progress", "--stats", "TARGET", "QUERY"} <= flags
    p = argparse.ArgumentParser()
    add_options(p, AlignCommand)
    args = p.parse_args(["t.fa", "q.fa", "--nogapped", "--notransition", "--noentropy", "--max-hits", "1000",
                         "--seed", "1110111111111"])  # a 0/1 pattern stays text, not a YAML number
    cmd = options_from_args(AlignCommand, args)
    assert (cmd.gapped, cmd.transition, cmd.entropy, cmd.max_hits) == (False, False, False, 1000)
    assert (cmd.target, cmd.query, cmd.seed) == ("t.fa", "q.fa", "1110111111111")


def test_command_is_the_pipeline_options_plus_its_own(tmp_path):
    """AlignCommand is the pipeline's options, the command's own and ``dist`` (the library's AlignConfig is
    the pipeline's options and the device); YAML loads into it."""
    assert issubclass(AlignCommand, PipelineOptions) and issubclass(AlignConfig, PipelineOptions)
    common = {f.name for f in dataclasses.fields(PipelineOptions)}
    assert {f.name for f in dataclasses.fields(AlignConfig)} - common == {"device"}
    own = {f.name for f in dataclasses.fields(AlignCommand)} - common
    assert own == {"target", "query", "output", "format", "stats", "dist"}
    assert {f.name for f in dataclasses.fields(AlignDist)} == {"device", "threads", "nproc", "timeout_s"}
    d = AlignCommand(target="t.fa", query="q.fa").dist
    assert (d.device, d.threads, d.nproc, d.timeout_s) == ("cpu", 0, 1, 600.0)  # the defaults of before
    path = tmp_path / "a.yaml"
    path.write_text("target: t.fa\nquery: q.fa\nmax_hits: 0\n")
    with pytest.raises(ConfigError, match="max_hits"):
        load_config(AlignCommand, path)


def test_tour_options():
    """The demo step's options are range-checked too."""
    assert SegalignTour().length == 30_000
    with pytest.raises(ConfigError, match="'length' = 10 is out of range"):
        SegalignTour(length=10)


def test_dist_flags_keep_their_spellings():
    """--threads N (as LASTZ users type it), --device, --nproc and --timeout-s fill the ``dist`` section."""
    p = argparse.ArgumentParser()
    add_options(p, AlignCommand)
    cmd = options_from_args(AlignCommand, p.parse_args(["t.fa", "q.fa", "--threads", "2", "--device", "auto",
                                                        "--nproc", "3", "--timeout-s", "30"]))
    assert (cmd.dist.threads, cmd.dist.device, cmd.dist.nproc, cmd.dist.timeout_s) == (2, "auto", 3, 30.0)
    with pytest.raises(ConfigError, match="--threads"):
        options_from_args(AlignCommand, p.parse_args(["t.fa", "q.fa", "--threads", "-1"]))


def test_old_keys_load_with_a_warning(tmp_path, capsys):
    """A YAML file (or --set) with the keys of before (threads, dist_timeout, device) still loads, into
    ``dist``, with one deprecation line per key."""
    path = tmp_path / "old.yaml"
    path.write_text("target: t.fa\nquery: q.fa\nthreads: 2\ndist_timeout: 120\ndevice: cpu\n")
    cmd = load_config(AlignCommand, path)
    assert (cmd.dist.threads, cmd.dist.timeout_s, cmd.dist.device) == (2, 120.0, "cpu")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("torchhpc: warning:") for line in err)
    assert "'dist_timeout' is now 'dist.timeout_s'" in "\n".join(err)
    cmd = load_config(AlignCommand, path, ["dist_timeout=60"])
    assert cmd.dist.timeout_s == 60.0 and "'dist_timeout' is now 'dist.timeout_s'" in capsys.readouterr().err


def test_dist_options_checked_in_python():
    """The ``dist`` section built in Python is range-checked like a loaded one."""
    with pytest.raises(ConfigError, match="'timeout_s'"):
        AlignDist(timeout_s=0)
    with pytest.raises(ConfigError, match="'nproc'"):
        AlignDist(nproc=0)
