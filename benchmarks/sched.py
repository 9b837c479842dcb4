"""Benchmark: the RLScheduler simulator's throughput and PPO's wall-clock per epoch.

In one run, on the same trace:
  * decisions/s of one env stepped through the Gymnasium API (random valid actions),
  * decisions/s of ``VecBatchScheduling`` (N envs in lock-step, shared observation arrays) against the
    anchor, Gymnasium's own ``SyncVectorEnv`` over the same N envs — the ratio is reported,
  * the same with the optional observation columns: F1's rank (``prior``), and with it the cluster state
    (``context``),
  * decisions/s of the whole rollout loop with the kernel policy choosing (batched forward),
  * heuristic sequences/s (SJF, 1024-job windows),
  * wall-clock of one PPO epoch (rollout and update split) of configs/sched/lublin1.yaml's settings.

    python benchmarks/sched.py [--trace ../shared/data/swf/lublin_256.swf] [--envs 32] [--out runs/bench]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_trace = Path(__file__).resolve().parents[2] / "shared/data/swf/lublin_256.swf"
    ap.add_argument("--trace", default=str(default_trace) if default_trace.exists() else None)
    ap.add_argument("--envs", type=int, default=32)
    ap.add_argument("--decisions", type=int, default=20_000)
    ap.add_argument("--out", default="runs/bench")
    ap.add_argument("--skip-ppo", action="store_true")
    args = ap.parse_args()

    import gymnasium as gym

    from torchhpc.envs.sched import BatchSchedulingEnv, VecBatchScheduling
    from torchhpc.ext.sched.evaluate import draw_starts, evaluate_heuristic
    from torchhpc.ext.sched.modules import SchedulingAgent
    from torchhpc.ext.sched.swf import load_sched_trace

    trace = load_sched_trace(args.trace)
    rng = np.random.default_rng(0)
    results: dict = {"trace": trace.name, "envs": args.envs, "torch_threads": torch.get_num_threads()}

    # -- one env, Gymnasium API -------------------------------------------------------------
    env = BatchSchedulingEnv(trace=trace)
    obs, _ = env.reset(seed=0)
    t0, n = time.perf_counter(), 0
    while n < args.decisions // 4:
        obs, _, term, _, _ = env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
        n += 1
        if term:
            obs, _ = env.reset()
    results["single_env_decisions_per_s"] = n / (time.perf_counter() - t0)

    # -- anchor: gymnasium SyncVectorEnv ------------------------------------------------------
    sync = gym.vector.SyncVectorEnv([lambda: BatchSchedulingEnv(trace=trace) for _ in range(args.envs)])
    obs, _ = sync.reset(seed=0)
    t0, n = time.perf_counter(), 0
    while n < args.decisions:
        # after a terminal step Gymnasium's next-step autoreset ignores the action (the mask is empty)
        acts = [int(rng.choice(np.flatnonzero(m))) if m.any() else 0 for m in obs["action_mask"]]
        obs, *_ = sync.step(np.asarray(acts))
        n += args.envs
    results["gymnasium_sync_vector_decisions_per_s"] = n / (time.perf_counter() - t0)

    # -- ours: lock-step vector env ----------------------------------------------------------------
    vec = VecBatchScheduling(args.envs, seed=0, trace=trace)
    q, m = vec.reset()
    t0, n = time.perf_counter(), 0
    while n < args.decisions:
        acts = [int(rng.choice(np.flatnonzero(row))) for row in m]
        q, m, *_ = vec.step(np.asarray(acts))
        n += args.envs
    results["vector_env_decisions_per_s"] = n / (time.perf_counter() - t0)
    results["vector_over_gymnasium_sync"] = (results["vector_env_decisions_per_s"]
                                             / results["gymnasium_sync_vector_decisions_per_s"])

    # -- the observation's optional columns: F1's rank (the shipped config) and the cluster state -----------
    for name, extra in (("prior", {"prior": "f1"}), ("prior_context", {"prior": "f1", "context": True})):
        vec_x = VecBatchScheduling(args.envs, seed=0, trace=trace, **extra)
        q, m = vec_x.reset()
        t0, n = time.perf_counter(), 0
        while n < args.decisions:
            q, m, *_ = vec_x.step(np.asarray([int(rng.choice(np.flatnonzero(row))) for row in m]))
            n += args.envs
        results[f"vector_env_{name}_decisions_per_s"] = n / (time.perf_counter() - t0)

    # -- with the policy choosing (batched forward) ------------------------------------------------
    agent = SchedulingAgent("kernel")
    q, m = vec.reset()
    t0, n = time.perf_counter(), 0
    while n < args.decisions:
        a, _, _ = agent.act(torch.from_numpy(q), torch.from_numpy(m))
        q, m, *_ = vec.step(a.numpy())
        n += args.envs
    results["policy_rollout_decisions_per_s"] = n / (time.perf_counter() - t0)

    # -- heuristics ----------------------------------------------------------------------------------
    starts = draw_starts(trace, 5, 1024, 1)
    t0 = time.perf_counter()
    evaluate_heuristic(trace, "sjf", starts, 1024, "none")
    results["sjf_1024_job_sequences_per_s"] = len(starts) / (time.perf_counter() - t0)

    # -- one PPO epoch ---------------------------------------------------------------------------------
    if not args.skip_ppo:
        import tempfile

        from torchhpc.ext.core.config import load_config
        from torchhpc.trainers.sched import SchedConfig, train

        cfg_path = Path(__file__).resolve().parents[1] / "configs/sched/lublin1.yaml"
        with tempfile.TemporaryDirectory() as tmp:
            cfg = load_config(SchedConfig, cfg_path, [
                f"trace.path={args.trace}" if args.trace else "trace.path=null", "ppo.epochs=1",
                "log_baselines=false", "eval.every=0", "eval.starts=[300]", "eval.length=256",
                f"run.root={tmp}", "run.run_id=bench", "run.progress=false", "threads=0"])
            train(cfg)
            row = json.loads((Path(tmp) / "sched/bench/metrics.jsonl").read_text().splitlines()[0])
        results["ppo_epoch"] = {k: row[k] for k in ("decisions", "rollout_s", "epoch_s", "pi_steps")}
        results["ppo_epoch"]["trajectories"] = cfg.ppo.trajectories

    for k, v in results.items():
        print(f"{k:<40} {v:.1f}" if isinstance(v, float) else f"{k:<40} {v}")
    out = Path(args.out) / "sched"
    out.mkdir(parents=True, exist_ok=True)
    (out / "throughput.json").write_text(json.dumps(results, indent=2))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ["single_env", "gymnasium_sync_vector", "vector_env", "policy_rollout"]
    fig, ax = plt.subplots(figsize=(6.4, 3.4), dpi=110)
    ax.bar(names, [results[f"{n}_decisions_per_s"] for n in names], color=["C7", "C7", "C0", "C0"])
    ax.set_ylabel("scheduling decisions / s")
    ax.set_title(f"simulator throughput on {trace.name} ({args.envs} envs)")
    fig.tight_layout()
    fig.savefig(out / "throughput.png")
    print(f"wrote {out / 'throughput.json'} and throughput.png")


if __name__ == "__main__":
    main()
