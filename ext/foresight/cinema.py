"""The sweep's outputs: a Cinema "Spec D" database (``<name>.cdb/data.csv`` + PNGs), the table of the
most compressing passing setting per compressor, and one HTML page showing both.

``data.csv`` uses Foresight's (CBench's) column names where they overlap -- ``Compressor_field__params``,
``absolute_error``, ``relative_error``, ``mse``, ``psnr``, ``minmax``, ``Compression Throughput(MB/s)``,
``DeCompression Throughput(MB/s)``, ``Compression Ratio`` -- then ours, then the ``FILE_*`` columns
naming the PNGs in the same folder (Cinema's convention for images).
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from torchhpc.ext.core.runs import atomic_write_text

FORESIGHT_COLUMNS = ["Compressor_field__params", "absolute_error", "relative_error", "mse", "psnr", "minmax",
                     "Compression Throughput(MB/s)", "DeCompression Throughput(MB/s)", "Compression Ratio"]
OUR_COLUMNS = ["compressor", "field", "params", "mode", "bound", "status", "error", "psnr_peak", "ssim", "nbytes_in", "nbytes_out",
               "patched", "power_spectrum_pass", "power_spectrum_max_deviation", "halo_mass_function_pass",
               "halo_mass_function_max_deviation", "halos_orig", "halos_dec", "turbulence_pass",
               "turbulence_max_deviation", "gradient_skewness", "gradient_flatness", "pass_all"]


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "inf" if v == math.inf else ("NaN" if math.isnan(v) else f"{v:.6g}")
    return str(v)


def columns_of(rows: list[dict[str, Any]]) -> list[str]:
    """Foresight's columns, ours (those present), the FILE_* columns (those present)."""
    present = {k for r in rows for k in r}
    cols = [c for c in FORESIGHT_COLUMNS if c in present or c == "Compressor_field__params"]
    cols += [c for c in OUR_COLUMNS if c in present]
    cols += sorted(c for c in present if c.startswith("FILE_"))
    cols += sorted(c for c in present if c not in cols)
    return cols


def write_cinema(cdb: Path, rows: list[dict[str, Any]]) -> Path:
    """``cdb/data.csv`` (atomically); returns its path."""
    cols = columns_of(rows)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for r in rows:
        w.writerow([_cell(r.get(c)) for c in cols])
    path = Path(cdb) / "data.csv"
    atomic_write_text(path, buf.getvalue())
    return path


def read_cinema(path: str | Path) -> tuple[list[str], list[dict[str, str]]]:
    """``(columns, rows)`` of a Cinema ``data.csv`` (ours or Foresight's; header names stripped)."""
    with open(path, newline="") as fh:
        reader = csv.reader(fh, skipinitialspace=True)
        header = [h.strip() for h in next(reader)]
        rows = [dict(zip(header, (c.strip() for c in line), strict=False)) for line in reader if line]
    return header, rows


def write_best(path: Path, best: list[dict[str, Any]]) -> Path:
    """The table of the most compressing passing setting per compressor (CSV)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    cols = ["compressor", "params", "ratio", "max_abs_error", "min_psnr"]
    w.writerow(cols)
    for b in best:
        w.writerow([_cell(b.get(c)) for c in cols])
    atomic_write_text(path, buf.getvalue())
    return path


# ----------------------------------------------------------------------------- the page

_CSS = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;font-size:12px}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#eee}td.l{text-align:left}
tr.fail td{background:#fde8e8}tr.failed td{background:#eee;color:#888}.pass{color:#1a7f37}.no{color:#c62828}
.gallery{display:flex;flex-wrap:wrap;gap:6px}.gallery figure{margin:0;font-size:10px;width:340px}
.gallery img{width:340px}pre{background:#f6f6f6;padding:.6em;font-size:12px}"""

_CHECK_JS = """window.addEventListener('load',function(){var im=document.images,bad=0;
for(var i=0;i<im.length;i++){if(!im[i].complete||im[i].naturalWidth===0)bad++;}
document.body.setAttribute('data-check',JSON.stringify({images:im.length,broken:bad,
rows:document.querySelectorAll('#sweep tbody tr').length,best:document.querySelectorAll('#best tbody tr').length}));});"""


