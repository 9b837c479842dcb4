"""Typed YAML configs: loading, overrides, and one-line errors that name the file and the key."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest

from torchhpc.ext.core.config import DistOptions, Options, describe, dump_config, load_config, option
from torchhpc.ext.core.errors import ConfigError


@dataclass
class Optim:
    lr: float = option(3e-4, help="learning rate", gt=0)
    betas: list[float] = option(default_factory=lambda: [0.9, 0.999], help="Adam betas")
    kind: Literal["adam", "sgd"] = option("adam", help="optimizer")


@dataclass
class Job:
    name: str = option("job", help="a name")
    epochs: int = option(10, help="epochs", ge=1, le=1000)
    backfill: str = option("none", choices=["none", "easy"])
    seed: int | None = option(None, help="seed")
    optim: Optim = field(default_factory=Optim)

    def __post_init__(self):
        if self.epochs > 500 and self.optim.kind == "sgd":
            raise ConfigError("epochs: more than 500 epochs needs kind adam")


def write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_defaults_file_and_overrides_take_precedence_in_order(tmp_path):
    """Defaults < file < --set, nested keys and YAML-typed values."""
    p = write(tmp_path, "epochs: 20\noptim:\n  lr: 0.01\n")
    cfg = load_config(Job, p, ["optim.lr=1e-3", "seed=7", "optim.betas=[0.5, 0.6]"])
    assert cfg.epochs == 20 and cfg.optim.lr == pytest.approx(1e-3) and cfg.seed == 7
    assert cfg.optim.betas == [0.5, 0.6] and cfg.optim.kind == "adam" and cfg.name == "job"
    assert load_config(Job).epochs == 10


def test_float_written_without_dot_is_accepted(tmp_path):
    """YAML 1.1 reads 1e-3 as a string; a float option still takes it."""
    assert load_config(Job, write(tmp_path, "optim:\n  lr: 1e-3\n")).optim.lr == pytest.approx(1e-3)


@pytest.mark.parametrize(
    "text, words",
    [
        ("epochz: 3\n", ["unknown key 'epochz'", "epochs"]),
        ("optim:\n  learning_rate: 3\n", ["unknown key 'optim.learning_rate'"]),
        ("epochs: three\n", ["'epochs'", "integer"]),
        ("epochs: 0\n", ["'epochs'", "out of range", ">= 1"]),
        ("optim:\n  lr: -1\n", ["'optim.lr'", "> 0"]),
        ("optim:\n  kind: rmsprop\n", ["'optim.kind'", "'adam'"]),
        ("backfill: conservative\n", ["'backfill'", "'easy'"]),
        ("optim: 3\n", ["'optim'", "mapping"]),
        ("epochs: true\n", ["'epochs'", "integer"]),
        ("- a\n- b\n", ["mapping"]),
        ("epochs: [1\n", ["not valid YAML", "line"]),
        ("epochs: 600\noptim:\n  kind: sgd\n", ["epochs", "adam"]),
    ],
)
def test_bad_files_give_one_line_naming_file_and_key(tmp_path, text, words):
    """Each mistake raises ConfigError with one line that names the file and the key."""
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(Job, p)
    msg = str(err.value)
    assert "\n" not in msg and str(p) in msg
    for w in words:
        assert w in msg, (w, msg)


@pytest.mark.parametrize(
    "item, words",
    [
        ("optim.lrr=1", ["--set optim.lrr=1", "unknown key 'optim.lrr'"]),
        ("epochs=-2", ["--set epochs=-2", "out of range"]),
        ("epochs", ["KEY=VALUE"]),
        ("name.x=1", ["not a section"]),
    ],
)
def test_bad_overrides_name_the_override(item, words):
    """A bad --set is blamed on the override, not on the file."""
    with pytest.raises(ConfigError) as err:
        load_config(Job, None, [item])
    for w in words:
        assert w in str(err.value)


def test_missing_file():
    """A missing config file is a ConfigError naming the path."""
    with pytest.raises(ConfigError, match="nope.yaml: config file not found"):
        load_config(Job, "nope.yaml")


def test_dump_round_trips(tmp_path):
    """The saved resolved config loads back to an equal config."""
    cfg = load_config(Job, None, ["optim.lr=0.5", "seed=3"])
    p = write(tmp_path, dump_config(cfg))
    assert load_config(Job, p) == cfg


def test_describe_lists_every_option():
    """describe() gives dotted keys with types, defaults and help."""
    rows = {r[0]: r for r in describe(Job)}
    assert rows["optim.lr"][2] == 3e-4 and rows["optim.lr"][3] == "learning rate"
    assert "epochs" in rows and "optim.betas" in rows


# ----------------------------------------------------------------------------- Options, renamed keys


@dataclass
class _Dist(Options):
    threads: int = option(0, help="threads", ge=0)


@dataclass
class _Renamed(Options):
    RENAMED = {"timeout": "dist.timeout_s", "solver.threads": "dist.threads"}
    LEGACY_VALUES = {"dist.threads": {None: 0}}
    dist: DistOptions = option(default_factory=DistOptions, help="where it runs")
    lr: float = option(0.1, help="step", gt=0)


def test_options_check_their_ranges_when_built_in_python():
    """An Options dataclass made directly in Python is range-checked as the YAML loader checks it."""
    with pytest.raises(ConfigError, match="_Dist: key 'threads' = -1 is out of range"):
        _Dist(threads=-1)
    with pytest.raises(ConfigError, match="key 'nproc' = 0 is out of range"):
        DistOptions(nproc=0)
    assert DistOptions().timeout_s == 300.0


def test_renamed_keys_still_load_with_one_warning(tmp_path, capsys):
    """An old key in a file or in --set lands on its new name, with one warning line each; old and new
    together are an error."""
    f = tmp_path / "c.yaml"
    f.write_text("timeout: 30\nsolver:\n  threads: 2\n")
    cfg = load_config(_Renamed, f)
    assert (cfg.dist.timeout_s, cfg.dist.threads) == (30.0, 2)
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"torchhpc: warning: {f}: key 'timeout' is now 'dist.timeout_s' (the old name still loads; "
                   f"please rename it)",
                   f"torchhpc: warning: {f}: key 'solver.threads' is now 'dist.threads' (the old name still "
                   f"loads; please rename it)"]
    assert load_config(_Renamed, None, ["timeout=12"]).dist.timeout_s == 12.0
    assert "key 'timeout' is now 'dist.timeout_s'" in capsys.readouterr().err
    f.write_text("timeout: 30\ndist:\n  timeout_s: 40\n")
    capsys.readouterr()
    with pytest.raises(ConfigError, match="both 'timeout' and its new name 'dist.timeout_s'"):
        load_config(_Renamed, f)
    # a config that fails to load says only its error (the rename's warning would be a second line)
    assert capsys.readouterr().err == ""
    with pytest.raises(ConfigError, match="out of range"):
        load_config(_Renamed, None, ["timeout=-1"])
    assert capsys.readouterr().err == ""


def test_yaml_merge_keys_load(tmp_path):
    """`<<: *anchor` merges a mapping (the duplicate-key check used to call it invalid YAML); a key written
    next to the merge overrides the merged one, and a key written twice is still refused."""
    from torchhpc.ext.core.config import read_yaml

    f = tmp_path / "m.yaml"
    f.write_text("defaults: &d\n  a: 1\n  b: 2\nx:\n  <<: *d\n  b: 3\n")
    assert read_yaml(f)["x"] == {"a": 1, "b": 3}
    f.write_text("x:\n  a: 1\n  a: 2\n")
    with pytest.raises(ConfigError, match="appears twice"):
        read_yaml(f)


def test_an_old_key_with_a_value_of_its_old_meaning_loads_in_the_new_meaning(tmp_path, capsys):
    """'solver.threads: null' (torch's default under the old name) becomes 'dist.threads: 0', with a line
    saying so; a plain value passes unchanged."""
    f = tmp_path / "c.yaml"
    f.write_text("solver:\n  threads: null\n")
    assert load_config(_Renamed, f).dist.threads == 0
    assert "'dist.threads: null' now reads 'dist.threads: 0'" in capsys.readouterr().err
    assert load_config(_Renamed, None, ["solver.threads=null"]).dist.threads == 0
    assert load_config(_Renamed, None, ["solver.threads=3"]).dist.threads == 3
