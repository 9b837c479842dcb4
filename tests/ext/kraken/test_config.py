"""kraken's options are defined once: the library, the YAML files and the CLI agree, and bad values name the option."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from torchhpc.ext.core.cli import describe_flags
from torchhpc.ext.core.config import load_config
from torchhpc.ext.core.errors import ConfigError
from torchhpc.ext.kraken.config import (
    BenchOptions,
    CheckpointOptions,
    KrakenConfig,
    ServeOptions,
    StreamOptions,
    TableOptions,
)

torchrec = pytest.importorskip("torchrec")

REPO = Path(__file__).resolve().parents[3]


def test_python_stream_is_the_cli_stream():
    """SyntheticClickStream() from Python draws exactly the batches `torchhpc kraken train` trains on by default."""
    from torchhpc.ext.kraken.jobs import build_stream
    from torchhpc.ext.kraken.stream import SyntheticClickStream

    ours, cli = SyntheticClickStream(), build_stream(KrakenConfig())
    assert ours.cfg == cli.cfg == StreamOptions()
    assert (ours.cfg.zipf, ours.cfg.effect_scale) == (1.05, 3.0)  # the published defaults
    a, b = ours.batch(3), cli.batch(3)
    assert torch.equal(a.labels, b.labels) and torch.equal(a.sparse.values(), b.sparse.values())


def test_table_config_is_built_from_the_table_options():
    """DynamicTableConfig.of carries every per-table option; the two share one field list."""
    from torchhpc.ext.kraken.embedding import DynamicTableConfig

    opts = TableOptions(max_rows=7, memory_budget_mb=0.5, admit_count=3, admit_prob=0.5, admit_window=9,
                        eviction="lfu", ttl=4, pooling="mean", init_rows=5, init_scale=0.2, sketch_width=2048)
    t = DynamicTableConfig.of(opts, "t_C1", 8, ["C1"])
    assert (t.name, t.dim, t.features) == ("t_C1", 8, ["C1"])
    for f in dataclasses.fields(TableOptions):
        assert getattr(t, f.name) == getattr(opts, f.name), f.name
    assert t.memory_budget == int(0.5 * 2**20)
    # the library's table defaults are the CLI's
    plain = DynamicTableConfig("t", 4)
    assert {f.name: getattr(plain, f.name) for f in dataclasses.fields(TableOptions)} == dataclasses.asdict(
        TableOptions())


@pytest.mark.parametrize("build, words", [
    (lambda: TableOptions(eviction="fifo"), "tables: key 'eviction'"),
    (lambda: TableOptions(admit_prob=0.0), "tables: key 'admit_prob'"),
    (lambda: StreamOptions(zipf=0.0), "stream: key 'zipf'"),
    (lambda: CheckpointOptions(full_every=0), "checkpoint: key 'full_every'"),
    (lambda: BenchOptions(steps=1), "bench: key 'steps'"),
    (lambda: BenchOptions(stream="criteo"), "path: give the Criteo-format log"),
    (lambda: BenchOptions(path="day_0.gz"), "add --stream criteo"),
    (lambda: StreamOptions(reader="pandas"), "stream: key 'reader'"),
    (lambda: ServeOptions(checkpoint_dir="x", poll=-1.0), "serve: key 'poll'"),
    (lambda: KrakenConfig(tables=TableOptions(max_rows=0, memory_budget_mb=0)), "max_rows or memory_budget_mb"),
])
def test_values_out_of_range_name_the_option(build, words):
    """A dataclass built in Python is range-checked like one read from a file."""
    with pytest.raises(ConfigError, match=words):
        build()


@pytest.mark.parametrize("name,source", [("debug.yaml", "synthetic"), ("synthetic.yaml", "synthetic"),
                                         ("criteo.yaml", "criteo")])
def test_published_configs_load(name, source):
    """Every key of the published configs still loads."""
    cfg = load_config(KrakenConfig, REPO / "configs" / "kraken" / name)
    assert cfg.stream.source == source


def test_serve_and_bench_flags_keep_their_spelling():
    """The generated flags of `kraken serve` and `kraken bench` are the ones the README shows."""
    serve = {f for f, _, _ in describe_flags(ServeOptions)}
    bench = {f for f, _, _ in describe_flags(BenchOptions)}
    assert {"--checkpoint-dir", "--duration", "--poll", "--requests", "--until-step", "--idle"} <= serve
    assert {"--steps", "--vocab", "--batch-size", "--dim", "--fraction", "--seed", "--out", "--json"} <= bench
    assert {"--stream", "--path"} <= bench
