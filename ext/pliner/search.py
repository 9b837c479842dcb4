"""PLiNER's guided search (SC20, §III-C): enhance everything, then bisect, coarse to fine.

1. Run the reference and the problem configuration; if they agree there is nothing to find.
2. Enhance the whole model (every op in float64): if that does not bring the divergence under the
   tolerance, no region can, and the search stops (``not_fixable``).
3. Level by level — module subtrees (descending the module tree), then the source lines inside the
   isolated modules, then the FX (aten) nodes of those lines — replace each kept region by its
   sub-regions and keep the smallest subset that still fixes the divergence, by bisection:
   if enhancing one half fixes it, recurse into that half; if neither half alone does, both hold
   culprits: isolate the first half with the second enhanced, then the second with what was kept
   of the first (so interacting culprits are found too).  ``search="ddmin"`` uses Zeller's delta
   debugging instead of the bisection.
4. Check minimality: removing any one culprit must break the fix (one run each; a culprit whose
   removal keeps the fix is dropped and the check repeated).

Every run of the problem configuration is counted by the :class:`~torchhpc.ext.pliner.oracle.Oracle`;
a repeated set is served from its cache and not counted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from torchhpc.ext.core.errors import ConfigError, InputError, TorchHPCError
from torchhpc.ext.core.usercode import describe_exception

from .config import Precision, SearchOptions, parse_precision
from .oracle import Oracle, RunBudgetExceeded, check_device, flat_outputs, run_config
from .program import GraphProgram, ModuleProgram, Region, short_line
from .recipe import Recipe


def _atoms(regions: Sequence[Region]) -> frozenset:
    out: set = set()
    for r in regions:
        out |= r.atoms
    return frozenset(out)


def bisect(oracle: Oracle, cands: list[Region], fixed: frozenset = frozenset()) -> list[Region]:
    """A subset of ``cands`` that, enhanced with ``fixed``, fixes the divergence (PLiNER's bisection).

    Precondition: ``fixed`` plus all of ``cands`` fixes it.
    """
    if len(cands) <= 1:
        return list(cands)
    half = len(cands) // 2
    a, b = cands[:half], cands[half:]
    if oracle.fixes(fixed | _atoms(a)):
        return bisect(oracle, a, fixed)
    if oracle.fixes(fixed | _atoms(b)):
        return bisect(oracle, b, fixed)
    kept_a = bisect(oracle, a, fixed | _atoms(b))  # both halves hold culprits
    kept_b = bisect(oracle, b, fixed | _atoms(kept_a))
    return kept_a + kept_b


def ddmin(oracle: Oracle, cands: list[Region], fixed: frozenset = frozenset()) -> list[Region]:
    """Zeller and Hildebrandt's ddmin: a 1-minimal subset of ``cands`` that (with ``fixed``) fixes it."""
    cands, n = list(cands), 2
    while len(cands) >= 2:
        size = len(cands) / n
        chunks = [cands[round(i * size):round((i + 1) * size)] for i in range(n)]
        chunks = [c for c in chunks if c]
        for c in chunks:  # reduce to a subset
            if oracle.fixes(fixed | _atoms(c)):
                cands, n = c, 2
                break
        else:
            for c in chunks:  # reduce to a complement
                rest = [r for r in cands if r not in c]
                if len(chunks) > 2 and oracle.fixes(fixed | _atoms(rest)):
                    cands, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(cands):
                    break
                n = min(2 * n, len(cands))
    return cands


@dataclass
class FindResult:
    """What :func:`find` returns: the status, the culprits, the errors and the cost of the search."""

    status: str  # found | no_divergence | not_fixable | spread | out_of_runs
    message: str
    reference: str
    problem: str
    metric: str
    tol: float
    engine: str  # graph (FX nodes) | module (model FX could not capture)
    error_before: float
    error_all: float | None = None
    error_after: float | None = None
    runs: int = 0
    seconds: float = 0.0
    n_candidates: int = 0
    minimal: bool | None = None
    culprits: list[dict] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)
    levels: list[dict] = field(default_factory=list)
    recipe: Recipe | None = None
    recipe_error: float | None = None
    atoms: frozenset = frozenset()

    def as_json(self) -> dict:
        d = {k: getattr(self, k) for k in ("status", "message", "reference", "problem", "metric", "tol", "engine",
                                           "error_before", "error_all", "error_after", "runs", "seconds",
                                           "n_candidates", "minimal", "culprits", "modules", "levels",
                                           "recipe_error")}
        d["recipe"] = self.recipe.as_json() if self.recipe else None
        for k in ("error_before", "error_all", "error_after", "recipe_error"):
            if d[k] is not None and d[k] != d[k] or d[k] in (float("inf"), float("-inf")):
                d[k] = str(d[k])  # strict JSON has no inf / nan
        return d

    def report(self) -> str:
        """The human-readable report."""
        out = [f"pliner: {self.problem} vs {self.reference}: {self.status} — {self.message}",
               f"  divergence ({self.metric}) before {self.error_before:.3e}"
               + (f", all enhanced {self.error_all:.3e}" if self.error_all is not None else "")
               + (f", culprits enhanced {self.error_after:.3e}" if self.error_after is not None else "")
               + f"  (tol {self.tol:g})",
               f"  {self.runs} runs, {self.seconds:.2f} s, {self.n_candidates} candidate "
               f"{'ops' if self.engine == 'graph' else 'modules'}"
               + ("" if self.minimal is None else f", minimal: {'yes (checked)' if self.minimal else 'no'}")]
        if self.culprits:
            out.append("  candidates (not isolated: the runs ran out):" if self.status == "out_of_runs"
                       else "  culprits:")
            for c in self.culprits:
                if self.engine == "graph":
                    out.append(f"    {c['node']:<16} {c['op']:<24} {c['module']:<24} {short_line(c['line'])}"
                               f"  {c['code']}")
                else:
                    out.append(f"    module {c['module']} ({c['module_type']})")
        if self.status == "found" and not self.recipe:
            out.append("  recipe: none verified (line recipes need eager mode; under torch.compile move the culprit "
                       "code into a submodule and wrap it with HighPrecision)" if self.engine == "graph" else
                       "  recipe: none verified (wrapping the culprit modules with HighPrecision did not bring the "
                       "divergence under the tolerance)")
        if self.recipe:
            out.append(f"  recipe (keep in float64): modules={self.recipe.modules} "
                       f"lines={[short_line(ln) for ln in self.recipe.lines]}"
                       + (f" -> divergence {self.recipe_error:.3e}" if self.recipe_error is not None else ""))
        return "\n".join(out)


