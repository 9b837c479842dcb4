"""The commands of foresight, one function each: ``torchhpc foresight run|compress|decompress``.

* :func:`run` — a sweep (:func:`~torchhpc.ext.foresight.sweep.run_sweep`) in its run folder: in this
  process, its slice under torchrun, or relaunched on ``--nproc N`` torchrun ranks;
* :func:`compress` / :func:`decompress` — one setting on one file, and the report of what it did
  (:func:`compress_file` / :func:`decompress_file` build it; the commands print it as text or JSON).
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

from torchhpc.ext.core.errors import InputError

from .config import CompressOptions, DecompressOptions, SweepConfig

MODULE = "torchhpc.trainers.foresight"
"""The module torchrun runs for ``run --nproc N`` (the commands' ``python -m`` / ``torchrun -m`` entry)."""


def run(cfg: SweepConfig) -> int:
    """``foresight run``: the sweep in this process, its slice under torchrun, or torchrun for ``--nproc N``;
    rank 0 prints where the results are and the best passing setting per compressor."""
    from torchhpc.ext.core.distributed import distributed, launched_by_torchrun

    if cfg.dist.nproc > 1 and not launched_by_torchrun():
        from torchhpc.ext.core.launch import relaunch

        return relaunch(cfg, MODULE, cfg.dist.nproc, ["run"])  # the resolved config, flags included, for every rank
    import torch

    from torchhpc.ext.core.runs import open_run

    from .sweep import load_input, run_sweep

    if cfg.dist.threads:
        torch.set_num_threads(cfg.dist.threads)
    inputs = load_input(cfg)  # a missing or unreadable input fails before a run folder exists
    # the ranks gather their rows over gloo whatever device the compressor runs on
    with distributed(device="cpu", timeout_s=cfg.dist.timeout_s) as ctx:
        sweep_run = open_run("foresight", cfg, cfg.run, ctx)
        summary = run_sweep(cfg, sweep_run, ctx, inputs)
    if summary:
        best = "; ".join(f"{b['compressor']} {b['params']}" + (f" ({b['ratio']:.1f}x)" if b["ratio"] else "")
                         for b in summary["best"])
        print(f"{summary['rows']} rows, {summary['failed']} failed -> {sweep_run.dir}")
        print(f"best passing setting per compressor: {best}")
    return 0


def compress(opts: CompressOptions) -> int:
    """``foresight compress IN OUT``: compress one array with one setting; print the report."""
    rep = compress_file(opts)
    print(json.dumps(rep) if opts.json else report_text(rep))
    return 0


def decompress(opts: DecompressOptions) -> int:
    """``foresight decompress IN OUT.npy``: restore a compressed file; print the report."""
    rep = decompress_file(opts)
    print(json.dumps(rep) if opts.json else report_text(rep))
    return 0


# ----------------------------------------------------------------------------- the one-file reports


def parse_params(spec: str | list[str]) -> dict[str, Any]:
    """``"predictor=interp,level=19"`` (or a list of ``KEY=VALUE``) -> ``{"predictor": "interp", "level": 19}``."""
    import yaml

    items = spec if isinstance(spec, list) else [spec]
    out: dict[str, Any] = {}
    for item in items:
        for part in filter(None, (p.strip() for p in str(item).split(","))):
            if "=" not in part:
                raise InputError(f"--param: expected KEY=VALUE, got {part!r}")
            k, v = part.split("=", 1)
            try:
                out[k.strip()] = yaml.safe_load(v.strip())
            except yaml.YAMLError as exc:
                where = f" ({exc.problem})" if getattr(exc, "problem", None) else ""
                raise InputError(f"--param {part}: the value is not a YAML scalar or list{where}") from None
    return out


def load_array(opts: CompressOptions):
    """``(name, tensor)``: the one field to compress: a .npy, or ``--field`` of an HDF5/.npz/GenericIO/raw file."""
    from .data import load_fields

    fields = load_fields(opts.input, "auto", [opts.field] if opts.field else None, opts.dims, opts.dtype)
    name, x = next(iter(fields.items()))
    if not x.is_floating_point():
        raise InputError(f"{opts.input}: field {name!r} is {x.dtype}; give a float32/float64 field")
    return name, x


def compress_file(opts: CompressOptions) -> dict[str, Any]:
    """Compress ``opts.input`` into ``opts.output``; returns the report (ratio, max error, throughput)."""
    import torch

    from torchhpc.ext.core.device import pick_device
    from torchhpc.ext.core.paths import check_input, check_output

    from .compressors import get_compressor, save_compressed

    check_input(opts.input, what="input")
    check_output(opts.output, inputs=[opts.input], what="output")
    comp = get_compressor(opts.compressor)
    params = parse_params(opts.param)
    if comp.modes and not comp.fixed_mode(params):
        params = {"mode": opts.mode, "bound": opts.bound, **params}
    elif opts.bound is not None:  # a bound this compressor would not hold: refused, not ignored
        fixed = ", ".join(sorted(set(params) & {"rate", "precision", "bits"}))
        why = (f"is not error-bounded with --param {fixed}" if comp.modes else
               "is lossless (it keeps every value)" if opts.compressor == "zstd" else "is not error-bounded")
        raise InputError(f"--bound {opts.bound}: compressor {opts.compressor!r} {why}; drop --bound and --mode, "
                         "or choose an error-bounded compressor")
    comp.check_params(params)  # before the input is read
    field, x = load_array(opts)
    dev = pick_device(opts.device)
    xd = x.to(dev) if opts.compressor == "ours" else x
    c, tc, first_c = _timed(lambda: comp.compress(xd, **params))
    save_compressed(c, opts.output)
    y, td, first_d = _timed(lambda: comp.decompress(c, xd.device).cpu())
    finite = torch.isfinite(x)
    err = (y.to(torch.float64) - x.to(torch.float64)).abs()[finite]  # NaN/inf are reported apart
    nz = x[finite] != 0
    mb = x.numel() * x.element_size() / 1e6
    return {"input": str(opts.input), "field": field, "output": str(opts.output), "compressor": opts.compressor,
            "params": c.params if opts.compressor != "ours" else {k: v for k, v in c.params.items()},
            "shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", ""),
            "bytes_in": x.numel() * x.element_size(), "bytes_out": Path(opts.output).stat().st_size,
            "ratio": c.stats["ratio"], "max_abs_error": float(err.max()) if err.numel() else 0.0,
            "max_rel_error": float((err[nz] / x.to(torch.float64)[finite].abs()[nz]).max()) if bool(nz.any()) else 0.0,
            "abs_bound": c.stats.get("eb"), "patched": c.stats["patched"], **nonfinite_report(x, y),
            "compress_MBps": mb / tc if tc > 0 else None, "decompress_MBps": mb / td if td > 0 else None,
            "compress_first_s": first_c, "decompress_first_s": first_d}


