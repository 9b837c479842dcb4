"""sched's options: the renamed keys of the `dist` section still load (with a warning), the shipped configs use
the new ones, and options built in Python are range-checked like loaded ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchhpc.ext.core.config import ConfigError, load_config
from torchhpc.ext.sched.config import EnvOptions, PPOOptions, SchedConfig, SchedDist, SchedTour, WindowOptions
from torchhpc.ext.sched.lublin import LublinParams

CONFIGS = sorted((Path(__file__).resolve().parents[3] / "configs" / "sched").glob("*.yaml"))


def test_old_top_level_device_and_threads_load_into_dist_with_a_warning(tmp_path, capsys):
    """`threads:` and `device:` at the top level (before the `dist` section) load as dist.threads and
    dist.device, with one warning line each naming the new key; so does `--set threads=...`."""
    old = tmp_path / "old.yaml"
    old.write_text("ppo:\n  epochs: 1\ndevice: cpu\nthreads: 2\n")
    cfg = load_config(SchedConfig, old)
    assert (cfg.dist.device, cfg.dist.threads, cfg.ppo.epochs) == ("cpu", 2, 1)
    warns = capsys.readouterr().err.strip().splitlines()
    assert len(warns) == 2 and all(w.startswith("torchhpc: warning: ") for w in warns)
    assert "'threads' is now 'dist.threads'" in warns[1] and "'device' is now 'dist.device'" in warns[0]
    cfg = load_config(SchedConfig, None, ["threads=3"])
    assert cfg.dist.threads == 3 and "'threads' is now 'dist.threads'" in capsys.readouterr().err
    both = tmp_path / "both.yaml"
    both.write_text("threads: 2\ndist:\n  threads: 1\n")
    with pytest.raises(ConfigError, match="keep 'dist.threads'"):
        load_config(SchedConfig, both)


def test_dist_defaults_keep_the_cpu_and_a_600_s_timeout():
    """sched's dist section: the CPU (the simulator is CPU-bound), torch's thread count, one process, 600 s."""
    d = SchedConfig().dist
    assert (d.device, d.threads, d.nproc, d.timeout_s) == ("cpu", 0, 1, 600.0)


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_shipped_configs_use_the_new_keys(path, capsys):
    """Every shipped config loads without a renamed-key warning."""
    load_config(SchedConfig, path)
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize("build, key", [
    (lambda: PPOOptions(epochs=-1), "epochs"),
    (lambda: PPOOptions(clip=0.0), "clip"),
    (lambda: EnvOptions(backfill="fifo"), "backfill"),
    (lambda: SchedDist(threads=-1), "threads"),
    (lambda: SchedDist(timeout_s=0.0), "timeout_s"),
    (lambda: WindowOptions(length=0), "length"),
    (lambda: SchedTour(jobs=10), "jobs"),
    (lambda: LublinParams(procs=0), "procs"),
], ids=["epochs", "clip", "backfill", "threads", "timeout", "window-length", "tour-jobs", "lublin-procs"])
def test_options_built_in_python_are_range_checked(build, key):
    """An out-of-range value given in Python is the ConfigError a config file would get, naming the key."""
    with pytest.raises(ConfigError, match=f"key '{key}'"):
        build()
