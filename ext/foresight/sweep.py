"""A sweep: every compressor setting of a :class:`~.config.SweepConfig` on every field, its metrics and
its analyses, into one Cinema database.

Under torchrun each rank runs the settings ``rank, rank + world, ...`` (a round-robin slice); rank 0
gathers the rows and writes ``<name>.cdb/data.csv``, ``best.csv`` and ``index.html``.  A setting whose
compressor raises is recorded as ``status=failed`` with the error, and the sweep goes on.
"""

from __future__ import annotations

import math
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from torchhpc.ext.core.device import pick_device
from torchhpc.ext.core.distributed import DistContext, local_cuda_device
from torchhpc.ext.core.errors import InputError
from torchhpc.ext.core.paths import check_input

from . import analyses as an
from .compressors import Compressed, get_compressor
from .config import SweepConfig
from .data import genericio_header, load_fields, synthetic_fields
from .metrics import error_histogram, field_metrics


@dataclass
class Setting:
    """One point of the sweep: a compressor and one value per parameter."""

    index: int
    compressor: str
    params: dict[str, Any]

    @property
    def params_label(self) -> str:
        """Foresight's params suffix: ``abs0.01`` (mode + bound), then ``key:value`` for the rest."""
        p = dict(self.params)
        head = ""
        if "mode" in p or "bound" in p:
            head = f"{p.pop('mode', 'abs')}{p.pop('bound', '')}"
        rest = "_".join(f"{k}:{v}" for k, v in p.items())
        return "_".join(x for x in (head, rest) if x)

    def row_name(self, field: str) -> str:
        """Foresight's ``Compressor_field__params`` key."""
        return f"{self.compressor}_{field}__{self.params_label}"


def sweep_settings(cfg: SweepConfig) -> list[Setting]:
    """Every setting of the sweep, numbered in config order."""
    out = []
    for spec in cfg.compressors:
        for params in spec.settings():
            out.append(Setting(len(out), spec.name, params))
    return out


def load_input(cfg: SweepConfig) -> tuple[dict[str, torch.Tensor], float | None]:
    """The fields to compress and the periodic box of the analyses (None: per-analysis default)."""
    inp = cfg.input
    if inp.path is None:
        fields = synthetic_fields(inp.synthetic, inp.size, inp.seed)
        box = inp.box or (float(inp.size) if inp.synthetic == "particles" else 1.0)
        if inp.fields:
            missing = [f for f in inp.fields if f not in fields]
            if missing:
                raise InputError(f"synthetic {inp.synthetic} input has no field {missing[0]!r} "
                                 f"(fields: {', '.join(fields)})")
            fields = {f: fields[f] for f in inp.fields}
        return fields, box
    check_input(inp.path, what="input.path")
    fields = load_fields(inp.path, inp.format, inp.fields, inp.dims, inp.dtype)
    if inp.fields is None:
        floats = {k: v for k, v in fields.items() if v.is_floating_point()}
        if not floats:
            raise InputError(f"{inp.path}: no float32/float64 field to compress (fields: "
                             + ", ".join(f"{k} {str(v.dtype).replace('torch.', '')}" for k, v in fields.items()) + ")")
        fields = floats
    for k, v in fields.items():
        if not v.is_floating_point():
            raise InputError(f"{inp.path}: field {k!r} is {v.dtype}; only float32/float64 fields are compressed")
    box = inp.box
    if box is None:
        try:
            box = float(genericio_header(inp.path)["phys_scale"][0])
        except InputError:
            box = None
    return fields, box


# ----------------------------------------------------------------------------- reference analyses


def _check_fields(fields: dict[str, torch.Tensor], names: list[str], analysis: str) -> None:
    """Every field ``analysis`` reads is there and finite (an FFT or a halo finder over a NaN is NaN
    everywhere, and a NaN comparison would pass)."""
    for n in names:
        if n not in fields:
            raise InputError(f"analysis {analysis} needs field {n!r}, which the input does not have "
                             f"(fields: {', '.join(fields)})")
        bad = int((~torch.isfinite(fields[n])).sum())
        if bad:
            raise InputError(f"analysis {analysis}: field {n!r} has {bad} NaN/inf value(s); the analysis needs "
                             "finite data (leave it out of analyses:, or clean the field)")


