"""The gems trainer and CLI: torchrun training with metrics, timeline and resume; bad input fails fast."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from harness.multiproc import torchrun

REPO = Path(__file__).resolve().parents[2]
DEBUG = str(REPO / "configs/gems/debug.yaml")


def _torchrun(nproc: int, args: list[str], timeout: float = 180) -> subprocess.CompletedProcess:
    return torchrun(nproc, ["-m", "torchhpc.trainers.gems", *args], timeout=timeout, cwd=REPO)


def _losses(run_dir: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_help_lists_the_subcommands(cli):
    """`torchhpc gems --help` names train, partition and simulate; gems is no longer 'planned'."""
    res = cli("gems", "--help")
    assert res.returncode == 0
    for word in ("train", "partition", "simulate"):
        assert word in res.stdout
    top = cli("--help")
    assert "gems" in top.stdout.split("Not yet available")[0]


@pytest.mark.parametrize("override,message", [
    ("pipeline.stages=6", "pipeline.stages = 6 but the model has only 5 blocks"),
    ("train.batch_size=3", "train.batch_size = 3 is not divisible into pipeline.micro_batches = 2"),
    ("pipeline.eta=2", "applies to schedule master only"),
    ("pipeline.balance=[1,1]", "pipeline.balance = [1, 1]"),
    ("pipeline.no_such_key=1", "unknown key 'pipeline.no_such_key'"),
])
def test_bad_config_is_one_line_before_any_process_starts(cli, override, message):
    """Impossible configs are refused by the CLI with one line naming the option, exit status 1."""
    res = cli("gems", "train", "--config", DEBUG, "--set", override, timeout=60)
    assert res.returncode == 1, res.stderr
    assert message in res.stderr
    assert "Traceback" not in res.stderr and "torch.distributed.run" not in res.stderr


def test_nproc_that_does_not_fit_is_refused(cli):
    """`--nproc 3` for a 2-stage, 1-group config is refused before torchrun is launched."""
    res = cli("gems", "train", "--config", DEBUG, "--nproc", "3", timeout=60)
    assert res.returncode == 1 and "--nproc 3 does not fit the config" in res.stderr


@pytest.mark.distributed
def test_world_size_that_does_not_fit_fails_fast_under_torchrun(tmp_path):
    """Launched by torchrun with 2 processes for a 1-stage config, every rank stops before any collective (so
    none waits on another) and only rank 0 says why, in one line."""
    res = _torchrun(2, ["--config", DEBUG, "--set", "pipeline.stages=1", "--set", f"run.root={tmp_path}"], timeout=120)
    assert res.returncode != 0
    ours = [ln for ln in res.stderr.splitlines() if ln.startswith("torchhpc.trainers.gems: error:")]
    assert len(ours) == 1 and "world size 2 does not fit the config" in ours[0], res.stderr[-3000:]


@pytest.mark.distributed
def test_torchrun_training_writes_metrics_timeline_and_resumes_exactly(cli, cli_here, tmp_path):
    """torchrun MAST training logs loss/samples/s/peak memory, draws the timeline, and a run stopped
    after 2 updates and resumed to 4 has the loss trajectory of an uninterrupted 4-update run; `gems simulate
    --calibrate` fits the simulator on the run."""
    root = f"run.root={tmp_path}"
    full = _torchrun(2, ["--config", DEBUG, "--set", root, "--set", "run.run_id=full"])
    assert full.returncode == 0, full.stderr[-3000:]
    run = tmp_path / "gems" / "full"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["schedule"] == "mast" and summary["global_batch"] == 8 and summary["samples_per_s"] > 0
    assert [r["rank"] for r in summary["peak_memory_per_rank"]] == [0, 1]
    assert all(r["peak_model_bytes"] > r["static_bytes"] > 0 for r in summary["peak_memory_per_rank"])
    assert (run / "timeline.png").stat().st_size > 0 and (run / "loss.png").exists()
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "ckpt-00000002.rank0.pt", "ckpt-00000002.rank1.pt", "ckpt-00000004.rank0.pt", "ckpt-00000004.rank1.pt"]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all(r["samples_per_s"] > 0 and r["peak_model_mib"] > 0 for r in rows)
    # the run records its action times (updates after the warm-up one), and the simulator calibrates on them
    times = summary["update_times"]
    assert sorted(times["spans"]) == ["0B", "0F", "1B", "1F"] and len(times["overhead_s"]) == 3
    assert all(t > 0 for spans in times["spans"].values() for t in spans)
    cal = cli_here("gems", "simulate", "--config", str(run / "config.yaml"), "--calibrate", str(run),
                   "--devices", "2,8", timeout=120)
    assert cal.returncode == 0, cal.stderr
    assert f"calibrated on {run}" in cal.stdout and "co-run slowdown" in cal.stdout
    # a damaged copy of the run, and a config of another model, are one line each (tracebacks, or a fit on the
    # warm-up update, or another model's times mixed with this one's memory)
    import shutil

    from torchhpc.ext.core.errors import InputError
    from torchhpc.ext.gems.simulator import calibration_from_run

    bad = tmp_path / "bad"
    shutil.copytree(run, bad)
    (bad / "summary.json").write_text("[1, 2]")
    with pytest.raises(InputError, match="summary.json is not a gems summary"):
        calibration_from_run(bad, None, bandwidth=1e9, latency=1e-6)
    shutil.copy(run / "summary.json", bad / "summary.json")
    (bad / "metrics.jsonl").write_text((run / "metrics.jsonl").read_text().splitlines()[0] + "\n")
    cut = cli_here("gems", "simulate", "--config", str(run / "config.yaml"), "--calibrate", str(bad), timeout=120)
    assert cut.returncode == 1 and "holds 1 update(s), fewer than the 3 timed" in cut.stderr, cut.stderr
    other = cli("gems", "simulate", "--config", str(run / "config.yaml"), "--model.width", "8", "--calibrate",
                str(run), timeout=120)
    assert other.returncode == 1 and "the run trained model.width = 4, the config has 8" in other.stderr, other.stderr
    assert len(other.stderr.strip().splitlines()) == 1

    first = _torchrun(2, ["--config", DEBUG, "--set", root, "--set", "run.run_id=cut", "--set", "train.steps=2"])
    assert first.returncode == 0, first.stderr[-3000:]
    again = _torchrun(2, ["--config", DEBUG, "--set", root, "--set", "run.run_id=cut", "--set", "run.resume=true"])
    assert again.returncode == 0, again.stderr[-3000:]
    assert _losses(tmp_path / "gems" / "cut") == pytest.approx(_losses(run), rel=1e-6)


def test_single_process_train_partition_and_simulate(cli_here, tmp_path):
    """A one-stage config trains in-process; `partition` prints the stage report; `simulate` predicts
    up to 1,024 devices."""
    res = cli_here("gems", "train", "--config", DEBUG, "--pipeline.stages", "1", "--train.steps", "2",
                   "--run.root", str(tmp_path), timeout=120)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.strip().splitlines()[-1])["samples_per_s"] > 0
    part = cli_here("gems", "partition", "--config", DEBUG, "--set", "pipeline.stages=3", timeout=120)
    assert part.returncode == 0, part.stderr
    assert "peak MiB" in part.stdout and len([ln for ln in part.stdout.splitlines() if ln.strip()[:1].isdigit()]) == 3
    sim = cli_here("gems", "simulate", "--config", DEBUG, "--devices", "2,1024", "--json", timeout=120)
    assert sim.returncode == 0, sim.stderr
    rows = json.loads(sim.stdout)
    assert {r["devices"] for r in rows} == {2, 1024} and {r["schedule"] for r in rows} == {"gpipe", "mast", "master"}
    # a per-update overhead of 50 ms is in every update (the exact sum is a simulator unit test; each
    # CLI call profiles again, so its stage times move); a negative one is a one-line error
    slow = cli_here("gems", "simulate", "--config", DEBUG, "--devices", "2,1024", "--json", "--overhead-ms", "50",
                    timeout=120)
    assert slow.returncode == 0, slow.stderr
    assert all(r["step_s"] >= 0.05 for r in json.loads(slow.stdout)) and min(r["step_s"] for r in rows) < 0.05
    bad = cli_here("gems", "simulate", "--config", DEBUG, "--overhead-ms", "-1", timeout=120)
    assert bad.returncode == 1 and "--overhead-ms" in bad.stderr and "Traceback" not in bad.stderr


def test_partition_and_simulate_profile_on_the_training_device(cli):
    """`partition` and `simulate` profile the blocks on --device, where training runs (they profiled on the CPU
    whatever it said): the report names the device, and CUDA asked for where there is none is one line; the
    training run's own keys typed there are named in a warning."""
    import torch

    part = cli("gems", "partition", "--config", DEBUG, "--device", "cpu", "--timeout-s", "5", "--set",
               "run.resume=true", timeout=120)
    assert part.returncode == 0 and ", profiled on cpu; " in part.stdout.splitlines()[0]
    # a training run's launch and folder keys, typed here, are named as not used (they did nothing silently)
    assert part.stderr.strip().splitlines() == [
        "torchhpc: warning: torchhpc gems partition does not use --timeout-s, --set run.resume (they set up a "
        "training run's processes and folder; this command runs here and writes none): ignored"]
    if not torch.cuda.is_available():
        for cmd in ("partition", "simulate"):
            res = cli("gems", cmd, "--config", DEBUG, "--device", "cuda", timeout=120)
            assert res.returncode == 1 and res.stderr.strip().splitlines() == [
                "torchhpc: error: device 'cuda' was requested but no CUDA device is available (use --device cpu)"]


