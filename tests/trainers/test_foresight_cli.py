"""``torchhpc foresight``: compress/decompress one file, run a sweep (one process and two torchrun ranks),
and bad input as one line with exit status 1."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from torchhpc.ext.foresight.cinema import read_cinema
from torchhpc.trainers import foresight

SWEEP = """
input: {synthetic: kolmogorov, size: 12, seed: 2}
compressors:
  - name: ours
    params: {mode: rel, bound: [1.0e-4, 1.0e-2]}
  - name: bitgroom
    params: {mode: pw_rel, bound: 1.0e-3}
  - name: downsample
    params: {factor: 2}
metrics: [max_abs_error, mse, psnr, ratio]
analyses: [{name: turbulence, tolerance: 0.02, k_max_fraction: 0.5, moment_tolerance: 0.05}]
output: {name: turb, plots: false, html: false}
run: {progress: false}
"""


def test_register_adds_the_three_commands():
    """`register` puts run, compress and decompress under `foresight` (what trainers/cli.py calls)."""
    p = argparse.ArgumentParser()
    foresight.register(p.add_subparsers(dest="cmd"))
    args = p.parse_args(["foresight", "compress", "a.npy", "b.fsz", "--bound", "0.1"])
    assert args.foresight_command == "compress"
    for cmd in ("run", "compress", "decompress"):
        with pytest.raises(SystemExit):
            p.parse_args(["foresight", cmd, "--help"])


def test_compress_then_decompress_json(tmp_path, capsys):
    """compress prints one JSON object with ratio, max error within the bound and throughput; decompress
    restores the array within the same bound."""
    x = np.cumsum(np.random.default_rng(0).normal(size=(10, 12, 14)), axis=0).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    for comp in ("ours", "sz3", "zfp", "fpzip"):
        assert foresight.main(["compress", str(tmp_path / "x.npy"), str(tmp_path / "x.fsz"), "--compressor", comp,
                               "--mode", "abs", "--bound", "0.01", "--json"]) == 0
        rep = json.loads(capsys.readouterr().out)
        assert rep["max_abs_error"] <= 0.01 and rep["ratio"] > 1 and rep["compress_MBps"] > 0
        assert {"compress_first_s", "decompress_first_s"} <= set(rep)  # the MB/s came through _timed
        assert foresight.main(["decompress", str(tmp_path / "x.fsz"), str(tmp_path / "y.npy"), "--original",
                               str(tmp_path / "x.npy"), "--json"]) == 0
        back = json.loads(capsys.readouterr().out)
        assert back["compressor"] == comp and back["max_abs_error"] == rep["max_abs_error"]
        assert np.abs(np.load(tmp_path / "y.npy") - x).max() <= 0.01


@pytest.mark.parametrize("argv,message", [
    (["--compressor", "lz4", "--bound", "1"], "--compressor: key 'compressor' must be one of"),
    (["--bound", "0"], "--bound: key 'bound' = 0.0 is out of range (must be > 0)"),
    (["--bound", "-3"], "out of range (must be > 0)"),
    ([], "give an error bound"),
    (["--bound", "1", "--param", "speed=3"], "no parameter 'speed'"),
    (["--bound", "1", "--field", "nope"], "no field 'nope'"),
    (["--compressor", "downsample", "--mode", "rel", "--bound", "1e-2"], "'downsample' is not error-bounded"),
    (["--compressor", "zstd", "--bound", "1e-3"], "'zstd' is lossless"),
    (["--compressor", "zfp", "--param", "rate=8", "--bound", "1e-3"], "not error-bounded with --param rate"),
    (["--compressor", "bitgroom", "--param", "bits=-1"], "bits must be an integer in 0..52"),
    (["--compressor", "zstd", "--param", "level=100"], "level must be an integer in 1..22"),
    (["--bound", "1", "--param", "predictor=[1"], "--param predictor=[1: the value is not a YAML scalar"),
])
def test_bad_compress_input_is_one_line(tmp_path, capsys, argv, message):
    """Unknown compressor, bound <= 0 or missing, unknown parameter or field, a bound the compressor would not
    hold (refused, not ignored), an out-of-range parameter or one that is not YAML: exit 1 and one line."""
    np.save(tmp_path / "x.npy", np.ones((4, 4), dtype=np.float32))
    code = foresight.main(["compress", str(tmp_path / "x.npy"), str(tmp_path / "o.fsz"), *argv])
    err = capsys.readouterr().err.strip()
    assert code == 1 and message in err and len(err.splitlines()) == 1, err


def test_decompress_bad_file_and_shape_mismatch(tmp_path, capsys):
    """A file that is not ours and an --original of another shape: exit 1, one line each."""
    np.save(tmp_path / "x.npy", np.ones((4, 4), dtype=np.float32))
    np.save(tmp_path / "z.npy", np.ones((5, 4), dtype=np.float32))
    assert foresight.main(["decompress", str(tmp_path / "x.npy"), str(tmp_path / "y.npy")]) == 1
    assert "not a foresight compressed file" in capsys.readouterr().err
    foresight.main(["compress", str(tmp_path / "x.npy"), str(tmp_path / "x.fsz"), "--bound", "0.1"])
    capsys.readouterr()
    assert foresight.main(["decompress", str(tmp_path / "x.fsz"), str(tmp_path / "y.npy"), "--original",
                           str(tmp_path / "z.npy")]) == 1
    err = capsys.readouterr().err.strip()
    assert "shape mismatch" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "y.npy").exists()  # a failed decompress leaves no output


def test_an_output_equal_to_an_input_is_refused_and_the_input_kept(tmp_path, capsys):
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    np.save(tmp_path / "x.npy", x)
    assert foresight.main(["compress", str(tmp_path / "x.npy"), str(tmp_path / "x.npy"), "--bound", "0.1"]) == 1
    err = capsys.readouterr().err.strip()
    assert "is also an input" in err and len(err.splitlines()) == 1, err
    assert np.array_equal(np.load(tmp_path / "x.npy"), x)
    foresight.main(["compress", str(tmp_path / "x.npy"), str(tmp_path / "x.fsz"), "--bound", "0.1"])
    capsys.readouterr()
    for out in ("x.npy", "./x.npy"):  # the --original, under another spelling
        assert foresight.main(["decompress", str(tmp_path / "x.fsz"), str(tmp_path / out), "--original",
                               str(tmp_path / "x.npy")]) == 1
        assert "is also an input" in capsys.readouterr().err
    assert np.array_equal(np.load(tmp_path / "x.npy"), x)
    assert foresight.main(["compress", str(tmp_path / "x.npy"), str(tmp_path / "no" / "dir" / "o.fsz"),
                           "--bound", "0.1"]) == 0  # a folder that does not exist yet is created
    capsys.readouterr()


def test_nan_and_inf_are_reported_apart_from_the_error_over_finite_values(tmp_path, capsys):
    x = np.cumsum(np.random.default_rng(1).normal(size=(6, 7, 8)), axis=2).astype(np.float32)
    x[0, 0, 0], x[2, 3, 4], x[5, 6, 7] = np.nan, np.inf, -np.inf
    np.save(tmp_path / "x.npy", x)
    assert foresight.main(["compress", str(tmp_path / "x.npy"), str(tmp_path / "x.fsz"), "--mode", "abs",
                           "--bound", "0.01", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert 0 < rep["max_abs_error"] <= 0.01
    assert (rep["nan_values"], rep["inf_values"], rep["nonfinite_kept"]) == (1, 2, True)
    assert foresight.main(["decompress", str(tmp_path / "x.fsz"), str(tmp_path / "y.npy"), "--original",
                           str(tmp_path / "x.npy"), "--json"]) == 0
    back = json.loads(capsys.readouterr().out)
    assert back["max_abs_error"] == rep["max_abs_error"] and back["nonfinite_kept"] is True


def _rows(root):
    (csv,) = list(root.glob("foresight/*/turb.cdb/data.csv"))
    return read_cinema(csv)[1]


def test_run_sweep_turbulence(tmp_path, capsys):
    """`foresight run` on a Kolmogorov velocity: the tight bound passes the turbulence rule, downsampling
    by 2 fails it (it removes the top half of the spectrum), bit grooming's pw_rel bound holds."""
    cfg = tmp_path / "s.yaml"
    cfg.write_text(SWEEP)
    assert foresight.main(["run", "--config", str(cfg), "--set", f"run.root={tmp_path}"]) == 0
    assert "best passing setting per compressor" in capsys.readouterr().out
    rows = _rows(tmp_path)
    assert len(rows) == 4 * 3
    by = {(r["compressor"], r["bound"]): r for r in rows}
    assert by[("ours", "0.0001")]["turbulence_pass"] == "true"
    assert by[("downsample", "")]["turbulence_pass"] == "false"
    assert all(r["status"] == "ok" for r in rows)


