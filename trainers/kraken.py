"""``torchhpc kraken``: continual training of a DLRM on a click stream with dynamic embeddings.

    torchhpc kraken train --config configs/kraken/synthetic.yaml          # one process
    torchrun --standalone --nproc-per-node 2 -m torchhpc.trainers.kraken \\
        --config configs/kraken/synthetic.yaml                          # rows sharded over 2 ranks
    torchhpc kraken serve --checkpoint-dir runs/kraken/<id>/checkpoints  # a serving replica
    torchhpc kraken bench --steps 1500                                  # vs torchrec EBC / MC-EBC

Training scores every batch before learning from it (progressive validation:
windowed AUC and log-loss in ``metrics.jsonl``), writes a delta checkpoint (rows
changed since the last one) every ``checkpoint.delta_every`` steps and a full one
every ``checkpoint.full_every``; ``--set run.resume=true --set run.run_id=<id>``
continues exactly where the last checkpoint left off.  The serving replica loads
those files as they appear and answers requests from the same stream in between,
printing how stale it is.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from torchhpc.ext.core.config import add_config_arguments, load_config, option
from torchhpc.ext.core.errors import ConfigError, InputError

from .common import ArgumentParser, RunOptions, add_common_arguments, parse_and_run


@dataclass
class StreamOptions:
    source: str = option("synthetic", help="synthetic (Zipf IDs with drift, known click model) | criteo (TSV)",
                         choices=["synthetic", "criteo"])
    path: str | None = option(None, help="Criteo-format TSV (.gz) file when source=criteo")
    batch_size: int = option(512, help="samples per batch (global, over all ranks)", ge=1)
    num_sparse: int = option(8, help="synthetic: categorical features", ge=1)
    vocab: int = option(20_000, help="synthetic: popularity ranks per feature", ge=1)
    zipf: float = option(1.05, help="synthetic: Zipf exponent of ID popularity", gt=0)
    new_ids_per_batch: float = option(4.0, help="synthetic: new IDs entering the top of each feature per batch",
                                      ge=0)
    effect_scale: float = option(3.0, help="synthetic: spread of the hidden per-ID click effects", ge=0)
    seed: int = option(0, help="synthetic: stream seed", ge=0)


@dataclass
class ModelOptions:
    dim: int = option(16, help="embedding dimension", ge=1)
    bottom: list[int] = option(default_factory=lambda: [64], help="bottom MLP hidden sizes")
    top: list[int] = option(default_factory=lambda: [64], help="top MLP hidden sizes")


@dataclass
class TableOptions:
    max_rows: int = option(0, help="rows per table (0: from memory_budget_mb)", ge=0)
    memory_budget_mb: float = option(2.0, help="bytes per table for rows, optimizer state, index and sketch (MB)",
                                     ge=0)
    admit_count: int = option(1, help="sightings before an ID gets a row", ge=1)
    admit_prob: float = option(1.0, help="probability an eligible new ID is admitted per batch", gt=0, le=1)
    admit_window: int = option(100, help="admission counts halve every N batches (0: never)", ge=0)
    eviction: str = option("lru", help="lru | lfu | none (when a table is full)", choices=["lru", "lfu", "none"])
    ttl: int = option(0, help="evict rows unseen for this many batches (0: never)", ge=0)
    pooling: str = option("sum", help="sum | mean", choices=["sum", "mean"])
    init_rows: int = option(1024, help="rows allocated at first (tables double up to the budget)", ge=1)
    init_scale: float = option(0.01, help="new rows are uniform in [-init_scale, init_scale]", ge=0)


@dataclass
class OptimOptions:
    sparse: str = option("rowwise_adagrad", help="embedding rows: rowwise_adagrad | rowwise_adam | adam | sgd",
                         choices=["rowwise_adagrad", "rowwise_adam", "adam", "sgd"])
    sparse_lr: float = option(0.1, help="embedding learning rate", gt=0)
    dense: str = option("adam", help="MLPs: adam | adamw", choices=["adam", "adamw"])
    dense_lr: float = option(1e-3, help="MLP learning rate", gt=0)
    weight_decay: float = option(0.0, help="AdamW weight decay of the MLPs", ge=0)


@dataclass
class TrainOptions:
    steps: int = option(1000, help="batches to train on (the stream's first batch is 0)", ge=1)
    log_every: int = option(50, help="log metrics every N steps", ge=1)
    window: int = option(50_000, help="samples in the progressive-validation window", ge=1)


@dataclass
class CheckpointOptions:
    delta_every: int = option(50, help="write the rows changed since the last checkpoint every N steps (0: off)",
                              ge=0)
    full_every: int = option(500, help="write a full checkpoint every N steps", ge=1)
    keep_full: int = option(2, help="full checkpoints kept (with the deltas after the oldest)", ge=1)


@dataclass
class KrakenConfig:
    """Continual training of a DLRM with dynamic embeddings (Kraken)."""

    stream: StreamOptions = option(default_factory=StreamOptions, help="click stream")
    model: ModelOptions = option(default_factory=ModelOptions, help="DLRM")
    tables: TableOptions = option(default_factory=TableOptions, help="dynamic embedding tables (one per feature)")
    optim: OptimOptions = option(default_factory=OptimOptions, help="optimizers")
    train: TrainOptions = option(default_factory=TrainOptions, help="training loop")
    checkpoint: CheckpointOptions = option(default_factory=CheckpointOptions, help="checkpoints")
    seed: int = option(0, help="seed of the weights", ge=0)
    device: str = option("cpu", help="cpu | cuda | auto", choices=["cpu", "cuda", "auto"])
    threads: int = option(0, help="torch threads per rank (0: torch's default)", ge=0)
    run: RunOptions = option(default_factory=RunOptions, help="run folder")

    def __post_init__(self) -> None:
        if self.stream.source == "criteo" and not self.stream.path:
            raise ConfigError("stream.path: give the Criteo TSV file when stream.source is criteo")
        if not self.tables.max_rows and not self.tables.memory_budget_mb:
            raise ConfigError("tables: give max_rows or memory_budget_mb")


# ============================================================================ building blocks


def feature_names(cfg: KrakenConfig) -> list[str]:
    from torchhpc.ext.kraken.stream import CRITEO_SPARSE

    n = CRITEO_SPARSE if cfg.stream.source == "criteo" else cfg.stream.num_sparse
    return [f"C{i + 1}" for i in range(n)]


def build_model(cfg: KrakenConfig, device, sharded: bool = False, optimizer_kind: str | None = None):
    """The DLRM of a config: one dynamic table per feature (sharded over the world when asked)."""
    from torchhpc.ext.kraken.embedding import DynamicEmbeddingCollection, DynamicTableConfig
    from torchhpc.ext.kraken.model import DLRM
    from torchhpc.ext.kraken.optim import SparseOptimizer

    t = cfg.tables
    names = feature_names(cfg)
    tables = [DynamicTableConfig(
        name=f"t_{f}", dim=cfg.model.dim, features=[f], max_rows=t.max_rows,
        memory_budget=int(t.memory_budget_mb * 2**20), init_rows=t.init_rows, pooling=t.pooling,
        admit_count=t.admit_count, admit_prob=t.admit_prob, eviction=t.eviction, ttl=t.ttl,
        init_scale=t.init_scale, admit_window=t.admit_window,
    ) for f in names]
    opt = SparseOptimizer(optimizer_kind or cfg.optim.sparse, lr=cfg.optim.sparse_lr)
    if sharded:
        from torchhpc.ext.kraken.sharded import ShardedDynamicEmbeddingCollection

        sparse = ShardedDynamicEmbeddingCollection(tables, opt, device=device, seed=cfg.seed)
    else:
        sparse = DynamicEmbeddingCollection(tables, opt, device=device, seed=cfg.seed)
    return DLRM(sparse, len(names), cfg.model.dim, bottom=tuple(cfg.model.bottom), top=tuple(cfg.model.top),
                seed=cfg.seed).to(device)


def build_stream(cfg: KrakenConfig):
    """``batch(t)`` for the synthetic stream, or an iterator over the Criteo file."""
    from torchhpc.ext.kraken.stream import SyntheticClickStream, SyntheticConfig

    s = cfg.stream
    if s.source == "synthetic":
        return SyntheticClickStream(SyntheticConfig(
            num_sparse=s.num_sparse, vocab=s.vocab, zipf=s.zipf, new_ids_per_batch=s.new_ids_per_batch,
            batch_size=s.batch_size, effect_scale=s.effect_scale, seed=s.seed))
    return None


def batches(cfg: KrakenConfig, start: int, stop: int):
    """``(t, batch)`` for steps ``start .. stop-1`` of the configured stream."""
    if cfg.stream.source == "synthetic":
        stream = build_stream(cfg)
        for t in range(start, stop):
            yield t, stream.batch(t)
    else:
        from torchhpc.ext.kraken.stream import read_criteo

        t = start
        for b in read_criteo(cfg.stream.path, cfg.stream.batch_size, start=start * cfg.stream.batch_size):
            if t >= stop:
                return
            yield t, b
            t += 1


def slice_batch(batch, rank: int, world: int):
    """Rank ``rank``'s contiguous share of a global batch (samples ``[rank*B/W, (rank+1)*B/W)``)."""
    import torch
    from torchrec import KeyedJaggedTensor

    from torchhpc.ext.kraken.stream import Batch

    if world == 1:
        return batch
    B = batch.labels.numel()
    if B % world:
        raise ConfigError(f"stream.batch_size {B} is not divisible by the {world} ranks")
    lo, hi = rank * B // world, (rank + 1) * B // world
    vals, lens = [], []
    for jt in batch.sparse.to_dict().values():
        off = jt.offsets()
        vals.append(jt.values()[int(off[lo]):int(off[hi])])
        lens.append(jt.lengths()[lo:hi])
    kjt = KeyedJaggedTensor.from_lengths_sync(keys=batch.sparse.keys(), values=torch.cat(vals),
                                              lengths=torch.cat(lens))
    return Batch(batch.dense[lo:hi], kjt, batch.labels[lo:hi], None if batch.keys is None else batch.keys[lo:hi])


