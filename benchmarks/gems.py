"""Benchmark: gems' schedules (GPipe baseline, MAST, MASTER) against torch.distributed.pipelining's
ScheduleGPipe / Schedule1F1B (and DeepSpeed's PipelineModule where it starts), same model, batch
and processes, on the CPU with gloo; with the simulator's predictions beside the measurements.

    python benchmarks/gems.py [--depth 29 --width 8 --image 128 --micro-batches 1,2 --repeats 3]

The model is a ResNet-v2 (GroupNorm) split into 2 stages by measured time; every micro-batch
holds ``--micro-batch`` images (1: the paper's regime of inputs so large that a replica holds one
or two micro-batches).  Each repeat is one ``torchrun --nproc-per-node 2`` job with one thread per
process that runs every method in turn (the order rotates between repeats); the table gives the
median over repeats of each method's median update time.  Memory per rank is the rise of the
process's peak resident set (VmHWM, reset before each method; freed memory is trimmed back to the
OS in between) above its resident set when the method starts, and for ours also the engine's own
count of weights + gradients + optimizer state + stashed activations + receive buffers (the
quantity the simulator predicts).

The simulator's throughput is shown three ways: fed by a single-process profile taken before the
runs (a prediction from nothing but the profile and the link); calibrated on the one-micro-batch
GPipe and MAST runs (their stage times, fixed time per update and co-run slowdown; see
:func:`torchhpc.ext.gems.simulator.calibrate`) and predicting the other configurations; and fed by
each run's own stage times.

Updates are timed with ``torchhpc.ext.core.bench.time_interleaved`` inside each rank; the results go
to OUT/gems/results.json in the suite's one schema (``write_results``: one row per method and
micro-batch count, the settings, link and calibration under ``params``) and OUT/gems/throughput.png.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from torchhpc.ext.core.bench import (
    Timing,
    bar_plot,
    benchmark_parser,
    result_row,
    time_interleaved,
    write_results,
)

HERE = Path(__file__).resolve()


# ============================================================================ memory of this process


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _reset_peak() -> int:
    """Give freed memory back to the OS, reset the peak RSS (VmHWM); returns the current RSS in bytes."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    return _status_kib("VmRSS") * 1024


def _peak_rise(base: int) -> int:
    return _status_kib("VmHWM") * 1024 - base


# ============================================================================ worker (one torchrun rank)


def _blocks(a):
    from torchhpc.ext.gems.modules import build_blocks

    return build_blocks("resnet_v2", depth=a["depth"], width=a["width"], in_shape=(3, a["image"], a["image"]),
                        num_classes=10, norm="group", seed=0)


def _opt(params):
    return torch.optim.SGD(params, lr=0.01, momentum=0.9)


def _time_updates(a, update) -> tuple[Timing, float]:
    """``a["warmup"]`` untimed updates, then ``a["steps"]`` timed by the suite's harness; returns the timing and
    the CPU seconds of this process per timed update."""
    for _ in range(a["warmup"]):
        update()
    cpu0 = time.process_time()
    timing = time_interleaved({"update": update}, repeats=a["steps"], warmup=0)["update"]
    return timing, (time.process_time() - cpu0) / a["steps"]


def _batches(a, n_slices: int, size: int) -> list:
    """Every update's input, made before the method's memory is measured (so it is nobody's memory)."""
    from torchhpc.ext.gems.data import SyntheticImages

    data = SyntheticImages((3, a["image"], a["image"]), 10, seed=0)
    return [[data.slice(step, m, size) for m in range(n_slices)] for step in range(a["warmup"] + a["steps"])]