def original_analyses(cfg: SweepConfig, fields: dict[str, torch.Tensor], box: float | None) -> dict[str, Any]:
    """Each analysis of the original data, computed once for the whole sweep."""
    out: dict[str, Any] = {}
    for a in cfg.analyses:
        if a.name == "power_spectrum":
            names = a.fields or [k for k, v in fields.items() if v.dim() == 3]
            if not names:
                raise InputError("analysis power_spectrum needs a 3D field; the input has none")
            _check_fields(fields, names, a.name)
            out[a.name] = {f: an.power_spectrum(fields[f], box or 1.0, a.overdensity) for f in names}
        elif a.name == "halo_mass_function":
            _check_fields(fields, a.position_fields, a.name)
            pos = torch.stack([fields[f].reshape(-1) for f in a.position_fields], 1)
            b = box or float(pos.max().ceil())
            out[a.name] = an.fof_halos(pos, b, a.linking_length, a.min_members)
        elif a.name == "turbulence":
            _check_fields(fields, a.velocity_fields, a.name)
            out[a.name] = torch.stack([fields[f] for f in a.velocity_fields])
    return out


# ----------------------------------------------------------------------------- one setting


def _mbps(nbytes: int, seconds: float) -> float:
    return nbytes / 1e6 / seconds if seconds > 0 else math.inf


def _call_params(s: Setting) -> dict[str, Any]:
    params = dict(s.params)
    if s.compressor == "ours":
        params.setdefault("backend", "auto")
    return params


def batch_groups(settings: list[Setting]) -> list[list[Setting]]:
    """``settings`` in groups compressed in one call: ours' settings that differ only in their bound
    (one batch on CUDA: every field at every bound of the group); every other setting alone.  The
    groups keep the settings' order."""
    groups: list[list[Setting]] = []
    by_key: dict[str, list[Setting]] = {}
    for s in settings:
        if s.compressor == "ours" and "bound" in s.params:
            key = repr(sorted((k, repr(v)) for k, v in s.params.items() if k != "bound"))
            if key in by_key:
                by_key[key].append(s)
                continue
            by_key[key] = [s]
            groups.append(by_key[key])
        else:
            groups.append([s])
    return groups


def compress_group(group: list[Setting], fields: dict[str, torch.Tensor], device: torch.device
                   ) -> list[tuple[list[torch.Tensor], list[Compressed]]] | None:
    """Every field at every setting of ``group`` (see :func:`batch_groups`) in one call: per setting, the
    fields as compressed and their results.  ``None`` where the group is one setting or the call fails
    (each setting then runs alone, so that a failure is recorded against its own setting)."""
    if len(group) < 2:
        return None
    comp = get_compressor("ours")
    xds = [x.to(device) for x in fields.values()]
    bounds = [s.params["bound"] for s in group for _ in xds]
    try:
        packed = comp.compress_many(xds * len(group), bounds=bounds, **_call_params(group[0]))
    except Exception:  # noqa: BLE001 - each setting alone then records its own error
        return None
    n = len(xds)
    return [(xds, packed[i * n:(i + 1) * n]) for i in range(len(group))]


