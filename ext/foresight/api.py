"""One-off use: compress a file with one setting, decompress it back (``torchhpc foresight compress|decompress``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from torchhpc.ext.core.errors import InputError

from .compressors import get_compressor, load_compressed, save_compressed
from .config import CompressOptions, DecompressOptions
from .data import load_fields


def parse_params(spec: str | list[str]) -> dict[str, Any]:
    """``"predictor=interp,level=19"`` (or a list of ``KEY=VALUE``) -> ``{"predictor": "interp", "level": 19}``."""
    items = spec if isinstance(spec, list) else [spec]
    out: dict[str, Any] = {}
    for item in items:
        for part in filter(None, (p.strip() for p in str(item).split(","))):
            if "=" not in part:
                raise InputError(f"--param: expected KEY=VALUE, got {part!r}")
            k, v = part.split("=", 1)
            out[k.strip()] = yaml.safe_load(v.strip())
    return out


def _device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device is available")
    return torch.device("cuda" if name == "cuda" or (name == "auto" and torch.cuda.is_available()) else "cpu")


def load_array(opts: CompressOptions) -> tuple[str, torch.Tensor]:
    """The one field to compress: a .npy, or ``--field`` of an HDF5/.npz/GenericIO/raw file."""
    fields = load_fields(opts.input, "auto", [opts.field] if opts.field else None, opts.dims, opts.dtype)
    name, x = next(iter(fields.items()))
    if not x.is_floating_point():
        raise InputError(f"{opts.input}: field {name!r} is {x.dtype}; give a float32/float64 field")
    return name, x


def compress_file(opts: CompressOptions) -> dict[str, Any]:
    """Compress ``opts.input`` into ``opts.output``; returns the report (ratio, max error, throughput)."""
    comp = get_compressor(opts.compressor)
    params = parse_params(opts.param)
    if comp.modes and not comp.fixed_mode(params):
        params = {"mode": opts.mode, "bound": opts.bound, **params}
    field, x = load_array(opts)
    dev = _device(opts.device)
    xd = x.to(dev) if opts.compressor == "ours" else x
    t0 = time.perf_counter()
    c = comp.compress(xd, **params)
    tc = time.perf_counter() - t0
    save_compressed(c, opts.output)
    t0 = time.perf_counter()
    y = comp.decompress(c, xd.device).cpu()
    td = time.perf_counter() - t0
    err = (y.to(torch.float64) - x.to(torch.float64)).abs()
    nz = x != 0
    mb = x.numel() * x.element_size() / 1e6
    return {"input": str(opts.input), "field": field, "output": str(opts.output), "compressor": opts.compressor,
            "params": c.params if opts.compressor != "ours" else {k: v for k, v in c.params.items()},
            "shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", ""),
            "bytes_in": x.numel() * x.element_size(), "bytes_out": Path(opts.output).stat().st_size,
            "ratio": c.stats["ratio"], "max_abs_error": float(err.max()),
            "max_rel_error": float((err[nz] / x.to(torch.float64).abs()[nz]).max()) if bool(nz.any()) else 0.0,
            "abs_bound": c.stats.get("eb"), "patched": c.stats["patched"],
            "compress_MBps": mb / tc if tc > 0 else None, "decompress_MBps": mb / td if td > 0 else None}


def decompress_file(opts: DecompressOptions) -> dict[str, Any]:
    """Decompress ``opts.input`` into the ``.npy`` ``opts.output``; with ``--original``, the max error."""
    c = load_compressed(opts.input)
    comp = get_compressor(c.compressor)
    t0 = time.perf_counter()
    y = comp.decompress(c, _device(opts.device)).cpu()
    td = time.perf_counter() - t0
    out = Path(opts.output)
    if out.suffix != ".npy":
        raise InputError(f"{out}: the restored array is written as .npy; name the output *.npy")
    np.save(out, y.numpy())
    mb = y.numel() * y.element_size() / 1e6
    rep: dict[str, Any] = {"input": str(opts.input), "output": str(out), "compressor": c.compressor,
                           "params": c.params, "shape": list(y.shape), "dtype": c.dtype,
                           "ratio": c.stats.get("ratio"), "decompress_MBps": mb / td if td > 0 else None}
    if opts.original is not None:
        x = torch.from_numpy(np.load(opts.original))
        if tuple(x.shape) != tuple(y.shape):
            raise InputError(f"shape mismatch: {opts.original} is {tuple(x.shape)}, the restored array "
                             f"{tuple(y.shape)}")
        rep["max_abs_error"] = float((y.to(torch.float64) - x.to(torch.float64)).abs().max())
    return rep


def report_text(rep: dict[str, Any]) -> str:
    """The text report of compress/decompress: one ``key: value`` line each."""
    lines = []
    for k, v in rep.items():
        if isinstance(v, float):
            v = f"{v:.6g}"
        lines.append(f"{k}: {v}")
    return "\n".join(lines)


__all__ = ["compress_file", "decompress_file", "parse_params", "report_text"]
