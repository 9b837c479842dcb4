"""Sweeps: the config syntax, the Cinema database against Foresight's, failed settings, the table and the page."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import torch

from torchhpc.ext.core.config import load_config
from torchhpc.ext.core.errors import ConfigError, InputError
from torchhpc.ext.core.runs import Run
from torchhpc.ext.foresight import compressors
from torchhpc.ext.foresight.cinema import FORESIGHT_COLUMNS, check_page, read_cinema
from torchhpc.ext.foresight.config import CompressorSpec, SweepConfig, expand_axis
from torchhpc.ext.foresight.sweep import run_sweep, sweep_settings

TINY = """
input: {synthetic: grf, size: 16, seed: 3}
compressors:
  - name: ours
    params: {mode: rel, bound: [1.0e-3, 1.0e-2]}
  - name: sz3
    params: {mode: rel, bound: {logspace: [1.0e-3, 1.0e-1, 3]}}
  - name: zstd
metrics: [max_abs_error, max_rel_error, mse, psnr, ssim, ratio, throughput, error_histogram]
analyses:
  - {name: power_spectrum, tolerance: 0.01, k_max_fraction: 0.5}
output: {name: tiny}
run: {progress: false}
"""


def write(tmp_path, text: str):
    p = tmp_path / "sweep.yaml"
    p.write_text(text)
    return p


def test_sweep_syntax_expands_axes_into_their_product():
    """Lists, logspace, linspace and range axes expand as documented; settings are the product of the axes."""
    assert expand_axis({"logspace": [1e-4, 1e-2, 3]}, "k") == [1e-4, 1e-3, 1e-2]
    assert expand_axis({"linspace": [0, 1, 5]}, "k") == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert expand_axis({"range": [8, 32, 8]}, "k") == [8, 16, 24]
    assert expand_axis(7, "k") == [7]
    spec = CompressorSpec("zfp", {"mode": ["abs", "rel"], "bound": {"logspace": [1e-3, 1e-1, 3]}})
    assert len(spec.settings()) == 6
    assert {"mode": "rel", "bound": 0.01} in spec.settings()
    for bad in ({"geomspace": [1, 2, 3]}, {"logspace": [0, 1, 3]}, [], {"range": [1, 2]}):
        with pytest.raises(ConfigError):
            expand_axis(bad, "compressors.zfp.params.bound")


@pytest.mark.parametrize("text,match", [
    ("compressors: [{name: lz4}]", "unknown compressor 'lz4'"),
    ("metrics: [psnr, entropy]", "unknown metric 'entropy'"),
    ("compressors: [{name: sz3, params: {mode: abs, bound: [0.1, 0]}}]", "error bound must be a number > 0"),
    ("compressors: [{name: sz3, params: {mode: abs, bound: 1, tolerance: 2}}]", "no parameter 'tolerance'"),
    ("analyses: [{name: vorticity}]", "unknown analysis 'vorticity'"),
    ("input: {format: raw, path: x.raw}", "input.dims is required"),
    ("outputs: {name: x}", "unknown key 'outputs'"),
])
def test_bad_configs_are_one_error_naming_the_option(tmp_path, text, match):
    """Unknown compressor/metric/analysis/key, a bound <= 0, a raw file without dims: one ConfigError."""
    with pytest.raises(ConfigError, match=match):
        load_config(SweepConfig, write(tmp_path, text))


def test_sweep_writes_a_cinema_database_like_foresights(tmp_path, shared_data, monkeypatch):
    """data.csv carries Foresight's CBench columns verbatim and in order (as in its published databases),
    FILE_* columns naming PNGs that exist, a crashing setting recorded as failed while the sweep goes on,
    the best passing setting per compressor, and an HTML page showing every row and image."""
    real = compressors.SZ3Compressor._encode

    def flaky(self, x, p, eb):  # SZ3 "crashes" on its loosest setting only
        if p["bound"] == pytest.approx(0.1):
            raise RuntimeError("simulated SZ3 crash")
        return real(self, x, p, eb)

    monkeypatch.setattr(compressors.SZ3Compressor, "_encode", flaky)
    cfg = load_config(SweepConfig, write(tmp_path, TINY), [f"run.root={tmp_path}"])
    assert len(sweep_settings(cfg)) == 6
    run = Run("foresight", cfg, root=tmp_path, progress=False)
    summary = run_sweep(cfg, run)
    cols, rows = read_cinema(summary["cinema"])

    # Foresight's columns, verbatim and in the same order as its NYX sweep databases
    for name in ("NYX_512_sz_sweep_.data.csv", "NYX_512_zfp_sweep_.data.csv"):
        theirs, their_rows = read_cinema(shared_data / "foresight" / "cinema_examples" / name)
        metric_cols = [c for c in theirs if not c.startswith("FILE_")]
        assert cols[:len(metric_cols)] == metric_cols == FORESIGHT_COLUMNS
        key = re.compile(r"^[^_]+_.+__.*$")
        assert all(key.match(r["Compressor_field__params"]) for r in their_rows + rows)
    files = [c for c in cols if c.startswith("FILE_")]
    assert files == sorted(files) and {"FILE_error_histogram", "FILE_power_spectrum"} <= set(files)
    for r in rows:
        if r["status"] == "ok":
            assert all((run.dir / "tiny.cdb" / r[c]).is_file() for c in files)

    failed = [r for r in rows if r["status"] == "failed"]
    assert len(failed) == 1 and "simulated SZ3 crash" in failed[0]["error"] and failed[0]["bound"] == "0.1"
    assert len(rows) == 6 and summary["failed"] == 1
    ok = [r for r in rows if r["status"] == "ok" and r["compressor"] != "zstd"]
    assert all(float(r["absolute_error"]) <= float(r["bound"]) * float(r["minmax"]) * (1 + 1e-9) for r in ok)

    best = {b["compressor"]: b for b in summary["best"]}
    passing = [r for r in rows if r["compressor"] == "ours" and r["pass_all"] == "true"]
    assert best["ours"]["ratio"] == pytest.approx(max(float(r["Compression Ratio"]) for r in passing), rel=1e-5)
    assert best["zstd"]["params"] == ""  # lossless: passes everything
    page = check_page(summary["html"])
    assert page["broken"] == 0 and page["rows"] == 6 and page["best"] == 3 and page["images"] >= 10, page


def test_missing_field_and_particle_analyses(tmp_path):
    """A field the input lacks is one InputError; a particle sweep runs FoF on decompressed positions."""
    cfg = load_config(SweepConfig, write(tmp_path, "input: {synthetic: grf, size: 8, fields: [pressure]}"),
                      [f"run.root={tmp_path}"])
    with pytest.raises(InputError, match="no field 'pressure'"):
        run_sweep(cfg, Run("foresight", cfg, root=tmp_path, progress=False))
    text = """
