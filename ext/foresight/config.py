"""Every option of foresight, written once: ``torchhpc foresight run|compress|decompress`` flags, ``--help``
and the YAML configs in ``configs/foresight/`` come from here.

* :class:`SweepConfig` — ``torchhpc foresight run --config FILE``: input, compressors with parameter
  sweeps, metrics, analyses with their pass/fail rules, output (a Cinema database + table + HTML page),
  and ``dist`` (:class:`SweepDist`: ``--device``, ``--threads``, ``--nproc``, ``--timeout-s``).
* :class:`CompressOptions` / :class:`DecompressOptions` — one-off ``compress IN OUT`` / ``decompress IN OUT``.
* :class:`ForesightTour` — the ``torchhpc demo`` step (:func:`torchhpc.ext.foresight.demo.demo`).

The sweep syntax (in ``compressors[].params``): a scalar is fixed; a list is a sweep axis; a mapping
``{logspace: [a, b, n]}`` (n values from a to b, evenly spaced in log), ``{linspace: [a, b, n]}`` or
``{range: [start, stop, step]}`` (integers, stop excluded) is a generated axis.  A compressor's
settings are the product of its axes.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchhpc.ext.core.config import DistOptions, Options, RunOptions, option
from torchhpc.ext.core.errors import ConfigError, InputError

ANALYSIS_NAMES = ("power_spectrum", "halo_mass_function", "turbulence")
METRIC_NAMES = ("max_abs_error", "max_rel_error", "mse", "psnr", "psnr_peak", "value_range", "ssim", "ratio",
                "throughput", "error_histogram")
COMPRESSOR_NAMES = ("ours", "sz3", "zfp", "fpzip", "bitgroom", "downsample", "zstd")


@dataclass
class InputOptions(Options):
    """What to compress: a file, or a synthetic field with known statistics."""

    path: str | None = option(None, input_file=True, help="HDF5 (NYX), .npy/.npz, raw volume or HACC GenericIO file; "
                                         "null: the synthetic input")
    format: str = option("auto", choices=["auto", "hdf5", "numpy", "raw", "genericio"],
                         help="file format (auto: from the suffix / the GenericIO magic)")
    fields: list[str] | None = option(None, help="fields to compress (null: every field of the input)")
    dims: list[int] | None = option(None, help="raw volumes: the dimensions, C order")
    dtype: str = option("float32", choices=["float32", "float64"], help="raw volumes: the value type")
    synthetic: str = option("grf", choices=["grf", "kolmogorov", "particles"],
                            help="without path: a Gaussian random field (density), a Kolmogorov velocity "
                                 "(vx, vy, vz) or clustered particles (x, y, z)")
    size: int = option(32, ge=4, le=2048, help="synthetic input: points per side")
    seed: int = option(0, help="synthetic input: seed")
    box: float | None = option(None, gt=0, help="periodic box side for the analyses (null: the GenericIO "
                                               "header's scale, else the grid size for particles, else 1)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.path is not None and self.format == "raw" and not self.dims:
            raise ConfigError("input.dims is required for a raw volume (e.g. [512, 512, 512])")


def expand_axis(value: Any, where: str) -> list[Any]:
    """One parameter's values: a list, a generated axis, or a single value."""
    if isinstance(value, list):
        if not value:
            raise ConfigError(f"{where}: an empty list sweeps nothing")
        return value
    if isinstance(value, dict):
        if len(value) != 1:
            raise ConfigError(f"{where}: a generated axis is one of {{logspace|linspace|range: [..]}}, got {value}")
        (kind, args), = value.items()
        if kind not in ("logspace", "linspace", "range") or not isinstance(args, list) or len(args) != 3:
            raise ConfigError(f"{where}: expected {{logspace|linspace|range: [a, b, n]}}, got {value}")
        a, b, n = args
        if kind == "range":
            if not all(isinstance(v, int) for v in args) or n == 0:
                raise ConfigError(f"{where}: range takes three integers [start, stop, step], got {args}")
            return list(range(a, b, n))
        if not isinstance(n, int) or n < 1:
            raise ConfigError(f"{where}: {kind} needs a count >= 1, got {n!r}")
        if kind == "logspace":
            if not (isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > 0 and b > 0):
                raise ConfigError(f"{where}: logspace needs positive ends, got {a!r}, {b!r}")
            if n == 1:
                return [float(a)]
            la, lb = math.log10(a), math.log10(b)
            return [float(f"{10 ** (la + (lb - la) * i / (n - 1)):.6g}") for i in range(n)]
        if n == 1:
            return [float(a)]
        return [float(f"{a + (b - a) * i / (n - 1):.6g}") for i in range(n)]
    return [value]