# ============================================================================ training


def train(cfg: KrakenConfig, verbose: bool = True) -> dict:
    """Continual training from a config (sharded when launched by torchrun); returns the summary."""
    import torch
    import torch.distributed as dist

    from torchhpc.ext.core.distributed import distributed
    from torchhpc.ext.core.runs import Run, new_run_id
    from torchhpc.ext.kraken.continual import ContinualTrainer

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    with distributed(device=cfg.device, timeout_s=300) as ctx:
        rank, world, device = ctx.rank, ctx.world_size, ctx.device
        run_id = [cfg.run.run_id or (new_run_id() if rank == 0 else None)]
        if ctx.initialized:
            dist.broadcast_object_list(run_id, src=0)
        run = Run("kraken", cfg, root=cfg.run.root, run_id=run_id[0], resume=cfg.run.resume, rank=rank,
                  progress=cfg.run.progress)
        sharded = ctx.initialized and world > 1
        model = build_model(cfg, device, sharded=sharded)
        trainer = ContinualTrainer(model, cfg.optim.dense_lr, cfg.optim.dense, cfg.optim.weight_decay,
                                   cfg.train.window, allreduce=sharded)
        ckpt_dir = run.ckpt_dir / (f"rank{rank}" if sharded else "")
        if rank == 0 or sharded:
            ckpt_dir.mkdir(parents=True, exist_ok=True)
        if cfg.run.resume:
            upto = None
            if sharded:  # every rank must restart from the same step, whatever a crash left behind
                from torchhpc.ext.kraken.continual import restorable_step

                newest = torch.tensor([restorable_step(ckpt_dir)])
                dist.all_reduce(newest, op=dist.ReduceOp.MIN)
                upto = int(newest)
            trainer.restore(ckpt_dir, upto)
            run.truncate_metrics(trainer.step)
            if verbose and rank == 0:
                print(f"resumed {run.dir} at step {trainer.step}")
        writes = rank == 0 or sharded  # dense state is replicated; each rank saves its own rows
        from torchhpc.ext.kraken.continual import restore_plan

        has_full = restore_plan(ckpt_dir)[0] is not None
        C = cfg.checkpoint
        t0, step0 = time.time(), trainer.step
        rows_written = 0
        loss = torch.tensor(float("nan"))
        bar = run.progress(total=cfg.train.steps, initial=trainer.step, desc="kraken", unit="batch")
        for t, batch in batches(cfg, trainer.step, cfg.train.steps):
            local = slice_batch(batch, rank, world if sharded else 1).to(device)
            loss = trainer.train_step(local)
            step = trainer.step
            if step % cfg.train.log_every == 0 or step == cfg.train.steps:
                pv = trainer.pv.result()
                if sharded:  # the window of every rank together
                    pv = _global_pv(trainer, world)
                mem = model.sparse.memory()["all"]
                stats = model.sparse.stats()
                rows = sum(s["rows"] for s in stats.values())
                run.log(step, loss=float(loss), auc=pv["auc"], logloss=pv["logloss"], ctr=pv["ctr"],
                        rows=rows, table_mb=mem["total"] / 2**20,
                        samples_per_s=(step - step0) * cfg.stream.batch_size / max(time.time() - t0, 1e-9))
                bar.set_postfix(auc=f"{pv['auc']:.4f}", rows=rows)
            if writes:
                # the first checkpoint of a run is a full one: deltas need a base to apply to
                if step % C.full_every == 0 or step == cfg.train.steps or (
                        not has_full and C.delta_every and step % C.delta_every == 0):
                    trainer.save_full(ckpt_dir, extra={"rank": rank, "world": world})
                    trainer.prune(ckpt_dir, C.keep_full)
                    has_full = True
                elif C.delta_every and step % C.delta_every == 0:
                    _, n = trainer.save_delta(ckpt_dir, extra={"rank": rank, "world": world})
                    rows_written += n
            bar.update(1)
            del t
        bar.close()
        pv = _global_pv(trainer, world) if sharded else trainer.pv.result()
        mem = model.sparse.memory()
        summary = {"steps": trainer.step, "auc": pv["auc"], "logloss": pv["logloss"],
                   "mean_logloss": pv.get("mean_logloss"), "loss": float(loss),
                   "table_bytes": mem["all"], "tables": model.sparse.stats(),
                   "seconds": round(time.time() - t0, 2), "world": world,
                   "rows_in_deltas": rows_written}
        run.write_summary(summary)
        if rank == 0:
            run.plot_metrics(["auc", "logloss"], "learning_curve.png",
                             title="progressive validation (windowed)")
            if verbose:
                print(f"{run.dir}: {trainer.step} batches, window AUC {pv['auc']:.4f}, log-loss "
                      f"{pv['logloss']:.4f}, tables {mem['all']['total'] / 2**20:.2f} MB, "
                      f"{summary['seconds']} s")
        summary["run_dir"] = str(run.dir)
        return summary


