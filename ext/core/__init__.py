"""The shared core every system stands on.

errors (one-line user errors and warnings), config (options as documented dataclasses, YAML, the
shared ``dist`` section), cli (flags and --help generated from those dataclasses; the end of every
entry point), runs (run folders, atomic checkpoints, the newest intact one, the run id agreed across
torchrun ranks), launch (relaunching a command's job under torchrun), dispatch (which backend runs),
device and distributed (torchrun set-up, rank helpers), budgets (what a GPU path may ask of the host,
declared beside it) and hostsync (those syncs and launches, counted on the CPU), lazy (names and
modules imported on first use), data (where the shared test data lives), paths (inputs and outputs checked before work starts; text read
plain or gzipped with any line ending), bench (the benchmark harness).

Names are imported lazily, so that ``torchhpc --help`` and config checks do not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ConfigError": "errors", "DistributedError": "errors", "InputError": "errors", "TorchHPCError": "errors",
    "warn": "errors",
    "DistOptions": "config", "Options": "config",
    "add_config_arguments": "config", "describe": "config", "dump_config": "config", "load_config": "config",
    "option": "config",
    "JobError": "launch", "relaunch": "launch", "torchrun": "launch",
    "HostBudget": "budgets", "HostWork": "budgets", "count_host_work": "hostsync",
    "shared_data_dir": "data",
    "check_input": "paths", "check_output": "paths", "open_text": "paths",
    "checkpoint_files": "runs", "newest_intact": "runs", "torchrun_rank": "distributed",
    "pick_device": "device",
    "UserFunction": "usercode", "describe_exception": "usercode", "load_function": "usercode",
    "DistContext": "distributed", "distributed": "distributed", "init_distributed": "distributed",
    "launched_by_torchrun": "distributed", "teardown_distributed": "distributed", "fail_on_every_rank": "distributed",
    "Run": "runs", "RunOptions": "runs", "agree": "runs", "atomic_torch_save": "runs", "atomic_write_text": "runs",
    "open_run": "runs",
    "ArgumentParser": "cli", "add_options": "cli", "config_command": "cli", "module_main": "cli",
    "options_from_args": "cli", "run_main": "cli",
    "check_backend": "dispatch", "numba_available": "dispatch", "resolve_backend": "dispatch",
    "triton_available": "dispatch",
    "Timing": "bench", "bar_plot": "bench", "time_interleaved": "bench", "write_results": "bench",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
