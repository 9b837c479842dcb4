"""The ``torchhpc kraken`` commands, one function each: ``train``, ``serve``, ``bench``.

Each owns what a command owns: the run folder, what it prints, and the torchrun ranks; the library
pieces they use (the model and stream of a config, the trainer, its checkpoints and resume checks,
the serving replica, the comparison) live in the modules named for them.  Torch and the library are
imported inside the functions, so ``torchhpc --help`` stays quick.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

from .config import BenchOptions, KrakenConfig, ServeOptions

JOB = "torchhpc.trainers.kraken"
"""The module each torchrun rank of ``kraken train`` runs."""


def train(cfg: KrakenConfig, verbose: bool = True) -> int:
    """``torchhpc kraken train`` (and each rank of ``torchrun -m torchhpc.trainers.kraken``): continual training.

    With ``dist.nproc > 1`` (outside torchrun) the job is relaunched on that many torchrun ranks, rows
    sharded over them; under torchrun every rank trains its share of each batch.  Writes
    ``runs/kraken/<id>/``: ``config.yaml``, ``metrics.jsonl`` (loss, windowed AUC/log-loss, CTR, table
    rows and MB, samples/s every ``train.log_every`` steps), ``summary.json``, ``learning_curve.png`` and
    ``checkpoints/`` (``rank<r>/`` per rank when sharded), on the schedule of
    :func:`~torchhpc.ext.kraken.continual.checkpoint_kind`.

    With ``run.resume`` everything is checked before anything is written: the shape options against
    the run's ``config.yaml`` (:func:`~torchhpc.ext.kraken.continual.check_resumable`), the newest intact
    checkpoint state (a damaged newest file is reported in one warning line and skipped), the stream at
    that step.  A run already at ``train.steps`` is left as it is (a no-op that says so).

    Args:
        cfg: the job's options.
        verbose: print where the run is and its final figures (rank 0).

    Returns:
        0 (torchrun's exit status when relaunched).

    Raises:
        InputError: a run folder that exists (or not, with ``run.resume``), a bad or empty Criteo
            file, a memory budget too small for one row, no intact checkpoint to resume from.
        ConfigError: a batch size not divisible by the number of ranks; a resume that changes the
            model's shape or the number of ranks.
        JobError: a relaunched rank failed (its one line).
    """
    import itertools

    if cfg.stream.source == "criteo":  # (stream.path is read only then: not an option(input_file=True))
        from torchhpc.ext.core.paths import check_input

        check_input(cfg.stream.path, what="--stream.path")
    import torch

    from torchhpc.ext.core.distributed import distributed, launched_by_torchrun

    if cfg.dist.nproc > 1 and not launched_by_torchrun():
        from torchhpc.ext.core.launch import relaunch

        return relaunch(cfg, JOB, cfg.dist.nproc)

    from torchhpc.ext.core.errors import InputError, warn
    from torchhpc.ext.core.runs import open_run

    from .continual import (
        ContinualTrainer,
        check_resumable,
        checkpoint_files,
        checkpoint_kind,
        restorable_step,
    )
    from .metrics import gathered_result
    from .model import build_model
    from .stream import batches, slice_batch

    if cfg.dist.threads:
        torch.set_num_threads(cfg.dist.threads)
    with distributed(device=cfg.dist.device, timeout_s=cfg.dist.timeout_s) as ctx:
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
            if sharded:  # every rank must restart from the same step, whatever a crash left behind (the least of
                # the ranks' newest, reduced on the job's device: NCCL takes no CPU tensor)
                upto = int(-ctx.max(-float(restorable_step(run_dir / "checkpoints" / f"rank{rank}"))))
            trainer.restore(run_dir / "checkpoints" / (f"rank{rank}" if sharded else ""), upto, drop_later=False)
            if trainer.step >= last:
                if verbose and rank == 0:
                    print(f"{run_dir}: already finished at step {trainer.step} (train.steps {last}): nothing to do, "
                          "the run is left as it is")
                return 0
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
                pv = gathered_result(trainer.pv, ctx if sharded else None)
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
                warn(f"{cfg.stream.path}: the stream ended at step {trainer.step}, before train.steps {last}")
        pv = gathered_result(trainer.pv, ctx if sharded else None)
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

                from .criteo import criteo_reader

                log = "" if cfg.stream.source == "synthetic" else \
                    f", read by the {criteo_reader(cfg.stream.path, cfg.stream.reader)} reader"
                print(f"{run.dir}: {trainer.step} batches ({resolve_backend('auto', device)} kernels{log}), window AUC "
                      f"{pv['auc']:.4f}, log-loss {pv['logloss']:.4f}, tables {mem['all']['total'] / 2**20:.2f} MiB, "
                      f"{summary['seconds']} s")
        return 0


def _wait_for_run(ckpt: Path, options: ServeOptions, t_start: float) -> tuple[KrakenConfig, list[Path]]:
    """The run's config and, for a sharded run, its shards' folders: a replica started beside ``train`` waits
    (polling) for the run's ``config.yaml`` and first checkpoint, until ``duration`` or ``idle`` runs out.
    A sharded run's layout is known from its first full checkpoint (``extra.world``): every rank's folder
    is waited for, not only those that exist at start.

    Raises:
        InputError: a file, not a folder; no ``config.yaml`` by the time it stops waiting.
    """
    from torchhpc.ext.core.errors import InputError

    from .continual import read_checkpoint, run_config

    limit = min(options.duration, options.idle) if options.idle else options.duration
    while True:
        try:
            cfg = run_config(ckpt)
        except InputError:
            if (ckpt.exists() and not ckpt.is_dir()) or time.time() - t_start > limit:
                raise
            cfg = None
        if cfg is not None:
            shards = sorted(d for d in ckpt.glob("rank*") if d.is_dir())
            if not shards and any(ckpt.glob("full-*.pt")):
                return cfg, []
            fulls = sorted(shards[0].glob("full-*.pt")) if shards else []
            try:
                world = int(read_checkpoint(fulls[0])["extra"].get("world", len(shards))) if fulls else None
            except (InputError, OSError, ValueError, TypeError):
                world = None
            if world is not None and len(shards) >= world:
                return cfg, shards
            if time.time() - t_start > limit:  # nothing (complete) yet: the replica reports what it loaded
                return cfg, shards
        time.sleep(options.poll)


def serve(options: ServeOptions) -> int:
    """``torchhpc kraken serve``: follow a training run's checkpoints and answer requests between loads.

    Each poll loads the new checkpoint files (one JSON line per load when ``verbose``), then scores
    ``requests`` batches of the run's synthetic stream just after the step it holds (a Criteo run
    is followed without scoring).  Stops at ``until_step``, after ``duration`` seconds or after
    ``idle`` seconds without a new file, and prints the summary (``verbose``): ``loads``, ``step``,
    ``batches_served``, staleness (median, max seconds), median latency (ms) and ``served_auc`` when
    requests were scored.

    Raises:
        InputError: not a kraken run's checkpoints folder; no checkpoint loaded by the time it stops (the
            folder is missing or empty, or every full checkpoint in it is damaged): the replica served nothing.
    """
    import torch

    from torchhpc.ext.core.errors import InputError

    from .continual import ServingReplica
    from .metrics import auc
    from .model import build_model
    from .stream import build_stream

    ckpt = Path(options.checkpoint_dir)
    t_start = time.time()
    cfg, shards = _wait_for_run(ckpt, options, t_start)
    requests = options.requests if cfg.stream.source == "synthetic" else 0
    model = build_model(cfg, "cpu")
    if shards:  # a sharded run: one collection per shard, IDs routed to their owner
        from .sharded import RoutedEmbeddingCollection

        model.sparse = RoutedEmbeddingCollection([build_model(cfg, "cpu").sparse for _ in shards])
    replica = ServingReplica(model, ckpt)
    stream = build_stream(cfg)
    last_load = time.time()
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
    if replica.step < 0:  # it never held a model: nothing was served, which is not a success
        raise InputError(f"kraken serve loaded no checkpoint in {time.time() - t_start:.1f} s: "
                         f"{replica.unloaded()}")
    summary = {"loads": loads, "step": replica.step, "batches_served": served,
               "staleness_s_median": float(torch.tensor(stale).median()) if stale else None,
               "staleness_s_max": max(stale) if stale else None,
               "latency_ms_median": 1e3 * float(torch.tensor(lat).median()) if lat else None}
    if preds:
        summary["served_auc"] = auc(torch.cat(preds), torch.cat(labels))
    if options.verbose:
        print(json.dumps({"summary": summary}))
    return 0


def bench(options: BenchOptions, variants: Sequence[str] | None = None) -> int:
    """``torchhpc kraken bench``: AUC and memory of torchrec EBC (full, hashed), MC-EBC and kraken on one
    stream (:class:`~torchhpc.ext.kraken.comparison.Comparison`).

    Prints one line per variant as it finishes and the comparison with ``ebc_full`` (or, with ``json``,
    one JSON object: the comparison's summary); writes ``<out>/kraken/stream.json`` (the suite's results
    schema) and ``stream.png`` (``criteo.json``/``criteo.png`` for a Criteo-format log) unless ``out`` is
    empty.

    Args:
        options: the command's options.
        variants: which of :data:`~torchhpc.ext.kraken.comparison.VARIANTS` to run, in order (``None``:
            all).

    Raises:
        InputError: an unknown variant; a missing, malformed or too short log.
    """
    from torchhpc.ext.core.bench import bar_plot, write_results

    from .comparison import VARIANTS, Comparison

    o = options
    verbose = not o.json
    comparison = Comparison(o, VARIANTS if variants is None else variants)
    if verbose and comparison.steps < o.steps:
        print(f"{o.path}: {comparison.steps} batches of {o.batch_size} (fewer than --steps {o.steps})", flush=True)

    def show(r: dict) -> None:
        if verbose:
            print(f"{r['variant']:11s} AUC {r['auc']:.4f} (last 10%: {r['auc_last']:.4f})  log-loss {r['logloss']:.4f}  "
                  f"peak {r['peak_bytes'] / 2**20:7.2f} MiB  {r['samples_per_s']:8.0f} samples/s", flush=True)

    summary = comparison.run(on_result=show)
    results, bayes = summary["results"], summary["bayes_auc"]
    if verbose:
        if bayes is not None:
            print(f"Bayes-optimal AUC (true click model) {bayes:.4f}")
        if "kraken_vs_full" in summary:
            k = summary["kraken_vs_full"]
            print(f"kraken vs ebc_full: AUC gap {k['auc_gap']:+.4f}, memory {k['memory_ratio']:.3f}x, "
                  f"speed {k['speed_ratio']:.2f}x")
    if o.out:
        rows = [{"name": r["variant"], **r} for r in results]
        if bayes is not None:
            rows.append({"name": "bayes_optimal", "auc": bayes, "what": "the true click model's probabilities"})
        if "kraken_vs_full" in summary:
            rows.append({"name": "kraken_vs_ebc_full", **summary["kraken_vs_full"]})
        name = "stream" if o.stream == "synthetic" else "criteo"
        path = write_results("kraken", name, rows, out=o.out, params=comparison.params, quiet=not verbose)
        bar_plot(path.with_suffix(".png"), [f"{r['variant']}\n{r['peak_bytes'] / 2**20:.1f} MiB" for r in results],
                 {"AUC, 2nd half": [r["auc"] for r in results], "AUC, last 10%": [r["auc_last"] for r in results]},
                 ylabel="progressive AUC", highlight="AUC, 2nd half",
                 title="same stream, same DLRM; peak embedding MiB under each" +
                       (f" (Bayes AUC {bayes:.3f})" if bayes is not None else f" ({Path(o.path).name})"))
    if o.json:
        print(json.dumps(summary))
    return 0


__all__ = ["JOB", "bench", "serve", "train"]
