"""segalign's options: one dataclass for the library, YAML and ``torchhpc align``, checked on construction."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from torchhpc.ext.core.cli import add_options, describe_flags, options_from_args
from torchhpc.ext.core.config import load_config
from torchhpc.ext.core.errors import ConfigError
from torchhpc.ext.segalign.config import MIN_SEED_WEIGHT, AlignCommand, AlignConfig, SegalignTour


def test_defaults_are_lastz_and_segalign():
    """The defaults are LASTZ's (12of19, one transition, xdrop 910, hspthresh 3000) and SegAlign's ydrop."""
    cfg = AlignConfig()
    assert (cfg.seed, cfg.transition, cfg.xdrop, cfg.hspthresh, cfg.ydrop, cfg.strand) == (
        "12of19", True, 910, 3000, 9430, "both")


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"max_hits": 0}, ["--max-hits", "> 0"]),
        ({"xdrop": -1}, ["--xdrop", "> 0"]),
        ({"step": 0}, ["--step", ">= 1"]),
        ({"gappedthresh": 0}, ["--gappedthresh", "> 0"]),
        ({"strand": "up"}, ["--strand", "plus"]),
        ({"gapped_by": "blast"}, ["--gapped-by", "native"]),
        ({"backend": "cuda-magic"}, ["--backend", "numba"]),
        ({"seed": "match0"}, ["--seed", f"between {MIN_SEED_WEIGHT} and 31"]),
        ({"seed": "match99"}, ["--seed", f"between {MIN_SEED_WEIGHT} and 31"]),
        ({"seed": "1101"}, ["--seed", "too few"]),
        ({"seed": "11x1"}, ["--seed", "0s and 1s"]),
        ({"seed": "0111111111"}, ["--seed", "start and end with 1"]),
    ],
)
def test_impossible_values_name_the_flag(kwargs, words):
    """Building a config with an impossible value is a ConfigError whose one line names the flag."""
    with pytest.raises(ConfigError) as exc:
        AlignConfig(**kwargs)
    msg = str(exc.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, msg


def test_check_sees_changes_in_place():
    """A field changed after construction is caught by check() (the pipeline calls it)."""
    cfg = AlignConfig()
    cfg.interval = 0
    with pytest.raises(ConfigError, match="--interval"):
        cfg.check()


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


def test_command_is_an_align_config(tmp_path):
    """AlignCommand is the pipeline's config plus the command's own options; YAML loads into it."""
    assert issubclass(AlignCommand, AlignConfig)
    common = {f.name for f in dataclasses.fields(AlignConfig)}
    own = {f.name for f in dataclasses.fields(AlignCommand)} - common
    assert own == {"target", "query", "output", "format", "stats", "threads", "dist_timeout"}
    path = tmp_path / "a.yaml"
    path.write_text("target: t.fa\nquery: q.fa\nmax_hits: 0\n")
    with pytest.raises(ConfigError, match="max_hits"):
        load_config(AlignCommand, path)


def test_tour_options():
    """The demo step's options are range-checked too."""
    assert SegalignTour().length == 30_000
    with pytest.raises(ConfigError, match="--length"):
        SegalignTour(length=10)