def build_program(model: torch.nn.Module, inputs: Sequence, problem: Precision):
    """:class:`GraphProgram` when torch.export captures the model, else :class:`ModuleProgram`."""
    import logging

    try:
        logging.disable(logging.CRITICAL)  # a model export cannot capture is expected: no log spew
        with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return GraphProgram(model, inputs, problem)
    except Exception as exc:  # noqa: BLE001 - any capture failure falls back to module granularity
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return ModuleProgram(model, inputs, problem, reason=f"{type(exc).__name__}: {reason}")
    finally:
        logging.disable(logging.NOTSET)


def _run_checked(model, inputs, cfg: Precision, what: str):
    """``model(*inputs)`` under ``cfg``; the user's model failing is one InputError line (where it failed)."""
    try:
        return run_config(model, inputs, cfg)
    except TorchHPCError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's model failing is bad input, one line
        raise InputError(f"the model fails under the {what} configuration {cfg.name}: "
                         f"{describe_exception(exc)}") from exc


def _check_finite_reference(ref_out, cfg: Precision) -> None:
    """A reference with NaN or inf outputs leaves nothing to measure the divergence against.

    Raises:
        InputError: how many values are NaN / infinite, in the reference configuration's outputs.
    """
    outs = flat_outputs(ref_out)
    total = sum(t.numel() for t in outs)
    nan = sum(int(torch.isnan(t).sum()) for t in outs)
    inf = sum(int(torch.isinf(t).sum()) for t in outs)
    if nan or inf:
        raise InputError(f"the reference configuration {cfg.name} is not finite: {nan} NaN and {inf} infinite "
                         f"values among the model's {total} outputs, so there is no reference to compare with "
                         "(fix the model or its inputs, or choose another --reference)")


def _check_repeatable(model, inputs, cfg: Precision, ref_out, tol: float, metric) -> None:
    """A second run of the reference agrees with the first to a tenth of the tolerance: a model whose runs
    differ by themselves (dropout in train mode, an unseeded random op) has no divergence to attribute to
    precision.  (A GPU's non-deterministic reductions differ far less than that.)

    Raises:
        InputError: how much the two runs differ, and the usual cause.
    """
    from .oracle import divergence

    again = _run_checked(model, inputs, cfg, "reference")
    a, b = flat_outputs(ref_out), flat_outputs(again)
    if len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b, strict=True)):
        return
    if len(a) == len(b) and all(x.shape == y.shape for x, y in zip(a, b, strict=True)):
        gap = float(metric(ref_out, again)) if callable(metric) else divergence(ref_out, again, metric)
        if gap <= tol / 10:
            return
    else:
        gap = float("nan")
    train = [n for n, m in model.named_modules() if m.training and isinstance(m, torch.nn.modules.dropout._DropoutNd)]
    why = (f"the model is in train mode with dropout ({', '.join(train[:3]) or 'the root'}): return model.eval() "
           "from the build function") if train else "an unseeded random op, or an op that is not deterministic"
    raise InputError(f"two runs of the reference configuration {cfg.name} differ by {gap:.3e} (more than a tenth "
                     f"of the tolerance): {why}; a search needs a model that repeats itself")