input: {synthetic: particles, size: 12, seed: 1}
compressors: [{name: ours, params: {mode: abs, bound: [1.0e-4, 2.0]}}]
analyses: [{name: halo_mass_function, tolerance: 0.05, min_members: 8, min_count: 2, n_bins: 3}]
output: {name: halos, plots: false, html: false}
"""
    cfg = load_config(SweepConfig, write(tmp_path, text), [f"run.root={tmp_path}"])
    summary = run_sweep(cfg, Run("foresight", cfg, root=tmp_path, run_id="halos", progress=False))
    _, rows = read_cinema(summary["cinema"])
    tight = [r for r in rows if r["bound"] == "0.0001"]
    assert all(r["halo_mass_function_pass"] == "true" and r["halos_orig"] == r["halos_dec"] for r in tight)
    assert int(tight[0]["halos_orig"]) > 0
    assert torch.tensor([float(r["absolute_error"]) for r in rows]).max() <= 2.0


def test_shipped_configs_load(shared_data):
    """Every config in configs/foresight/ loads and expands (debug, NYX, HACC, halos, turbulence)."""
    from pathlib import Path

    folder = Path(__file__).resolve().parents[3] / "configs" / "foresight"
    names = sorted(p.stem for p in folder.glob("*.yaml"))
    assert {"debug", "nyx", "hacc", "halos", "turbulence"} <= set(names)
    for n in names:
        assert sweep_settings(load_config(SweepConfig, folder / f"{n}.yaml"))


def test_demo_step_checks_itself(tmp_path):
    """The `torchhpc demo` step runs its small sweep and reports ok (bounds held, columns, page)."""
    from torchhpc.ext.foresight.config import ForesightTour
    from torchhpc.ext.foresight.demo import demo

    run = Run("demo", None, root=tmp_path, progress=False)
    out = demo(ForesightTour(size=12, bounds=[1e-2]), run, torch.device("cpu"), seed=0)
    assert out["ok"] and out["rows"] == 4 and out["failed"] == 0
    assert [b["compressor"] for b in out["best"]] == ["ours", "sz3", "zfp", "fpzip"]


def test_ours_bounds_are_compressed_in_one_call_with_what_each_gets_alone(tmp_path, monkeypatch):
    """Ours' settings that differ only in their bound are one group: one compress_many call takes every
    field at every bound, and each row holds what that field at that bound gets alone (ratio, error);
    other compressors' settings stay one per call, in config order."""
    from torchhpc.ext.foresight.sweep import batch_groups, load_input

    text = TINY.replace("params: {mode: rel, bound: [1.0e-3, 1.0e-2]}",
                        "params: {mode: rel, bound: [1.0e-3, 1.0e-2, 0.05], predictor: [lorenzo, auto]}")
    cfg = load_config(SweepConfig, write(tmp_path, text), [f"run.root={tmp_path}"])
    settings = sweep_settings(cfg)
    groups = batch_groups(settings)
    assert [[s.index for s in g] for g in groups] == [[0, 2, 4], [1, 3, 5], [6], [7], [8], [9]]
    calls = []
    real = compressors.OursCompressor.compress_many

    def spy(self, xs, **kw):
        calls.append((len(xs), kw.get("bounds")))
        return real(self, xs, **kw)

    monkeypatch.setattr(compressors.OursCompressor, "compress_many", spy)
    run = Run("foresight", cfg, root=tmp_path, progress=False)
    summary = run_sweep(cfg, run)
    assert summary["failed"] == 0
    fields, _ = load_input(cfg)
    n = len(fields)
    assert calls == [(3 * n, [b for b in (1e-3, 1e-2, 0.05) for _ in range(n)])] * 2
    _, rows = read_cinema(summary["cinema"])
    ours = [r for r in rows if r["compressor"] == "ours"]
    assert len(ours) == 6 * len(fields)
    for r in ours:
        x = fields[r["field"]]
        alone = compressors.compress(x, "ours", mode="rel", bound=float(r["bound"]),
                                     predictor="lorenzo" if "lorenzo" in r["params"] else "auto")
        assert float(r["Compression Ratio"]) == pytest.approx(alone.stats["ratio"], rel=1e-5)  # as the CSV rounds
        assert float(r["absolute_error"]) <= float(r["bound"]) * float(r["minmax"]) * (1 + 1e-9)