def run_setting(cfg: SweepConfig, s: Setting, fields: dict[str, torch.Tensor], box: float | None,
                ref: dict[str, Any], cdb: Path, device: torch.device,
                done: tuple[list[torch.Tensor], list[Compressed]] | None = None) -> list[dict[str, Any]]:
    """Compress every field with setting ``s``; its rows (one per field) with metrics, analyses, plots.

    ``done``: the fields already compressed with ``s`` (:func:`compress_group`), as ``(fields on the
    device, results)``."""
    from . import plots

    comp = get_compressor(s.compressor)
    params = _call_params(s)
    rows: dict[str, dict[str, Any]] = {}
    dec: dict[str, torch.Tensor] = {}
    try:
        # the setting's fields in one call: ours on CUDA compresses them as one batch (each field's time is
        # then the batch's, shared by bytes)
        if done is not None:
            xds, packed = done
        else:
            xds = [x.to(device) if s.compressor == "ours" else x for x in fields.values()]
            packed = comp.compress_many(xds, **params)
        for (name, x), xd, c in zip(fields.items(), xds, packed, strict=True):
            tc = c.stats["compress_s"]
            t0 = time.perf_counter()
            y = comp.decompress(c, xd.device).cpu()
            td = time.perf_counter() - t0
            dec[name] = y
            nbytes = x.numel() * x.element_size()
            m = field_metrics(x, y, cfg.metrics)
            row = {"Compressor_field__params": s.row_name(name), "compressor": s.compressor, "field": name,
                   "params": s.params_label, "mode": s.params.get("mode"), "bound": s.params.get("bound"),
                   "status": "ok", "error": ""}
            row["absolute_error"] = m.get("max_abs_error")
            row["relative_error"] = m.get("max_rel_error")
            row["mse"] = m.get("mse")
            row["psnr"] = m.get("psnr")
            row["psnr_peak"] = m.get("psnr_peak")
            row["minmax"] = m.get("value_range") if "value_range" in cfg.metrics else float(x.max() - x.min())
            row["ssim"] = m.get("ssim")
            if "throughput" in cfg.metrics:
                row["Compression Throughput(MB/s)"] = _mbps(nbytes, tc)
                row["DeCompression Throughput(MB/s)"] = _mbps(nbytes, td)
            row["Compression Ratio"] = c.stats["ratio"]
            row["nbytes_in"] = nbytes
            row["nbytes_out"] = c.stats["nbytes_out"]
            row["patched"] = c.stats["patched"]
            if cfg.output.plots and "error_histogram" in cfg.metrics:
                counts, edges = error_histogram(x, y, bound=c.stats.get("eb") if c.params.get("mode") != "pw_rel"
                                                else None)
                row["FILE_error_histogram"] = plots.error_histogram_png(
                    cdb / f"hist_{s.index:04d}_{name}.png", counts, edges, s.row_name(name))
            rows[name] = row
    except Exception as exc:  # a compressor crashing on one setting: record it, go on with the sweep
        msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        if not isinstance(exc, InputError):
            msg += f" (at {traceback.extract_tb(exc.__traceback__)[-1].name})"
        return [{"Compressor_field__params": s.row_name(f), "compressor": s.compressor, "field": f,
                 "params": s.params_label, "mode": s.params.get("mode"), "bound": s.params.get("bound"),
                 "status": "failed", "error": msg, "pass_all": False} for f in fields]

    passes: list[bool] = []
    for a in cfg.analyses:
        if a.name == "power_spectrum":
            for f, po in ref[a.name].items():
                pd = an.power_spectrum(dec[f], box or 1.0, a.overdensity)
                chk = an.spectrum_ratio_check(po, pd, a.tolerance, a.k_max_fraction)
                rows[f]["power_spectrum_pass"] = chk["pass"]
                rows[f]["power_spectrum_max_deviation"] = chk["max_deviation"]
                passes.append(chk["pass"])
                if cfg.output.plots:
                    rows[f]["FILE_power_spectrum"] = plots.ratio_png(
                        cdb / f"pk_{s.index:04d}_{f}.png", chk, a.tolerance, s.row_name(f), "P_dec(k) / P_orig(k)")
        elif a.name == "halo_mass_function":
            pos = torch.stack([dec[f].reshape(-1) for f in a.position_fields], 1)
            b = box or float(torch.stack([fields[f].reshape(-1) for f in a.position_fields], 1).max().ceil())
            halos = an.fof_halos(pos, b, a.linking_length, a.min_members)
            chk = an.halo_mass_function_check(ref[a.name]["sizes"], halos["sizes"], a.tolerance, a.min_count,
                                              a.n_bins)
            passes.append(chk["pass"])
            png = (plots.halo_png(cdb / f"hmf_{s.index:04d}.png", chk, a.tolerance, f"{s.compressor} {s.params_label}")
                   if cfg.output.plots else None)
            for f in a.position_fields:
                rows[f].update({"halo_mass_function_pass": chk["pass"],
                                "halo_mass_function_max_deviation": chk["max_deviation"],
                                "halos_orig": chk["halos_orig"], "halos_dec": chk["halos_dec"]})
                if png:
                    rows[f]["FILE_halo_mass_function"] = png
        elif a.name == "turbulence":
            u = torch.stack([dec[f] for f in a.velocity_fields])
            chk = an.turbulence_check(ref[a.name], u, a.tolerance, a.k_max_fraction, a.moment_tolerance, box or 1.0)
            passes.append(chk["pass"])
            png = (plots.turbulence_png(cdb / f"turb_{s.index:04d}.png", chk, a.tolerance,
                                        f"{s.compressor} {s.params_label}") if cfg.output.plots else None)
            for f in a.velocity_fields:
                rows[f].update({"turbulence_pass": chk["pass"], "turbulence_max_deviation": chk["max_deviation"],
                                "gradient_skewness": chk["skewness"][1], "gradient_flatness": chk["flatness"][1]})
                if png:
                    rows[f]["FILE_turbulence"] = png
    for r in rows.values():
        r["pass_all"] = all(passes)
    return list(rows.values())


# ----------------------------------------------------------------------------- the whole sweep