def run_ours(a, schedule, M, eta, rank, world):
    from torchhpc.ext.gems.data import SyntheticImages
    from torchhpc.ext.gems.runtime import PipelineEngine

    base = _reset_peak()
    engine = PipelineEngine(_blocks(a), a["bounds"], schedule, (3, a["image"], a["image"]), M * a["mb"], M, eta=eta,
                            rank=rank, world_size=world, optimizer=_opt)
    data = SyntheticImages((3, a["image"], a["image"]), 10, seed=0)
    steps, events = iter(range(a["warmup"] + a["steps"])), []

    def update():
        engine.train_step(data, next(steps))
        events.append(engine.events)  # the engine starts a new list each update

    timing, cpu = _time_updates(a, update)
    spans, head, tail = {}, [], []
    for evs, step_s in zip(events[a["warmup"]:], timing.times, strict=True):
        # this run's own per-stage compute times, for the simulator
        acts = [ev for ev in evs if ev.kind in ("F", "B")]
        for ev in acts:
            spans.setdefault(f"{engine.copies[ev.replica].stage}{ev.kind}", []).append(ev.end - ev.start)
        # time before the first action (slicing, posting receives) and after the last (sync, optimizer, loss)
        head.append(min(ev.start for ev in acts))
        tail.append(step_s - max(ev.end for ev in acts))
    return {"step_s": timing.median, "cpu_s": cpu, "global_batch": engine.global_batch,
            "rss_rise": _peak_rise(base), "model_bytes": engine.peak_bytes, "spans": spans, "head": head, "tail": tail}


def run_torch(a, name, M, rank, world):
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    batches = iter(_batches(a, 1, M * a["mb"]))
    base = _reset_peak()
    lo, hi = a["bounds"][rank]
    stage_mod = nn.Sequential(*_blocks(a)[lo:hi])
    stage = PipelineStage(stage_mod, rank, world, torch.device("cpu"))
    cls = {"torch-gpipe": ScheduleGPipe, "torch-1f1b": Schedule1F1B}[name]
    try:
        sched = cls(stage, n_microbatches=M, loss_fn=lambda out, y: F.cross_entropy(out, y))
    except ValueError as exc:  # e.g. torch 2.13 refuses fewer micro-batches than stages
        return {"error": str(exc), "global_batch": M * a["mb"]}
    opt = _opt(list(stage_mod.parameters()))

    def update():
        ((x, y),) = next(batches)
        if rank == 0:
            sched.step(x)
        elif rank == world - 1:
            sched.step(target=y, losses=[])
        else:
            sched.step()
        opt.step()
        opt.zero_grad(set_to_none=True)
        dist.barrier()  # ours ends each update with a (scalar) collective too

    timing, cpu = _time_updates(a, update)
    return {"step_s": timing.median, "cpu_s": cpu, "global_batch": M * a["mb"], "rss_rise": _peak_rise(base)}


def run_deepspeed(a, M, rank, world):
    import deepspeed
    import torch.nn.functional as F
    from deepspeed.pipe import PipelineModule
    from torch import nn

    batches = iter(_batches(a, M, a["mb"]))
    base = _reset_peak()
    deepspeed.init_distributed(dist_backend="gloo")  # adopts the worker's process group
    blocks = _blocks(a)
    layers = [nn.Sequential(*blocks[lo:hi]) for lo, hi in a["bounds"]]  # one layer per stage: the same split
    model = PipelineModule(layers=layers, num_stages=world, loss_fn=lambda out, y: F.cross_entropy(out, y),
                           partition_method="uniform")
    cfg = {"train_micro_batch_size_per_gpu": a["mb"], "gradient_accumulation_steps": M,
           "optimizer": {"type": "SGD", "params": {"lr": 0.01, "momentum": 0.9}}, "steps_per_print": 10**9}
    engine, *_ = deepspeed.initialize(model=model, model_parameters=[p for p in model.parameters()], config=cfg)
    timing, cpu = _time_updates(a, lambda: engine.train_batch(data_iter=iter(next(batches))))
    return {"step_s": timing.median, "cpu_s": cpu, "global_batch": M * a["mb"], "rss_rise": _peak_rise(base)}