def test_a_missing_input_names_the_option_and_where_a_relative_path_is_read_from(tmp_path, monkeypatch):
    """A config whose input file is missing: one InputError naming input.path, and for a relative path the
    directory it was read from (a shipped config run from elsewhere)."""
    from torchhpc.ext.foresight.sweep import load_input

    monkeypatch.chdir(tmp_path)
    text = TINY.replace("input: {synthetic: grf, size: 16, seed: 3}", "input: {path: data/missing.h5}")
    cfg = load_config(SweepConfig, write(tmp_path, text))
    with pytest.raises(InputError, match=r"input.path data/missing.h5: no such file \(a relative path is read "
                                         r"from the current directory, " + re.escape(str(tmp_path))):
        load_input(cfg)
    absolute = load_config(SweepConfig, write(tmp_path, text.replace("data/missing.h5", str(tmp_path / "no.h5"))))
    with pytest.raises(InputError, match=r"no such file$"):
        load_input(absolute)
    # `foresight run` reads the input before it makes the run folder: a failed run leaves none behind
    from torchhpc.ext.foresight.commands import run

    runs = tmp_path / "runs"
    absolute = dataclasses.replace(absolute, run=dataclasses.replace(absolute.run, root=str(runs)))
    with pytest.raises(InputError, match=r"no such file$"):
        run(absolute)
    assert not runs.exists()


def test_a_field_with_nan_is_refused_by_its_analyses_and_an_int_only_input_by_the_sweep(tmp_path):
    """A NaN in the field: the power spectrum of the original would be NaN and every comparison with it would
    'pass' (NaN > 0 is false, so no mode was compared): one InputError naming the field and the analysis.  An
    input with no float field (an int32 .npy): one InputError, not a sweep of 0 rows."""
    from torchhpc.ext.foresight.data import gaussian_random_field

    x = gaussian_random_field(16, lambda k: k**-3.0).numpy()
    x[3, 4, 5] = np.nan
    np.save(tmp_path / "rho.npy", x)
    text = TINY.replace("input: {synthetic: grf, size: 16, seed: 3}", f"input: {{path: {tmp_path / 'rho.npy'}}}")
    cfg = load_config(SweepConfig, write(tmp_path, text), [f"run.root={tmp_path}"])
    with pytest.raises(InputError, match="analysis power_spectrum: field 'rho' has 1 NaN/inf value"):
        run_sweep(cfg, Run("foresight", cfg, root=tmp_path, progress=False))
    np.save(tmp_path / "ints.npy", np.arange(4096, dtype=np.int32).reshape(16, 16, 16))
    cfg = load_config(SweepConfig, write(tmp_path, text.replace("rho.npy", "ints.npy")), [f"run.root={tmp_path}"])
    with pytest.raises(InputError, match="no float32/float64 field to compress \\(fields: ints int32\\)"):
        run_sweep(cfg, Run("foresight", cfg, root=tmp_path, progress=False))