def _table(table_id: str, cols: list[str], rows: list[dict[str, Any]], row_class=None) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = []
    for r in rows:
        cls = f' class="{row_class(r)}"' if row_class else ""
        cells = []
        for c in cols:
            v = r.get(c)
            if isinstance(v, bool):
                cells.append(f'<td class="{"pass" if v else "no"}">{"pass" if v else "fail"}</td>')
            elif isinstance(v, (int, float)):
                cells.append(f"<td>{html.escape(_cell(v))}</td>")
            else:
                cells.append(f'<td class="l">{html.escape(_cell(v))}</td>')
        body.append(f"<tr{cls}>{''.join(cells)}</tr>")
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def write_html(path: Path, cfg: Any, rows: list[dict[str, Any]], best: list[dict[str, Any]], cdb: Path) -> Path:
    """``index.html``: the best settings, the whole sweep table and every plot (paths into the .cdb)."""
    from torchhpc.ext.core.config import dump_config

    rel = os.path.relpath(cdb, Path(path).parent)
    show = ["Compressor_field__params", "status", "Compression Ratio", "absolute_error", "relative_error", "psnr",
            "ssim", "Compression Throughput(MB/s)", "DeCompression Throughput(MB/s)"]
    show += [c for c in ("power_spectrum_pass", "halo_mass_function_pass", "turbulence_pass", "pass_all")
             if any(c in r for r in rows)]
    show.append("error")

    def klass(r):
        return "failed" if r.get("status") == "failed" else ("" if r.get("pass_all", True) else "fail")

    figs = []
    for r in rows:
        for c in sorted(k for k in r if k.startswith("FILE_") and r[k]):
            src = html.escape(f"{rel}/{r[c]}")
            figs.append(f'<figure><img src="{src}" alt="{html.escape(c)}" loading="eager">'
                        f"<figcaption>{html.escape(r['Compressor_field__params'])} · {html.escape(c[5:])}"
                        "</figcaption></figure>")
    figs = list(dict.fromkeys(figs))  # halo/turbulence plots are shared by the rows of a setting
    n_ok = sum(r.get("status") == "ok" for r in rows)
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Foresight sweep: {html.escape(cfg.output.name)}</title>
<style>{_CSS}</style><script>{_CHECK_JS}</script></head><body>
<h1>Foresight sweep: {html.escape(cfg.output.name)}</h1>
<p>{len(rows)} rows ({n_ok} ran, {len(rows) - n_ok} failed) · Cinema database
<a href="{html.escape(rel)}/data.csv">{html.escape(rel)}/data.csv</a></p>
<h2>Most compressing setting that passes every analysis</h2>
{_table("best", ["compressor", "params", "ratio", "max_abs_error", "min_psnr"], best)}
<h2>Every setting</h2>
{_table("sweep", show, rows, klass)}
<h2>Plots</h2><div class="gallery">{"".join(figs)}</div>
<h2>Config</h2><pre>{html.escape(dump_config(cfg))}</pre>
</body></html>
"""
    atomic_write_text(path, page)
    return Path(path)


class _PageParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.tables: dict[str, int] = {}
        self._table: str | None = None
        self._in_body = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.images.append(a.get("src", ""))
        elif tag == "table":
            self._table = a.get("id")
            self.tables[self._table or ""] = 0
        elif tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._in_body and self._table is not None:
            self.tables[self._table] += 1

    def handle_endtag(self, tag):
        if tag == "tbody":
            self._in_body = False
        elif tag == "table":
            self._table = None


def browser() -> str | None:
    """A headless Chromium/Chrome on PATH, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        exe = shutil.which(name)
        if exe:
            return exe
    return None


def check_page(path: str | Path, use_browser: bool = True, timeout: float = 60.0) -> dict[str, Any]:
    """Load ``index.html`` and report ``{"checker", "images", "broken", "rows", "best"}``.

    With a headless Chromium on PATH the page is loaded for real (``--dump-dom`` after the load event;
    a script in the page counts images that failed to decode); otherwise an HTML parser counts the
    table rows and checks that every image file exists.
    """
    path = Path(path).resolve()
    exe = browser() if use_browser else None
    if exe:
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
               "--virtual-time-budget=10000", "--dump-dom", path.as_uri()]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        start = out.stdout.find("data-check=")
        if start >= 0:
            q = out.stdout[start + len("data-check=")]
            end = out.stdout.index(q, start + len("data-check=") + 1)
            raw = html.unescape(out.stdout[start + len("data-check=") + 1:end])
            return {"checker": "chromium", **json.loads(raw)}
        return {"checker": "chromium", "images": 0, "broken": -1, "rows": 0, "best": 0,
                "stderr": out.stderr[-500:]}
    p = _PageParser()
    p.feed(path.read_text())
    broken = sum(not (path.parent / src).is_file() for src in p.images)
    return {"checker": "html.parser", "images": len(p.images), "broken": broken, "rows": p.tables.get("sweep", 0),
            "best": p.tables.get("best", 0)}


__all__ = ["FORESIGHT_COLUMNS", "OUR_COLUMNS", "browser", "check_page", "columns_of", "read_cinema", "write_best",
           "write_cinema", "write_html"]