def test_profiling_on_another_device_leaves_the_models_blocks_where_they_are():
    """Training profiles its own blocks on the rank's device: copies go there (here the meta device, which runs
    the same calls without data), the blocks the engine gets next stay on the CPU."""
    from torchhpc.ext.core.config import load_config
    from torchhpc.ext.gems.config import GemsConfig
    from torchhpc.ext.gems.training import build_model, profile

    cfg = load_config(GemsConfig, DEBUG)
    blocks = build_model(cfg)
    prof = profile(cfg, blocks, device="meta")
    assert len(prof.forward_s) == len(blocks) and prof.param_bytes.sum() > 0
    assert {p.device.type for b in blocks for p in b.parameters()} == {"cpu"}


def test_every_shipped_config_loads():
    """configs/gems/*.yaml all load into the typed config, with world sizes that match their torchrun commands."""
    from torchhpc.ext.core.config import load_config
    from torchhpc.ext.gems.config import GemsConfig

    sizes = {}
    for path in sorted((REPO / "configs/gems").glob("*.yaml")):
        cfg = load_config(GemsConfig, path)
        sizes[path.stem] = cfg.world_size
        assert f"--nproc-per-node {cfg.world_size}" in path.read_text()
    assert sizes["mast_resnet"] == 2 and sizes["hybrid_resnet"] == 4 and len(sizes) >= 5


def test_calibrate_on_a_folder_that_is_not_a_run_is_one_line(cli_here, tmp_path):
    """`gems simulate --calibrate DIR` on a folder without a run's summary.json stops with one line naming it."""
    res = cli_here("gems", "simulate", "--config", DEBUG, "--calibrate", str(tmp_path), timeout=120)
    assert res.returncode == 1 and "--calibrate" in res.stderr and "summary.json not found" in res.stderr
    assert "Traceback" not in res.stderr