def _global_pv(trainer, world: int) -> dict:
    """Progressive-validation figures over every rank's window (gathered, then scored once)."""
    import torch
    import torch.distributed as dist

    from torchhpc.ext.kraken.metrics import auc, log_loss

    st = trainer.pv.state_dict()
    p = torch.cat(st["p"]) if st["p"] else torch.empty(0)
    y = torch.cat(st["y"]) if st["y"] else torch.empty(0)
    gathered = [None] * world
    dist.all_gather_object(gathered, (p, y))
    P = torch.cat([g[0] for g in gathered])
    Y = torch.cat([g[1] for g in gathered])
    return {"auc": auc(P, Y), "logloss": log_loss(P, Y) if P.numel() else float("nan"),
            "ctr": float(Y.mean()) if Y.numel() else float("nan")}


# ============================================================================ serving


def serve(checkpoint_dir: str, duration: float = 30.0, poll: float = 0.5, requests: int = 512,
          until_step: int | None = None, idle: float = 0.0, verbose: bool = True) -> dict:
    """Follow a training run's checkpoints and answer requests between loads; returns the summary."""
    from pathlib import Path

    import torch

    from torchhpc.ext.kraken.continual import ServingReplica
    from torchhpc.ext.kraken.metrics import auc

    ckpt = Path(checkpoint_dir)
    cfg_path = ckpt.parent / "config.yaml"
    if not cfg_path.is_file():
        cfg_path = ckpt.parent.parent / "config.yaml"  # a rank folder of a sharded run
    if not cfg_path.is_file():
        raise InputError(f"{ckpt}: not the checkpoints folder of a kraken run (no config.yaml beside it)")
    cfg = load_config(KrakenConfig, cfg_path, [])
    if cfg.stream.source != "synthetic" and requests:
        requests = 0  # requests come from the synthetic stream; a Criteo run is served without scoring
    shards = sorted(ckpt.glob("rank*"))
    if shards:  # a sharded run: one collection per shard, IDs routed to their owner
        from torchhpc.ext.kraken.sharded import RoutedEmbeddingCollection

        model = build_model(cfg, "cpu")
        model.sparse = RoutedEmbeddingCollection([build_model(cfg, "cpu").sparse for _ in shards])
    else:
        model = build_model(cfg, "cpu")
    replica = ServingReplica(model, ckpt)
    stream = build_stream(cfg)
    t_start, last_load = time.time(), time.time()
    loads, served, stale = 0, 0, []
    preds, labels, lat = [], [], []
    while True:
        for info in replica.poll():
            loads += 1
            stale.append(info["staleness_s"])
            last_load = time.time()
            if verbose:
                print(json.dumps({"loaded": info["kind"], "step": info["step"], "shard": info["shard"],
                                  "staleness_s": round(info["staleness_s"], 3)}), flush=True)
        if replica.step >= 0 and requests and stream is not None:
            # requests: the next traffic after the step the replica holds
            b = stream.batch(replica.step + 1 + served % 7)
            t0 = time.perf_counter()
            p = replica.predict(b)
            lat.append(time.perf_counter() - t0)
            preds.append(p)
            labels.append(b.labels)
            served += 1
        done_step = until_step is not None and replica.step >= until_step
        if done_step or time.time() - t_start > duration or (idle and time.time() - last_load > idle):
            break
        time.sleep(poll)
    summary = {"loads": loads, "step": replica.step, "batches_served": served,
               "staleness_s_median": float(torch.tensor(stale).median()) if stale else None,
               "staleness_s_max": max(stale) if stale else None,
               "latency_ms_median": 1e3 * float(torch.tensor(lat).median()) if lat else None}
    if preds:
        summary["served_auc"] = auc(torch.cat(preds), torch.cat(labels))
    if verbose:
        print(json.dumps({"summary": summary}))
    return summary


