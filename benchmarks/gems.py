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
``_calibrate``) and predicting the other configurations; and fed by each run's own stage times.

Writes runs/bench/gems/results.json and throughput.png.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

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


def run_ours(a, schedule, M, eta, rank, world):
    from torchhpc.ext.gems.data import SyntheticImages
    from torchhpc.ext.gems.runtime import PipelineEngine

    base = _reset_peak()
    engine = PipelineEngine(_blocks(a), a["bounds"], schedule, (3, a["image"], a["image"]), M * a["mb"], M, eta=eta,
                            rank=rank, world_size=world, optimizer=_opt)
    data = SyntheticImages((3, a["image"], a["image"]), 10, seed=0)
    times, cpu0, spans, head, tail = [], None, {}, [], []
    for step in range(a["warmup"] + a["steps"]):
        if step == a["warmup"]:
            cpu0 = time.process_time()
        t0 = time.perf_counter()
        engine.train_step(data, step)
        times.append(time.perf_counter() - t0)
        if step >= a["warmup"]:  # this run's own per-stage compute times, for the simulator
            acts = [ev for ev in engine.events if ev.kind in ("F", "B")]
            for ev in acts:
                spans.setdefault(f"{engine.copies[ev.replica].stage}{ev.kind}", []).append(ev.end - ev.start)
            # time before the first action (slicing, posting receives) and after the last (sync, optimizer, loss)
            head.append(min(ev.start for ev in acts))
            tail.append(times[-1] - max(ev.end for ev in acts))
    cpu = (time.process_time() - cpu0) / a["steps"]
    return {"step_s": statistics.median(times[a["warmup"]:]), "cpu_s": cpu, "global_batch": engine.global_batch,
            "rss_rise": _peak_rise(base), "model_bytes": engine.peak_bytes, "spans": spans, "head": head, "tail": tail}


def run_torch(a, name, M, rank, world):
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    from torchhpc.ext.gems.data import SyntheticImages

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
    data = SyntheticImages((3, a["image"], a["image"]), 10, seed=0)
    times, cpu0 = [], None
    for step in range(a["warmup"] + a["steps"]):
        x, y = data.slice(step, 0, M * a["mb"])
        if step == a["warmup"]:
            cpu0 = time.process_time()
        t0 = time.perf_counter()
        if rank == 0:
            sched.step(x)
        elif rank == world - 1:
            sched.step(target=y, losses=[])
        else:
            sched.step()
        opt.step()
        opt.zero_grad(set_to_none=True)
        dist.barrier()  # ours ends each update with a (scalar) collective too
        times.append(time.perf_counter() - t0)
    cpu = (time.process_time() - cpu0) / a["steps"]
    return {"step_s": statistics.median(times[a["warmup"]:]), "cpu_s": cpu, "global_batch": M * a["mb"],
            "rss_rise": _peak_rise(base)}


def run_deepspeed(a, M, rank, world):
    import deepspeed
    import torch.nn.functional as F
    from deepspeed.pipe import PipelineModule
    from torch import nn

    from torchhpc.ext.gems.data import SyntheticImages

    base = _reset_peak()
    deepspeed.init_distributed(dist_backend="gloo")  # adopts the worker's process group
    blocks = _blocks(a)
    layers = [nn.Sequential(*blocks[lo:hi]) for lo, hi in a["bounds"]]  # one layer per stage: the same split
    model = PipelineModule(layers=layers, num_stages=world, loss_fn=lambda out, y: F.cross_entropy(out, y),
                           partition_method="uniform")
    cfg = {"train_micro_batch_size_per_gpu": a["mb"], "gradient_accumulation_steps": M,
           "optimizer": {"type": "SGD", "params": {"lr": 0.01, "momentum": 0.9}}, "steps_per_print": 10**9}
    engine, *_ = deepspeed.initialize(model=model, model_parameters=[p for p in model.parameters()], config=cfg)
    data = SyntheticImages((3, a["image"], a["image"]), 10, seed=0)
    times, cpu0 = [], None
    for step in range(a["warmup"] + a["steps"]):
        mbs = [data.slice(step, m, a["mb"]) for m in range(M)]
        if step == a["warmup"]:
            cpu0 = time.process_time()
        t0 = time.perf_counter()
        engine.train_batch(data_iter=iter(mbs))
        times.append(time.perf_counter() - t0)
    cpu = (time.process_time() - cpu0) / a["steps"]
    return {"step_s": statistics.median(times[a["warmup"]:]), "cpu_s": cpu, "global_batch": M * a["mb"],
            "rss_rise": _peak_rise(base)}


