"""Every option of fperror, written once: ``torchhpc fperror analyze|trace`` flags and ``--help`` come from here.

* :class:`BoundOptions` — how the bound is computed (input rounding, abstraction, branch and bound, device).
* :class:`AnalyzeOptions` — ``torchhpc fperror analyze FILE``: a Satire/FPTaylor/FPCore file.
* :class:`TraceOptions` — ``torchhpc fperror trace module:function --ranges x=-1:1``.
* :class:`FperrorTour` — the ``torchhpc demo`` step (:func:`torchhpc.ext.fperror.demo.demo`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from torchhpc.ext.core.config import Options, option
from torchhpc.ext.core.errors import ConfigError

#: keys renamed since earlier versions (old -> new), for AnalyzeOptions and TraceOptions files and --set
_RENAMED = {"bound.time_budget": "bound.time_budget_s"}


@dataclass
class BoundOptions(Options):
    """How the bound is computed: the one set of settings (and defaults) of
    :func:`~torchhpc.ext.fperror.ops.analyze`, ``analyze_file``, ``bound`` and both commands."""

    inputs: str = option("exact", choices=["exact", "rounded"], flag="--inputs",
                         help="inputs exact, or rounded from reals (FPTaylor files: where a rounding applies to a real "
                              "variable, FPTaylor's semantics; others: to their declared precision)")
    abstraction: str = option("auto", flag="--abstraction",
                              help="off, auto (cut DAGs deeper than abstraction_depth levels, in the middle third) "
                                   "or MIN:MAX (cut once at the level in that window crossed by the fewest nodes; "
                                   "cut nodes carry their range and forward-propagated error)")
    abstraction_depth: int = option(500, ge=1, flag="--abstraction-depth", help="auto abstraction's depth threshold")
    linear: str = option("auto", choices=["auto", "on", "off"], flag="--linear",
                         help="closed-form (affine, double-double) ranges and adjoints for linear kernels; auto: when "
                              "nodes x inputs <= linear_max_work and the DAG is too big for branch and bound")
    linear_max_work: float = option(2e7, gt=0, flag="--linear-max-work",
                                    help="auto linear mode's limit on nodes x inputs (time grows with it)")
    rounding: str = option("standard", choices=["standard", "power2"], flag="--rounding",
                           help="each rounding errs by <= u|x| (standard) or <= u 2^floor(log2|x|), half an ulp of "
                                "x's binade (power2: FPTaylor's default improved model, up to 2x tighter)")
    device: str = option("cpu", choices=["cpu", "cuda"], flag="--device", help="where the interval passes run")
    bb_iters: int = option(60, ge=0, le=100000, flag="--bb-iters",
                           help="branch-and-bound rounds (0: one interval pass over the whole box)")
    bb_batch: int = option(512, ge=2, le=1 << 20, flag="--bb-batch", help="sub-boxes evaluated per round (one batch)")
    bb_tol: float = option(1e-3, gt=0, le=1, flag="--bb-tol",
                           help="stop when the bound is within this relative gap of a point's first-order error")
    bb_max_nodes: int = option(20000, ge=0, flag="--bb-max-nodes",
                               help="DAGs larger than this get one interval pass over the whole box")
    bb_max_inputs: int = option(12, ge=1, flag="--bb-max-inputs",
                                help="more free inputs than this: no branch and bound (bisection does not pay)")
    bb_max_outputs: int = option(16, ge=0, flag="--bb-max-outputs",
                                 help="more outputs than this: one interval pass instead of branch and bound")
    time_budget_s: float = option(20.0, gt=0, flag="--time-budget", help="seconds of branch and bound per file")
    top: int = option(5, ge=0, le=1000, flag="--top", help="culprit operations listed per output")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.abstraction_window()

    def updated(self, **overrides) -> BoundOptions:
        """A copy with ``overrides`` (field names) set, checked like any instance; ``self`` when none.

        Raises:
            TypeError: a name that is not a field.
            ConfigError: a value out of range.
        """
        return dataclasses.replace(self, **overrides) if overrides else self

    def abstraction_window(self) -> str | tuple[int, int]:
        """``"off"``/``"auto"`` or the ``(MIN, MAX)`` level window; ConfigError names the option."""
        spec = self.abstraction
        if spec in ("off", "auto"):
            return spec
        parts = spec.split(":")
        if len(parts) == 2 and all(p.strip().isdigit() for p in parts):
            lo, hi = int(parts[0]), int(parts[1])
            if 1 <= lo <= hi:
                return lo, hi
        raise ConfigError(f"abstraction: expected off, auto or MIN:MAX with 1 <= MIN <= MAX, got {spec!r}")


@dataclass
class AnalyzeOptions(Options):
    """``torchhpc fperror analyze FILE``."""

    RENAMED: ClassVar[dict[str, str]] = _RENAMED

    file: Path = option(positional=True, input_file=True, help="Satire, FPTaylor or FPCore file")
    format: str = option("auto", choices=["auto", "satire", "fptaylor", "fpcore"], flag="--format",
                         help="input language (auto: from the file's keywords)")
    json: bool = option(False, flag="--json", help="print one JSON object instead of the table")
    bound: BoundOptions = option(default_factory=BoundOptions, help="how the bound is computed")


@dataclass
class TraceOptions(Options):
    """``torchhpc fperror trace module:function --ranges x=-1:1,y=0:2``."""

    RENAMED: ClassVar[dict[str, str]] = _RENAMED

    target: str = option(positional=True, help="module:function (the module is imported; a .py path works too)")
    ranges: str = option("", flag="--ranges", help="input ranges by argument name: x=-1:1,y=0:2")
    shapes: str = option("", flag="--shapes", help="tensor shapes by argument name: x=8x8,y=8 (scalars if absent)")
    dtype: str = option("float64", choices=["float64", "float32", "float16"], flag="--dtype",
                        help="the precision the function runs in")
    json: bool = option(False, flag="--json", help="print one JSON object instead of the table")
    bound: BoundOptions = option(default_factory=BoundOptions, help="how the bound is computed")

    def __post_init__(self) -> None:
        super().__post_init__()
        if ":" not in self.target:
            raise ConfigError(f"target: expected module:function, got {self.target!r}")


@dataclass
class FperrorTour(Options):
    """The demo step: bound three FPBench kernels and a torch softmax; sampled errors must stay below."""

    samples: int = option(200, ge=10, le=100000, help="random points per kernel for the soundness check")


__all__ = ["AnalyzeOptions", "BoundOptions", "FperrorTour", "TraceOptions"]
