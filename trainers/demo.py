"""``torchhpc demo`` / ``make demo``: a quick tour that runs each system on an embedded input.

Every step makes its own input (no download, no external file), runs the system,
checks the result against an independent reference where one is cheap, and
records figures in one run folder ``runs/demo/<run-id>/``: ``summary.json``
(one entry per step), ``metrics.jsonl`` and a PNG per step.

    torchhpc demo                               # all steps, defaults
    torchhpc demo --config configs/demo/default.yaml --set steps=[kraken]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torchhpc.ext.core.config import ConfigError, add_config_arguments, load_config, option

from .common import ArgumentParser, RunOptions, add_common_arguments, parse_and_run


@dataclass
class KrakenTour:
    """The jagged embedding-bag step: our pooling against torchrec's EmbeddingBagCollection."""

    features: int = option(3, help="sparse features (one table each)", ge=1, le=64)
    batch: int = option(512, help="samples per batch", ge=1)
    rows: int = option(20_000, help="rows per table", ge=1)
    dim: int = option(64, help="embedding dimension", ge=1)
    mean_bag: float = option(8.0, help="mean ids per sample and feature", gt=0)
    repeats: int = option(10, help="timed forward+backward passes", ge=1)
    continual_steps: int = option(200, help="batches of continual training with dynamic tables (0: skip)", ge=0)


@dataclass
class DemoConfig:
    """The demo tour."""

    steps: list[str] = option(default_factory=lambda: list(TOUR), help="which systems to run, in order")
    seed: int = option(0, help="seed of every generated input", ge=0)
    device: str = option("auto", help="auto (CUDA when present), cpu or cuda", choices=["auto", "cpu", "cuda"])
    kraken: KrakenTour = option(default_factory=KrakenTour, help="kraken step")
    run: RunOptions = option(default_factory=RunOptions, help="run folder")

    def __post_init__(self) -> None:
        unknown = [s for s in self.steps if s not in TOUR]
        if unknown:
            raise ConfigError(f"steps: unknown step {unknown[0]!r} (available: {', '.join(TOUR)})")


# ----------------------------------------------------------------------------- tour steps