# ============================================================================ CLI


def cmd_train(args: argparse.Namespace) -> int:
    cfg = load_config(KrakenConfig, args.config, args.overrides)
    train(cfg)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    serve(args.checkpoint_dir, args.duration, args.poll, args.requests, args.until_step, args.idle)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from torchhpc.ext.kraken.bench import run_comparison

    res = run_comparison(steps=args.steps, vocab=args.vocab, batch_size=args.batch_size, dim=args.dim,
                         fraction=args.fraction, out=args.out, seed=args.seed, verbose=not args.json)
    if args.json:
        print(json.dumps(res))
    return 0


def register(sub) -> None:
    p = sub.add_parser("kraken", help="Kraken: continual training with dynamic sparse embeddings, serving, bench",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ksub = p.add_subparsers(dest="kraken_command", metavar="SUBCOMMAND", parser_class=ArgumentParser)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])
    t = ksub.add_parser("train", help="continual training from a config (torchrun: sharded over ranks)")
    add_config_arguments(t, default=None)
    add_common_arguments(t)
    t.set_defaults(func=cmd_train)
    s = ksub.add_parser("serve", help="a serving replica that follows a run's checkpoints")
    s.add_argument("--checkpoint-dir", required=True, help="runs/kraken/<id>/checkpoints")
    s.add_argument("--duration", type=float, default=30.0, help="seconds to serve (default 30)")
    s.add_argument("--poll", type=float, default=0.5, help="seconds between looks for new files (default 0.5)")
    s.add_argument("--requests", type=int, default=512, help="requests per poll from the stream (0: none)")
    s.add_argument("--until-step", type=int, default=None, help="stop once this training step is loaded")
    s.add_argument("--idle", type=float, default=0.0, help="stop after this many seconds without a new file")
    add_common_arguments(s)
    s.set_defaults(func=cmd_serve)
    b = ksub.add_parser("bench", help="AUC and memory vs torchrec EBC (full, hashed) and MC-EBC on one stream")
    b.add_argument("--steps", type=int, default=1500, help="batches of the stream (default 1500)")
    b.add_argument("--vocab", type=int, default=20_000, help="popularity ranks per feature (default 20000)")
    b.add_argument("--batch-size", type=int, default=512)
    b.add_argument("--dim", type=int, default=16)
    b.add_argument("--fraction", type=float, default=1 / 3, help="memory of the small variants / full (1/3)")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--out", default="runs/bench", help="writes <out>/kraken/stream.json and .png")
    b.add_argument("--json", action="store_true", help="print one JSON object")
    add_common_arguments(b)
    b.set_defaults(func=cmd_bench)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="torchhpc.trainers.kraken", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arguments(p)
    add_common_arguments(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """torchrun entry: ``torchrun ... -m torchhpc.trainers.kraken --config FILE [--set k=v]``."""
    return parse_and_run(build_parser, cmd_train, argv)


if __name__ == "__main__":
    sys.exit(main())
