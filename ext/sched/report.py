"""What ``sched heuristics`` and ``sched eval`` compute and print: job windows, the metrics table, the box plot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torchhpc.ext.core.errors import InputError

from .config import EvalCommandOptions, HeuristicsOptions, WindowOptions
from .evaluate import PUBLISHED_STARTS, draw_starts, evaluate_heuristic, mean_ratio, summarise, windows_better
from .heuristics import HEURISTICS
from .swf import SchedTrace, load_sched_trace

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


def heuristics(opts: HeuristicsOptions) -> dict[str, dict[str, float]]:
    """``sched heuristics``: each heuristic's mean metrics over the windows; prints the table (or JSON)."""
    trace = window_trace(opts)
    starts = window_starts(opts, trace)
    names = opts.policy or list(HEURISTICS)
    results = {name: summarise(evaluate_heuristic(trace, name, starts, opts.length, opts.backfill)) for name in names}
    if opts.json:
        print(json.dumps(results))
    else:
        print(f"{trace.name}: {len(trace)} jobs, {trace.procs_total} procs, backfill={opts.backfill}, "
              f"{len(starts)} window(s) of {opts.length} jobs (mean over windows)")
        print(metrics_table(results))
    return results


def policy_source(spec: str, which: str = "best") -> tuple[int, dict[str, Any], Path, str]:
    """``(epoch, state, folder for plots, backfilling it was trained with)`` of a ``--checkpoint`` value: a run
    folder, a checkpoint file, or ``pretrained:NAME`` (a shipped policy; plots go to ``runs/sched/pretrained-NAME``).

    Raises:
        InputError: no such run, file or shipped policy, or an unreadable checkpoint.
    """
    import yaml

    from .ppo import load_checkpoint
    from .zoo import PREFIX, card, is_pretrained, load_pretrained

    if is_pretrained(spec):
        name = spec[len(PREFIX):]
        step, state = load_pretrained(name)
        info = card(name)
        return step, state, Path("runs/sched") / f"pretrained-{name}", (info.get("setting") or {}).get(
            "backfill", "none")
    step, state, out_dir = load_checkpoint(spec, which)
    cfg = Path(out_dir) / "config.yaml"
    backfill = "none"
    if cfg.is_file():
        try:
            backfill = (yaml.safe_load(cfg.read_text()) or {}).get("env", {}).get("backfill", "none")
        except yaml.YAMLError:
            backfill = "none"
    return step, state, Path(out_dir), backfill


def evaluate_checkpoint(opts: EvalCommandOptions) -> dict[str, Any]:
    """``sched eval``: the checkpoint's policy beside the heuristics on the windows; prints the table (or JSON),
    the windows won, the paired bootstrap ratio, and writes the box plot beside the run.

    Raises:
        InputError: no run folder or checkpoint file at ``opts.checkpoint``, or an unreadable one.
    """
    from .ppo import agent_settings, evaluate_policy, from_checkpoint

    step, state, out_dir, trained_backfill = policy_source(opts.checkpoint, opts.which)
    backfill = opts.backfill or trained_backfill
    if not opts.json:
        print(f"checkpoint: epoch {step}" + (
            f" (best held-out {state['best']['value']:.2f} at epoch {state['best']['epoch']})"
            if state.get("best") else "") + f" of {opts.checkpoint}; backfill={backfill}")
    agent = from_checkpoint(state)
    trace = window_trace(opts)
    starts = window_starts(opts, trace)
    rl_rows = evaluate_policy(agent, trace, starts, opts.length, backfill, greedy=opts.greedy,
                              samples=opts.samples, seed=opts.seed, settings=agent_settings(state))
    per_seq = {"rl": rl_rows}
    for name in opts.policy:
        per_seq[name] = evaluate_heuristic(trace, name, starts, opts.length, backfill)
    results = {k: summarise(v) for k, v in per_seq.items()}
    out_dir.mkdir(parents=True, exist_ok=True)
    png = box_plot(per_seq, out_dir / f"eval_{trace.name}_{backfill}.png",
                   f"{trace.name}, backfill={backfill}, {len(starts)} x {opts.length} jobs")
    if opts.json:
        print(json.dumps(results))
        return results
    print(metrics_table(results))
    passes = "greedy" if opts.greedy else f"mean of {opts.samples} sampled pass(es) per window"
    wins = ", ".join("{} {}/{}".format(h, *windows_better(rl_rows, rows)) for h, rows in per_seq.items() if h != "rl")
    print(f"windows where RL ({passes}) has the lower bsld: {wins}")
    for h, rows in per_seq.items():
        if h != "rl" and len(starts) > 1:
            r, lo, hi = mean_ratio(rl_rows, rows)
            print(f"RL bsld / {h} bsld: {r:.3f} (95% paired bootstrap interval over the {len(starts)} "
                  f"windows: {lo:.3f}-{hi:.3f})")
    print(f"box plot: {png}")
    return results


__all__ = ["box_plot", "evaluate_checkpoint", "heuristics", "metrics_table", "policy_source", "window_starts",
           "window_trace"]
