"""The shared core every system stands on: errors, configs, run folders, device and distributed set-up."""

from .config import add_config_arguments, describe, dump_config, load_config, option
from .device import pick_device
from .distributed import (
    DistContext,
    distributed,
    init_distributed,
    launched_by_torchrun,
    teardown_distributed,
)
from .errors import ConfigError, DistributedError, InputError, TorchHPCError
from .runs import Run, atomic_torch_save, atomic_write_text

__all__ = [
    "ConfigError",
    "DistContext",
    "DistributedError",
    "InputError",
    "Run",
    "TorchHPCError",
    "add_config_arguments",
    "atomic_torch_save",
    "atomic_write_text",
    "describe",
    "distributed",
    "dump_config",
    "init_distributed",
    "launched_by_torchrun",
    "load_config",
    "option",
    "pick_device",
    "teardown_distributed",
]