REPEAT_BELOW_S = 2.0
"""A call faster than this is timed again for the report's MB/s (see :func:`_timed`)."""


def _timed(call):
    """``(result, seconds, first call's seconds)``: a first call in a fresh process also pays one-time costs
    (compiled kernels loaded, the codec's tables built), which on a small field are most of its time; a call
    under :data:`REPEAT_BELOW_S` is made once more and the faster one is the throughput's time."""
    t0 = time.perf_counter()
    out = call()
    first = time.perf_counter() - t0
    if first >= REPEAT_BELOW_S:
        return out, first, first
    out = None  # (not two results held at once: a decoded field may be large)
    t0 = time.perf_counter()
    out = call()
    return out, min(first, time.perf_counter() - t0), first


def nonfinite_report(x, y) -> dict[str, Any]:
    """NaN and inf values of the original ``x``, counted apart from the error over the finite values, and
    whether the restored ``y`` keeps each of them (same NaN positions, same infinities)."""
    import torch

    nan, inf = torch.isnan(x), torch.isinf(x)
    n_nan, n_inf = int(nan.sum()), int(inf.sum())
    if not (n_nan or n_inf):
        return {}
    kept = bool(torch.equal(torch.isnan(y), nan)) and bool(torch.equal(y[inf], x[inf]))
    return {"nan_values": n_nan, "inf_values": n_inf, "nonfinite_kept": kept}


def decompress_file(opts: DecompressOptions) -> dict[str, Any]:
    """Decompress ``opts.input`` into the ``.npy`` ``opts.output``; with ``--original``, the max error."""
    import numpy as np
    import torch

    from torchhpc.ext.core.device import pick_device
    from torchhpc.ext.core.paths import check_input, check_output
    from torchhpc.ext.core.runs import atomic_write_bytes

    out = Path(opts.output)
    if out.suffix != ".npy":
        raise InputError(f"{out}: the restored array is written as .npy; name the output *.npy")
    check_input(opts.input, what="input")
    if opts.original is not None:
        check_input(opts.original, what="--original")
    check_output(out, inputs=[opts.input, opts.original], what="output")

    from .compressors import get_compressor, load_compressed

    c = load_compressed(opts.input)
    comp = get_compressor(c.compressor)
    y, td, first_d = _timed(lambda: comp.decompress(c, pick_device(opts.device)).cpu())
    mb = y.numel() * y.element_size() / 1e6
    rep: dict[str, Any] = {"input": str(opts.input), "output": str(out), "compressor": c.compressor,
                           "params": c.params, "shape": list(y.shape), "dtype": c.dtype,
                           "ratio": c.stats.get("ratio"), "decompress_MBps": mb / td if td > 0 else None,
                           "decompress_first_s": first_d}
    if opts.original is not None:  # checked before anything is written: a failure leaves no output
        from torchhpc.ext.core.paths import load_numpy

        x = torch.from_numpy(load_numpy(opts.original, what="--original", one_array=True))
        if tuple(x.shape) != tuple(y.shape):
            raise InputError(f"shape mismatch: {opts.original} is {tuple(x.shape)}, the restored array "
                             f"{tuple(y.shape)}")
        finite = torch.isfinite(x)
        err = (y.to(torch.float64) - x.to(torch.float64)).abs()[finite]
        rep["max_abs_error"] = float(err.max()) if err.numel() else 0.0
        rep.update(nonfinite_report(x, y))
    buf = io.BytesIO()
    np.save(buf, y.numpy())
    atomic_write_bytes(out, buf.getvalue())
    return rep


def report_text(rep: dict[str, Any]) -> str:
    """The text report of compress/decompress: one ``key: value`` line each."""
    lines = []
    for k, v in rep.items():
        if isinstance(v, float):
            v = f"{v:.6g}"
        lines.append(f"{k}: {v}")
    return "\n".join(lines)


__all__ = ["MODULE", "compress", "compress_file", "decompress", "decompress_file", "parse_params", "report_text",
           "run"]
