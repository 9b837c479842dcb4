"""The oracle: run the same model in a reference and a problem configuration, measure the divergence.

A :class:`~torchhpc.ext.pliner.config.Precision` is applied by :func:`precision_context` (autocast,
TF32, determinism) and :func:`prepare` (device, torch.compile).  On the CPU, TF32 matmuls are
emulated by :class:`TF32Emulation`: the float32 inputs of every matmul and convolution are rounded
to TF32 (1 sign, 8 exponent, 10 mantissa bits, round to nearest even) and the product is computed
in float32 — what tensor cores do on an A100/H100.  float64 inputs (an enhanced region) pass untouched.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import time
from collections.abc import Callable, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from torchhpc.ext.core.errors import ConfigError, InputError, TorchHPCError
from torchhpc.ext.core.usercode import describe_exception

from .config import Precision

aten = torch.ops.aten

#: the ops whose float32 inputs tensor cores round to TF32
TF32_OPS = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default,
            aten.convolution.default, aten._convolution.default, aten.addbmm.default}


def round_to_tf32(x: torch.Tensor) -> torch.Tensor:
    """Round float32 ``x`` to the nearest TF32 value (10 mantissa bits, ties to even), kept as float32."""
    b = x.contiguous().view(torch.int32)
    b = (b + 0x0FFF + ((b >> 13) & 1)) & ~0x1FFF
    return b.view(torch.float32).view_as(x)


class TF32Emulation(TorchDispatchMode):
    """Round the float32 operands of matmuls and convolutions to TF32 (the CPU stand-in for tensor cores)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in TF32_OPS:
            def rnd(t):
                return round_to_tf32(t) if isinstance(t, torch.Tensor) and t.dtype == torch.float32 else t
            args, kwargs = tree_map(rnd, args), tree_map(rnd, kwargs)
        return func(*args, **kwargs)


@contextlib.contextmanager
def precision_context(cfg: Precision):
    """The numerical settings of ``cfg`` for the duration of a run (restored afterwards)."""
    with contextlib.ExitStack() as stack:
        if cfg.autocast != "none":
            stack.enter_context(torch.autocast(cfg.device, dtype=getattr(torch, cfg.autocast)))
        if cfg.device == "cuda":
            # matmuls through set_float32_matmul_precision, the API a user's own setting ("medium", say) is made
            # with: torch 2.13 refuses to read the precision back once the older allow_tf32 flag was written over it
            old = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)
            on = cfg.matmul == "tf32"
            torch.set_float32_matmul_precision("high" if on else "highest")
            torch.backends.cudnn.allow_tf32 = on
            stack.callback(lambda: _restore_tf32(old))
        elif cfg.matmul == "tf32":
            stack.enter_context(TF32Emulation())
        if cfg.deterministic:
            old_det = torch.are_deterministic_algorithms_enabled()
            torch.use_deterministic_algorithms(True)
            stack.callback(lambda: torch.use_deterministic_algorithms(old_det))
        yield


def _restore_tf32(old) -> None:
    torch.set_float32_matmul_precision(old[0])
    torch.backends.cudnn.allow_tf32 = old[1]


def check_device(cfg: Precision) -> None:
    """Raise :class:`ConfigError` when ``cfg`` asks for CUDA and there is none."""
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"configuration {cfg.name}: device cuda asked for, but no CUDA device is available")


def to_device(x, device: str):
    """Move every tensor of the pytree ``x`` to ``device``."""
    return tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, x)


def elsewhere(module: torch.nn.Module, device: str) -> bool:
    """Whether a parameter or buffer of ``module`` lives on another device type than ``device``."""
    return any(t.device.type != device for t in itertools.chain(module.parameters(), module.buffers()))


def prepare(fn: Callable, cfg: Precision) -> Callable:
    """``fn`` as ``cfg`` runs it: a copy on its device for a CUDA configuration (the user's model, wherever it
    is, on whichever GPU, is left as it was), a copy on the CPU for a CPU one when the model was built
    elsewhere; wrapped by torch.compile when asked."""
    check_device(cfg)
    if isinstance(fn, torch.nn.Module) and (cfg.device != "cpu" or elsewhere(fn, "cpu")):
        fn = copy.deepcopy(fn).to(cfg.device)  # Module.to moves in place: leave the user's model where it is
    if cfg.backend == "compile":
        torch._dynamo.reset()  # every enhanced variant is a new program: compile it afresh
        fn = torch.compile(fn, backend=cfg.compile_backend, dynamic=False)
    return fn


