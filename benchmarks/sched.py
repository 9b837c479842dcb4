"""Benchmark: the RLScheduler simulator's throughput and PPO's wall-clock per epoch.

In one run, on the same trace, timed in turns (``time_interleaved``):
  * decisions/s of one env stepped through the Gymnasium API (random valid actions),
  * decisions/s of ``VecBatchScheduling`` (N envs in lock-step, shared observation arrays) against the
    anchor, Gymnasium's own ``SyncVectorEnv`` over the same N envs — the ratio is reported,
  * the same with the optional observation columns: F1's rank (``prior``), and with it the cluster state
    (``context``),
  * decisions/s of the whole rollout loop with the kernel policy choosing (batched forward),
  * heuristic sequences/s (SJF, 1024-job windows),
and the wall-clock of one PPO epoch (rollout and update split) of configs/sched/lublin1.yaml's settings;
and, per backfilling mode, the bare simulators (no observation) on 256-job windows with random valid actions:
the per-window reference ``ClusterSimulator`` (the anchor) against ``BatchedClusterSimulator`` advancing
``--windows`` windows at once — its torch path (lock-step tensor ops), its compiled numba path (every window
its own event loop, windows over threads) and, on a GPU, its Triton path (one program per window, two launches
and one host sync a decision) — decisions/s of each and their ratio.

    python benchmarks/sched.py [--trace ../shared/data/swf/lublin_256.swf] [--envs 32] [--windows 1024] [--out runs/bench]
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from torchhpc.ext.core.bench import (
    bar_plot,
    benchmark_parser,
    print_rows,
    result_row,
    time_interleaved,
    write_results,
)
from torchhpc.ext.core.data import shared_data_dir

ANCHOR = "gymnasium_sync_vector"


def stepper(step: Callable[[], int], decisions: int) -> Callable[[], None]:
    """A call that makes ``decisions`` decisions with ``step`` (which returns how many it made)."""

    def run() -> None:
        n = 0
        while n < decisions:
            n += step()

    return run


def throughput_candidates(trace, envs: int, decisions: int) -> dict[str, Callable[[], None]]:
    """name -> a call that makes ``decisions`` decisions (random valid actions, or the policy's), so that the
    ratio of two candidates' times is the ratio of their throughputs."""
    import gymnasium as gym

    from torchhpc.envs.sched import BatchSchedulingEnv, VecBatchScheduling
    from torchhpc.ext.sched.modules import SchedulingAgent

    rng = np.random.default_rng(0)

    def random_actions(masks) -> np.ndarray:
        # after a terminal step Gymnasium's next-step autoreset ignores the action (the mask is empty)
        return np.asarray([int(rng.choice(np.flatnonzero(m))) if m.any() else 0 for m in masks])

    single = BatchSchedulingEnv(trace=trace)
    state = {"obs": single.reset(seed=0)[0]}

    def single_step() -> int:
        obs, _, term, _, _ = single.step(int(rng.choice(np.flatnonzero(state["obs"]["action_mask"]))))
        state["obs"] = single.reset()[0] if term else obs
        return 1

    sync = gym.vector.SyncVectorEnv([lambda: BatchSchedulingEnv(trace=trace) for _ in range(envs)])
    state["sync"] = sync.reset(seed=0)[0]

    def sync_step() -> int:
        state["sync"], *_ = sync.step(random_actions(state["sync"]["action_mask"]))
        return envs

    def vec_step(vec: VecBatchScheduling) -> Callable[[], int]:
        vec.reset()

        def step() -> int:
            vec.step(random_actions(vec.mask))
            return envs

        return step

    agent = SchedulingAgent("kernel")
    policy_vec = VecBatchScheduling(envs, seed=0, trace=trace)
    policy_vec.reset()

    def policy_step() -> int:
        a, _, _ = agent.act(torch.from_numpy(policy_vec.queue), torch.from_numpy(policy_vec.mask))
        policy_vec.step(a.numpy())
        return envs

    return {
        "single_env": stepper(single_step, decisions),
        ANCHOR: stepper(sync_step, decisions),
        "vector_env": stepper(vec_step(VecBatchScheduling(envs, seed=0, trace=trace)), decisions),
        "vector_env_prior": stepper(vec_step(VecBatchScheduling(envs, seed=0, trace=trace, prior="f1")), decisions),
        "vector_env_prior_context": stepper(
            vec_step(VecBatchScheduling(envs, seed=0, trace=trace, prior="f1", context=True)), decisions),
        "policy_rollout": stepper(policy_step, decisions),
    }


SIM_ANCHOR = "per_env_simulator"


def simulator_candidates(trace, windows: int, decisions: int, backfill: str, length: int = 256
                         ) -> dict[str, Callable[[], None]]:
    """name -> a call that makes ``decisions`` decisions on ``length``-job windows with random valid actions:
    the reference simulator one window at a time, and the batched one ``windows`` at a time (CPU, CUDA)."""
    from torchhpc.ext.core.dispatch import numba_available
    from torchhpc.ext.sched.batched import BatchedClusterSimulator
    from torchhpc.ext.sched.simulator import ClusterSimulator

    rng = np.random.default_rng(0)
    low, high = length, len(trace) - length - 1  # the training draw of window starts
    ref = ClusterSimulator(trace, backfill)

    def ref_step() -> int:
        if ref.done:
            ref.reset(int(rng.integers(low, high)), length)
        q = ref.queue
        ref.schedule(q[int(rng.integers(len(q)))])
        return 1

    def batched(device: str, backend: str) -> Callable[[], int]:
        sim = BatchedClusterSimulator(trace, backfill, device=device, backend=backend)
        gen = torch.Generator(device=device).manual_seed(0)
        sim.reset(rng.integers(low, high, windows), length)

        def step() -> int:
            if bool(sim.done.all()):
                sim.reset(rng.integers(low, high, windows), length)
            before = sim.decisions
            sim.schedule(sim.random_valid(gen))
            return sim.decisions - before

        return step

    out = {SIM_ANCHOR: stepper(ref_step, decisions),
           "batched_simulator_torch": stepper(batched("cpu", "torch"), decisions)}
    if numba_available():
        out["batched_simulator_numba"] = stepper(batched("cpu", "numba"), decisions)
    if torch.cuda.is_available():
        out["batched_simulator_cuda"] = stepper(batched("cuda", "triton"), decisions)
    return out


def ppo_epoch(trace_path: str | None) -> dict:
    """Wall-clock of one PPO epoch of configs/sched/lublin1.yaml (rollout and update split)."""
    from torchhpc.ext.core.config import load_config
    from torchhpc.ext.sched.commands import train
    from torchhpc.ext.sched.config import SchedConfig

    cfg_path = Path(__file__).resolve().parents[1] / "configs/sched/lublin1.yaml"
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(SchedConfig, cfg_path, [
            f"trace.path={trace_path}" if trace_path else "trace.path=null", "ppo.epochs=1",
            "log_baselines=false", "eval.every=0", "eval.starts=[300]", "eval.length=256",
            f"run.root={tmp}", "run.run_id=bench", "run.progress=false", "dist.threads=0"])
        train(cfg, verbose=False)
        row = json.loads((Path(tmp) / "sched/bench/metrics.jsonl").read_text().splitlines()[0])
    return {k: row[k] for k in ("decisions", "rollout_s", "epoch_s", "pi_steps")} | {
        "trajectories": cfg.ppo.trajectories}


def main() -> None:
    ap = benchmark_parser(__doc__, repeats=3)
    default_trace = shared_data_dir() / "swf" / "lublin_256.swf"
    ap.add_argument("--trace", default=str(default_trace) if default_trace.exists() else None,
                    help="SWF trace (default: ../shared/data/swf/lublin_256.swf, else a generated Lublin trace)")
    ap.add_argument("--envs", type=int, default=32, help="envs stepped together (default 32)")
    ap.add_argument("--decisions", type=int, default=20_000, help="decisions per timed call (default 20000)")
    ap.add_argument("--skip-ppo", action="store_true", help="leave out the PPO epoch")
    ap.add_argument("--windows", type=int, default=1024, help="windows the batched simulator advances at once")
    ap.add_argument("--sim-decisions", type=int, default=262_144,
                    help="decisions per timed call of the bare simulators without backfilling (default 262144; "
                         "a sixteenth with backfilling)")
    ap.add_argument("--backfill", action="append", choices=["none", "rlscheduler", "easy"],
                    help="backfilling modes of the bare-simulator rows (repeatable; default none and rlscheduler)")
    ap.add_argument("--only-simulators", action="store_true", help="only the bare-simulator rows")
    args = ap.parse_args()

    from torchhpc.ext.sched.evaluate import draw_starts, evaluate_heuristic
    from torchhpc.ext.sched.traces import load_sched_trace

    trace = load_sched_trace(args.trace)
    rows, per_s = [], {}
    for backfill in args.backfill or ["none", "rlscheduler"]:
        n = args.sim_decisions if backfill == "none" else args.sim_decisions // 16  # backfilling: far slower
        sim = time_interleaved(simulator_candidates(trace, args.windows, n, backfill), repeats=args.repeats)
        sim_per_s = {name: n / t.median for name, t in sim.items()}
        rows.append(result_row(f"simulator_{backfill}", sim, anchor=SIM_ANCHOR, decisions=n,
                               windows=args.windows, decisions_per_s=sim_per_s))
        per_s |= {f"{name}_{backfill}": v for name, v in sim_per_s.items()}
    if not args.only_simulators:
        timings = time_interleaved(throughput_candidates(trace, args.envs, args.decisions), repeats=args.repeats)
        env_per_s = {name: args.decisions / t.median for name, t in timings.items()}  # the same decisions per call
        rows.append(result_row("decisions", timings, anchor=ANCHOR, decisions=args.decisions,
                               decisions_per_s=env_per_s))
        per_s |= env_per_s
        starts = draw_starts(trace, 5, 1024, 1)
        sjf = time_interleaved({"sjf": lambda: evaluate_heuristic(trace, "sjf", starts, 1024, "none")},
                               repeats=args.repeats, warmup=0)
        rows.append(result_row("sjf_1024_job_sequences", sjf, sequences_per_s=len(starts) / sjf["sjf"].median))
        if not args.skip_ppo:
            rows.append({"name": "ppo_epoch", **ppo_epoch(args.trace)})
    print_rows(rows)
    for name, v in per_s.items():
        print(f"{name:<36} {v:>10.0f} decisions/s")
    params = {"trace": trace.name, "envs": args.envs, "decisions": args.decisions, "repeats": args.repeats,
              "windows": args.windows, "sim_decisions": args.sim_decisions, "torch_threads": torch.get_num_threads()}
    write_results("sched", "throughput", rows, out=args.out, params=params)
    png = bar_plot(Path(args.out) / "sched" / "throughput.png", list(per_s), {"decisions/s": list(per_s.values())},
                   ylabel="scheduling decisions / s", title=f"simulator throughput on {trace.name} ({args.envs} envs)")
    print(f"wrote {png}")


if __name__ == "__main__":
    main()
