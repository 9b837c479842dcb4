"""Run folders, metrics, atomic checkpoints and progress bars.

Every job writes one folder::

    runs/<system>/<run-id>/
        config.yaml          the resolved config (defaults < file < --set)
        metrics.jsonl        one JSON object per logged step: {"step": .., "time": .., <metric>: ..}
        summary.json         the final (or latest) figures of the run
        *.png                plots
        checkpoints/
            ckpt-00000012.pt   written atomically: temp file in the same folder, fsync, rename

A crash at any moment leaves the last complete checkpoint, and
``Run(..., resume=True)`` continues from it: metrics logged after that
checkpoint are dropped so the log stays consistent with the state.

Only rank 0 writes the shared files; every rank may write its own checkpoint
shard (``save_checkpoint(..., shard=rank)``).
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import yaml

from .config import RunOptions, config_to_dict, dump_config
from .errors import InputError, TorchHPCError, warn

K = TypeVar("K")
T = TypeVar("T")

_CKPT_RE = re.compile(r"^(?P<name>[A-Za-z0-9_]+)-(?P<step>\d{8})(?:\.rank(?P<shard>\d+))?\.pt$")


# ----------------------------------------------------------------------------- atomic files


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _atomic_write(path: str | Path, write: Callable[[BinaryIO], object]) -> None:
    """Call ``write(fh)`` on a temp file beside ``path``, fsync, then rename it over ``path``.

    Readers see the old file or the new one, never a part; a failure leaves no temp file behind.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    _fsync_dir(path.parent)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`_atomic_write`)."""
    _atomic_write(path, lambda fh: fh.write(data))


def atomic_write_text(path: str | Path, text: str) -> None:
    """Text version of :func:`atomic_write_bytes` (UTF-8)."""
    atomic_write_bytes(path, text.encode())


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    """``torch.save`` to ``path`` atomically (see :func:`_atomic_write`)."""
    import torch

    _atomic_write(path, lambda fh: torch.save(obj, fh))


# ----------------------------------------------------------------------------- the run


#: the command-line flag that continues a run (``--set run.resume=true`` in a config's terms)
RESUME_FLAG = "--run.resume"


def holds_a_run(folder: str | Path) -> bool:
    """True when ``folder`` holds a run that did some work: its ``config.yaml`` and any of metrics,
    a summary or a checkpoint.  A folder with only the config is what a job that failed at start left
    (unreadable data, a bad option found by a rank); a new run with that id takes it over."""
    folder = Path(folder)
    if not (folder / "config.yaml").exists():
        return False
    if (folder / "metrics.jsonl").exists() or (folder / "summary.json").exists():
        return True
    ckpt = folder / "checkpoints"
    return ckpt.is_dir() and any(ckpt.iterdir())


def already_holds_a_run(folder: str | Path) -> str:
    """The one-line refusal for a new run on a folder that :func:`holds_a_run`."""
    return f"run folder {folder} already holds a run (pass {RESUME_FLAG} to continue it, or choose another run id)"


def new_run_id() -> str:
    """A sortable, unique run id: ``YYYYmmdd-HHMMSS-xxxx``."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


LOG_INTERVAL_S = 30.0
"""How often a progress bar redraws where stderr is a log, not a terminal or a notebook."""


def progress_bar(iterable: Iterable[Any] | None = None, **kwargs: Any):
    """A tqdm bar (``tqdm.auto``: a widget in a notebook) that redraws at most every :data:`LOG_INTERVAL_S`
    seconds where stderr is neither a terminal nor a notebook (a file, a pipe, a job's log), so a log gets a
    line now and then instead of a frame per update; ``kwargs`` as tqdm's."""
    import sys

    from tqdm.auto import tqdm

    stream = kwargs.get("file") or sys.stderr
    interactive = getattr(stream, "isatty", lambda: False)() or type(stream).__module__.startswith("ipykernel")
    if not interactive:
        kwargs.setdefault("mininterval", LOG_INTERVAL_S)
    return tqdm(iterable, **kwargs)