@dataclass
class CompressorSpec(Options):
    """One compressor and its parameter sweep."""

    name: str = option(help=f"compressor: {', '.join(COMPRESSOR_NAMES)}")
    params: dict[str, Any] = option(default_factory=dict,
                                    help="parameters (mode, bound, ...); a list or {logspace|linspace|range: "
                                         "[a, b, n]} is a sweep axis")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.name not in COMPRESSOR_NAMES:
            raise ConfigError(f"unknown compressor {self.name!r} (known: {', '.join(COMPRESSOR_NAMES)})")

    def settings(self, where: str = "compressors") -> list[dict[str, Any]]:
        """Every parameter combination of this compressor (the product of its axes)."""
        keys = list(self.params)
        axes = [expand_axis(self.params[k], f"{where}.{self.name}.params.{k}") for k in keys]
        return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*axes)]


@dataclass
class AnalysisSpec(Options):
    """One analysis and its pass/fail rule."""

    name: str = option(help=f"analysis: {', '.join(ANALYSIS_NAMES)}")
    tolerance: float = option(0.01, gt=0, help="pass when |ratio - 1| < tolerance (spectra, halo counts per bin)")
    k_max_fraction: float = option(0.5, gt=0, le=1,
                                   help="spectra: the rule applies for k <= this fraction of the largest k")
    fields: list[str] | None = option(None, help="power_spectrum: fields it runs on (null: every 3D field)")
    overdensity: bool = option(False, help="power_spectrum: of delta = rho / mean - 1 (else rho - mean)")
    linking_length: float = option(0.2, gt=0, help="halo_mass_function: FoF link, in mean inter-particle spacings")
    min_members: int = option(10, ge=2, help="halo_mass_function: fewest particles of a halo")
    min_count: int = option(5, ge=1, help="halo_mass_function: bins with fewer original halos are not judged")
    n_bins: int = option(8, ge=1, le=100, help="halo_mass_function: logarithmic mass bins")
    moment_tolerance: float = option(0.05, gt=0,
                                     help="turbulence: largest change of the velocity-gradient skewness "
                                          "(absolute) and flatness (relative)")
    position_fields: list[str] = option(default_factory=lambda: ["x", "y", "z"],
                                        help="halo_mass_function: the particle position fields")
    velocity_fields: list[str] = option(default_factory=lambda: ["vx", "vy", "vz"],
                                        help="turbulence: the velocity component fields")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.name not in ANALYSIS_NAMES:
            raise ConfigError(f"unknown analysis {self.name!r} (known: {', '.join(ANALYSIS_NAMES)})")
        for key in ("position_fields", "velocity_fields"):
            if len(getattr(self, key)) != 3:
                raise ConfigError(f"analyses.{key} must name three fields, got {getattr(self, key)}")


@dataclass
class OutputOptions(Options):
    """What a sweep writes into its run folder."""

    name: str = option("foresight", help="the Cinema database is <name>.cdb/ (data.csv + PNGs)")
    plots: bool = option(True, help="write the PNG plots named by the FILE_* columns")
    html: bool = option(True, help="write index.html showing the table, the best settings and the plots")


def _default_compressors() -> list[CompressorSpec]:
    return [CompressorSpec("ours", {"mode": "rel", "bound": [1e-3, 1e-2]})]


@dataclass
class SweepDist(DistOptions):
    """Where a sweep runs and on how many processes (the ``dist:`` section).

    The suite's :class:`~torchhpc.ext.core.config.DistOptions`, on the CPU by default; the ranks of
    ``--nproc N`` each run a slice of the settings and talk over gloo whatever the device.
    """

    device: str = option("cpu", flag="--device", choices=["auto", "cpu", "cuda"],
                         help="where our compressor and the analyses run (auto: cuda when present)")


