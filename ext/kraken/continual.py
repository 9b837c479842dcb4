"""Continual training on a stream, delta checkpoints, and a serving replica that follows them.

* :class:`ContinualTrainer` runs the loop: score each batch (progressive
  validation), then train on it — dense parameters with Adam/AdamW, embedding rows
  with their sparse optimizer.
* Checkpoints live in ``<run>/checkpoints/``: ``full-<step>.pt`` (everything) every
  ``full_every`` steps and ``delta-<step>.pt`` (only rows changed since the previous
  checkpoint, plus the small dense state) every ``delta_every`` steps, each written
  atomically.  :meth:`ContinualTrainer.restore` loads the newest full checkpoint and
  replays the deltas after it, giving back exactly the state of the last one.
* :class:`ServingReplica` (another process: ``torchhpc kraken serve``) loads the same
  files as they appear and answers requests in between, measuring how stale it is.
"""

from __future__ import annotations

import re
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
    """The newest full checkpoint (at or before step ``upto``) and the deltas after it, in order."""
    files = [f for f in checkpoint_files(ckpt_dir) if upto is None or f[0] <= upto]
    fulls = [f for f in files if f[1] == "full"]
    if not fulls:
        return None, []
    base = fulls[-1][0]
    return fulls[-1][2], [p for s, k, p in files if k == "delta" and s > base]


def restorable_step(ckpt_dir: str | Path) -> int:
    """The newest step :meth:`ContinualTrainer.restore` can reach from this folder (-1: none)."""
    full, deltas = restore_plan(ckpt_dir)
    if full is None:
        return -1
    return int(_FILE_RE.match((deltas[-1] if deltas else full).name)[2])


def _load(path: Path) -> dict:
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:
        raise InputError(f"{path}: cannot read checkpoint ({exc.__class__.__name__}: {exc})") from None


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

    def restore(self, ckpt_dir: str | Path, upto: int | None = None) -> dict | None:
        """Load the newest full checkpoint and replay the deltas after it (all at or before step
        ``upto``); files of later steps are removed, as training will write them again.  Returns the
        last checkpoint's ``extra``."""
        full, deltas = restore_plan(ckpt_dir, upto)
        if full is None:  # nothing to restore: leftover files (deltas without a base) would mislead later
            for _step, _kind, path in checkpoint_files(ckpt_dir):
                path.unlink(missing_ok=True)
            return None
        blob = _load(full)
        self.model.load_state_dict(blob["model"])
        self.dense_opt.load_state_dict(blob["dense_opt"])
        self.pv.load_state_dict(blob["pv"])
        self.step, extra = int(blob["step"]), blob.get("extra", {})
        for path in deltas:
            blob = _load(path)
            self.model.sparse.apply_delta(blob["sparse"])
            self.model.load_state_dict(blob["dense"], strict=False)
            self.dense_opt.load_state_dict(blob["dense_opt"])
            self.pv.load_state_dict(blob["pv"])
            self.step, extra = int(blob["step"]), blob.get("extra", {})
        self.model.sparse.mark_clean()
        for step, _kind, path in checkpoint_files(ckpt_dir):
            if step > self.step:
                path.unlink(missing_ok=True)
        return extra


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
            self.followers = [[d, c, -1] for d, c in zip(dirs, model.sparse.shards, strict=True)]
        else:
            self.followers = [[self.ckpt_dir, model.sparse, -1]]

    @property
    def step(self) -> int:
        """The training step every shard has reached (-1 before the first load)."""
        return min(f[2] for f in self.followers)

    def poll(self) -> list[dict]:
        loaded = []
        for i, follower in enumerate(self.followers):
            directory, sparse, held = follower
            full, deltas = restore_plan(directory)
            if full is None:
                continue
            base = int(_FILE_RE.match(full.name)[2])
            todo = [full] if base > held else []  # a newer full checkpoint than what we hold: start there
            todo += [p for p in deltas if int(_FILE_RE.match(p.name)[2]) > max(held, base)]
            for path in todo:
                if not path.exists():  # pruned by the trainer since we listed it: catch up next poll
                    break
                blob = _load(path)
                if blob["kind"] == "full":
                    sparse.load_state_dict({k[len("sparse."):]: v for k, v in blob["model"].items()
                                            if k.startswith("sparse.")})
                    dense = {k: v for k, v in blob["model"].items() if not k.startswith("sparse.")}
                else:
                    sparse.apply_delta(blob["sparse"])
                    dense = blob["dense"]
                if i == 0:
                    self.model.load_state_dict(dense, strict=False)
                follower[2] = int(blob["step"])
                loaded.append({"step": follower[2], "kind": blob["kind"], "shard": i,
                               "staleness_s": time.time() - blob["time"]})
        return loaded

    @torch.no_grad()
    def predict(self, batch) -> torch.Tensor:
        """Click probabilities for a batch of requests (unknown IDs read zero vectors)."""
        return torch.sigmoid(self.model(batch.dense, batch.sparse))