class Run:
    """One job's folder under ``runs/<system>/<run-id>/``.

    Args:
        system: the system's short name (``sched``, ``kraken``, ...).
        config: the resolved config dataclass (or mapping); saved as ``config.yaml``.
        root: the parent of all runs (default ``runs``).
        run_id: the folder name; a new timestamped id when omitted.
        resume: continue an existing run: the folder must exist; its latest checkpoint
            is available through :meth:`load_checkpoint`.
        rank: this process's rank; only rank 0 writes shared files and shows progress bars.

    Raises:
        InputError: ``resume`` on a run that does not exist, or a new run on a folder
            that already holds one (:func:`holds_a_run`: a folder a failed start left is taken over).
    """

    def __init__(
        self,
        system: str,
        config: Any = None,
        *,
        root: str | Path = "runs",
        run_id: str | None = None,
        resume: bool = False,
        rank: int = 0,
        progress: bool = True,
    ) -> None:
        self.system = system
        self.rank = rank
        self.is_main = rank == 0
        self.show_progress = progress
        self.run_id = run_id or new_run_id()
        self.dir = Path(root) / system / self.run_id
        self.ckpt_dir = self.dir / "checkpoints"
        self.resumed = resume
        if resume:
            if not self.dir.is_dir():
                raise InputError(f"cannot resume: run folder {self.dir} does not exist")
        elif self.is_main and holds_a_run(self.dir):
            raise InputError(already_holds_a_run(self.dir))
        if self.is_main:
            self.dir.mkdir(parents=True, exist_ok=True)
            if config is not None:
                self.save_config(config)
        self._t0 = time.time()

    # -- config / metrics / summary ------------------------------------------------------------

    def save_config(self, config: Any) -> None:
        """Write the resolved config as ``config.yaml`` (a changed config on resume keeps the old one
        as ``config.previous.yaml``)."""
        if not self.is_main:
            return
        text = config if isinstance(config, str) else (
            yaml.safe_dump(dict(config), sort_keys=False) if isinstance(config, Mapping) else dump_config(config)
        )
        path = self.dir / "config.yaml"
        if path.exists() and path.read_text() != text:
            atomic_write_text(self.dir / "config.previous.yaml", path.read_text())
        atomic_write_text(path, text)

    def log(self, step: int, **metrics: Any) -> None:
        """Append one line to ``metrics.jsonl`` (rank 0): ``{"step", "time", **metrics}``."""
        if not self.is_main:
            return
        row = {"step": int(step), "time": round(time.time() - self._t0, 6)}
        row.update({k: _jsonable(v) for k, v in metrics.items()})
        with open(self.dir / "metrics.jsonl", "a") as fh:
            fh.write(json.dumps(row, allow_nan=False) + "\n")
            fh.flush()

    def metrics(self) -> list[dict[str, Any]]:
        """All rows of ``metrics.jsonl`` (a torn last line from a crash is ignored)."""
        path = self.dir / "metrics.jsonl"
        if not path.exists():
            return []
        rows = []
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return rows

    def truncate_metrics(self, after_step: int) -> None:
        """Drop logged rows with ``step > after_step`` (used on resume)."""
        if not self.is_main:
            return
        rows = [r for r in self.metrics() if r.get("step", 0) <= after_step]
        atomic_write_text(self.dir / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows))

    def write_summary(self, summary: Mapping[str, Any]) -> Path:
        """Merge ``summary`` into ``summary.json`` (atomically) and return its path."""
        path = self.dir / "summary.json"
        if self.is_main:
            current = json.loads(path.read_text()) if path.exists() else {}
            current.update({k: _jsonable(v) for k, v in summary.items()})
            atomic_write_text(path, json.dumps(current, indent=2, allow_nan=False) + "\n")
        return path

    # -- checkpoints -----------------------------------------------------------------------------

    def checkpoint_path(self, step: int, name: str = "ckpt", shard: int | None = None) -> Path:
        suffix = f".rank{shard}" if shard is not None else ""
        return self.ckpt_dir / f"{name}-{step:08d}{suffix}.pt"

    def save_checkpoint(
        self, state: Mapping[str, Any], step: int, *, name: str = "ckpt", shard: int | None = None, keep: int = 3
    ) -> Path | None:
        """Atomically save ``state`` for ``step``; keep the newest ``keep`` checkpoints.

        With ``shard=None`` only rank 0 writes; with ``shard=rank`` every rank writes its own file.
        """
        if shard is None and not self.is_main:
            return None
        path = self.checkpoint_path(step, name, shard)
        atomic_torch_save({"step": int(step), "state": dict(state)}, path)
        if keep > 0:
            steps = sorted(self.checkpoint_steps(name, shard))
            for old in steps[:-keep]:
                self.checkpoint_path(old, name, shard).unlink(missing_ok=True)
        return path

    def checkpoint_steps(self, name: str = "ckpt", shard: int | None = None) -> list[int]:
        """The steps of the checkpoint files ``name`` (of ``shard``) in this run, in no particular order."""
        return [step for step, _ in checkpoint_files(self.ckpt_dir, name, shard)]

    def latest_checkpoint(self, name: str = "ckpt", shard: int | None = None) -> Path | None:
        """The newest complete checkpoint file, or ``None``."""
        steps = self.checkpoint_steps(name, shard)
        return self.checkpoint_path(max(steps), name, shard) if steps else None

    def load_checkpoint(
        self, path: str | Path | None = None, *, name: str = "ckpt", shard: int | None = None,
        map_location: Any = "cpu",
    ) -> tuple[int, dict[str, Any]] | None:
        """Load ``(step, state)`` from ``path`` or the newest checkpoint; ``None`` if there is none.

        Raises:
            InputError: the file is not a torchhpc checkpoint.
        """
        path = Path(path) if path is not None else self.latest_checkpoint(name, shard)
        if path is None:
            return None
        try:
            import torch

            blob = torch.load(path, map_location=map_location, weights_only=False)
        except Exception as exc:  # a corrupt file is a user-facing error, not a traceback
            raise InputError(f"{path}: cannot read checkpoint ({exc.__class__.__name__}: {exc})") from None
        if not isinstance(blob, dict) or "step" not in blob or "state" not in blob:
            raise InputError(f"{path}: not a torchhpc checkpoint (expected keys 'step' and 'state')")
        return int(blob["step"]), blob["state"]

    # -- progress and plots ------------------------------------------------------------------------

    def progress(self, iterable: Iterable[Any] | None = None, **kwargs: Any):
        """A tqdm bar on rank 0 (silent elsewhere, or when progress is off): :func:`progress_bar`."""
        kwargs.setdefault("dynamic_ncols", True)
        kwargs.setdefault("leave", False)
        return progress_bar(iterable, disable=not (self.is_main and self.show_progress), **kwargs)

    def plot_metrics(
        self, keys: Sequence[str], filename: str = "metrics.png", *, x: str = "step", title: str | None = None,
        ylabel: str | None = None, logy: bool = False,
    ) -> Path | None:
        """Plot ``keys`` of ``metrics.jsonl`` against ``x`` into a PNG in the run folder."""
        if not self.is_main:
            return None
        rows = self.metrics()
        if not rows:
            return None
        plt = _pyplot()
        fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
        for key in keys:
            pts = [(r[x], r[key]) for r in rows if key in r and x in r and r[key] is not None]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, marker="." if len(xs) < 50 else None, label=key)
        ax.set_xlabel(x)
        if ylabel:
            ax.set_ylabel(ylabel)
        if logy:
            ax.set_yscale("log")
        ax.set_title(title or f"{self.system} {self.run_id}")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = self.dir / filename
        fig.savefig(path)
        plt.close(fig)
        return path

    @property
    def elapsed(self) -> float:
        return time.time() - self._t0

    def __repr__(self) -> str:
        return f"Run({self.system!r}, dir={str(self.dir)!r})"