def measure_link(nbytes: int, rank: int, iters: int = 20) -> dict:
    """Ping-pong between ranks 0 and 1 (medians of single round trips): latency from a 4-byte message,
    bandwidth from a message of ``max(nbytes, 4 MiB)``."""
    import torch.distributed as dist

    one_way = {}
    big = max(nbytes, 4 << 20)
    for name, n in (("big", big), ("small", 4)):
        t = torch.zeros(max(1, n // 4))

        def round_trip(t=t):
            if rank == 0:
                dist.send(t, 1)
                dist.recv(t, 1)
            elif rank == 1:
                dist.recv(t, 0)
                dist.send(t, 0)

        dist.barrier()
        one_way[name] = time_interleaved({name: round_trip}, repeats=iters, warmup=0)[name].median / 2
    latency = one_way["small"]
    return {"latency_s": latency, "bandwidth_Bps": big / max(one_way["big"] - latency, one_way["big"] / 2)}


def worker(a: dict) -> None:
    import torch.distributed as dist

    from torchhpc.ext.core.distributed import distributed

    torch.set_num_threads(1)
    with distributed(device="cpu", timeout_s=300) as ctx:
        rank, world = ctx.rank, ctx.world_size
        res = {"rank": rank, "methods": {}}
        if a.get("link_bytes"):
            res["link"] = measure_link(a["link_bytes"], rank)
        # one unrecorded pass first, so one-time set-up (thread pools, gloo buffers) is nobody's memory
        for i, method in enumerate([a["methods"][0], *a["methods"]]):
            name, M = method.rsplit("@", 1)
            M = int(M)
            if name in ("gpipe", "mast", "master"):
                r = run_ours(a, name, M, a["eta"] if name == "master" else 1, rank, world)
            elif name.startswith("torch-"):
                r = run_torch(a, name, M, rank, world)
            else:
                r = run_deepspeed(a, M, rank, world)
            if i > 0:
                res["methods"][method] = r
            dist.barrier()
        all_res = [None] * world
        dist.all_gather_object(all_res, res)
        if rank == 0:
            Path(a["result"]).write_text(json.dumps(all_res))


# ============================================================================ driver


def build_parser() -> argparse.ArgumentParser:
    from torchhpc.ext.core.cli import add_options
    from torchhpc.ext.gems.config import GemsBench

    ap = benchmark_parser(__doc__, repeats=3)
    add_options(ap, GemsBench)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    return ap


def _pooled_spans(runs, method) -> dict[str, list[float]]:
    """Every compute span of ``method`` in every repeat and rank, per stage and kind (``"0F"``, ...)."""
    spans: dict[str, list[float]] = {}
    for run in runs:
        for r in run:
            for key, values in r["methods"][method]["spans"].items():
                spans.setdefault(key, []).extend(values)
    return spans


def calibrate_on_runs(runs, infos, link, micro_batch):
    """:func:`~torchhpc.ext.gems.simulator.calibrate` on the one-micro-batch runs: stage times from GPipe's
    actions (its ranks never compute at once), per update rank 0's wait before its first action plus the
    shortest time after a rank's last action, and the co-run slowdown fitted to MAST's update time."""
    from torchhpc.ext.gems.simulator import calibrate

    overheads = []
    for run in runs:
        heads = run[0]["methods"]["gpipe@1"]["head"]
        tails = [r["methods"]["gpipe@1"]["tail"] for r in run]
        overheads += [h + min(t) for h, *t in zip(heads, *tails, strict=True)]
    target = statistics.median(max(r["methods"]["mast@1"]["step_s"] for r in run) for run in runs)
    return calibrate(infos, _pooled_spans(runs, "gpipe@1"), overheads, step_s=target, schedule="mast",
                     micro_batches=1, micro_batch=micro_batch, bandwidth=link["bandwidth_Bps"],
                     latency=link["latency_s"])


def main() -> None:
    from torchhpc.ext.core.cli import options_from_args, run_main
    from torchhpc.ext.gems.config import GemsBench

    parsed = build_parser().parse_args()
    if parsed.worker:
        worker(json.loads(Path(parsed.worker).read_text()))
        return
    if parsed.device not in ("auto", "cpu"):
        sys.exit(f"benchmarks/gems.py: --device {parsed.device}: the benchmark runs on CPU processes with gloo")
    sys.exit(run_main(lambda a: bench(options_from_args(GemsBench, a), a.out, a.repeats), parsed,
                      "benchmarks/gems.py"))


def bench(args, out_root: str, repeats: int) -> None:
    """Run the benchmark with ``args`` (:class:`~torchhpc.ext.gems.config.GemsBench`) into ``out_root``/gems."""

    from torchhpc.ext.gems.modules import build_blocks
    from torchhpc.ext.gems.partition import (
        StageInfo,
        balanced_bounds,
        block_costs,
        profile_blocks,
        stage_infos,
        stage_report,
    )
    from torchhpc.ext.gems.simulator import simulate, stage_times_from_spans

    torch.set_num_threads(1)
    out = Path(out_root) / "gems"
    out.mkdir(parents=True, exist_ok=True)
    P = 2
    Ms = args.micro_batch_counts
    blocks = build_blocks("resnet_v2", depth=args.depth, width=args.width, in_shape=(3, args.image, args.image),
                          num_classes=10, norm="group", seed=0)
    if args.reuse:  # the split and the profile the earlier run used
        saved = json.loads((out / "profile.json").read_text())
        bounds = [tuple(b) for b in saved["bounds"]]
        infos = [StageInfo(**{**i, "blocks": tuple(i["blocks"])}) for i in saved["stages"]]
    else:
        x = torch.randn(args.micro_batch, 3, args.image, args.image)
        prof = profile_blocks(blocks, x, repeats=3)
        bounds = balanced_bounds(block_costs(prof, "time"), P)
        infos = stage_infos(prof, bounds)
        (out / "profile.json").write_text(json.dumps({"bounds": bounds, "stages": [i.__dict__ for i in infos]}))
    print(f"ResNet-v2-{args.depth} width {args.width}, {args.image}x{args.image} images, micro-batch {args.micro_batch}, "
          f"{len(blocks)} blocks -> stages {bounds}\n{stage_report(infos, max(Ms))}", flush=True)

    ds_reason = None
    if args.deepspeed == "no":
        ds_reason = "--deepspeed no"
    elif args.deepspeed == "auto":
        cache = Path(os.environ.get("TORCH_EXTENSIONS_DIR", Path.home() / ".cache/torch_extensions"))
        if not any(cache.glob("*/deepspeed_shm_comm*")):
            ds_reason = (f"its CPU communication extension is not compiled yet ({cache} has no deepspeed_shm_comm); "
                         "the first run JIT-compiles it for minutes — pass --deepspeed yes to include it")
    methods = []
    for M in Ms:
        methods += [f"gpipe@{M}", f"mast@{M}", f"master@{M}", f"torch-gpipe@{M}", f"torch-1f1b@{M}",
                    f"torch-gpipe@{2 * M}"]
        if ds_reason is None:
            methods.append(f"deepspeed@{M}")
    methods = list(dict.fromkeys(methods))  # torch-gpipe@2M may coincide with a later M's torch-gpipe
    if args.only:
        methods = [m for m in args.only.split(",") if m]
    if ds_reason:
        print(f"DeepSpeed pipeline skipped: {ds_reason}", flush=True)

    runs, loads = [], []
    for rep in range(repeats):
        if args.reuse:
            runs.append(json.loads((out / f"repeat{rep}.json").read_text()))
            loads.append(None)
            continue
        order = methods[rep % len(methods):] + methods[:rep % len(methods)]
        spec = {"depth": args.depth, "width": args.width, "image": args.image, "mb": args.micro_batch,
                "bounds": bounds, "eta": args.eta, "steps": args.steps, "warmup": args.warmup, "methods": order,
                "result": str(out / f"repeat{rep}.json"),
                "link_bytes": int(infos[0].output_bytes) if rep == 0 else 0}
        spec_path = out / f"spec{rep}.json"
        spec_path.write_text(json.dumps(spec))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={P}", str(HERE),
               "--worker", str(spec_path)]
        t0 = time.time()
        load_before = os.getloadavg()[0]
        env = dict(os.environ, OMP_NUM_THREADS="1", DS_ACCELERATOR="cpu")
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        loads.append((load_before, os.getloadavg()[0]))
        if proc.returncode != 0:
            sys.exit(f"repeat {rep} failed:\n{proc.stderr[-4000:]}")
        runs.append(json.loads(Path(spec["result"]).read_text()))
        print(f"repeat {rep + 1}/{repeats} done in {time.time() - t0:.0f} s "
              f"(1-min load average {loads[-1][0]:.2f} before, {loads[-1][1]:.2f} after)", flush=True)

    link = runs[0][0]["link"]
    cal = calibrate_on_runs(runs, infos, link, args.micro_batch) if {"gpipe@1", "mast@1"} <= set(methods) else None
    rows = []
    for method in methods:
        name, M = method.rsplit("@", 1)
        M = int(M)
        first = runs[0][0]["methods"][method]
        if "error" in first:
            rows.append({"name": method, "method": name, "micro_batches": M, "global_batch": first["global_batch"],
                         "error": first["error"]})
            continue
        # per repeat, the update time of the slower rank; over repeats, their spread
        timing = Timing([max(r["methods"][method]["step_s"] for r in run) for run in runs])
        gb = first["global_batch"]
        cpu = statistics.median(sum(r["methods"][method]["cpu_s"] for r in run) for run in runs)
        extra = {"method": name, "micro_batches": M, "global_batch": gb, "step_s": timing.median,
                 "cpu_ms_per_sample": cpu / gb * 1e3, "samples_per_s": gb / timing.median,
                 "samples_per_s_min": gb / timing.max, "samples_per_s_max": gb / timing.min,
                 "rss_rise_mib_per_rank": [statistics.median(run[k]["methods"][method]["rss_rise"] for run in runs)
                                           / 2**20 for k in range(P)]}
        if name in ("gpipe", "mast", "master"):
            eta = args.eta if name == "master" else 1
            sim_kw = dict(eta=eta, micro_batch=args.micro_batch, bandwidth=link["bandwidth_Bps"],
                          latency=link["latency_s"])
            extra["model_mib_per_rank"] = [statistics.median(run[k]["methods"][method]["model_bytes"] for run in runs)
                                           / 2**20 for k in range(P)]
            sim = simulate(infos, name, M, **sim_kw)
            extra["sim_samples_per_s"] = sim.samples_per_s
            extra["sim_error"] = sim.samples_per_s / extra["samples_per_s"] - 1
            extra["sim_model_mib_per_rank"] = [b / 2**20 for b in sim.peak_bytes]
            if cal:  # calibrated on the one-micro-batch GPipe and MAST runs (in-sample for those two)
                sim_k = simulate(cal.stages, name, M, corun_slowdown=cal.corun_slowdown,
                                 update_overhead_s=cal.overhead_s, **sim_kw)
                extra["sim_cal_samples_per_s"] = sim_k.samples_per_s
                extra["sim_cal_error"] = sim_k.samples_per_s / extra["samples_per_s"] - 1
                extra["sim_cal_in_sample"] = method in ("gpipe@1", "mast@1")
            # the same model fed by the stage times this run measured (median over all its actions)
            sim_own = simulate(stage_times_from_spans(infos, _pooled_spans(runs, method)), name, M, **sim_kw)
            extra["sim_own_samples_per_s"] = sim_own.samples_per_s
            extra["sim_own_error"] = sim_own.samples_per_s / extra["samples_per_s"] - 1
        rows.append(result_row(method, {name: timing}, **extra))
    for row in rows:
        if "error" in row:
            continue
        ref = [r for r in rows if r["method"] == "gpipe" and r["micro_batches"] == row["micro_batches"]]
        row["vs_gems_gpipe"] = row["samples_per_s"] / ref[0]["samples_per_s"] if ref else None
    model = f"resnet_v2-{args.depth} width {args.width}"
    params = {"model": model, "image": args.image, "micro_batch": args.micro_batch, "stages": P, "bounds": bounds,
              "repeats": repeats, "steps": args.steps, "warmup": args.warmup, "eta": args.eta, "link": link,
              "load_average_before_after": loads, "deepspeed_skipped": ds_reason,
              "calibration": None if cal is None else cal.as_dict(), "stage_profile": [i.__dict__ for i in infos]}
    write_results("gems", "results", rows, out=out_root, params=params)

    print(f"\nlink (gloo loopback ping-pong): {link['bandwidth_Bps'] / 1e9:.2f} GB/s, {link['latency_s'] * 1e6:.0f} us")
    if cal:
        st = ", ".join(f"stage {i.stage} {i.forward_s * 1e3:.1f} / {i.backward_s * 1e3:.1f} ms" for i in cal.stages)
        print(f"calibrated on the M = 1 runs: forward / backward {st} (GPipe's actions); "
              f"{cal.overhead_s * 1e3:.1f} ms per update outside the actions; "
              f"co-run slowdown {cal.corun_slowdown:.2f} (fitted to MAST's update time)")
    print_table(rows, args.eta)
    ok = [r for r in rows if "error" not in r]
    nan = float("nan")
    bar_plot(out / "throughput.png", [f"{r['method']}\nM={r['micro_batches']}" for r in ok],
             {"measured": [r["samples_per_s"] for r in ok],
              "simulator, single-process profile": [r.get("sim_samples_per_s", nan) for r in ok],
              "simulator, calibrated on M = 1": [r.get("sim_cal_samples_per_s", nan) for r in ok]},
             ylabel="samples / s", title=f"{model}, {args.image}x{args.image}, 2 ranks x 1 thread, gloo",
             highlight="measured")


def print_table(rows, eta) -> None:
    """The results as the markdown table of docs/gems/results.md."""
    hdr = ("| method | M | global batch | samples/s (median; min–max) | × gems GPipe, same M | CPU ms/sample (both ranks) "
           "| peak RSS rise MiB r0 / r1 | tracked model MiB r0 / r1 | simulator samples/s (error) "
           "| simulator calibrated on M = 1 (error) | simulator fed this run's stage times (error) "
           "| simulator MiB r0 / r1 |")
    print(hdr)
    print("|" + "---|" * 12)
    for r in rows:
        label = {"gpipe": "gems GPipe (baseline)", "mast": "gems MAST", "master": f"gems MASTER (η={eta})",
                 "torch-gpipe": "torch ScheduleGPipe", "torch-1f1b": "torch Schedule1F1B",
                 "deepspeed": "DeepSpeed PipelineModule"}[r["method"]]
        if "error" in r:
            print(f"| {label} | {r['micro_batches']} | {r['global_batch']} | refused: {r['error']} |" + " — |" * 8)
            continue
        sim = (f"{r['sim_samples_per_s']:.2f} ({r['sim_error'] * 100:+.0f} %)" if "sim_samples_per_s" in r else "—")
        model = (" / ".join(f"{v:.1f}" for v in r["model_mib_per_rank"]) if "model_mib_per_rank" in r else "—")
        simc = (f"{r['sim_cal_samples_per_s']:.2f} ({r['sim_cal_error'] * 100:+.0f} %"
                f"{', fit' if r['sim_cal_in_sample'] else ''})" if "sim_cal_samples_per_s" in r else "—")
        own = (f"{r['sim_own_samples_per_s']:.2f} ({r['sim_own_error'] * 100:+.0f} %)"
               if "sim_own_samples_per_s" in r else "—")
        smem = (" / ".join(f"{v:.1f}" for v in r["sim_model_mib_per_rank"]) if "sim_model_mib_per_rank" in r else "—")
        ratio = "—" if r["vs_gems_gpipe"] is None else f"{r['vs_gems_gpipe']:.2f}"
        print(f"| {label} | {r['micro_batches']} | {r['global_batch']} | {r['samples_per_s']:.2f} "
              f"({r['samples_per_s_min']:.2f}–{r['samples_per_s_max']:.2f}) | {ratio} | {r['cpu_ms_per_sample']:.0f} | "
              f"{' / '.join(f'{v:.1f}' for v in r['rss_rise_mib_per_rank'])} | {model} | {sim} | {simc} | {own} | {smem} |")


if __name__ == "__main__":
    main()
