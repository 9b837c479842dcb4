"""``torchhpc fperror``: rigorous bounds on the round-off error of straight-line floating-point code.

    torchhpc fperror analyze doppler1.txt                      # Satire / FPTaylor / FPCore, format detected
    torchhpc fperror analyze fft_1024pt_sat.txt --json         # one JSON object
    torchhpc fperror analyze kepler0.txt --inputs rounded      # FPTaylor's convention: inputs rounded
    torchhpc fperror analyze lorentz_70_sat.txt --abstraction 100:200   # Satire's abstraction, one cut
    torchhpc fperror analyze fdtd1d_100_32.txt --linear on     # closed-form ranges for a linear kernel
    torchhpc fperror trace mymodule:step --ranges u=0:1 --shapes u=64 --dtype float32

Prints per output the absolute and relative bound, the value range, the part of the bound beyond
first order, and the operations contributing most (with their line). Every option is defined in
torchhpc.ext.fperror.config (AnalyzeOptions, TraceOptions); --config FILE takes them as YAML.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from torchhpc.ext.core.cli import command_group, config_command, subcommands_main
from torchhpc.ext.core.errors import ConfigError, InputError
from torchhpc.ext.fperror.config import AnalyzeOptions, TraceOptions


def run_analyze(opts: AnalyzeOptions) -> int:
    """``torchhpc fperror analyze FILE``."""
    from torchhpc.ext.fperror.api import analyze_file

    res = analyze_file(opts.file, opts.format, opts.bound, progress=not opts.json and sys.stderr.isatty())
    print(json.dumps(res.as_json()) if opts.json else res.table(opts.bound.top))
    return 0


def _pairs(spec: str, what: str) -> dict[str, str]:
    out = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        if "=" not in item:
            raise ConfigError(f"--{what}: expected name=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _load_function(target: str):
    mod_name, fn_name = target.rsplit(":", 1)
    try:
        if mod_name.endswith(".py"):
            spec = importlib.util.spec_from_file_location(Path(mod_name).stem, mod_name)
            if spec is None or spec.loader is None:
                raise ImportError(mod_name)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        else:
            mod = importlib.import_module(mod_name)
    except (ImportError, FileNotFoundError) as exc:
        raise InputError(f"cannot import {mod_name!r}: {exc}") from None
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise InputError(f"{mod_name} has no function {fn_name!r}")
    return fn


def run_trace(opts: TraceOptions) -> int:
    """``torchhpc fperror trace module:function --ranges x=lo:hi``."""
    import torch

    from torchhpc.ext.fperror.api import bound

    ranges = {}
    for k, v in _pairs(opts.ranges, "ranges").items():
        try:
            lo, hi = (float(x) for x in v.split(":"))
        except ValueError:
            raise ConfigError(f"--ranges: expected {k}=LO:HI, got {k}={v}") from None
        ranges[k] = (lo, hi)
    if not ranges:
        raise ConfigError("--ranges: give a range for every argument, e.g. --ranges x=-1:1")
    shapes = {}
    for k, v in _pairs(opts.shapes, "shapes").items():
        try:
            shapes[k] = tuple(int(x) for x in v.split("x"))
        except ValueError:
            raise ConfigError(f"--shapes: expected {k}=8x8, got {k}={v}") from None
    res = bound(_load_function(opts.target), ranges, shapes, getattr(torch, opts.dtype), opts.bound)
    print(json.dumps(res.as_json()) if opts.json else res.table(opts.bound.top))
    return 0


def _add_commands(group) -> None:
    config_command(group, "analyze", AnalyzeOptions, run_analyze, config_file=True,
                   help="bound every output of a Satire, FPTaylor or FPCore file")
    config_command(group, "trace", TraceOptions, run_trace, config_file=True,
                   help="bound a PyTorch function's round-off over input ranges")


def register(sub) -> None:
    _add_commands(command_group(sub, "fperror", description=__doc__,
                                help="rigorous round-off error bounds (Satire/FPTaylor/FPCore files, torch code)"))


def main(argv: Sequence[str] | None = None) -> int:
    return subcommands_main("torchhpc.trainers.fperror", _add_commands, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
