"""The ``torchhpc gems`` commands, one function each: ``train``, ``partition``, ``simulate``.

Each owns what a command owns: the run folder, what it prints, and the torchrun ranks; the library
pieces they use (the blocks, data and stage split of a config, the checks before any collective, the
pipeline engine, the simulator) live in :mod:`.training`, :mod:`.runtime`, :mod:`.partition` and
:mod:`.simulator`.  Torch and the library are imported inside the functions, so ``torchhpc --help``
stays quick.
"""

from __future__ import annotations

import json
import statistics
import time

from .config import GemsConfig, GemsSimulate

JOB = "torchhpc.trainers.gems"
"""The module each torchrun rank of ``gems train`` runs."""


def train(cfg: GemsConfig, verbose: bool = True) -> int:
    """``torchhpc gems train`` (and each rank of ``torchrun -m torchhpc.trainers.gems``): train with the
    configured schedule.

    In this process when it is already under torchrun or the job needs one process; else the job is
    relaunched under ``torchrun --standalone --nproc-per-node stages x groups`` with the resolved config
    (``dist.nproc``, when given, must be that number: the config checks it).  A run writes
    ``runs/gems/<id>/``: ``config.yaml``, ``metrics.jsonl`` (loss, samples/s, step time, tracked peak
    memory per update), ``summary.json`` (per-rank peak memory, median samples/s, the stage split and
    the measured action times that :func:`~.simulator.calibration_from_run` fits the simulator on),
    ``loss.png``, ``timeline.png`` (the last update) and one checkpoint shard per rank; ``run.resume``
    continues from the newest step every rank's shard of which loads.

    Args:
        cfg: the job's options.
        verbose: print the schedule, the stage report and the final figures (rank 0).

    Returns:
        0 (torchrun's exit status when relaunched).

    Raises:
        DistributedError: the world size is not ``stages x groups``, or a peer stops answering.
        InputError: resuming a run that does not exist, or a new run in a used folder; every checkpoint
            of a resumed run damaged.
        JobError: a relaunched rank failed (its one line).
    """
    from torchhpc.ext.core.distributed import launched_by_torchrun

    cfg = cfg.job()
    if not launched_by_torchrun() and cfg.world_size > 1:
        from torchhpc.ext.core.launch import relaunch

        return relaunch(cfg, JOB, cfg.world_size)

    import torch

    from torchhpc.ext.core.distributed import distributed, fail_on_every_rank, torchrun_rank
    from torchhpc.ext.core.errors import InputError, TorchHPCError
    from torchhpc.ext.core.runs import agree, open_run

    from .partition import stage_infos, stage_report
    from .runtime import PipelineEngine
    from .timeline import plot_timeline
    from .training import (
        action_times,
        build_data,
        build_model,
        check_job,
        intact_checkpoint,
        make_optimizer,
        merge_update_times,
        profile,
        sample_shape,
        stage_bounds,
    )

    p = cfg.pipeline
    if cfg.dist.threads:
        torch.set_num_threads(cfg.dist.threads)
    rank_env, world_env = torchrun_rank()
    try:  # every rank checks the same things before any of them waits on another
        check_job(cfg, world_env)
    except TorchHPCError as exc:
        fail_on_every_rank(exc, rank_env)
    with distributed(device=cfg.dist.device, timeout_s=cfg.dist.timeout_s) as ctx:
        rank, world = ctx.rank, ctx.world_size
        # on resume nothing is written until the checkpoint is known to continue this run
        run = open_run("gems", None if cfg.run.resume else cfg, cfg.run, ctx)
        blocks = build_model(cfg)
        split = None
        if rank == 0:
            # a resumed run keeps the split it was checkpointed with; a new one measures its own
            try:
                step, state0 = intact_checkpoint(run, world) if cfg.run.resume else (None, None)
            except TorchHPCError as exc:
                split = ("error", str(exc))
            else:
                if state0 is not None:
                    split = (None, [tuple(b) for b in state0["bounds"]], step)
                else:
                    if cfg.run.resume:
                        from torchhpc.ext.core.errors import warn

                        warn(f"run {cfg.run.run_id} has no checkpoint to resume from: training starts at step 0")
                    prof = profile(cfg, blocks, ctx.device) if p.balance is None else None
                    split = (prof, stage_bounds(cfg, prof, len(blocks)), None)
        split = agree(split, ctx)
        if split[0] == "error":
            fail_on_every_rank(InputError(split[1]), rank)
        prof, bounds, resume_step = split
        if resume_step is not None and resume_step >= cfg.train.steps:
            if rank == 0 and verbose:
                print(f"gems: {run.dir} already finished at step {resume_step} (train.steps = {cfg.train.steps}): "
                      "nothing to do (raise --train.steps to train on)", flush=True)
            return 0
        if cfg.run.resume:
            run.save_config(cfg)
        if rank == 0 and verbose:
            print(f"gems: schedule={p.schedule} stages={p.stages} groups={p.groups} micro_batches={p.micro_batches} "
                  f"eta={p.eta} global batch={cfg.global_batch}; stage blocks {bounds}", flush=True)
            if prof is not None:
                print(stage_report(stage_infos(prof, bounds), p.micro_batches), flush=True)
        data = build_data(cfg)
        engine = PipelineEngine(blocks, bounds, p.schedule, sample_shape(cfg), cfg.train.batch_size,
                                p.micro_batches, eta=p.eta, groups=p.groups, rank=rank, world_size=world,
                                optimizer=make_optimizer(cfg), checkpoint_stages=p.checkpoint_stages,
                                device=ctx.device, timeout_s=cfg.dist.timeout_s)
        del blocks
        start = 0
        if resume_step is not None:
            start, state = run.load_checkpoint(run.checkpoint_path(resume_step, shard=rank))
            engine.load_state_dict(state["engine"])
            run.truncate_metrics(start)
        step_times, losses = [], []
        spans: dict[str, list[float]] = {}
        heads, tails = [], []
        for step in run.progress(range(start, cfg.train.steps), desc=f"gems {p.schedule}", initial=start,
                                 total=cfg.train.steps):
            t0 = time.perf_counter()
            loss = engine.train_step(data, step)
            dt = time.perf_counter() - t0
            step_times.append(dt)
            losses.append(loss)
            run.log(step + 1, loss=loss, samples_per_s=cfg.global_batch / dt, step_s=dt,
                    peak_model_mib=engine.peak_bytes / 2**20)
            if len(step_times) > cfg.train.warmup_steps:  # what the simulator is calibrated on
                step_spans, head, tail = action_times(engine, dt)
                for key, values in step_spans.items():
                    spans.setdefault(key, []).extend(values)
                heads.append(head)
                tails.append(tail)
            if (step + 1) % cfg.train.checkpoint_every == 0 or step + 1 == cfg.train.steps:
                run.save_checkpoint({"engine": engine.state_dict(), "bounds": [list(b) for b in bounds]}, step + 1,
                                    shard=rank)
        reports = ctx.gather(engine.memory_report())
        events = ctx.gather([e.__dict__ for e in engine.events])
        measured = ctx.gather({"spans": spans, "heads": heads, "tails": tails})
        timed = step_times[cfg.train.warmup_steps:] or step_times
        summary = {
            "schedule": p.schedule, "stages": p.stages, "groups": p.groups, "world_size": world,
            "micro_batches": p.micro_batches, "eta": p.eta, "global_batch": cfg.global_batch,
            "bounds": [list(b) for b in bounds], "steps": cfg.train.steps,
            "samples_per_s": cfg.global_batch / statistics.median(timed) if timed else None,
            "final_loss": losses[-1] if losses else None, "first_loss": losses[0] if losses else None,
            "peak_memory_per_rank": reports, "run_dir": str(run.dir),
            "micro_batch": cfg.micro_batch, "update_times": merge_update_times(measured),
        }
        if rank == 0:
            run.write_summary(summary)
            run.plot_metrics(["loss"], "loss.png", ylabel="mean cross-entropy")
            if cfg.train.timeline and events and any(events):
                plot_timeline([e for ev in events for e in ev], run.dir / "timeline.png",
                              f"gems {p.schedule}: P={p.stages} D={p.groups} M={p.micro_batches} eta={p.eta}, "
                              "last update")
            if verbose:
                mib = [round(r["peak_model_bytes"] / 2**20, 2) for r in reports]
                print(json.dumps({"samples_per_s": summary["samples_per_s"], "final_loss": summary["final_loss"],
                                  "peak_model_mib_per_rank": mib, "run_dir": str(run.dir)}), flush=True)
        return 0


def partition(cfg: GemsConfig) -> int:
    """``torchhpc gems partition``: profile the configured blocks and print the per-stage time and memory
    report (:func:`~.training.partition_report`)."""
    from .training import partition_report

    print(partition_report(cfg))
    return 0


def simulate(cfg: GemsSimulate) -> int:
    """``torchhpc gems simulate``: the discrete-event prediction of throughput and memory on every device
    count of ``simulate.devices``, as a table (or JSON rows with ``simulate.json``)."""
    from .simulator import predict, simulation_table

    rows, what = predict(cfg)
    if cfg.simulate.json:
        print(json.dumps([r.as_dict() for r in rows]))
    else:
        print(what)
        print(simulation_table(rows))
    return 0


__all__ = ["JOB", "partition", "simulate", "train"]
