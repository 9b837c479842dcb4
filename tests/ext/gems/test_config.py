"""The gems options: one definition for the YAML files, the library and the generated flags."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from torchhpc.ext.core.cli import add_options, options_from_args
from torchhpc.ext.core.config import ConfigError, load_config
from torchhpc.ext.gems.config import GemsConfig, GemsDist, GemsSimulate, PipelineOptions

DEBUG = str(Path(__file__).resolve().parents[3] / "configs" / "gems" / "debug.yaml")


def _parse(cls, *argv):
    p = argparse.ArgumentParser()
    add_options(p, cls, config_file=True)
    return options_from_args(cls, p.parse_args(list(argv)))


def test_flags_config_file_and_set_agree():
    """`--pipeline.stages 3` equals `--set pipeline.stages=3`; a flag beats --set, which beats the file."""
    a = _parse(GemsConfig, "--pipeline.stages", "3", "--model.depth", "20")
    b = _parse(GemsConfig, "--set", "pipeline.stages=3", "--set", "model.depth=20")
    assert a == b and a.pipeline.stages == 3
    c = _parse(GemsConfig, "--config", DEBUG, "--set", "train.steps=7", "--train.steps", "9")
    assert c.train.steps == 9 and c.model.depth == 11


def test_simulate_options_keep_their_spellings_and_checks():
    """`gems simulate` keeps --devices, --latency, --overhead-ms ...; bad values are errors naming the flag."""
    cfg = _parse(GemsSimulate, "--devices", "2,8,64,1024", "--latency", "50", "--overhead-ms", "3", "--json")
    assert cfg.simulate.device_counts == [2, 8, 64, 1024] and cfg.simulate.latency == 50.0
    assert cfg.simulate.overhead_ms == 3.0 and cfg.simulate.json is True
    assert _parse(GemsSimulate, "--devices", "1024").simulate.device_counts == [1024]
    with pytest.raises(ConfigError, match="--devices must be comma-separated integers"):
        _parse(GemsSimulate, "--devices", "2,x")
    with pytest.raises(ConfigError, match="--devices must list positive device counts, got '2,,4'"):
        _parse(GemsSimulate, "--devices", "2,,4")  # an empty count was dropped without a word
    with pytest.raises(ConfigError, match="--schedules"):
        _parse(GemsSimulate, "--schedules", "mast,zero-bubble")
    with pytest.raises(ConfigError, match="--overhead-ms"):
        _parse(GemsSimulate, "--overhead-ms", "-1")


def test_train_command_checks_nproc_and_saves_the_job_alone():
    """--nproc (dist.nproc) must equal stages x groups; the job() a `gems simulate` config holds has no
    simulator section."""
    cfg = _parse(GemsConfig, "--config", DEBUG, "--nproc", "2")
    assert cfg.dist.nproc == 2 and cfg.job() is cfg
    with pytest.raises(ConfigError, match="--nproc 3 does not fit the config"):
        _parse(GemsConfig, "--config", DEBUG, "--nproc", "3")
    sim = _parse(GemsSimulate, "--config", DEBUG, "--devices", "2")
    assert type(sim.job()) is GemsConfig and sim.job() == load_config(GemsConfig, DEBUG)


def test_dist_options_keep_their_flags_and_gems_defaults():
    """--device, --threads, --timeout-s keep their spelling (now dist.*), with gems' defaults: the CPU, one
    thread per rank, 120 s; nproc follows the pipeline unless given."""
    cfg = _parse(GemsConfig, "--config", DEBUG)
    assert (cfg.dist.device, cfg.dist.threads, cfg.dist.nproc, cfg.dist.timeout_s) == ("cpu", 1, None, 120.0)
    cfg = _parse(GemsConfig, "--config", DEBUG, "--threads", "2", "--timeout-s", "30", "--device", "auto")
    assert (cfg.dist.device, cfg.dist.threads, cfg.dist.timeout_s) == ("auto", 2, 30.0)


def test_old_keys_load_with_one_warning_each(tmp_path, capsys):
    """`device`, `threads`, `timeout_s` (top level) and `launch.nproc` of older files and --set are now under
    `dist`: they still load, each with one deprecation line."""
    old = tmp_path / "old.yaml"
    old.write_text(Path(DEBUG).read_text() + "device: cpu\nthreads: 2\ntimeout_s: 60\nlaunch:\n  nproc: 2\n")
    capsys.readouterr()
    cfg = load_config(GemsConfig, old)
    assert (cfg.dist.device, cfg.dist.threads, cfg.dist.timeout_s, cfg.dist.nproc) == ("cpu", 2, 60.0, 2)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(x.startswith("torchhpc: warning:") and "is now 'dist." in x for x in err)
    cfg = load_config(GemsConfig, DEBUG, ["timeout_s=5"])
    assert cfg.dist.timeout_s == 5.0 and "'timeout_s' is now 'dist.timeout_s'" in capsys.readouterr().err


@pytest.mark.parametrize("build, words", [
    (lambda: GemsDist(threads=-1), "GemsDist: key 'threads'"),
    (lambda: GemsDist(timeout_s=0.0), "GemsDist: key 'timeout_s'"),
    (lambda: GemsDist(nproc=0), "GemsDist: key 'nproc'"),
    (lambda: GemsDist(device="tpu"), "GemsDist: key 'device'"),
    (lambda: PipelineOptions(stages=0), "PipelineOptions: key 'stages'"),
    (lambda: GemsConfig(dist=GemsDist(nproc=3)), "--nproc 3 does not fit the config"),
])
def test_options_built_in_python_are_range_checked(build, words):
    """A dataclass built in Python is range-checked like one read from a file."""
    with pytest.raises(ConfigError, match=words):
        build()


def test_benchmark_options_keep_their_spellings():
    """benchmarks/gems.py's flags come from GemsBench: --micro-batches 1,2 as before; a bad depth names --depth."""
    from torchhpc.ext.gems.config import GemsBench

    cfg = _parse(GemsBench, "--micro-batches", "1,2,4", "--depth", "20", "--deepspeed", "no")
    assert cfg.micro_batch_counts == [1, 2, 4] and cfg.depth == 20 and cfg.deepspeed == "no"
    assert _parse(GemsBench, "--micro-batches", "2").micro_batch_counts == [2]
    with pytest.raises(ConfigError, match="--depth 12"):
        _parse(GemsBench, "--depth", "12")


