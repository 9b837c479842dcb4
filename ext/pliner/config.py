"""Every option of pliner, written once: ``torchhpc pliner find`` flags and ``--help`` come from here.

* :class:`Precision` — one configuration of a model run (backend, autocast, matmul precision, device,
  determinism); :func:`parse_precision` reads the presets ``fp32``, ``autocast-bf16``, ``tf32``, ...
* :class:`SearchOptions` — the oracle's tolerance and metric, and how the culprits are searched.
* :class:`FindOptions` — ``torchhpc pliner find --model FILE.py:build_fn --problem autocast-bf16``.
* :class:`PlinerTour` — the ``torchhpc demo`` step (:func:`torchhpc.ext.pliner.demo.demo`).
"""

from __future__ import annotations

from dataclasses import dataclass

from torchhpc.ext.core.config import Options, option
from torchhpc.ext.core.errors import ConfigError


@dataclass(frozen=True)
class Precision(Options):
    """One configuration of a run of the same model on the same inputs (PLiNER's "compiler + flags")."""

    backend: str = option("eager", choices=["eager", "compile"], help="eager PyTorch or torch.compile")
    compile_backend: str = option("inductor", help="torch.compile backend when backend is compile")
    autocast: str = option("none", choices=["none", "bfloat16", "float16"],
                           help="torch.autocast lower-precision dtype (none: autocast off)")
    matmul: str = option("ieee", choices=["ieee", "tf32"],
                         help="matmul/conv precision: ieee float32, or tf32 (on CPU emulated by rounding the "
                              "float32 inputs of matmuls and convolutions to TF32's 10-bit mantissa)")
    device: str = option("cpu", choices=["cpu", "cuda"], help="where the model runs")
    deterministic: bool = option(False, help="torch.use_deterministic_algorithms during the run")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.backend == "compile" and self.matmul == "tf32" and self.device == "cpu":
            raise ConfigError("precision: tf32 is emulated on the CPU by intercepting eager matmuls; "
                              "it cannot be combined with backend=compile on the CPU")

    @property
    def name(self) -> str:
        """The shortest preset spelling of this configuration (``fp32``, ``autocast-bf16+compile``, ...)."""
        parts = []
        if self.autocast != "none":
            parts.append({"bfloat16": "autocast-bf16", "float16": "autocast-fp16"}[self.autocast])
        if self.matmul == "tf32":
            parts.append("tf32")
        if self.backend == "compile":
            parts.append("compile" if self.compile_backend == "inductor" else f"compile:{self.compile_backend}")
        if self.device == "cuda":
            parts.append("cuda")
        if self.deterministic:
            parts.append("deterministic")
        return "+".join(parts) or "fp32"


#: preset name -> the fields it sets; ``a+b`` combines presets (``autocast-bf16+compile``)
PRESETS: dict[str, dict] = {
    "fp32": {},
    "eager": {},
    "autocast-bf16": {"autocast": "bfloat16"},
    "bf16": {"autocast": "bfloat16"},
    "autocast-fp16": {"autocast": "float16"},
    "fp16": {"autocast": "float16"},
    "tf32": {"matmul": "tf32"},
    "compile": {"backend": "compile"},
    "cuda": {"device": "cuda"},
    "deterministic": {"deterministic": True},
}


def parse_precision(spec: str | Precision, what: str = "problem") -> Precision:
    """``"autocast-bf16+compile"`` -> :class:`Precision`; ``compile:aot_eager`` picks the compile backend.

    Raises:
        ConfigError: an unknown preset (the message lists the valid ones), an empty one, an argument to
            a preset other than compile, or two presets that set one field two ways.
    """
    if isinstance(spec, Precision):
        return spec
    fields: dict = {}
    parts = [p.strip() for p in str(spec).split("+")]
    if not any(parts) or not all(parts):
        raise ConfigError(f"--{what}: {str(spec)!r} has an empty configuration; give presets joined by + "
                          f"({', '.join(PRESETS)}), e.g. autocast-bf16+compile")
    for part in parts:
        name, colon, arg = part.partition(":")
        if name not in PRESETS:
            raise ConfigError(f"--{what}: unknown configuration {part!r}; valid: {', '.join(PRESETS)} "
                              "(combine with +, e.g. autocast-bf16+compile)")
        if colon and name != "compile":
            raise ConfigError(f"--{what}: {part!r}: only compile takes an argument (compile:BACKEND)")
        if colon and not arg:
            raise ConfigError(f"--{what}: {part!r}: name the torch.compile backend after the colon")
        for key, value in PRESETS[name].items():
            if key in fields and fields[key] != value:
                raise ConfigError(f"--{what}: {spec!r} sets {key} twice ({fields[key]} and {value}); keep one")
            fields[key] = value
        if name == "compile" and arg:
            fields["compile_backend"] = arg
    return Precision(**fields)


@dataclass
class SearchOptions(Options):
    """The divergence oracle and the culprit search."""

    tol: float = option(1e-3, gt=0, flag="--tol",
                        help="the two configurations agree when the divergence is at most this")
    metric: str = option("rel_l2", choices=["rel_l2", "max_abs", "max_rel"], flag="--metric",
                         help="divergence of the outputs: relative L2 norm, max absolute or max relative error")
    search: str = option("bisect", choices=["bisect", "ddmin"], flag="--search",
                         help="PLiNER's enhance-all-then-bisect, or delta debugging (ddmin) for interacting culprits")
    levels: str = option("module,line,op", flag="--levels",
                         help="search levels, coarse to fine, from module, line, op (comma-separated)")
    spread: int = option(12, ge=1, flag="--spread",
                         help="a fixing set larger than this is reported as status spread (no small culprit)")
    max_runs: int = option(2000, ge=1, flag="--max-runs", help="stop the search after this many runs (status out_of_runs)")
    check_minimal: bool = option(True, flag="--check-minimal", neg_flag="--no-check-minimal",
                                 help="check that removing any culprit breaks the fix (one run per culprit)")

    def __post_init__(self) -> None:
        super().__post_init__()
        bad = [lv for lv in self.levels.split(",") if lv.strip() not in ("module", "line", "op")]
        if bad or not self.levels.strip():
            raise ConfigError(f"levels: expected a comma-separated list of module, line, op; got {self.levels!r}")


@dataclass
class FindOptions(Options):
    """``torchhpc pliner find --model FILE.py:build_fn --problem autocast-bf16``."""

    model: str = option(help="MODULE:build_fn or FILE.py:build_fn; build_fn() returns (model, inputs)", flag="--model")
    reference: str = option("fp32", flag="--reference", help="reference configuration (presets joined by +)")
    problem: str = option("autocast-bf16", flag="--problem",
                          help="problem configuration: autocast-bf16, autocast-fp16, tf32, compile, cuda, "
                               "deterministic, or several joined by +")
    json: bool = option(False, flag="--json", help="print one JSON object instead of the report")
    search: SearchOptions = option(default_factory=SearchOptions, help="oracle and search")

    def __post_init__(self) -> None:
        super().__post_init__()
        if ":" not in self.model:
            raise ConfigError(f"model: expected MODULE:build_fn or FILE.py:build_fn, got {self.model!r}")
        parse_precision(self.reference, "reference")
        parse_precision(self.problem, "problem")


@dataclass
class PlinerTour(Options):
    """The demo step: find the op that makes a tiny transformer drift under bf16 autocast, and repair it."""

    tol: float = option(1e-2, gt=0, help="divergence tolerance (relative L2) of the demo")


__all__ = ["FindOptions", "PRESETS", "PlinerTour", "Precision", "SearchOptions", "parse_precision"]