def best_settings(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per compressor, the setting with the highest overall ratio (all fields' bytes in / out) among
    those that ran on every field and passed every analysis."""
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault((r["compressor"], r["params"]), []).append(r)
    best: dict[str, dict[str, Any]] = {}
    for (comp, params), rs in by.items():
        if not all(r["status"] == "ok" and r.get("pass_all") for r in rs):
            continue
        ratio = sum(r["nbytes_in"] for r in rs) / max(sum(r["nbytes_out"] for r in rs), 1)
        if comp not in best or ratio > best[comp]["ratio"]:
            best[comp] = {"compressor": comp, "params": params, "ratio": ratio,
                          "max_abs_error": max(r.get("absolute_error") or 0.0 for r in rs),
                          "min_psnr": min((r.get("psnr") or math.inf) for r in rs)}
    tried = sorted({r["compressor"] for r in rows}, key=[r["compressor"] for r in rows].index)
    return [best.get(c, {"compressor": c, "params": "(none passes)", "ratio": None, "max_abs_error": None,
                         "min_psnr": None}) for c in tried]


def sweep_device(cfg: SweepConfig, ctx: DistContext | None) -> torch.device:
    """Where this rank compresses: ``cfg.dist.device``; on CUDA under torchrun its own GPU (``cuda:LOCAL_RANK``:
    the job's process group is gloo on the CPU, so nothing else picks it)."""
    device = pick_device(cfg.dist.device)
    if device.type == "cuda" and ctx is not None and ctx.world_size > 1:
        device = local_cuda_device(ctx.local_rank)
    return device


def run_sweep(cfg: SweepConfig, run, ctx: DistContext | None = None,
              inputs: tuple[dict[str, torch.Tensor], float | None] | None = None) -> dict[str, Any]:
    """Run the sweep of ``cfg`` into ``run`` (a :class:`~torchhpc.ext.core.runs.Run`); this rank's slice
    under torchrun (``ctx``, the job's :class:`~torchhpc.ext.core.distributed.DistContext`; ``None``: one
    process).  Rank 0 writes the database, the table and the page and returns the summary. ``inputs``: the
    fields and box of :func:`load_input`, where the caller read them already (before the run folder exists).

    Raises:
        InputError: ``cfg.dist.device`` cannot be used here, or the input cannot be read.
    """
    from . import cinema

    rank, world = (ctx.rank, ctx.world_size) if ctx is not None else (0, 1)
    device = sweep_device(cfg, ctx)
    fields, box = load_input(cfg) if inputs is None else inputs
    settings = sweep_settings(cfg)
    ref = original_analyses(cfg, fields, box)
    cdb = run.dir / f"{cfg.output.name}.cdb"
    cdb.mkdir(parents=True, exist_ok=True)
    mine = settings[rank::world]
    rows: list[dict[str, Any]] = []
    t0 = time.time()
    done: dict[int, tuple[list[torch.Tensor], list[Compressed]]] = {}
    first_of = {g[0].index: g for g in batch_groups(mine)}
    for s in run.progress(mine, desc="foresight sweep", unit="setting"):
        if s.index in first_of:  # a group's first setting: compress the whole group (its other settings wait)
            got = compress_group(first_of[s.index], fields, device)
            done.update(zip((g.index for g in first_of[s.index]), got or (), strict=False))
        rows.extend(run_setting(cfg, s, fields, box, ref, cdb, device, done.pop(s.index, None)))
    if world > 1:
        rows = [r for part in ctx.gather(rows) for r in part]
    rank_of = {s.row_name(f): (s.index, i) for s in settings for i, f in enumerate(fields)}
    rows.sort(key=lambda r: rank_of.get(r["Compressor_field__params"], (1 << 30, 0)))
    if rank != 0:
        return {}
    best = best_settings(rows)
    csv_path = cinema.write_cinema(cdb, rows)
    best_path = cinema.write_best(run.dir / "best.csv", best)
    summary = {"settings": len(settings), "fields": list(fields), "rows": len(rows),
               "failed": sum(r["status"] == "failed" for r in rows), "ranks": world,
               "seconds": round(time.time() - t0, 3), "cinema": str(csv_path), "best": best,
               "best_csv": str(best_path)}
    if cfg.output.html:
        summary["html"] = str(cinema.write_html(run.dir / "index.html", cfg, rows, best, cdb))
    run.write_summary(summary)
    return summary


__all__ = ["Setting", "batch_groups", "best_settings", "compress_group", "load_input", "original_analyses",
           "run_setting", "run_sweep", "sweep_settings"]
