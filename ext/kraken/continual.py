"""Continual training on a stream, delta checkpoints, and a serving replica that follows them.

* :class:`ContinualTrainer` runs the loop: score each batch (progressive
  validation), then train on it — dense parameters with Adam/AdamW, embedding rows
  with their sparse optimizer.
* Checkpoints live in ``<run>/checkpoints/``: ``full-<step>.pt`` (everything) every
  ``full_every`` steps and ``delta-<step>.pt`` (only rows changed since the previous
  checkpoint, plus the small dense state) every ``delta_every`` steps, each written
  atomically.  :meth:`ContinualTrainer.restore` loads the newest full checkpoint and
  replays the deltas after it, giving back exactly the state of the last one.  A damaged
  file (truncated, garbage) is reported in one warning line and skipped: the newest
  intact state is used (an older full checkpoint and its intact deltas, up to the first
  damaged one; see :func:`intact_chain`).
* :class:`ServingReplica` (another process: ``torchhpc kraken serve``) loads the same
  files as they appear and answers requests in between, measuring how stale it is; it
  skips a damaged file the same way (one warning line per file).
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import torch

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.core.runs import atomic_torch_save

from .metrics import ProgressiveValidation
from .model import DLRM

_FILE_RE = re.compile(r"^(full|delta)-(\d{8})\.pt$")


def checkpoint_files(ckpt_dir: str | Path) -> list[tuple[int, str, Path]]:
    """``(step, kind, path)`` of every complete checkpoint file, by step (a full before a delta)."""
    d = Path(ckpt_dir)
    if not d.is_dir():
        return []
    out = []
    for p in d.iterdir():
        m = _FILE_RE.match(p.name)
        if m:
            out.append((int(m[2]), m[1], p))
    return sorted(out, key=lambda x: (x[0], x[1] != "full"))


def restore_plan(ckpt_dir: str | Path, upto: int | None = None) -> tuple[Path | None, list[Path]]:
    """The newest full checkpoint (at or before step ``upto``) and the deltas after it, in order
    (by file name only; :func:`intact_chain` also reads them)."""
    files = [f for f in checkpoint_files(ckpt_dir) if upto is None or f[0] <= upto]
    fulls = [f for f in files if f[1] == "full"]
    if not fulls:
        return None, []
    base = fulls[-1][0]
    return fulls[-1][2], [p for s, k, p in files if k == "delta" and s > base]


def try_load(path: Path) -> tuple[dict | None, str]:
    """``(blob, "")`` for an intact checkpoint file, ``(None, why)`` for a damaged one (truncated, not a
    torch file, not a kraken checkpoint)."""
    try:
        blob = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # a truncated zip, garbage bytes, an unpickling error
        return None, f"{exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]
    m = _FILE_RE.match(path.name)
    if not isinstance(blob, dict) or blob.get("kind") not in ("full", "delta") or "step" not in blob:
        return None, "not a kraken checkpoint"
    if m and (blob["kind"] != m[1] or int(blob["step"]) != int(m[2])):
        return None, f"holds a {blob['kind']} checkpoint of step {blob['step']}, not what its name says"
    return blob, ""


def intact_chain(ckpt_dir: str | Path, upto: int | None = None) -> tuple[list[tuple[Path, dict]], list[str]]:
    """The newest intact state of a checkpoint folder, read: ``([(path, blob) of the newest intact full
    checkpoint, then the intact deltas after it], damaged)``.

    Deltas are replayed from the chosen full checkpoint up to the next full one (a delta after a
    full checkpoint holds only what changed since that one), stopping at the first damaged delta.
    ``damaged`` describes each damaged file met on the way (``"<path> (<why>)"``). Steps after
    ``upto`` are ignored.
    """
    files = [f for f in checkpoint_files(ckpt_dir) if upto is None or f[0] <= upto]
    fulls = [f for f in files if f[1] == "full"]
    damaged: list[str] = []
    chain: list[tuple[Path, dict]] = []
    base = None
    for step, _kind, path in reversed(fulls):
        blob, why = try_load(path)
        if blob is not None:
            chain, base = [(path, blob)], step
            break
        damaged.append(f"{path.name} ({why})")
    if base is None:
        return [], damaged
    nxt = min((s for s, _k, _p in fulls if s > base), default=None)
    for step, kind, path in files:
        if kind != "delta" or step <= base or (nxt is not None and step >= nxt):
            continue
        blob, why = try_load(path)
        if blob is None:
            damaged.append(f"{path.name} ({why})")
            break
        chain.append((path, blob))
    return chain, damaged


def restorable_step(ckpt_dir: str | Path) -> int:
    """The newest step :meth:`ContinualTrainer.restore` can reach from this folder (-1: none), skipping
    damaged files as it does."""
    chain, _ = intact_chain(ckpt_dir)
    return int(chain[-1][1]["step"]) if chain else -1


def warn(message: str) -> None:
    """One warning line on stderr (``torchhpc: warning: ...``)."""
    print(f"torchhpc: warning: {message}", file=sys.stderr, flush=True)


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
            InputError: full checkpoints exist but none is intact; a checkpoint that does not fit the
                model (written by a run of another shape).
        """
        ckpt_dir = Path(ckpt_dir)
        chain, damaged = intact_chain(ckpt_dir, upto)
        if not chain:
            if damaged:
                raise InputError(f"{ckpt_dir}: no intact full checkpoint to resume from (damaged: "
                                 f"{', '.join(damaged)})")
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
        blob, why = try_load(path)
        if blob is None and path.exists():
            self.damaged.add(path)
            warn(f"{path}: damaged checkpoint ({why}); skipped, serving the newest intact state")
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
            for step, path in reversed(fulls):  # a newer full checkpoint than what we hold: start there
                if step <= follower[2]:
                    break
                blob = self._read(path)
                if blob is not None:
                    loaded.append(self._apply(i, follower, blob))
                    break
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

    @torch.no_grad()
    def predict(self, batch) -> torch.Tensor:
        """Click probabilities for a batch of requests (unknown IDs read zero vectors)."""
        return torch.sigmoid(self.model(batch.dense, batch.sparse))