def checkpoint_files(folder: str | Path, name: str = "ckpt", shard: int | None = None) -> list[tuple[int, Path]]:
    """``(step, file)`` of the checkpoints ``<name>-<step>[.rank<shard>].pt`` in ``folder``, newest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = []
    for p in folder.iterdir():
        m = _CKPT_RE.match(p.name)
        if m and m["name"] == name and (int(m["shard"]) if m["shard"] is not None else None) == shard:
            found.append((int(m["step"]), p))
    return sorted(found, reverse=True)


def newest_intact(
    candidates: Iterable[tuple[int, K]], load: Callable[[K], T], *, where: str | Path, report: bool = True,
) -> tuple[int, K, T] | None:
    """The newest checkpoint that loads, for any checkpoint scheme (one file, a shard per rank, a full
    checkpoint with its deltas).

    Args:
        candidates: ``(step, key)`` pairs in any order; ``key`` names the checkpoint (a path, a step).
        load: reads a candidate, raising :class:`~torchhpc.ext.core.errors.TorchHPCError` (a one-line
            message naming what is damaged) when it cannot.
        where: the folder, for messages.
        report: one warning line when damaged newer checkpoints were skipped.

    Returns:
        ``(step, key, loaded)`` of the newest candidate that loads; ``None`` when there is no candidate.

    Raises:
        InputError: candidates exist but none of them loads.
    """
    damaged: list[str] = []
    for step, key in sorted(candidates, key=lambda c: c[0], reverse=True):
        try:
            loaded = load(key)
        except TorchHPCError as exc:
            damaged.append(str(exc))
            continue
        if damaged and report:
            more = f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""
            name = f"{key.name} (step {step})" if isinstance(key, Path) else f"step {step}"
            warn(f"{damaged[0]}{more}; using {name}, the newest intact checkpoint in {where}")
        return step, key, loaded
    if damaged:
        more = f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""
        raise InputError(f"no intact checkpoint in {where}: {damaged[0]}{more}")
    return None


def agree(value: Any, ctx: Any = None) -> Any:
    """Rank 0's ``value`` on every rank (a broadcast; the value itself for a single process).

    Args:
        value: any picklable object; only rank 0's is used.
        ctx: a :class:`~torchhpc.ext.core.distributed.DistContext` (``None``: single process).
    """
    if ctx is None or not getattr(ctx, "initialized", False):
        return value
    import torch.distributed as dist

    box = [value if ctx.rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def open_run(system: str, config: Any, options: RunOptions, ctx: Any = None) -> Run:
    """The run folder of a job, with one run id agreed by every rank of a torchrun job.

    Args:
        system: the system's short name.
        config: the resolved config (saved as ``config.yaml`` by rank 0).
        options: the job's :class:`RunOptions`.
        ctx: the job's :class:`~torchhpc.ext.core.distributed.DistContext` (``None``: one process).

    Raises:
        InputError: as :class:`Run`.
    """
    rank = getattr(ctx, "rank", 0) if ctx is not None else 0
    run_id = agree(options.run_id or (new_run_id() if rank == 0 else None), ctx)
    # rank 0 decides whether the folder can be used; every rank gets the same answer (no rank waits
    # in a collective for a peer that has already failed)
    problem = None
    if rank == 0:
        folder = Path(options.root) / system / run_id
        if options.resume and not options.run_id:
            problem = "cannot resume without --run.run-id: name the run folder to continue"
        elif options.resume and not folder.is_dir():
            problem = f"cannot resume: run folder {folder} does not exist"
        elif not options.resume and holds_a_run(folder):
            problem = already_holds_a_run(folder)
    problem = agree(problem, ctx)
    if problem:
        raise InputError(problem)
    return Run(system, config, root=options.root, run_id=run_id, resume=options.resume, rank=rank,
               progress=options.progress)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _jsonable(v: Any) -> Any:
    """Plain JSON data; a value that is not a finite number (NaN, inf) becomes ``null``, so that
    ``summary.json`` and ``metrics.jsonl`` stay strict JSON that every reader accepts."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    torch = sys.modules.get("torch")  # a tensor can only exist once torch is imported
    if torch is not None and isinstance(v, torch.Tensor):
        return _jsonable(v.item() if v.numel() == 1 else v.tolist())
    if hasattr(v, "item") and callable(v.item) and getattr(v, "ndim", 1) == 0:
        return _jsonable(v.item())
    if isinstance(v, Path):
        return str(v)
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if hasattr(v, "tolist"):
        return _jsonable(v.tolist())
    return v


__all__ = [
    "LOG_INTERVAL_S",
    "Run",
    "RunOptions",
    "agree",
    "open_run",
    "progress_bar",
    "atomic_torch_save",
    "atomic_write_bytes",
    "atomic_write_text",
    "config_to_dict",
    "holds_a_run",
    "new_run_id",
    "RESUME_FLAG",
]
