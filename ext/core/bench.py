"""The benchmark harness every ``benchmarks/<system>.py`` uses.

A benchmark runs ours and the anchor on the same input in one run and reports the ratio.  This
module gives it the pieces that would otherwise be written again per system:

* :func:`time_interleaved` times several candidates in turns (A, B, A, B, ...) so that a slow
  moment of the machine falls on all of them, and returns min / median / max per candidate;
* :func:`result_row` and :func:`write_results`: one results-JSON schema for the whole suite
  (``system``, ``benchmark``, ``rows``, ``machine``, ``torch``, ``commit``, ``command``, ``date``);
* :func:`bar_plot`: one plot helper (grouped bars, one group per row);
* :func:`benchmark_parser`: the flags every benchmark takes (``--out``, ``--repeats``, ``--device``).

    timings = time_interleaved({"ours": ours, "torchrec": theirs}, repeats=5, sync=torch.cuda.synchronize)
    rows = [result_row("pooling", timings, anchor="torchrec")]
    write_results("kraken", "pooling", rows, out="runs/bench")
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .runs import _jsonable, _pyplot, atomic_write_text

SCHEMA_VERSION = 1


@dataclass
class Timing:
    """Seconds per call of one candidate over the timed repeats."""

    times: list[float] = field(default_factory=list)

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def max(self) -> float:
        return max(self.times)

    def as_dict(self) -> dict[str, float]:
        return {"min_s": self.min, "median_s": self.median, "max_s": self.max, "repeats": len(self.times)}


def time_interleaved(
    candidates: Mapping[str, Callable[[], Any]], *, repeats: int = 5, warmup: int = 1,
    sync: Callable[[], None] | None = None, number: int = 1,
) -> dict[str, Timing]:
    """Time each candidate ``repeats`` times, in turns, after ``warmup`` untimed calls each.

    Args:
        candidates: name -> a call with no arguments (its result is ignored).
        repeats: timed rounds; each round calls every candidate once, in the given order.
        warmup: untimed calls per candidate first (compilation, caches, allocator).
        sync: called before reading the clock (``torch.cuda.synchronize`` for GPU work).
        number: calls per timed sample (the sample is their mean), for very short calls.

    Returns:
        name -> :class:`Timing` (seconds per call).

    Raises:
        ValueError: ``repeats`` or ``number`` below 1, or no candidates.
    """
    if repeats < 1 or number < 1 or not candidates:
        raise ValueError("time_interleaved needs candidates, repeats >= 1 and number >= 1")
    sync = sync or (lambda: None)
    for fn in candidates.values():
        for _ in range(warmup):
            fn()
    sync()
    out = {name: Timing() for name in candidates}
    for _ in range(repeats):
        for name, fn in candidates.items():
            sync()
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            sync()
            out[name].times.append((time.perf_counter() - t0) / number)
    return out


def result_row(name: str, timings: Mapping[str, Timing], *, anchor: str | None = None,
               **extra: Any) -> dict[str, Any]:
    """One row of a results file: each candidate's min/median/max and, with ``anchor``, the speed-up
    ``anchor median / candidate median`` of every other candidate (> 1: faster than the anchor)."""
    row: dict[str, Any] = {"name": name}
    for cand, t in timings.items():
        row[cand] = t.as_dict()
    if anchor is not None:
        row["anchor"] = anchor
        row["speedup_vs_anchor"] = {c: timings[anchor].median / t.median for c, t in timings.items() if c != anchor}
    row.update(extra)
    return row


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, timeout=5, cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode:
        return None
    return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def machine_info() -> dict[str, Any]:
    """The machine a figure was measured on: CPU, cores, threads, GPU, versions."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {"cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(), "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    return info


def write_results(
    system: str, benchmark: str, rows: Sequence[Mapping[str, Any]], *, out: str | Path = "runs/bench",
    params: Mapping[str, Any] | None = None, quiet: bool = False,
) -> Path:
    """Write ``<out>/<system>/<benchmark>.json`` in the suite's one schema and return its path.

    The file holds ``system``, ``benchmark``, ``rows`` (as given), ``params`` (the benchmark's
    settings), ``machine`` (:func:`machine_info`), ``torch``, ``commit`` (git, ``+dirty`` when the
    tree has changes), ``command`` (as typed) and ``date`` (UTC, ISO 8601).
    """
    machine = machine_info()
    doc = {
        "schema": SCHEMA_VERSION, "system": system, "benchmark": benchmark, "rows": [_jsonable(dict(r)) for r in rows],
        "params": _jsonable(dict(params or {})), "machine": machine, "torch": machine["torch"],
        "commit": _git_commit(), "command": " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    path = Path(out) / system / f"{benchmark}.json"
    atomic_write_text(path, json.dumps(doc, indent=2, allow_nan=False, default=_no_nan) + "\n")
    if not quiet:
        print(f"wrote {path}")
    return path


def _no_nan(x: Any) -> Any:
    return asdict(x) if hasattr(x, "__dataclass_fields__") else str(x)


def bar_plot(
    path: str | Path, groups: Sequence[str], series: Mapping[str, Sequence[float]], *, ylabel: str,
    title: str = "", logy: bool = False, highlight: str | None = None,
) -> Path:
    """Grouped bars: one group per entry of ``groups``, one bar per series (e.g. ours / the anchor).

    Args:
        path: the PNG to write.
        groups: the x-axis labels.
        series: name -> one value per group.
        ylabel, title, logy: axis label, title and a log scale.
        highlight: the series drawn in the suite's colour (the others grey-blue).
    """
    plt = _pyplot()
    names = list(series)
    width = 0.8 / max(len(names), 1)
    fig, ax = plt.subplots(figsize=(max(4.8, 1.2 * len(groups) + 2), 3.6), dpi=110)
    for i, name in enumerate(names):
        xs = [g + (i - (len(names) - 1) / 2) * width for g in range(len(groups))]
        color = "C0" if name == highlight else f"C{(i + 1) % 10}"
        ax.bar(xs, list(series[name]), width=width, label=name, color=color)
    ax.set_xticks(range(len(groups)), list(groups))
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    if title:
        ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def benchmark_parser(description: str | None, *, repeats: int = 5) -> argparse.ArgumentParser:
    """The flags every benchmark takes: ``--out DIR``, ``--repeats N``, ``--device``."""
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/bench", help="results go to OUT/<system>/<benchmark>.json/.png")
    ap.add_argument("--repeats", type=int, default=repeats, help=f"timed rounds per candidate (default {repeats})")
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    return ap


def print_rows(rows: Sequence[Mapping[str, Any]]) -> None:
    """A plain-text table of each row's median times and speed-ups."""
    for row in rows:
        parts = [str(row.get("name"))]
        for k, v in row.items():
            if isinstance(v, Mapping) and "median_s" in v:
                parts.append(f"{k} {1e3 * v['median_s']:.2f} ms")
        for k, v in (row.get("speedup_vs_anchor") or {}).items():
            parts.append(f"{k}/{row['anchor']} {v:.2f}x")
        print("  ".join(parts))


__all__ = ["Timing", "bar_plot", "benchmark_parser", "machine_info", "print_rows", "result_row",
           "time_interleaved", "write_results"]
