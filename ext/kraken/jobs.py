"""The two kraken jobs, built from a :class:`~torchhpc.ext.kraken.config.KrakenConfig`.

* :func:`train` — continual training (sharded over the ranks when launched by torchrun): every
  batch is scored before the model learns from it (progressive validation, logged every
  ``train.log_every`` steps), and checkpoints follow :func:`checkpoint_kind`'s schedule.
  ``run.resume`` continues exactly where the last checkpoint left off.
* :func:`serve` — a serving replica that follows a run's checkpoints and answers requests from the
  run's own stream in between, reporting how stale it is.

:func:`build_model`, :func:`build_stream` and :func:`batches` turn a config into the DLRM and the
stream; the entry point (``trainers/kraken.py``) only parses options and calls these.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from torchhpc.ext.core.config import load_config
from torchhpc.ext.core.errors import ConfigError, InputError

from .config import CheckpointOptions, KrakenConfig, ServeOptions
from .stream import CRITEO_DENSE, CRITEO_SPARSE, Batch


def feature_names(cfg: KrakenConfig) -> list[str]:
    """The KJT keys of the configured stream: ``C1 .. CK`` (K = 26 for Criteo)."""
    n = CRITEO_SPARSE if cfg.stream.source == "criteo" else cfg.stream.num_sparse
    return [f"C{i + 1}" for i in range(n)]


def build_model(cfg: KrakenConfig, device, sharded: bool = False, optimizer_kind: str | None = None):
    """The DLRM of a config: one dynamic table per feature (rows sharded over the world when asked).

    Args:
        cfg: the config (``model``, ``tables``, ``optim``, ``seed``).
        device: where the tables and MLPs live.
        sharded: a :class:`~torchhpc.ext.kraken.sharded.ShardedDynamicEmbeddingCollection` (needs an
            initialised process group).
        optimizer_kind: the sparse optimizer instead of ``optim.sparse``.

    Raises:
        InputError: a memory budget too small for one row.
    """
    from .embedding import DynamicEmbeddingCollection, DynamicTableConfig
    from .model import DLRM
    from .optim import SparseOptimizer

    names = feature_names(cfg)
    tables = [DynamicTableConfig.of(cfg.tables, f"t_{f}", cfg.model.dim, [f]) for f in names]
    opt = SparseOptimizer(optimizer_kind or cfg.optim.sparse, lr=cfg.optim.sparse_lr)
    if sharded:
        from .sharded import ShardedDynamicEmbeddingCollection

        sparse = ShardedDynamicEmbeddingCollection(tables, opt, device=device, seed=cfg.seed)
    else:
        sparse = DynamicEmbeddingCollection(tables, opt, device=device, seed=cfg.seed)
    num_dense = CRITEO_DENSE if cfg.stream.source == "criteo" else cfg.stream.num_dense
    return DLRM(sparse, len(names), cfg.model.dim, num_dense=num_dense, bottom=tuple(cfg.model.bottom),
                top=tuple(cfg.model.top), seed=cfg.seed).to(device)


def build_stream(cfg: KrakenConfig):
    """The :class:`~torchhpc.ext.kraken.stream.SyntheticClickStream` of ``cfg.stream`` (``None`` for Criteo)."""
    from .stream import SyntheticClickStream

    return SyntheticClickStream(cfg.stream) if cfg.stream.source == "synthetic" else None


def batches(cfg: KrakenConfig, start: int, stop: int) -> Iterator[tuple[int, Batch]]:
    """``(t, batch)`` for steps ``start .. stop-1`` of the configured stream (global batches).

    Raises:
        InputError: a missing or malformed Criteo file (see :func:`~torchhpc.ext.kraken.stream.read_criteo`).
    """
    if cfg.stream.source == "synthetic":
        stream = build_stream(cfg)
        for t in range(start, stop):
            yield t, stream.batch(t)
    else:
        from .stream import read_criteo

        t = start
        for b in read_criteo(cfg.stream.path, cfg.stream.batch_size, start=start * cfg.stream.batch_size,
                             reader=cfg.stream.reader):
            if t >= stop:
                return
            yield t, b
            t += 1


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
                          f"has {world}; resume it with --nproc-per-node {written}")


def train(cfg: KrakenConfig, verbose: bool = True) -> dict:
    """Continual training from a config (rows sharded over the ranks under torchrun); returns the summary.

    Writes ``runs/kraken/<id>/``: ``config.yaml``, ``metrics.jsonl`` (loss, windowed AUC/log-loss,
    CTR, table rows and MB, samples/s every ``train.log_every`` steps), ``summary.json``,
    ``learning_curve.png`` and ``checkpoints/`` (``rank<r>/`` per rank when sharded).

    With ``run.resume`` everything is checked before anything is written: the shape options against
    the run's ``config.yaml`` (:func:`check_resumable`), the newest intact checkpoint state (a
    damaged newest file is reported in one warning line and skipped), the stream at that step. A
    run already at ``train.steps`` is left as it is (a no-op that says so).

    Raises:
        InputError: a run folder that exists (or not, with ``run.resume``), a bad or empty Criteo
            file, a memory budget too small for one row, no intact checkpoint to resume from.
        ConfigError: a batch size not divisible by the number of ranks; a resume that changes the
            model's shape or the number of ranks.
    """
    import itertools

    from torchhpc.ext.core.distributed import distributed
    from torchhpc.ext.core.runs import open_run

    from .continual import ContinualTrainer, restorable_step
    from .metrics import gathered_result
    from .stream import slice_batch

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    with distributed(device=cfg.device, timeout_s=300) as ctx:
        rank, device = ctx.rank, ctx.device
        sharded = ctx.initialized and ctx.world_size > 1
        world = ctx.world_size if sharded else 1
        model = build_model(cfg, device, sharded=sharded)
        trainer = ContinualTrainer(model, cfg.optim.dense_lr, cfg.optim.dense, cfg.optim.weight_decay,
                                   cfg.train.window, allreduce=sharded)
        last = cfg.train.steps
        # ---- resume: check and restore before anything is written
        run_dir = Path(cfg.run.root) / "kraken" / cfg.run.run_id if cfg.run.resume and cfg.run.run_id else None
        resuming = run_dir is not None and run_dir.is_dir()
        if resuming:
            check_resumable(cfg, run_dir, world)
            upto = None
            if sharded:  # every rank must restart from the same step, whatever a crash left behind
                import torch.distributed as dist

                newest = torch.tensor([restorable_step(run_dir / "checkpoints" / f"rank{rank}")])
                dist.all_reduce(newest, op=dist.ReduceOp.MIN)
                upto = int(newest)
            trainer.restore(run_dir / "checkpoints" / (f"rank{rank}" if sharded else ""), upto, drop_later=False)
            if trainer.step >= last:
                if verbose and rank == 0:
                    print(f"{run_dir}: already finished at step {trainer.step} (train.steps {last}): nothing to do, "
                          "the run is left as it is")
                path = run_dir / "summary.json"
                summary = json.loads(path.read_text()) if path.is_file() else {"steps": trainer.step}
                summary["run_dir"] = str(run_dir)
                return summary
        # ---- the stream must have samples from here on (an empty Criteo file is an error, not a NaN run)
        stream = batches(cfg, trainer.step, last)
        first = next(stream, None)
        if first is None:
            raise InputError(f"{cfg.stream.path or 'the stream'}: no samples from step {trainer.step} on")
        run = open_run("kraken", cfg, cfg.run, ctx)
        ckpt_dir = run.ckpt_dir / (f"rank{rank}" if sharded else "")
        writes = rank == 0 or sharded  # dense state is replicated; each rank saves its own rows
        if writes:
            ckpt_dir.mkdir(parents=True, exist_ok=True)
        if cfg.run.resume:
            if writes:
                trainer.drop_later(ckpt_dir)  # training writes the later steps again
            run.truncate_metrics(trainer.step)
            if verbose and rank == 0:
                print(f"resumed {run.dir} at step {trainer.step}")
        from .continual import checkpoint_files

        has_full = any(k == "full" for _s, k, _p in checkpoint_files(ckpt_dir))
        t0, step0 = time.time(), trainer.step
        rows_written = 0
        kind = None
        loss = torch.tensor(float("nan"))
        bar = run.progress(total=last, initial=trainer.step, desc="kraken", unit="batch")
        for _, batch in itertools.chain([first], stream):
            # ---- score, then learn from this rank's share of the batch
            loss = trainer.train_step(slice_batch(batch, rank, world).to(device))
            step = trainer.step
            # ---- progressive validation, every log_every steps
            if step % cfg.train.log_every == 0 or step == last:
                pv = gathered_result(trainer.pv, world)
                mem = model.sparse.memory()["all"]
                rows = sum(s["rows"] for s in model.sparse.stats().values())
                run.log(step, loss=float(loss), auc=pv["auc"], logloss=pv["logloss"], ctr=pv["ctr"],
                        rows=rows, table_mb=mem["total"] / 2**20,
                        samples_per_s=(step - step0) * cfg.stream.batch_size / max(time.time() - t0, 1e-9))
                bar.set_postfix(auc=f"{pv['auc']:.4f}", rows=rows)
            # ---- checkpoints
            kind = checkpoint_kind(step, cfg.checkpoint, last, has_full) if writes else None
            if kind == "full":
                trainer.save_full(ckpt_dir, extra={"rank": rank, "world": ctx.world_size})
                trainer.prune(ckpt_dir, cfg.checkpoint.keep_full)
                has_full = True
            elif kind == "delta":
                rows_written += trainer.save_delta(ckpt_dir, extra={"rank": rank, "world": ctx.world_size})[1]
            bar.update(1)
        bar.close()
        if trainer.step < last:  # a Criteo file that ends before train.steps: keep the final state whole
            if writes and kind != "full":
                trainer.save_full(ckpt_dir, extra={"rank": rank, "world": ctx.world_size})
                trainer.prune(ckpt_dir, cfg.checkpoint.keep_full)
            if rank == 0:
                from .continual import warn

                warn(f"{cfg.stream.path}: the stream ended at step {trainer.step}, before train.steps {last}")
        pv = gathered_result(trainer.pv, world)
        mem = model.sparse.memory()
        summary = {"steps": trainer.step, "auc": pv["auc"], "logloss": pv["logloss"],
                   "mean_logloss": pv.get("mean_logloss"), "loss": float(loss),
                   "table_bytes": mem["all"], "tables": model.sparse.stats(),
                   "seconds": round(time.time() - t0, 2), "world": ctx.world_size,
                   "rows_in_deltas": rows_written}
        run.write_summary(summary)
        if rank == 0:
            run.plot_metrics(["auc", "logloss"], "learning_curve.png", title="progressive validation (windowed)")
            if verbose:
                from torchhpc.ext.core.dispatch import resolve_backend

                from .stream import criteo_reader

                log = "" if cfg.stream.source == "synthetic" else \
                    f", read by the {criteo_reader(cfg.stream.path, cfg.stream.reader)} reader"
                print(f"{run.dir}: {trainer.step} batches ({resolve_backend('auto', device)} kernels{log}), window AUC "
                      f"{pv['auc']:.4f}, log-loss {pv['logloss']:.4f}, tables {mem['all']['total'] / 2**20:.2f} MB, "
                      f"{summary['seconds']} s")
        summary["run_dir"] = str(run.dir)
        return summary


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
    raise InputError(f"{ckpt}: not the checkpoints folder of a kraken run (no config.yaml beside it)")


def serve(options: ServeOptions) -> dict:
    """Follow a training run's checkpoints and answer requests between loads; returns the summary.

    Each poll loads the new checkpoint files (one JSON line per load when ``verbose``), then scores
    ``requests`` batches of the run's synthetic stream just after the step it holds (a Criteo run
    is followed without scoring).  Stops at ``until_step``, after ``duration`` seconds or after
    ``idle`` seconds without a new file.

    Returns:
        ``loads``, ``step``, ``batches_served``, staleness (median, max seconds), median latency
        (ms) and ``served_auc`` when requests were scored.

    Raises:
        InputError: not a kraken run's checkpoints folder; an unreadable checkpoint.
    """
    from .continual import ServingReplica
    from .metrics import auc

    ckpt = Path(options.checkpoint_dir)
    cfg = run_config(ckpt)
    requests = options.requests if cfg.stream.source == "synthetic" else 0
    shards = sorted(ckpt.glob("rank*"))
    model = build_model(cfg, "cpu")
    if shards:  # a sharded run: one collection per shard, IDs routed to their owner
        from .sharded import RoutedEmbeddingCollection

        model.sparse = RoutedEmbeddingCollection([build_model(cfg, "cpu").sparse for _ in shards])
    replica = ServingReplica(model, ckpt)
    stream = build_stream(cfg)
    t_start = last_load = time.time()
    loads, served, stale = 0, 0, []
    preds, labels, lat = [], [], []
    while True:
        for info in replica.poll():
            loads += 1
            stale.append(info["staleness_s"])
            last_load = time.time()
            if options.verbose:
                print(json.dumps({"loaded": info["kind"], "step": info["step"], "shard": info["shard"],
                                  "staleness_s": round(info["staleness_s"], 3)}), flush=True)
        if replica.step >= 0 and requests and stream is not None:
            b = stream.batch(replica.step + 1 + served % 7)  # the traffic just after the step the replica holds
            t0 = time.perf_counter()
            p = replica.predict(b)
            lat.append(time.perf_counter() - t0)
            preds.append(p)
            labels.append(b.labels)
            served += 1
        done = options.until_step is not None and replica.step >= options.until_step
        now = time.time()
        if done or now - t_start > options.duration or (options.idle and now - last_load > options.idle):
            break
        time.sleep(options.poll)
    summary = {"loads": loads, "step": replica.step, "batches_served": served,
               "staleness_s_median": float(torch.tensor(stale).median()) if stale else None,
               "staleness_s_max": max(stale) if stale else None,
               "latency_ms_median": 1e3 * float(torch.tensor(lat).median()) if lat else None}
    if preds:
        summary["served_auc"] = auc(torch.cat(preds), torch.cat(labels))
    if options.verbose:
        print(json.dumps({"summary": summary}))
    return summary


__all__ = ["SHAPE_KEYS", "batches", "build_model", "build_stream", "check_resumable", "checkpoint_kind",
           "feature_names", "run_config", "serve", "train"]