def tour_kraken(cfg: DemoConfig, run, device) -> dict:
    """Pool a synthetic KeyedJaggedTensor through our op and torchrec's EBC; compare and time."""
    import torch
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor

    from torchhpc.ext.kraken.ops import pooled_embeddings

    k = cfg.kraken
    g = torch.Generator().manual_seed(cfg.seed)
    keys = [f"f{i}" for i in range(k.features)]
    lengths = torch.poisson(torch.full((k.features * k.batch,), k.mean_bag), generator=g).long()
    # Zipf-like ids: a few hot rows, a long tail (what recommendation traffic looks like)
    u = torch.rand(int(lengths.sum()), generator=g)
    values = (k.rows * u.pow(3.0)).long().clamp_(max=k.rows - 1)
    kjt = KeyedJaggedTensor.from_lengths_sync(keys=keys, values=values, lengths=lengths).to(device)
    ebc = EmbeddingBagCollection(
        tables=[EmbeddingBagConfig(name=f"t_{f}", embedding_dim=k.dim, num_embeddings=k.rows, feature_names=[f])
                for f in keys],
        device=device,
    )
    tables = {f"t_{f}": ebc.embedding_bags[f"t_{f}"].weight for f in keys}
    feat2table = {f: f"t_{f}" for f in keys}

    def ours():
        return pooled_embeddings(kjt, tables, feat2table, "sum", validate=False)

    def theirs():
        return ebc(kjt).to_dict()

    a, b = ours(), theirs()
    max_diff = max(float((a[f] - b[f]).detach().abs().max()) for f in keys)
    # gradients of one loss through both paths
    loss_a = sum((a[f] * (i + 1)).sum() for i, f in enumerate(keys))
    ga = torch.autograd.grad(loss_a, list(tables.values()))
    b = theirs()
    loss_b = sum((b[f] * (i + 1)).sum() for i, f in enumerate(keys))
    gb = torch.autograd.grad(loss_b, list(tables.values()))
    grad_diff = max(float((x - y).abs().max()) for x, y in zip(ga, gb, strict=True))

    def timed(fn):
        out = fn()
        sum(v.sum() for v in out.values()).backward()
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        sync()
        t0 = time.perf_counter()
        for _ in range(k.repeats):
            out = fn()
            sum(v.sum() for v in out.values()).backward()
        sync()
        return (time.perf_counter() - t0) / k.repeats * 1e3

    ms_ours, ms_torchrec = timed(ours), timed(theirs)
    for step, (name, ms) in enumerate([("ours", ms_ours), ("torchrec_ebc", ms_torchrec)]):
        run.log(step, step_name="kraken", impl=name, fwd_bwd_ms=ms)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=110)
    ax.bar(["torchhpc jagged_embedding_bag", "torchrec EBC"], [ms_ours, ms_torchrec], color=["C0", "C7"])
    ax.set_ylabel("ms per forward+backward")
    ax.set_title(f"{k.features}x{k.batch} bags, {int(values.numel())} ids, D={k.dim} ({device.type})")
    fig.tight_layout()
    fig.savefig(run.dir / "kraken_pooling.png")
    plt.close(fig)
    continual = {}
    if k.continual_steps:
        # continual training on a drifting synthetic stream: dynamic tables under a row budget
        from .kraken import KrakenConfig, train

        kcfg = load_config(KrakenConfig, None, [
            f"run.root={run.dir}", "run.run_id=continual", "run.progress=false", f"seed={cfg.seed}",
            f"train.steps={k.continual_steps}", "train.log_every=50", "stream.batch_size=256", "stream.vocab=5000",
            "stream.num_sparse=4", "tables.max_rows=2000", "tables.memory_budget_mb=0", "tables.admit_count=2",
            "checkpoint.delta_every=50", "checkpoint.full_every=100",
        ])
        s = train(kcfg, verbose=False)
        continual = {"continual_auc": round(s["auc"], 4), "continual_rows": sum(t["rows"] for t in s["tables"].values()),
                     "continual_evictions": sum(t["evictions"] for t in s["tables"].values()),
                     "continual_run": s["run_dir"]}
    return {
        "matches_torchrec": max_diff < 1e-5 and grad_diff < 1e-5,
        "speedup_vs_torchrec": round(ms_torchrec / ms_ours, 3),
        **continual,
        "what": "jagged embedding-bag pooling of a KeyedJaggedTensor vs torchrec EmbeddingBagCollection",
        "ids": int(values.numel()),
        "max_abs_diff_forward": max_diff,
        "max_abs_diff_grad": grad_diff,
        "ms_ours": round(ms_ours, 3),
        "ms_torchrec": round(ms_torchrec, 3),
        "device": device.type,
    }


def tour_sched(cfg: DemoConfig, run, device) -> dict:
    """RLScheduler: heuristics on a generated Lublin trace, then a short PPO run of the kernel policy."""
    from torchhpc.ext.core.config import load_config
    from torchhpc.ext.sched.evaluate import draw_starts, evaluate_heuristic, summarise
    from torchhpc.ext.sched.swf import load_sched_trace

    from .sched import SchedConfig, train

    trace = load_sched_trace(None, None, 3000, cfg.seed)
    starts = draw_starts(trace, 3, 256, cfg.seed)
    table = {h: round(summarise(evaluate_heuristic(trace, h, starts, 256, "none"))["bsld"], 2)
             for h in ("fcfs", "sjf", "wfp3", "unicep", "f1")}
    sched_cfg = load_config(SchedConfig, None, [
        "trace.generate_jobs=3000", f"trace.generate_seed={cfg.seed}", "env.sequence_length=256",
        "ppo.epochs=2", "ppo.trajectories=8", "ppo.num_envs=4", "ppo.pi_iters=5", "ppo.v_iters=5",
        "ppo.imitate=f1", "ppo.imitate_sequences=16", "env.time_scale=log",
        f"eval.starts={starts}", "eval.length=256", "eval.greedy=true", "log_baselines=false",
        f"run.root={cfg.run.root}", "run.progress=false", f"seed={cfg.seed}",
    ])
    summary = train(sched_cfg, verbose=False)
    rl = summary["eval"]["rl"]["bsld"]
    return {
        "what": "heuristics, and the kernel policy warm-started from F1 then 2 PPO epochs, "
                "evaluated greedily on 3 windows of 256 jobs of a generated Lublin trace",
        "bsld": table | {"rl": round(rl, 2)},
        "ok": rl >= 1.0 and table["sjf"] <= table["fcfs"],
    }


