"""The timeline picture: what each rank did when during one update (a Gantt chart, PNG)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

COLORS = {
    (0, "F"): "#9ecae1", (0, "B"): "#3182bd",   # replica A: light = forward, dark = backward
    (1, "F"): "#fdae6b", (1, "B"): "#e6550d",   # replica B
    (-1, "allreduce"): "#969696", (-1, "optimizer"): "#74c476",
}


def plot_timeline(events: Sequence, path: str | Path, title: str = "") -> Path:
    """Draw ``events`` (:class:`~.runtime.Event` or dicts with the same fields) as one row per rank.

    Bars are labelled with the micro-batch (``e.m`` with MASTER repetitions), coloured by replica
    and by forward / backward; the gradient all-reduce and the optimizer step close each row.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = [e if isinstance(e, dict) else e.__dict__ for e in events]
    ranks = sorted({r["rank"] for r in rows})
    end = max((r["end"] for r in rows), default=1.0)
    reps = max((r["rep"] for r in rows), default=0) + 1
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(ranks) + 1.6), dpi=110)
    for r in rows:
        y = ranks.index(r["rank"])
        w = r["end"] - r["start"]
        ax.barh(y, w * 1e3, left=r["start"] * 1e3, height=0.7,
                color=COLORS.get((r["replica"], r["kind"]), "#cccccc"), edgecolor="black", linewidth=0.4)
        if r["kind"] in ("F", "B") and w / end > 0.025:
            label = f"{r['rep']}.{r['micro_batch']}" if reps > 1 else str(r["micro_batch"])
            ax.text((r["start"] + w / 2) * 1e3, y, label, ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("time in the update (ms)")
    ax.set_title(title, fontsize=9)
    legend = [Patch(color=COLORS[(0, "F")], label="A forward"), Patch(color=COLORS[(0, "B")], label="A backward"),
              Patch(color=COLORS[(1, "F")], label="B forward"), Patch(color=COLORS[(1, "B")], label="B backward"),
              Patch(color=COLORS[(-1, "allreduce")], label="grad all-reduce"),
              Patch(color=COLORS[(-1, "optimizer")], label="optimizer")]
    ax.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, -0.25 if len(ranks) < 4 else -0.12),
              ncol=6, fontsize=7, frameon=False)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