@dataclass
class SweepConfig(Options):
    """``torchhpc foresight run --config FILE``: compressors x settings x fields -> metrics and analyses."""

    RENAMED = {"device": "dist.device", "nproc": "dist.nproc"}

    input: InputOptions = option(default_factory=InputOptions, help="the data")
    compressors: list[CompressorSpec] = option(default_factory=_default_compressors, cli=False,
                                               help="compressors and their parameter sweeps (config file only)")
    metrics: list[str] = option(default_factory=lambda: ["max_abs_error", "max_rel_error", "mse", "psnr", "ssim",
                                                         "ratio", "throughput", "error_histogram"],
                                help=f"metrics: {', '.join(METRIC_NAMES)}")
    analyses: list[AnalysisSpec] = option(default_factory=list, cli=False,
                                          help="analyses and their pass/fail rules (config file only)")
    output: OutputOptions = option(default_factory=OutputOptions, help="the Cinema database and page")
    dist: SweepDist = option(default_factory=SweepDist,
                             help="device, CPU threads, torchrun ranks (each runs a slice of the sweep), timeout")
    run: RunOptions = option(default_factory=RunOptions, help="the run folder")

    def __post_init__(self) -> None:
        super().__post_init__()
        for m in self.metrics:
            if m not in METRIC_NAMES:
                raise ConfigError(f"unknown metric {m!r} (known: {', '.join(METRIC_NAMES)})")
        if not self.compressors:
            raise ConfigError("compressors: give at least one compressor")
        from .compressors import get_compressor

        for spec in self.compressors:  # every setting checked now, not half-way through the sweep
            comp = get_compressor(spec.name)
            for s in spec.settings():
                try:
                    comp.check_params(s)
                except InputError as exc:
                    raise ConfigError(f"compressors.{spec.name}: {exc}") from None


@dataclass
class CompressOptions(Options):
    """``torchhpc foresight compress IN OUT``: one setting on one file."""

    input: Path = option(positional=True, input_file=True, help="the array: .npy/.npz, HDF5 (with --field) or raw (with --dims)")
    output: Path = option(positional=True, help="the compressed file to write")
    compressor: str = option("ours", choices=list(COMPRESSOR_NAMES), help="which compressor")
    mode: str = option("abs", choices=["abs", "rel", "pw_rel"],
                       help="error bound: abs |x-x'|<=E, rel |x-x'|<=E(max-min), pw_rel |x-x'|<=E|x|")
    bound: float | None = option(None, gt=0, help="the error bound E (> 0; required by the error-bounded modes)")
    param: str = option("", flag="--param",
                        help="extra compressor parameters as KEY=VALUE,KEY=VALUE (e.g. predictor=interp,level=19)")
    field: str | None = option(None, help="the field of an HDF5/.npz/GenericIO file (default: its only/first one)")
    dims: list[int] | None = option(None, help="raw volumes: dimensions")
    dtype: str = option("float32", choices=["float32", "float64"], help="raw volumes: value type")
    json: bool = option(False, help="print one JSON object instead of the text report")
    device: str = option("cpu", choices=["auto", "cpu", "cuda"], help="where our compressor runs")


@dataclass
class DecompressOptions(Options):
    """``torchhpc foresight decompress IN OUT.npy``."""

    input: Path = option(positional=True, input_file=True, help="a file written by `torchhpc foresight compress`")
    output: Path = option(positional=True, help="the .npy to write")
    original: Path | None = option(None, input_file=True, help="the original .npy: report the max error against it")
    json: bool = option(False, help="print one JSON object instead of the text report")
    device: str = option("cpu", choices=["auto", "cpu", "cuda"], help="where the decoding runs")


@dataclass
class ForesightTour(Options):
    """The ``torchhpc demo`` step: a small sweep of ours/SZ3/ZFP/fpzip on a synthetic GRF."""

    size: int = option(32, ge=8, le=256, help="points per side of the synthetic field")
    bounds: list[float] = option(default_factory=lambda: [1e-3, 1e-2], help="value-range relative bounds swept")


__all__ = ["ANALYSIS_NAMES", "COMPRESSOR_NAMES", "METRIC_NAMES", "AnalysisSpec", "CompressOptions",
           "CompressorSpec", "DecompressOptions", "ForesightTour", "InputOptions", "OutputOptions", "SweepConfig",
           "SweepDist", "expand_axis"]
