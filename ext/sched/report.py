"""What ``sched heuristics`` and ``sched eval`` show: the job windows a command schedules, the metrics table, the
box plot (the commands themselves are in :mod:`torchhpc.ext.sched.commands`)."""

from __future__ import annotations

from pathlib import Path

from torchhpc.ext.core.errors import InputError

from .config import WindowOptions
from .evaluate import PUBLISHED_STARTS, draw_starts
from .swf import SchedTrace
from .traces import load_sched_trace

TABLE_COLUMNS = ("bsld", "wait", "turnaround", "slowdown", "util", "util_rlscheduler")


def window_trace(opts: WindowOptions) -> SchedTrace:
    """The trace of a command: ``--trace`` or the generated Lublin trace (``--generate-jobs``, ``--trace-seed``)."""
    return load_sched_trace(opts.trace, opts.procs, opts.generate_jobs, opts.trace_seed, not opts.lenient)


def window_starts(opts: WindowOptions, trace: SchedTrace) -> list[int]:
    """The window starts of a command: ``--start``, else ``--starts`` (a list or ``published``), else
    ``--sequences`` windows drawn with ``--seed``.

    Raises:
        InputError: ``--starts`` is neither ``published`` nor comma-separated integers.
    """
    if opts.start is not None:
        return [opts.start]
    if opts.starts:
        if opts.starts == "published":
            return list(PUBLISHED_STARTS)
        try:
            starts = [int(x) for x in opts.starts.split(",") if x.strip()]
        except ValueError:
            raise InputError(
                f"--starts must be comma-separated job indices or 'published', got {opts.starts!r}") from None
        if not starts:
            raise InputError(f"--starts gives no window start ({opts.starts!r})")
        return starts
    return draw_starts(trace, opts.sequences, opts.length, opts.seed)


def metrics_table(results: dict[str, dict[str, float]]) -> str:
    """One row per policy, one column per metric (blank where a policy lacks it)."""
    lines = [f"{'policy':<20}" + "".join(f"{c:>17}" for c in TABLE_COLUMNS)]
    for name, m in results.items():
        lines.append(f"{name:<20}" + "".join(f"{m[c]:>17.2f}" if c in m else f"{'':>17}" for c in TABLE_COLUMNS))
    return "\n".join(lines)


def box_plot(per_seq: dict[str, list[dict[str, float]]], path: Path, title: str) -> Path:
    """Per-window bsld of each policy as boxes (log scale), saved as a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=110)
    names = list(per_seq)
    ax.boxplot([[r["bsld"] for r in per_seq[n]] for n in names], tick_labels=names)
    ax.set_yscale("log")
    ax.set_ylabel("average bounded slowdown")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


__all__ = ["TABLE_COLUMNS", "box_plot", "metrics_table", "window_starts", "window_trace"]
