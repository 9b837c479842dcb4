"""The shared core every system stands on: errors, configs, run folders, device and distributed set-up.

Names are imported lazily, so that ``torchhpc --help`` and config checks do not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ConfigError": "errors", "DistributedError": "errors", "InputError": "errors", "TorchHPCError": "errors",
    "add_config_arguments": "config", "describe": "config", "dump_config": "config", "load_config": "config",
    "option": "config",
    "pick_device": "device",
    "DistContext": "distributed", "distributed": "distributed", "init_distributed": "distributed",
    "launched_by_torchrun": "distributed", "teardown_distributed": "distributed",
    "Run": "runs", "atomic_torch_save": "runs", "atomic_write_text": "runs",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
