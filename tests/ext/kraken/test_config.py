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
    KrakenDist,
    ServeOptions,
    StreamOptions,
    TableOptions,
)

torchrec = pytest.importorskip("torchrec")

REPO = Path(__file__).resolve().parents[3]


def test_python_stream_is_the_cli_stream():
    """SyntheticClickStream() from Python draws exactly the batches `torchhpc kraken train` trains on by default."""
    from torchhpc.ext.kraken.stream import SyntheticClickStream, build_stream

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
    (lambda: TableOptions(eviction="fifo"), "TableOptions: key 'eviction'"),
    (lambda: TableOptions(admit_prob=0.0), "TableOptions: key 'admit_prob'"),
    (lambda: StreamOptions(zipf=0.0), "StreamOptions: key 'zipf'"),
    (lambda: CheckpointOptions(full_every=0), "CheckpointOptions: key 'full_every'"),
    (lambda: BenchOptions(steps=1), "BenchOptions: key 'steps'"),
    (lambda: BenchOptions(stream="criteo"), "path: give the Criteo-format log"),
    (lambda: BenchOptions(path="day_0.gz"), "add --stream criteo"),
    (lambda: StreamOptions(reader="pandas"), "StreamOptions: key 'reader'"),
    (lambda: ServeOptions(checkpoint_dir="x", poll=-1.0), "ServeOptions: key 'poll'"),
    (lambda: KrakenConfig(tables=TableOptions(max_rows=0, memory_budget_mb=0)), "max_rows or memory_budget_mb"),
    (lambda: KrakenDist(threads=-1), "KrakenDist: key 'threads'"),
    (lambda: KrakenDist(nproc=0), "KrakenDist: key 'nproc'"),
    (lambda: KrakenDist(timeout_s=0.0), "KrakenDist: key 'timeout_s'"),
    (lambda: KrakenDist(device="tpu"), "KrakenDist: key 'device'"),
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


def test_old_device_and_threads_keys_load_with_one_warning(tmp_path, capsys):
    """The top-level `device` and `threads` of older config files (and --set) are now `dist.device` and
    `dist.threads`: they still load, each with one deprecation line on stderr."""
    old = tmp_path / "old.yaml"
    old.write_text((REPO / "configs" / "kraken" / "debug.yaml").read_text() + "device: cpu\nthreads: 2\n")
    capsys.readouterr()
    cfg = load_config(KrakenConfig, old)
    assert (cfg.dist.device, cfg.dist.threads, cfg.dist.nproc, cfg.dist.timeout_s) == ("cpu", 2, 1, 300.0)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(x.startswith("torchhpc: warning:") for x in err)
    assert "'device' is now 'dist.device'" in err[0] and "'threads' is now 'dist.threads'" in err[1]
    cfg = load_config(KrakenConfig, None, ["threads=3"])
    assert cfg.dist.threads == 3 and "'threads' is now 'dist.threads'" in capsys.readouterr().err


def test_dist_flags_keep_their_spelling():
    """`kraken train` keeps --device and --threads (now dist.device, dist.threads) and gains --nproc and
    --timeout-s; kraken trains on the CPU unless told otherwise."""
    flags = {f: default for f, default, _ in describe_flags(KrakenConfig)}
    assert flags["--device"] == "cpu" and flags["--threads"] == "0" and flags["--nproc"] == "1"
    assert flags["--timeout-s"] == "300.0"


def test_serve_and_bench_flags_keep_their_spelling():
    """The generated flags of `kraken serve` and `kraken bench` are the ones the README shows."""
    serve = {f for f, _, _ in describe_flags(ServeOptions)}
    bench = {f for f, _, _ in describe_flags(BenchOptions)}
    assert {"--checkpoint-dir", "--duration", "--poll", "--requests", "--until-step", "--idle"} <= serve
    assert {"--steps", "--vocab", "--batch-size", "--dim", "--fraction", "--seed", "--out", "--json"} <= bench
    assert {"--stream", "--path"} <= bench