def tour_ccsdt(cfg: DemoConfig, run, device) -> dict:
    """The (T) energy of water (6-31G, frozen core): ours against PySCF's ccsd_t on the same inputs.

    Without PySCF the step compares the torch path with the dense reference on synthetic inputs instead.
    """
    import torch

    from torchhpc.ext.ccsdt import triples_energy, triples_energy_reference, triples_flops

    backend = "triton" if device.type == "cuda" else "torch"
    try:
        from pyscf import cc, gto, scf
        from pyscf.cc import ccsd_t
    except ImportError:
        from torchhpc.ext.ccsdt.reference import random_inputs

        args = random_inputs(4, 12, seed=cfg.seed)
        ref = triples_energy_reference(*args)
        ours = triples_energy(*[a.to(device) for a in args], backend=backend)
        return {"what": "(T) of synthetic inputs vs the dense reference (PySCF not installed)",
                "e_t": ours, "e_t_reference": ref, "abs_diff": abs(ours - ref), "ok": abs(ours - ref) < 1e-10}
    from torchhpc.ext.ccsdt import from_pyscf

    mol = gto.M(atom="O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692", basis="6-31g", verbose=0)
    mycc = cc.CCSD(scf.RHF(mol).run()).set_frozen().run()
    eris = mycc.ao2mo()
    inputs = from_pyscf(mycc, eris)
    t0 = time.perf_counter()
    e_theirs = float(ccsd_t.kernel(mycc, eris, mycc.t1.copy(), mycc.t2.copy(), verbose=0))
    s_theirs = time.perf_counter() - t0
    arrays = [torch.as_tensor(a, device=device) for a in inputs.arrays()]
    triples_energy(*arrays, backend=backend)  # warm-up (Triton compiles on first use)
    t0 = time.perf_counter()
    e_ours = triples_energy(*arrays, backend=backend)
    s_ours = time.perf_counter() - t0
    run.log(0, step_name="ccsdt", e_t=e_ours, e_t_pyscf=e_theirs, seconds=s_ours, seconds_pyscf=s_theirs)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=110)
    ax.bar([f"torchhpc ({backend})", "PySCF ccsd_t"], [s_ours * 1e3, s_theirs * 1e3], color=["C0", "C7"])
    ax.set_ylabel("ms for E(T)")
    ax.set_title(f"H2O 6-31G (T) = {e_ours:.10f} Eh, |diff| {abs(e_ours - e_theirs):.1e}", fontsize=9)
    fig.tight_layout()
    fig.savefig(run.dir / "ccsdt_triples.png")
    plt.close(fig)
    return {
        "what": "CCSD(T) triples energy of H2O/6-31G (frozen core) vs pyscf.cc.ccsd_t on the same inputs",
        "e_t": e_ours, "e_t_pyscf": e_theirs, "abs_diff": abs(e_ours - e_theirs),
        "ok": abs(e_ours - e_theirs) < 1e-10, "nocc": inputs.nocc, "nvir": inputs.nvir,
        "ms_ours": round(s_ours * 1e3, 3), "ms_pyscf": round(s_theirs * 1e3, 3),
        "gflops_ours": round(triples_flops(inputs.nocc, inputs.nvir) / s_ours / 1e9, 3), "device": device.type,
    }


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def tour_gems(cfg: DemoConfig, run, device) -> dict:
    """GEMS: a few MAST updates of a small ResNet-v2 on 2 CPU processes (torchrun)."""
    import json
    import os
    import subprocess
    from pathlib import Path

    config = Path(__file__).resolve().parents[1] / "configs" / "gems" / "debug.yaml"
    if not config.is_file():
        return {"ok": False, "error": f"{config} not found (run the demo from a checkout)"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           "-m", "torchhpc.trainers.gems", "--config", str(config),
           "--set", f"run.root={run.dir}", "--set", "run.run_id=mast"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["(no output)"]
        return {"ok": False, "error": tail[0]}
    folder = run.dir / "gems" / "mast"
    summary = json.loads((folder / "summary.json").read_text())
    keep = {k: summary[k] for k in ("schedule", "steps", "final_loss", "samples_per_s") if k in summary}
    return {"ok": True, **keep, "run": str(folder),
            "what": "MAST (two mirrored pipeline replicas) on 2 gloo processes; timeline.png in the run"}


def tour_segalign(cfg: DemoConfig, run, device) -> dict:
    """SegAlign: align a simulated 30 kbp genome pair (known truth); LASTZ beside it when installed."""
    from torchhpc.ext.segalign.align import AlignConfig, align_files
    from torchhpc.ext.segalign.output import write_maf
    from torchhpc.ext.segalign.recall import (
        lastz_available,
        lastz_command,
        pairs_from_alignments,
        pairs_from_maf,
        recall,
        run_lastz,
    )
    from torchhpc.ext.segalign.simulate import simulate_pair

    sim = simulate_pair(length=30_000, seed=cfg.seed)
    tpath, qpath = run.dir / "target.fa", run.dir / "query.fa"
    sim.write(tpath, qpath)
    t0 = time.perf_counter()
    res = align_files(tpath, qpath, AlignConfig(device="cpu"))  # the CUDA kernel has not yet run on a GPU
    seconds = time.perf_counter() - t0
    with open(run.dir / "alignment.maf", "w") as fh:
        write_maf(res.alignments, fh)
    truth = {("target", "query", s): sim.true_pairs(s) for s in "+-"}
    out = {"alignments": len(res.alignments),
           "truth_recall": round(recall(pairs_from_alignments(res.alignments), truth)[0], 4),
           "align_s": round(seconds, 2)}
    if lastz_available():
        maf = run_lastz(lastz_command(tpath, qpath, nogapped=False, fmt="maf-"))
        out["recall_of_lastz"] = round(recall(pairs_from_alignments(res.alignments, matching=True),
                                              pairs_from_maf(maf, matching=True))[0], 4)
    return {**out, "maf": str(run.dir / "alignment.maf"),
            "what": "simulated 30 kbp pair (substitutions, indels, inversions, duplications) aligned natively"}


#: step name -> function(cfg, run, device) -> summary dict
TOUR: dict[str, Callable] = {
    "sched": tour_sched,
    "kraken": tour_kraken,
    "gems": tour_gems,
    "segalign": tour_segalign,
    "ccsdt": tour_ccsdt,
}


# ----------------------------------------------------------------------------- entry points


def run_demo(args: argparse.Namespace) -> int:
    import torch

    from torchhpc.ext.core.device import pick_device
    from torchhpc.ext.core.runs import Run

    cfg = load_config(DemoConfig, args.config, args.overrides)
    torch.manual_seed(cfg.seed)
    device = pick_device(cfg.device)
    run = Run("demo", cfg, root=cfg.run.root, run_id=cfg.run.run_id, resume=cfg.run.resume,
              progress=cfg.run.progress)
    print(f"torchhpc demo -> {run.dir}")
    results = {}
    for name in run.progress(cfg.steps, desc="demo"):
        t0 = time.perf_counter()
        res = TOUR[name](cfg, run, device)
        res["seconds"] = round(time.perf_counter() - t0, 3)
        results[name] = res
        run.write_summary({name: res})
        print(f"  {name:<8} {_one_line(res)}")
    ok = all(r.get("matches_torchrec", True) and r.get("ok", True) for r in results.values())
    run.write_summary({"ok": ok})
    print(f"summary: {run.dir / 'summary.json'}")
    return 0 if ok else 1


def _one_line(res: dict) -> str:
    keys = [k for k in res if k not in ("what",)][:6]
    return ", ".join(f"{k}={res[k]}" for k in keys)


def _add_args(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p)
    add_common_arguments(p)


def register(sub) -> None:
    p = sub.add_parser("demo", help="a quick tour of every system on generated inputs (make demo)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_args(p)
    p.set_defaults(func=run_demo)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="torchhpc.trainers.demo", description=__doc__)
    _add_args(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    return parse_and_run(build_parser, run_demo, argv)


if __name__ == "__main__":
    sys.exit(main())