def test_run_sweeps_the_codec_from_a_config(tmp_path, capsys):
    """`params: {codec: [planes, blocks]}` is a sweep axis: both codecs' rows are ok, hold the bound and carry the
    same values (the same quantisation), whatever the codec."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(SWEEP.replace("params: {mode: rel, bound: [1.0e-4, 1.0e-2]}",
                                 "params: {mode: rel, bound: 1.0e-2, codec: [planes, blocks]}"))
    assert foresight.main(["run", "--config", str(cfg), "--set", f"run.root={tmp_path}"]) == 0
    capsys.readouterr()
    ours = [r for r in _rows(tmp_path) if r["compressor"] == "ours"]
    assert len(ours) == 2 * 3 and all(r["status"] == "ok" for r in ours)
    by = {(r["field"], "blocks" in r["params"]): r for r in ours}
    for field in {r["field"] for r in ours}:
        assert by[(field, True)]["absolute_error"] == by[(field, False)]["absolute_error"]


@pytest.mark.distributed
def test_run_over_two_torchrun_ranks_equals_one_process(tmp_path):
    """`--nproc 2` runs half the settings per rank and writes the same rows as one process (timings aside)."""
    cfg = tmp_path / "s.yaml"
    cfg.write_text(SWEEP)
    one, two = tmp_path / "one", tmp_path / "two"
    assert foresight.main(["run", "--config", str(cfg), "--set", f"run.root={one}"]) == 0
    assert foresight.main(["run", "--config", str(cfg), "--set", f"run.root={two}", "--nproc", "2"]) == 0
    skip = {"Compression Throughput(MB/s)", "DeCompression Throughput(MB/s)"}
    a = [{k: v for k, v in r.items() if k not in skip} for r in _rows(one)]
    b = [{k: v for k, v in r.items() if k not in skip} for r in _rows(two)]
    assert a == b and len(a) == 12
    (summary,) = list(two.glob("foresight/*/summary.json"))
    assert json.loads(summary.read_text())["ranks"] == 2


def test_a_quick_call_is_timed_twice_for_its_throughput(monkeypatch):
    """The report's MB/s come from the faster of two calls when the first takes under REPEAT_BELOW_S (a fresh
    process's first call also loads the compiled kernels: on a 32^3 field 0.73 MB/s where the codec runs at ~25),
    from the one call otherwise; the first call's seconds are reported beside (a scripted clock, not a real one)."""
    from torchhpc.ext.foresight import commands

    now = [0.0]
    monkeypatch.setattr(commands.time, "perf_counter", lambda: now[0])
    calls = []

    def taking(*seconds):
        def call():
            now[0] += seconds[len(calls)]
            calls.append(1)
            return len(calls)
        return call

    assert commands._timed(taking(1.5, 0.25)) == (2, 0.25, 1.5) and len(calls) == 2
    calls.clear()
    assert commands._timed(taking(commands.REPEAT_BELOW_S + 1)) == (1, commands.REPEAT_BELOW_S + 1,
                                                                     commands.REPEAT_BELOW_S + 1)
    assert len(calls) == 1