def test_master_repeats_mast_twice_unless_told():
    """schedule master with no eta runs 2 MAST repetitions per update (eta 1 would be MAST itself, which the
    README's `--set pipeline.schedule=master` example then ran); other schedules keep 1; a given eta stands."""
    assert load_config(GemsConfig, DEBUG, ["pipeline.schedule=master"]).pipeline.eta == 2
    assert load_config(GemsConfig, DEBUG).pipeline.eta == 1
    assert load_config(GemsConfig, DEBUG, ["pipeline.schedule=master", "pipeline.eta=3"]).pipeline.eta == 3


def test_several_processes_on_cuda_are_refused_before_the_process_group(monkeypatch):
    """The pipeline's point-to-point schedule tells messages apart by tags (gloo); NCCL does not match tags
    and its ranks would wait on each other: several processes on CUDA (or auto with a GPU) are one error
    before any process group exists; one process on CUDA, and several on the CPU, pass this check."""
    import torch

    from torchhpc.ext.core.errors import InputError
    from torchhpc.ext.gems import training

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(training, "build_data", lambda cfg: None)  # (the data is not what this checks)
    cfg = load_config(GemsConfig, DEBUG, ["run.run_id=null"])
    for device in ("cuda", "auto"):
        cfg.dist.device = device
        with pytest.raises(InputError, match="several processes runs on the CPU"):
            training.check_job(cfg, cfg.world_size)
    if cfg.world_size > 1:
        cfg.dist.device = "cpu"
        training.check_job(cfg, cfg.world_size)