def find(model: torch.nn.Module, inputs: Sequence | torch.Tensor, *, reference: str | Precision = "fp32",
         problem: str | Precision = "autocast-bf16", options: SearchOptions | None = None,
         metric: Callable | str | None = None, progress: Callable[[str], None] | None = None,
         program=None, **search_options) -> FindResult:
    """Find the smallest set of regions whose float64 enhancement makes ``problem`` agree with ``reference``.

    Args:
        model: the model; ``model(*inputs)`` is run in both configurations.
        inputs: a tensor or a tuple of positional inputs.
        reference, problem: configurations (:class:`Precision` or preset strings such as ``"tf32"``).
        options: tolerance, metric, search and levels (:class:`SearchOptions`).
        metric: a callable ``(ref_outputs, outputs) -> float`` replacing ``options.metric``, or the name of
            one of :class:`SearchOptions`' metrics.
        search_options: fields of :class:`SearchOptions` over ``options`` (``tol=1e-2``, ``search="ddmin"``),
            checked as the command line checks them.
        progress: called with one line per search level.
        program: a prepared program (e.g. the benchmark's), else built here.

    Raises:
        InputError: the model fails in a configuration, the reference's outputs are not finite, or the
            outputs differ in number or shape.
        ConfigError: a configuration asks for CUDA where there is none, a bad preset, or a search option
            that :class:`SearchOptions` does not have or refuses.
    """
    opts = options or SearchOptions()
    if isinstance(metric, str):
        search_options["metric"], metric = metric, None
    if search_options:
        from torchhpc.ext.core.config import load_config

        known = {f.name for f in dataclasses.fields(SearchOptions)}
        unknown = sorted(set(search_options) - known)
        if unknown:
            raise ConfigError(f"find(): unknown search option(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        # over ``options``, typed and range-checked as the command line's values are
        values = {**dataclasses.asdict(opts), **search_options}
        opts = load_config(SearchOptions, None, [("find()", [k], v) for k, v in values.items()])
    ref_cfg, prob_cfg = parse_precision(reference, "reference"), parse_precision(problem, "problem")
    check_device(ref_cfg)
    check_device(prob_cfg)
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    say = progress or (lambda _m: None)
    t0 = time.perf_counter()
    ref_out = _run_checked(model, inputs, ref_cfg, "reference")
    _check_finite_reference(ref_out, ref_cfg)
    _check_repeatable(model, inputs, ref_cfg, ref_out, opts.tol, metric or opts.metric)
    plain = _run_checked(model, inputs, prob_cfg, "problem")
    from .oracle import divergence
    before = float(metric(ref_out, plain)) if metric else divergence(ref_out, plain, opts.metric)
    res = FindResult("found", "", reference=ref_cfg.name, problem=prob_cfg.name,
                     metric=getattr(metric, "__name__", opts.metric), tol=opts.tol, engine="graph",
                     error_before=before, runs=1)
    if before <= opts.tol:
        res.seconds = time.perf_counter() - t0
        res.status, res.message = "no_divergence", (f"the configurations already agree (divergence {before:.3e} "
                                                    f"<= tol {opts.tol:g})")
        return res
    prog = program or build_program(model, inputs, prob_cfg)
    oracle = Oracle(prog.run, ref_out, opts.tol, metric or opts.metric, max_runs=opts.max_runs)
    oracle.cache[frozenset()], oracle.runs = before, 1  # the plain problem run above is the empty set's run
    res.engine, res.n_candidates = prog.kind, len(prog.ops)
    note = "" if prog.kind == "graph" else f" (FX could not capture the model: {prog.reason}; module-level search)"

    def finish(status: str, message: str) -> FindResult:
        res.status, res.message = status, message + note
        res.runs, res.seconds = oracle.runs, time.perf_counter() - t0
        return res

    res.error_before = oracle.error(frozenset())
    root = prog.root()
    try:
        res.error_all = oracle.error(root.atoms)
    except RunBudgetExceeded:
        return finish("out_of_runs", f"--max-runs {opts.max_runs} allows no run beyond the plain problem run: "
                                     "nothing was searched (give at least 2)")
    if res.error_all > opts.tol:
        low = sorted({str(t.dtype).replace("torch.", "") for t in flat_outputs(plain)
                      if t.dtype in (torch.bfloat16, torch.float16)})
        why = (f"the model's outputs are {' and '.join(low)} under {prob_cfg.name}, and their own rounding (the "
               f"values handed back, which no op's precision changes) may exceed it: raise --tol above "
               f"{res.error_all:.1e}, or return float32 outputs" if low else
               "the divergence is not a precision loss the problem configuration adds (or the tolerance is below "
               "the reference's own error)")
        return finish("not_fixable", f"enhancing the whole model to float64 leaves divergence {res.error_all:.3e} "
                                     f"> tol {opts.tol:g}: {why}")
    isolate = ddmin if opts.search == "ddmin" else bisect
    kept: list[Region] = [root]
    try:
        for level in [lv.strip() for lv in opts.levels.split(",")]:
            runs0 = oracle.runs
            changed = True
            while changed:
                changed = False
                new: list[Region] = []
                for i, r in enumerate(kept):
                    parts = prog.split(r, level)
                    if len(parts) == 1 and parts[0] == r:
                        new.append(r)
                        continue
                    others = _atoms(new) | _atoms(kept[i + 1:])
                    if not oracle.fixes(others | _atoms(parts)):  # sub-regions do not cover r (module engine)
                        new.append(r)
                        continue
                    new.extend(isolate(oracle, parts, others))
                    changed = True
                kept = new
            say(f"[pliner] level {level:<6}: {len(kept)} region(s) kept, {len(_atoms(kept))} atom(s); "
                f"{oracle.runs - runs0} runs (total {oracle.runs}): "
                + ", ".join(r.label for r in kept[:6]) + (" ..." if len(kept) > 6 else ""))
            res.levels.append({"level": level, "kept": [r.label for r in kept], "runs": oracle.runs - runs0})
        if opts.check_minimal:
            dropped = True
            while dropped:
                dropped = False
                for r in kept:
                    rest = [q for q in kept if q is not r]
                    if oracle.fixes(_atoms(rest)):
                        kept, dropped = rest, True
                        break
            res.minimal = True
    except RunBudgetExceeded:
        res.atoms = _atoms(kept)
        res.culprits = prog.describe(res.atoms)
        return finish("out_of_runs", f"the search used its {opts.max_runs} runs (--max-runs) before it finished: "
                                     f"{len(res.atoms)} candidate region(s) kept so far, not verified")
    res.atoms = _atoms(kept)
    res.error_after = oracle.error(res.atoms)
    res.culprits = prog.describe(res.atoms)
    mods = {c["module"] for c in res.culprits}
    res.modules = sorted(mods)
    if len(res.atoms) > opts.spread:
        return finish("spread", f"{len(res.atoms)} regions must be enhanced together (> --spread {opts.spread}): "
                                "the divergence is spread over many operations")
    seconds = time.perf_counter() - t0
    res.recipe, res.recipe_error = _recipe(model, inputs, prog, res, ref_out, prob_cfg, opts, metric)
    out = finish("found", f"{len(res.atoms)} {'op' if prog.kind == 'graph' else 'module'}"
                          f"{'s' if len(res.atoms) != 1 else ''} in float64 "
                          f"bring the divergence from {res.error_before:.3e} to {res.error_after:.3e}")
    out.seconds = seconds
    return out


def _recipe(model, inputs, prog, res: FindResult, ref_out, cfg: Precision, opts: SearchOptions, metric):
    """The mixed-precision recipe the user applies, verified by one run each (not counted as search runs)."""
    from .oracle import divergence

    def err(recipe: Recipe) -> float:
        with recipe.applied(model):
            out = run_config(model, inputs, cfg)
        return float(metric(ref_out, out)) if metric else divergence(ref_out, out, opts.metric)

    candidates = []
    if prog.kind == "graph":
        lines = sorted({c["line"] for c in res.culprits if c["line"] and c["line"] != "?"})
        if lines and cfg.backend == "eager":
            candidates.append(Recipe(lines=lines))
        mods = sorted({c["module"] for c in res.culprits if c["module"] != "<root>"})
        if mods and len(mods) == len({c["module"] for c in res.culprits}):
            candidates.append(Recipe(modules=mods))
    else:
        mods = sorted(c["module"] for c in res.culprits if c["module"] != "<root>")
        if mods:
            candidates.append(Recipe(modules=mods))
    best = None
    for rec in candidates:
        try:
            e = err(rec)
        except Exception:  # noqa: BLE001 - a recipe that cannot run (e.g. under compile) is skipped
            continue
        if best is None or e < best[1]:
            best = (rec, e)
        if e <= opts.tol:
            return rec, e
    return best if best else (None, None)


__all__ = ["FindResult", "bisect", "build_program", "ddmin", "find"]