def measure_link(nbytes: int, rank: int, iters: int = 20) -> dict:
    """Ping-pong between ranks 0 and 1 (medians of single round trips): latency from a 4-byte message,
    bandwidth from a message of ``max(nbytes, 4 MiB)``."""
    import torch.distributed as dist

    one_way = {}
    big = max(nbytes, 4 << 20)
    for name, n in (("big", big), ("small", 4)):
        t = torch.zeros(max(1, n // 4))
        dist.barrier()
        trips = []
        for _ in range(iters):
            t0 = time.perf_counter()
            if rank == 0:
                dist.send(t, 1)
                dist.recv(t, 1)
            elif rank == 1:
                dist.recv(t, 0)
                dist.send(t, 0)
            trips.append(time.perf_counter() - t0)
        one_way[name] = statistics.median(trips) / 2
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--depth", type=int, default=29, help="ResNet-v2 depth (9n+2)")
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--image", type=int, default=128, help="image side (pixels)")
    ap.add_argument("--micro-batch", type=int, default=1, help="images per micro-batch")
    ap.add_argument("--micro-batches", default="1,2", help="micro-batches per replica (comma-separated)")
    ap.add_argument("--eta", type=int, default=2, help="MASTER repetitions")
    ap.add_argument("--steps", type=int, default=6, help="timed updates per method")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--deepspeed", choices=["auto", "yes", "no"], default="auto",
                    help="auto: only if its CPU extensions are already compiled")
    ap.add_argument("--only", default=None, help="comma-separated subset of methods, e.g. gpipe@1,torch-gpipe@1")
    ap.add_argument("--reuse", action="store_true", help="re-analyse the repeat*.json of an earlier run in --out")
    ap.add_argument("--out", default="runs/bench/gems")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(json.loads(Path(args.worker).read_text()))
        return

    from torchhpc.ext.gems.modules import build_blocks
    from torchhpc.ext.gems.partition import (
        StageInfo,
        balanced_bounds,
        block_costs,
        profile_blocks,
        stage_infos,
        stage_report,
    )
    from torchhpc.ext.gems.simulator import simulate

    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    P = 2
    Ms = [int(m) for m in args.micro_batches.split(",")]
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
    for rep in range(args.repeats):
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
        print(f"repeat {rep + 1}/{args.repeats} done in {time.time() - t0:.0f} s "
              f"(1-min load average {loads[-1][0]:.2f} before, {loads[-1][1]:.2f} after)", flush=True)

    link = runs[0][0]["link"]
    cal = _calibrate(runs, infos, link, args.micro_batch) if {"gpipe@1", "mast@1"} <= set(methods) else None
    rows = []
    for method in methods:
        name, M = method.rsplit("@", 1)
        M = int(M)
        first = runs[0][0]["methods"][method]
        if "error" in first:
            rows.append({"method": name, "micro_batches": M, "global_batch": first["global_batch"],
                         "error": first["error"]})
            continue
        per_rep_step = [max(r["methods"][method]["step_s"] for r in run) for run in runs]
        step = statistics.median(per_rep_step)
        gb = runs[0][0]["methods"][method]["global_batch"]
        cpu = statistics.median(sum(r["methods"][method]["cpu_s"] for r in run) for run in runs)
        row = {"method": name, "micro_batches": M, "global_batch": gb, "step_s": step,
               "cpu_ms_per_sample": cpu / gb * 1e3,
               "samples_per_s": gb / step, "samples_per_s_min": gb / max(per_rep_step),
               "samples_per_s_max": gb / min(per_rep_step),
               "rss_rise_mib_per_rank": [statistics.median(run[k]["methods"][method]["rss_rise"] for run in runs) / 2**20
                                         for k in range(P)]}
        if name in ("gpipe", "mast", "master"):
            row["model_mib_per_rank"] = [statistics.median(run[k]["methods"][method]["model_bytes"] for run in runs)
                                         / 2**20 for k in range(P)]
            sim = simulate(infos, name, M, eta=args.eta if name == "master" else 1, micro_batch=args.micro_batch,
                           bandwidth=link["bandwidth_Bps"], latency=link["latency_s"])
            row["sim_samples_per_s"] = sim.samples_per_s
            row["sim_error"] = sim.samples_per_s / row["samples_per_s"] - 1
            row["sim_model_mib_per_rank"] = [b / 2**20 for b in sim.peak_bytes]
            if cal:  # calibrated on the one-micro-batch GPipe and MAST runs (in-sample for those two)
                sim_k = simulate(cal["stages"], name, M, eta=args.eta if name == "master" else 1,
                                 micro_batch=args.micro_batch, bandwidth=link["bandwidth_Bps"],
                                 latency=link["latency_s"], corun_slowdown=cal["corun_slowdown"],
                                 update_overhead_s=cal["overhead_s"])
                row["sim_cal_samples_per_s"] = sim_k.samples_per_s
                row["sim_cal_error"] = sim_k.samples_per_s / row["samples_per_s"] - 1
                row["sim_cal_in_sample"] = method in ("gpipe@1", "mast@1")
            # the same model fed by the stage times this run measured (median over all its actions)
            own = _stage_medians(runs, method, infos)
            sim_own = simulate(own, name, M, eta=args.eta if name == "master" else 1, micro_batch=args.micro_batch,
                               bandwidth=link["bandwidth_Bps"], latency=link["latency_s"])
            row["sim_own_samples_per_s"] = sim_own.samples_per_s
            row["sim_own_error"] = sim_own.samples_per_s / row["samples_per_s"] - 1
        rows.append(row)
    for row in rows:
        if "error" in row:
            continue
        ref = [r for r in rows if r["method"] == "gpipe" and r["micro_batches"] == row["micro_batches"]]
        row["vs_gems_gpipe"] = row["samples_per_s"] / ref[0]["samples_per_s"] if ref else None
    result = {"model": f"resnet_v2-{args.depth} width {args.width}", "image": args.image,
              "micro_batch": args.micro_batch, "stages": P, "bounds": bounds, "repeats": args.repeats,
              "steps": args.steps, "link": link,
              "load_average_before_after": loads, "cpus": os.cpu_count(),
              "deepspeed_skipped": ds_reason, "rows": rows,
              "calibration": None if cal is None else {
                  "overhead_s": cal["overhead_s"], "corun_slowdown": cal["corun_slowdown"],
                  "stages": [i.__dict__ for i in cal["stages"]]},
              "stage_profile": [i.__dict__ for i in infos]}
    (out / "results.json").write_text(json.dumps(result, indent=2))

    print(f"\nlink (gloo loopback ping-pong): {link['bandwidth_Bps'] / 1e9:.2f} GB/s, {link['latency_s'] * 1e6:.0f} us")
    if cal:
        st = ", ".join(f"stage {i.stage} {i.forward_s * 1e3:.1f} / {i.backward_s * 1e3:.1f} ms" for i in cal["stages"])
        print(f"calibrated on the M = 1 runs: forward / backward {st} (GPipe's actions); "
              f"{cal['overhead_s'] * 1e3:.1f} ms per update outside the actions; "
              f"co-run slowdown {cal['corun_slowdown']:.2f} (fitted to MAST's update time)")
    hdr = ("| method | M | global batch | samples/s (median; min–max) | × gems GPipe, same M | CPU ms/sample (both ranks) | peak RSS rise MiB r0 / r1 "
           "| tracked model MiB r0 / r1 | simulator samples/s (error) | simulator calibrated on M = 1 (error) "
           "| simulator fed this run's stage times (error) | simulator MiB r0 / r1 |")
    print(hdr)
    print("|" + "---|" * 12)
    for r in rows:
        label = {"gpipe": "gems GPipe (baseline)", "mast": "gems MAST", "master": f"gems MASTER (η={args.eta})",
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
    _plot(rows, out / "throughput.png", result["model"], args.image)


def _stage_medians(runs, method, infos):
    """``infos`` with each stage's forward and backward time replaced by the median over every such
    action of ``method`` in every repeat and rank (compute only: waits for inputs are not in a span)."""
    own = []
    for info in infos:
        f, b = (statistics.median(x for run in runs for r in run
                                  for x in r["methods"][method]["spans"].get(f"{info.stage}{kind}", []))
                for kind in "FB")
        own.append(dataclasses.replace(info, forward_s=f, backward_s=b))
    return own


def _calibrate(runs, infos, link, micro_batch) -> dict:
    """Fit the simulator's machine parameters on the one-micro-batch runs, to predict the others.

    GPipe with one micro-batch never computes on both ranks at once, so its actions give each stage's
    forward and backward time in a pipeline process, and its updates the fixed time per update
    (rank 0's wait before its first action, plus the shortest time after a rank's last action: the
    optimizer step and the loss reduction). Then the co-run slowdown is the factor that makes the
    simulated MAST update (one micro-batch, where the ranks do compute at once) as long as measured.
    """
    from torchhpc.ext.gems.simulator import simulate

    base = _stage_medians(runs, "gpipe@1", infos)
    per_step = []
    for run in runs:
        heads = run[0]["methods"]["gpipe@1"]["head"]
        tails = [r["methods"]["gpipe@1"]["tail"] for r in run]
        per_step += [h + min(t) for h, *t in zip(heads, *tails, strict=True)]
    overhead = statistics.median(per_step)
    target = statistics.median(max(r["methods"]["mast@1"]["step_s"] for r in run) for run in runs)
    kw = dict(micro_batch=micro_batch, bandwidth=link["bandwidth_Bps"], latency=link["latency_s"],
              update_overhead_s=overhead)
    lo, hi = 1.0, 4.0  # the simulated update grows with the slowdown: bisect
    if simulate(base, "mast", 1, **kw).step_s >= target:
        hi = 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if simulate(base, "mast", 1, corun_slowdown=mid, **kw).step_s < target:
            lo = mid
        else:
            hi = mid
    return {"stages": base, "overhead_s": overhead, "corun_slowdown": hi}


def _plot(rows, path, model, image):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.8), dpi=110)
    rows = [r for r in rows if "error" not in r]
    labels = [f"{r['method']}\nM={r['micro_batches']}" for r in rows]
    ax.bar(range(len(rows)), [r["samples_per_s"] for r in rows], color=[
        "#3182bd" if r["method"] in ("gpipe", "mast", "master") else "#969696" for r in rows])
    for key, color, label in (("sim_samples_per_s", "#e6550d", "simulator, single-process profile"),
                              ("sim_cal_samples_per_s", "#31a354", "simulator, calibrated on M = 1")):
        sims = [(i, r[key]) for i, r in enumerate(rows) if key in r]
        if sims:
            ax.scatter(*zip(*sims, strict=True), color=color, zorder=3, label=label, s=18)
    ax.legend(fontsize=7)
    ax.set_xticks(range(len(rows)), labels, fontsize=6, rotation=0)
    ax.set_ylabel("samples / s")
    ax.set_title(f"{model}, {image}x{image}, 2 ranks x 1 thread, gloo", fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    main()