def run_config(fn: Callable, inputs: Sequence, cfg: Precision):
    """Run ``fn(*inputs)`` under ``cfg``; the outputs come back on the CPU."""
    fn = prepare(fn, cfg)
    args = to_device(tuple(inputs), cfg.device)
    with torch.no_grad(), precision_context(cfg):
        out = fn(*args)
    return to_device(out, "cpu")


def flat_outputs(out) -> list[torch.Tensor]:
    """The floating tensors of an output pytree, in order (what the divergence is measured on)."""
    leaves, _ = tree_flatten(out)
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.is_floating_point()]


def divergence(ref, out, metric: str = "rel_l2") -> float:
    """Divergence of ``out`` from ``ref`` (two output pytrees), in float64.

    ``rel_l2``: ``||out - ref||_2 / ||ref||_2`` over all outputs together; ``max_abs``: the largest
    absolute difference; ``max_rel``: the largest ``|out - ref| / max(|ref|, tiny)``.  A NaN or inf in
    one output and not the other is an infinite divergence.

    Raises:
        InputError: the outputs differ in number or shape.
    """
    r, o = flat_outputs(ref), flat_outputs(out)
    if len(r) != len(o):
        raise InputError(f"the two configurations return {len(r)} and {len(o)} floating outputs")
    if not r:
        raise InputError("the model returns no floating-point tensor: nothing to compare")
    for i, (a, b) in enumerate(zip(r, o, strict=True)):
        if a.shape != b.shape:
            raise InputError(f"output {i} has shape {tuple(a.shape)} in the reference and {tuple(b.shape)} "
                             "in the problem configuration")
    a = torch.cat([t.detach().double().reshape(-1) for t in r])
    b = torch.cat([t.detach().double().reshape(-1) for t in o])
    fa, fb = torch.isfinite(a), torch.isfinite(b)
    if not torch.equal(fa, fb) or not torch.equal(a[~fa], b[~fb]):
        return float("inf")
    a, b = a[fa], b[fb]
    d = (b - a).abs()
    if metric == "max_abs":
        return float(d.max()) if d.numel() else 0.0
    if metric == "max_rel":
        return float((d / a.abs().clamp_min(torch.finfo(torch.float32).tiny)).max()) if d.numel() else 0.0
    den = float(torch.linalg.vector_norm(a))
    num = float(torch.linalg.vector_norm(d))
    return num / den if den > 0 else num


class Oracle:
    """Counts and caches runs of the problem configuration with a set of regions enhanced.

    Args:
        run: ``atoms (frozenset) -> outputs`` of the problem configuration with ``atoms`` in float64.
        reference: the reference configuration's outputs.
        tol: agreement threshold on the divergence.
        metric: ``rel_l2`` / ``max_abs`` / ``max_rel``, or a callable ``(ref, out) -> float``.
        max_runs: a run beyond this raises :class:`RunBudgetExceeded`.
    """

    def __init__(self, run: Callable, reference, tol: float, metric: str | Callable = "rel_l2",
                 max_runs: int = 10**9):
        self._run, self.reference, self.tol, self.metric, self.max_runs = run, reference, tol, metric, max_runs
        self.cache: dict[frozenset, float] = {}
        self.runs = 0
        self.seconds = 0.0

    def error(self, atoms) -> float:
        """The divergence with ``atoms`` enhanced (one run, unless this set was run before)."""
        key = frozenset(atoms)
        if key not in self.cache:
            if self.runs >= self.max_runs:
                raise RunBudgetExceeded(self.runs)
            t0 = time.perf_counter()
            try:
                out = self._run(key)
            except TorchHPCError:
                raise
            except Exception as exc:  # noqa: BLE001 - the user's model failing with part of it in float64
                raise InputError(f"the model fails with {len(key)} region(s) run in float64: {describe_exception(exc)} "
                                 "(a tensor the model keeps as a plain attribute, not a parameter or buffer, stays "
                                 "float32: register it as a buffer)") from exc
            m = self.metric
            self.cache[key] = float(m(self.reference, out)) if callable(m) else divergence(self.reference, out, m)
            self.seconds += time.perf_counter() - t0
            self.runs += 1
        return self.cache[key]

    def fixes(self, atoms) -> bool:
        """True when enhancing ``atoms`` brings the divergence to at most the tolerance."""
        return self.error(atoms) <= self.tol


class RunBudgetExceeded(RuntimeError):
    """The search used its ``max_runs``."""


__all__ = ["Oracle", "RunBudgetExceeded", "TF32Emulation", "check_device", "divergence", "elsewhere", "flat_outputs",
           "precision_context", "prepare", "round_to_tf32", "run_config"]
