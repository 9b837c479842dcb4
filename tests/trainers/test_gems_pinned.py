"""Pinned results of the gems debug config: a refactor of the trainer must reproduce them.

The values below were produced by the code before the refactor "One shape for every system", at commit
67fa2f8 (``torchrun --nproc-per-node 2 -m torchhpc.trainers.gems --config configs/gems/debug.yaml``,
``torchhpc gems partition`` and ``torchhpc gems simulate`` on that config, OMP_NUM_THREADS=1, on a CPU).
The stages are balanced by memory (``--set pipeline.balance_by=memory``), so the split is a function of
byte counts rather than of measured times.

Classified by the suite's tolerance policy (tests/README.md):

* exact: stage bounds, byte counts, steps, batch and world sizes, the partition table (byte counts
  printed in MiB), the simulated schedules' sizes and memory;
* float32 trajectory (rel 1e-5): the training losses, which come out of oneDNN/MKL GEMMs whose kernels
  differ by CPU model (one float32 ulp moved on another Xeon);
* float64 arithmetic of fixed inputs (rel 1e-12): the simulated all-reduce times;
* left out: wall-clock figures (times, samples/s, the order in which two MAST replicas interleave and so
  their stash peaks).

Bit-for-bit equality of a refactor is checked outside the suite, on one host (``tools/compare_commits.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness.multiproc import torchrun
from harness.tolerance import FLOAT32_TRAJECTORY, FLOAT64_FIXED, assert_close_tree

REPO = Path(__file__).resolve().parents[2]
DEBUG = str(REPO / "configs/gems/debug.yaml")
BY_MEMORY = ["--set", "pipeline.balance_by=memory"]

DEBUG_LOSSES = [1.8405671119689941, 1.5109910368919373, 1.803219497203827, 1.4431813955307007]
DEBUG_BOUNDS = [[0, 3], [3, 5]]
DEBUG_STATIC_BYTES = [101100, 101100]

#: ``gems partition`` with 3 stages: blocks, params MiB, activations per micro-batch MiB, peak MiB
PARTITION_3 = [["0-1", "0.00", "0.05", "0.11"], ["2-2", "0.01", "0.10", "0.22"], ["3-4", "0.02", "0.07", "0.21"]]

#: ``gems simulate --devices 2,8 --latency 50 --bandwidth 2 --overhead-ms 3``: the figures that do not
#: depend on measured times (devices, batch, sizes, the gradient all-reduce, GPipe's fixed memory)
SIMULATE = [
    {"schedule": "gpipe", "devices": 2, "groups": 1, "eta": 1, "micro_batch": 2, "global_batch": 4,
     "allreduce_s": 0.0, "peak_bytes": [380976, 218940]},
    {"schedule": "mast", "devices": 2, "groups": 1, "eta": 1, "micro_batch": 2, "global_batch": 8,
     "allreduce_s": 0.00011685},
    {"schedule": "master", "devices": 2, "groups": 1, "eta": 2, "micro_batch": 2, "global_batch": 16,
     "allreduce_s": 0.00011685},
    {"schedule": "gpipe", "devices": 8, "groups": 4, "eta": 1, "micro_batch": 2, "global_batch": 16,
     "allreduce_s": 0.00031940699999999996, "peak_bytes": [380976, 218940]},
    {"schedule": "mast", "devices": 8, "groups": 4, "eta": 1, "micro_batch": 2, "global_batch": 32,
     "allreduce_s": 0.0007294874999999999},
    {"schedule": "master", "devices": 8, "groups": 4, "eta": 2, "micro_batch": 2, "global_batch": 64,
     "allreduce_s": 0.0007294874999999999},
]


@pytest.mark.distributed
def test_debug_run_losses_are_pinned(tmp_path):
    """The debug config's MAST run on 2 gloo processes logs the pinned loss of every update."""
    res = torchrun(2, ["-m", "torchhpc.trainers.gems", "--config", DEBUG, *BY_MEMORY, "--set", f"run.root={tmp_path}",
                       "--set", "run.run_id=pinned"], timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "gems" / "pinned"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert_close_tree([r["loss"] for r in rows], DEBUG_LOSSES, FLOAT32_TRAJECTORY, where="loss")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["bounds"] == DEBUG_BOUNDS
    assert_close_tree([summary["first_loss"], summary["final_loss"]], [DEBUG_LOSSES[0], DEBUG_LOSSES[-1]],
                      FLOAT32_TRAJECTORY, where="summary")
    assert summary["global_batch"] == 8 and summary["world_size"] == 2
    assert [r["static_bytes"] for r in summary["peak_memory_per_rank"]] == DEBUG_STATIC_BYTES


def test_partition_and_simulated_figures_are_pinned(cli_here):
    """`gems partition` splits by memory as pinned; `gems simulate` gives the pinned sizes and all-reduce times."""
    part = cli_here("gems", "partition", "--config", DEBUG, *BY_MEMORY, "--set", "pipeline.stages=3", timeout=120)
    assert part.returncode == 0, part.stderr
    rows = [ln.split() for ln in part.stdout.splitlines() if ln.strip()[:1].isdigit()]
    assert [[r[1], *r[4:]] for r in rows] == PARTITION_3
    sim = cli_here("gems", "simulate", "--config", DEBUG, *BY_MEMORY, "--devices", "2,8", "--json",
                   "--latency", "50", "--bandwidth", "2", "--overhead-ms", "3", timeout=120)
    assert sim.returncode == 0, sim.stderr
    got = json.loads(sim.stdout)
    assert len(got) == len(SIMULATE)
    for row, want in zip(got, SIMULATE, strict=True):
        for key, value in want.items():
            if key == "allreduce_s":
                assert_close_tree(row[key], value, FLOAT64_FIXED, where=f"{want['schedule']}.{key}")
            else:
                assert row[key] == value, (want["schedule"], want["devices"], key)
        assert row["step_s"] >= 0.003  # the 3 ms per update is in every update
