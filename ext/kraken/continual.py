"""Continual training on a stream, delta checkpoints, and a serving replica that follows them.

* :class:`ContinualTrainer` runs the loop: score each batch (progressive
  validation), then train on it — dense parameters with Adam/AdamW, embedding rows
  with their sparse optimizer.
* Checkpoints live in ``<run>/checkpoints/``: ``full-<step>.pt`` (everything) every
  ``full_every`` steps and ``delta-<step>.pt`` (only rows changed since the previous
  checkpoint, plus the small dense state) every ``delta_every`` steps, each written
  atomically (:func:`checkpoint_kind` is the schedule).  :meth:`ContinualTrainer.restore`
  loads the newest full checkpoint and replays the deltas after it, giving back exactly the
  state of the last one.  A damaged file (truncated, garbage) is reported in one warning line
  and skipped: the newest intact full checkpoint is chosen by core's
  :func:`~torchhpc.ext.core.runs.newest_intact`, and its intact deltas are replayed up to the
  first damaged one (see :func:`intact_chain`).
* A resume must keep the model's shape (:func:`check_resumable`); :func:`run_config` finds the
  config of a run from its checkpoints folder.
* :class:`ServingReplica` (another process: ``torchhpc kraken serve``) loads the same
  files as they appear and answers requests in between, measuring how stale it is; it
  skips a damaged file the same way (one warning line per file).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import torch

from torchhpc.ext.core.config import load_config
from torchhpc.ext.core.errors import ConfigError, InputError, warn
from torchhpc.ext.core.runs import atomic_torch_save, newest_intact
from torchhpc.ext.core.runs import checkpoint_files as named_checkpoint_files

from .config import CheckpointOptions, KrakenConfig
from .metrics import ProgressiveValidation
from .model import DLRM

KINDS = ("full", "delta")
"""The checkpoint files of a kraken run: ``full-<step>.pt`` and ``delta-<step>.pt``."""


def checkpoint_files(ckpt_dir: str | Path) -> list[tuple[int, str, Path]]:
    """``(step, kind, path)`` of every complete checkpoint file, by step (a full before a delta)."""
    out = [(step, kind, path) for kind in KINDS for step, path in named_checkpoint_files(ckpt_dir, kind)]
    return sorted(out, key=lambda x: (x[0], x[1] != "full"))


def read_checkpoint(path: Path) -> dict:
    """The checkpoint in ``path``, read on the CPU.

    Raises:
        InputError: ``"<file name> (<why>)"`` for a damaged file (truncated, not a torch file, not a kraken
            checkpoint, not what its name says).
    """
    try:
        blob = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # a truncated zip, garbage bytes, an unpickling error
        first = str(exc).splitlines()[0] if str(exc) else ""
        first = re.split(r"(?<=[.!?])\s", first, maxsplit=1)[0]  # torch's first sentence, not its advice
        if len(first) > 120:
            first = first[:117].rsplit(" ", 1)[0] + "..."
        raise InputError(f"{path.name} ({exc.__class__.__name__}: {first})" if first else
                         f"{path.name} ({exc.__class__.__name__})") from None
    m = re.match(r"^(full|delta)-(\d{8})\.pt$", path.name)
    if not isinstance(blob, dict) or blob.get("kind") not in KINDS or "step" not in blob:
        raise InputError(f"{path.name} (not a kraken checkpoint)")
    if m and (blob["kind"] != m[1] or int(blob["step"]) != int(m[2])):
        raise InputError(f"{path.name} (holds a {blob['kind']} checkpoint of step {blob['step']}, not what its "
                         "name says)")
    return blob


def intact_chain(ckpt_dir: str | Path, upto: int | None = None) -> tuple[list[tuple[Path, dict]], list[str]]:
    """The newest intact state of a checkpoint folder, read: ``([(path, blob) of the newest intact full
    checkpoint, then the intact deltas after it], damaged)``.

    The full checkpoint is core's :func:`~torchhpc.ext.core.runs.newest_intact` among the full ones.
    Deltas are replayed from it up to the next full one (a delta after a full checkpoint holds only what
    changed since that one), stopping at the first damaged delta.  ``damaged`` describes each damaged
    file met on the way (``"<name> (<why>)"``).  Steps after ``upto`` are ignored.

    Raises:
        InputError: full checkpoints exist but none of them is intact (core's message).
    """
    ckpt_dir = Path(ckpt_dir)
    files = [f for f in checkpoint_files(ckpt_dir) if upto is None or f[0] <= upto]
    fulls = [(step, path) for step, kind, path in files if kind == "full"]
    damaged: list[str] = []

    def read_full(path: Path) -> dict:
        try:
            return read_checkpoint(path)
        except InputError as exc:
            damaged.append(str(exc))
            raise

    found = newest_intact(fulls, read_full, where=ckpt_dir, report=False)  # one warning, with the deltas', below
    if found is None:
        return [], damaged
    base, path, blob = found
    chain = [(path, blob)]
    nxt = min((s for s, _p in fulls if s > base), default=None)
    for step, kind, path in files:
        if kind != "delta" or step <= base or (nxt is not None and step >= nxt):
            continue
        try:
            chain.append((path, read_checkpoint(path)))
        except InputError as exc:
            damaged.append(str(exc))
            break
    return chain, damaged


def restorable_step(ckpt_dir: str | Path) -> int:
    """The newest step :meth:`ContinualTrainer.restore` can reach from this folder (-1: none, or no intact
    full checkpoint), skipping damaged files as it does."""
    try:
        chain, _ = intact_chain(ckpt_dir)
    except InputError:  # every full checkpoint is damaged: restore says so (on every rank, after they agree)
        return -1
    return int(chain[-1][1]["step"]) if chain else -1


def checkpoint_kind(step: int, options: CheckpointOptions, last_step: int, has_full: bool) -> str | None:
    """What to write after ``step``: ``"full"``, ``"delta"`` or ``None``.

    A full checkpoint every ``full_every`` steps and at the last step; a delta (rows changed since
    the previous checkpoint) every ``delta_every`` steps in between.  The first checkpoint of a run
    is always a full one: a delta needs a base to apply to.
    """
    delta_due = bool(options.delta_every) and step % options.delta_every == 0
    if step % options.full_every == 0 or step == last_step or (delta_due and not has_full):
        return "full"
    return "delta" if delta_due else None


#: Options that fix the shapes of the model and its checkpoints: a resume must not change them.
SHAPE_KEYS = ("stream.source", "stream.num_sparse", "stream.num_dense", "model.dim", "model.bottom", "model.top",
              "optim.sparse", "tables.max_rows", "tables.memory_budget_mb", "tables.sketch_width")


def _key(cfg: KrakenConfig, key: str):
    section, name = key.split(".")
    return getattr(getattr(cfg, section), name)


def check_resumable(cfg: KrakenConfig, run_dir: Path, world: int) -> None:
    """Check, before anything is written, that ``cfg`` can continue the run in ``run_dir``: the
    options of :data:`SHAPE_KEYS` equal the run's saved ``config.yaml`` and the checkpoints were
    written by as many ranks as this job has.

    Raises:
        InputError: no ``config.yaml`` in the folder.
        ConfigError: a shape option or the number of ranks differs (naming the key and both values).
    """
    saved_path = run_dir / "config.yaml"
    if not saved_path.is_file():
        raise InputError(f"cannot resume {run_dir}: no config.yaml in it (not a kraken run folder)")
    saved = load_config(KrakenConfig, saved_path, [])
    for key in SHAPE_KEYS:
        if key in ("stream.num_sparse", "stream.num_dense") and cfg.stream.source == "criteo":
            continue  # a Criteo file fixes both
        old, new = _key(saved, key), _key(cfg, key)
        if old != new:
            raise ConfigError(f"cannot resume {run_dir}: {key} is {new} here but {old} in the run's config.yaml "
                              f"(its checkpoints hold that shape); keep {key}={old} or start a new run")
    ckpt = run_dir / "checkpoints"
    shards = sorted(p for p in ckpt.glob("rank*") if p.is_dir()) if ckpt.is_dir() else []
    written = len(shards) if shards else 1
    if (shards or any(ckpt.glob("*.pt"))) and written != world:
        raise ConfigError(f"cannot resume {run_dir}: its checkpoints were written by {written} rank(s), this job "
                          f"has {world}; resume it with --nproc {written} (torchrun: --nproc-per-node {written})")


def run_config(checkpoint_dir: str | Path) -> KrakenConfig:
    """The config of the run whose checkpoints are in ``checkpoint_dir`` (or a rank folder of it).

    Raises:
        InputError: a file, not a folder; no ``config.yaml`` beside the folder (not a kraken run's
            checkpoints; the folder itself need not exist yet).
    """
    ckpt = Path(checkpoint_dir)
    if ckpt.exists() and not ckpt.is_dir():
        raise InputError(f"{ckpt}: not a folder (give a run's checkpoints folder: runs/kraken/<id>/checkpoints)")
    candidates = [ckpt.parent / "config.yaml"]
    if re.fullmatch(r"rank\d+", ckpt.name):  # one shard of a sharded run
        candidates.append(ckpt.parent.parent / "config.yaml")
    for cfg_path in candidates:
        if cfg_path.is_file():
            return load_config(KrakenConfig, cfg_path, [])
    if not ckpt.exists():
        raise InputError(f"{ckpt}: no such folder, and no kraken run beside it (no {candidates[0]}); give a run's "
                         "checkpoints folder, runs/kraken/<id>/checkpoints")
    raise InputError(f"{ckpt}: not the checkpoints folder of a kraken run (no config.yaml beside it)")


class ContinualTrainer:
    """One DLRM trained continually; ``model.sparse`` is a (sharded) dynamic embedding collection.

    Args:
        model: the :class:`DLRM`.
        dense_lr / dense_optimizer: ``adam`` or ``adamw`` for the MLPs.
        window: samples in the progressive-validation window.
        allreduce: average dense gradients over ranks (set for sharded training).
    """

    def __init__(self, model: DLRM, dense_lr: float = 1e-3, dense_optimizer: str = "adam",
                 weight_decay: float = 0.0, window: int = 50_000, allreduce: bool = False):
        self.model = model
        opt_cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[dense_optimizer]
        self.dense_opt = opt_cls(model.dense_parameters(), lr=dense_lr, weight_decay=weight_decay)
        self.pv = ProgressiveValidation(window)
        self.step = 0
        self.allreduce = allreduce

    def train_step(self, batch) -> torch.Tensor:
        """Score ``batch`` with the current model (recorded for progressive validation), then train on it."""
        self.model.train()
        logits = self.model(batch.dense, batch.sparse)
        self.pv.update(torch.sigmoid(logits.detach()), batch.labels)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, batch.labels)
        self.dense_opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.allreduce:
            from .sharded import allreduce_dense_gradients

            allreduce_dense_gradients(self.model.dense_parameters())
        self.dense_opt.step()
        self.model.sparse.apply_gradients()
        self.step += 1
        return loss.detach()

    # ------------------------------------------------------------------ checkpoints
    def _dense_state(self) -> dict:
        return {k: v.clone() for k, v in self.model.state_dict().items() if not k.startswith("sparse.")}

    def save_full(self, ckpt_dir: str | Path, extra: dict | None = None) -> Path:
        """Everything, atomically; then resets the changed-row tracking."""
        state = {"kind": "full", "step": self.step, "model": self.model.state_dict(),
                 "dense_opt": self.dense_opt.state_dict(), "pv": self.pv.state_dict(), "extra": extra or {},
                 "time": time.time()}
        path = Path(ckpt_dir) / f"full-{self.step:08d}.pt"
        atomic_torch_save(state, path)
        self.model.sparse.mark_clean()  # only once the file is safely in place
        return path

    def save_delta(self, ckpt_dir: str | Path, extra: dict | None = None) -> tuple[Path, int]:
        """Rows changed since the last checkpoint (+ dense state); returns the path and the row count."""
        delta = self.model.sparse.export_delta(with_state=True, clear=False)
        rows = sum(int(d["rows"].numel()) for d in delta["tables"].values())
        state = {"kind": "delta", "step": self.step, "sparse": delta, "dense": self._dense_state(),
                 "dense_opt": self.dense_opt.state_dict(), "pv": self.pv.state_dict(), "extra": extra or {},
                 "time": time.time()}
        path = Path(ckpt_dir) / f"delta-{self.step:08d}.pt"
        atomic_torch_save(state, path)
        self.model.sparse.mark_clean()  # only after the write succeeded: an exception leaves the rows marked
        return path, rows

    def prune(self, ckpt_dir: str | Path, keep_full: int = 2) -> None:
        """Keep the newest ``keep_full`` full checkpoints and the deltas after the oldest kept one."""
        files = checkpoint_files(ckpt_dir)
        fulls = [s for s, k, _ in files if k == "full"]
        if not fulls:
            return
        cut = fulls[-keep_full:][0]
        for s, _k, p in files:
            if s < cut:
                p.unlink(missing_ok=True)

    def restore(self, ckpt_dir: str | Path, upto: int | None = None, drop_later: bool = True) -> dict | None:
        """Load the newest intact full checkpoint and replay the intact deltas after it (all at or
        before step ``upto``); returns the last checkpoint's ``extra``.

        Damaged files (a truncated newest full checkpoint or delta) are skipped with one warning line
        naming them and the step restored. With ``drop_later``, files of later steps (damaged ones
        included) are removed, as training will write them again (see :meth:`drop_later`).

        Raises:
            InputError: full checkpoints exist but none is intact (core's
                :func:`~torchhpc.ext.core.runs.newest_intact` message); a checkpoint that does not fit the
                model (written by a run of another shape).
        """
        ckpt_dir = Path(ckpt_dir)
        chain, damaged = intact_chain(ckpt_dir, upto)
        if not chain:
            if drop_later:
                self.drop_later(ckpt_dir)
            return None
        extra: dict = {}
        try:
            for i, (_path, blob) in enumerate(chain):
                if i == 0:
                    self.model.load_state_dict(blob["model"])
                else:
                    self.model.sparse.apply_delta(blob["sparse"])
                    self.model.load_state_dict(blob["dense"], strict=False)
                self.dense_opt.load_state_dict(blob["dense_opt"])
                self.pv.load_state_dict(blob["pv"])
                self.step, extra = int(blob["step"]), blob.get("extra", {})
        except (RuntimeError, KeyError, ValueError) as exc:
            first = str(exc).strip().splitlines()
            raise InputError(f"{_path}: does not fit this model ({exc.__class__.__name__}: "
                             f"{first[-1].strip() if first else exc}); was it written by a run of another "
                             "shape?") from None
        self.model.sparse.mark_clean()
        if damaged:
            warn(f"{ckpt_dir}: damaged checkpoint {', '.join(damaged)}; restored the newest intact state, "
                 f"step {self.step} ({chain[0][0].name} + {len(chain) - 1} deltas)")
        if drop_later:
            self.drop_later(ckpt_dir)
        return extra

    def drop_later(self, ckpt_dir: str | Path) -> None:
        """Remove checkpoint files of steps after the one held (all of them before any restore)."""
        held = self.step if self.step > 0 else -1
        for step, _kind, path in checkpoint_files(ckpt_dir):
            if step > held:
                path.unlink(missing_ok=True)


class ServingReplica:
    """A read-only copy of the model that follows a trainer's checkpoint folder.

    :meth:`poll` applies any full checkpoint or delta newer than what it holds
    and returns what it loaded, with the staleness: seconds from the file being
    written to being applied.  For a sharded run (``checkpoints/rank<r>/``) the
    model's sparse module is a :class:`~torchhpc.ext.kraken.sharded.RoutedEmbeddingCollection`
    with one collection per shard, each following its rank's files; the dense
    weights come from rank 0.
    """

    def __init__(self, model: DLRM, ckpt_dir: str | Path):
        from .sharded import RoutedEmbeddingCollection

        self.model = model.eval()
        self.ckpt_dir = Path(ckpt_dir)
        if isinstance(model.sparse, RoutedEmbeddingCollection):
            dirs = [self.ckpt_dir / f"rank{r}" for r in range(len(model.sparse.shards))]
            # [folder, sparse module, step held, step of the full checkpoint it started from]
            self.followers = [[d, c, -1, -1] for d, c in zip(dirs, model.sparse.shards, strict=True)]
        else:
            self.followers = [[self.ckpt_dir, model.sparse, -1, -1]]
        self.damaged: set[Path] = set()

    @property
    def step(self) -> int:
        """The training step every shard has reached (-1 before the first load)."""
        return min(f[2] for f in self.followers)

    def _read(self, path: Path) -> dict | None:
        """The file's checkpoint; ``None`` for one pruned since it was listed, or a damaged one (one
        warning line the first time)."""
        if path in self.damaged:
            return None
        try:
            return read_checkpoint(path)
        except InputError as exc:
            if path.exists():
                self.damaged.add(path)
                warn(f"{path.parent}: damaged checkpoint {exc}; skipped, serving the newest intact state")
            return None

    def _load(self, path: Path) -> dict:
        """:meth:`_read` for :func:`~torchhpc.ext.core.runs.newest_intact`: a file it cannot use raises."""
        blob = self._read(path)
        if blob is None:
            raise InputError(f"{path.name} (damaged, or pruned since it was listed)")
        return blob

    def _apply(self, i: int, follower: list, blob: dict) -> dict:
        sparse = follower[1]
        if blob["kind"] == "full":
            sparse.load_state_dict({k[len("sparse."):]: v for k, v in blob["model"].items()
                                    if k.startswith("sparse.")})
            dense = {k: v for k, v in blob["model"].items() if not k.startswith("sparse.")}
            follower[3] = int(blob["step"])
        else:
            sparse.apply_delta(blob["sparse"])
            dense = blob["dense"]
        if i == 0:
            self.model.load_state_dict(dense, strict=False)
        follower[2] = int(blob["step"])
        return {"step": follower[2], "kind": blob["kind"], "shard": i, "staleness_s": time.time() - blob["time"]}

    def poll(self) -> list[dict]:
        """Apply what is new in each shard's folder: the newest intact full checkpoint newer than what
        is held (if any), then the intact deltas after it up to the next full checkpoint. Damaged files
        are skipped with one warning each."""
        loaded = []
        for i, follower in enumerate(self.followers):
            files = checkpoint_files(follower[0])
            fulls = [(s, p) for s, k, p in files if k == "full"]
            newer = [(s, p) for s, p in fulls if s > follower[2]]  # a newer full checkpoint: start there
            try:
                found = newest_intact(newer, self._load, where=follower[0], report=False)
            except InputError:  # every newer one is damaged (each warned once by _read): keep what is held
                found = None
            if found is not None:
                loaded.append(self._apply(i, follower, found[2]))
            if follower[3] < 0:
                continue
            nxt = min((s for s, _p in fulls if s > follower[3]), default=None)
            for step, kind, path in files:
                if kind != "delta" or step <= follower[2] or (nxt is not None and step >= nxt):
                    continue
                blob = self._read(path)  # pruned since listed: catch up next poll; damaged: wait for a full
                if blob is None:
                    break
                loaded.append(self._apply(i, follower, blob))
        return loaded

    def unloaded(self) -> str | None:
        """Why some shard holds nothing yet (``None`` when every one holds a checkpoint): its folder is
        missing, has no full checkpoint to start from, or has only damaged ones."""
        for folder, _sparse, step, _full in self.followers:
            if step >= 0:
                continue
            if not folder.is_dir():
                return f"{folder} does not exist (has the training run started?)"
            fulls = [p for _s, k, p in checkpoint_files(folder) if k == "full"]
            damaged = [p for p in fulls if p in self.damaged]
            if not fulls:
                return f"{folder} holds no full checkpoint (full-*.pt) to start from"
            if len(damaged) == len(fulls):
                return f"all {len(fulls)} full checkpoint(s) in {folder} are damaged (each named above)"
            return f"{folder}: no full checkpoint could be loaded"
        return None

    @torch.no_grad()
    def predict(self, batch) -> torch.Tensor:
        """Click probabilities for a batch of requests (unknown IDs read zero vectors)."""
        return torch.sigmoid(self.model(batch.dense, batch.sparse))
