"""The program under search and its regions: module subtrees, source lines and FX (aten) nodes.

:class:`GraphProgram` captures the model once with :func:`torch.export.export` (non-strict, so the
graph keeps autocast-visible ops such as ``aten.linear`` and records each node's module path and
stack trace) and builds, for any set of enhanced op nodes, a rewritten graph in which (PLiNER §III-B,
"precision enhancement"):

* every floating value entering an enhanced node from outside the set is cast up to float64,
* values flowing between enhanced nodes stay float64 (free ops — views, ``getitem`` — follow their
  inputs, so a transposed float64 product stays float64),
* every value leaving the set is cast back to the dtype it has in a plain run of the problem
  configuration (recorded once by :meth:`GraphProgram.plain_dtypes`),
* everything else is untouched, so the problem configuration (autocast, TF32, torch.compile) still
  applies to it; autocast leaves float64 operands alone, and TF32 emulation only rounds float32.

:class:`ModuleProgram` is the fall-back for models FX cannot capture: its atoms are module paths,
enhanced by swapping in :class:`~torchhpc.ext.pliner.recipe.HighPrecision` wrappers.
"""

from __future__ import annotations

import copy
import operator
import os
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch.fx import Node
from torch.utils._pytree import tree_flatten

from .config import Precision
from .oracle import elsewhere, precision_context, run_config, to_device

_TORCH_DIR = os.path.dirname(torch.__file__)
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


@dataclass(frozen=True)
class Region:
    """A set of atoms enhanced together: a module subtree, a module's own ops, a source line or one op."""

    kind: str  # "module" | "ops" | "line" | "op"
    key: str  # module path, "file:line" or node name
    atoms: frozenset = field(compare=False)
    label: str = field(default="", compare=False)


@dataclass
class OpInfo:
    """One candidate FX node: its name, aten op, module path and type, and source line."""

    name: str
    op: str
    module: str
    module_type: str
    chain: tuple
    line: str
    code: str = ""

    def as_json(self) -> dict:
        return {"node": self.name, "op": self.op, "module": self.module or "<root>", "module_type": self.module_type,
                "line": self.line, "code": self.code}


def _user_frame(stack_trace: str | None) -> tuple[str, str]:
    """``("file:line", source text)`` of the innermost frame outside torch in an FX stack trace."""
    if not stack_trace:
        return "?", ""
    lines = stack_trace.strip().splitlines()
    frames = [(i, m) for i, ln in enumerate(lines) if (m := _FRAME.search(ln))]
    if not frames:
        return "?", ""
    user = [(i, m) for i, m in frames if not os.path.abspath(m.group(1)).startswith(_TORCH_DIR)]
    i, m = (user or frames)[-1]
    code = lines[i + 1].strip() if i + 1 < len(lines) else ""
    return f"{m.group(1)}:{m.group(2)}", code


def short_line(line: str) -> str:
    """``/a/b/model.py:12`` -> ``model.py:12`` (for tables)."""
    path, _, no = line.rpartition(":")
    return f"{os.path.basename(path)}:{no}" if path else line


def _is_free(node: Node) -> bool:
    """Views and selections: they compute nothing, so they follow their inputs' precision."""
    if node.target is operator.getitem:
        return True
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return False
    if schema.is_mutable:
        return False
    return bool(schema.returns) and schema.returns[0].alias_info is not None or node.target in (
        torch.ops.aten.clone.default, torch.ops.aten.contiguous.default)


def _floating(val) -> bool:
    if isinstance(val, torch.Tensor):
        return val.is_floating_point()
    if isinstance(val, (tuple, list)):
        return any(_floating(v) for v in val)
    return False


def _retarget(graph: torch.fx.Graph, device: str) -> None:
    """Point the graph's CPU device arguments (``aten.ones(..., device=cpu)``: what export recorded for a
    ``device=x.device`` in the model, captured on the CPU) at ``device``, in place.  A tensor the model puts
    on the CPU on purpose is recorded the same way and moves too: on a GPU the graph runs wholly there."""
    if device == "cpu":
        return
    target = torch.device(device)

    def move(a):
        return target if isinstance(a, torch.device) and a.type == "cpu" else a

    for n in graph.nodes:
        if n.op == "call_function":
            n.args = torch.fx.node.map_aggregate(n.args, move)
            n.kwargs = torch.fx.node.map_aggregate(n.kwargs, move)


class GraphProgram:
    """A model captured as an aten FX graph, enhanced node by node.

    Args:
        model: the ``nn.Module`` (its ``forward(*inputs)``).
        inputs: positional inputs (tensors or pytrees of tensors).
        problem: the problem configuration (its plain run fixes the dtypes values are cast back to).

    Raises:
        Exception: whatever :func:`torch.export.export` raises when the model cannot be captured
        (the caller falls back to :class:`ModuleProgram`).
    """

    kind = "graph"

    def __init__(self, model: torch.nn.Module, inputs: Sequence, problem: Precision):
        self.model, self.inputs, self.problem = model, tuple(inputs), problem
        # captured on the CPU (a model built on the GPU is copied there): the graph's factory ops then say
        # device=cpu, and every run elsewhere rewrites them to its device (_retarget)
        here = copy.deepcopy(model).cpu() if elsewhere(model, "cpu") else model
        ep = torch.export.export(here, to_device(self.inputs, "cpu"), strict=False)
        gm = ep.module()
        for n in list(gm.graph.nodes):
            if n.op == "call_module" and str(n.target).startswith("_guards") and not n.users:
                gm.graph.erase_node(n)
            elif n.op == "call_function" and str(n.target).startswith("aten._assert") and not n.users:
                gm.graph.erase_node(n)  # export's dtype asserts: the problem configuration changes dtypes
        gm.recompile()
        self.gm = gm
        self.flat_inputs = tree_flatten(self.inputs)[0]
        self.order = {n.name: i for i, n in enumerate(gm.graph.nodes)}
        self._float = {n.name: self._node_floating(n) for n in gm.graph.nodes}
        pinned = set()  # producers of values mutated in place: their copies would lose the mutation
        for n in gm.graph.nodes:
            schema = getattr(n.target, "_schema", None)
            if n.op == "call_function" and schema is not None and schema.is_mutable:
                pinned.update(a.name for a in n.all_input_nodes)
                pinned.add(n.name)
        self.pinned = pinned
        self.ops: dict[str, OpInfo] = {}
        self.module_types: dict[str, str] = {"": type(model).__name__}
        for n in gm.graph.nodes:
            if n.op != "call_function" or _is_free(n) or n.name in pinned:
                continue
            if not self._float[n.name] or not any(self._float[a.name] for a in n.all_input_nodes):
                continue
            stack = list((n.meta.get("nn_module_stack") or {}).values())
            chain = tuple(p for p, _ in stack if p)
            for p, t in stack:
                self.module_types.setdefault(p, str(t).rpartition(".")[2])
            line, code = _user_frame(n.meta.get("stack_trace"))
            module = chain[-1] if chain else ""
            self.ops[n.name] = OpInfo(n.name, str(n.target), module, self.module_types.get(module, ""), chain,
                                      line, code)
        self._dtypes: dict[str, torch.dtype] | None = None

    # ------------------------------------------------------------------ plain runs

    def _node_floating(self, n: Node) -> bool:
        val = n.meta.get("val")
        if val is None and n.op == "get_attr":
            val = operator.attrgetter(n.target)(self.gm)
        return _floating(val)

    def trace_values(self, cfg: Precision) -> dict[str, object]:
        """Every node's value in a plain eager run under ``cfg``'s numerical settings (node name -> value)."""
        values: dict[str, object] = {}

        class Recorder(torch.fx.Interpreter):
            def run_node(self, n):
                out = super().run_node(n)
                values[n.name] = out
                return out

        # on cfg's device, under its autocast: CUDA's keeps softmax, log_softmax, layer_norm, ... in float32
        # where the CPU's runs them in bf16, so the cast-back dtypes must come from the device's own run
        eager = Precision(autocast=cfg.autocast, matmul=cfg.matmul, deterministic=cfg.deterministic,
                          device=cfg.device)
        gm, inputs = self.on_device(cfg.device)
        with torch.no_grad(), precision_context(eager):
            Recorder(gm).run(*inputs)
        return values

    def on_device(self, device: str) -> tuple[torch.fx.GraphModule, list]:
        """The captured graph and its flat inputs on ``device`` (a copy, factory ops retargeted, off the CPU)."""
        if device == "cpu":
            return self.gm, to_device(self.flat_inputs, "cpu")
        gm = copy.deepcopy(self.gm)
        _retarget(gm.graph, device)
        gm.recompile()
        return gm.to(device), to_device(self.flat_inputs, device)

    def plain_dtypes(self) -> dict[str, torch.dtype]:
        """The dtype of every floating tensor node in a plain run of the problem configuration."""
        if self._dtypes is None:
            vals = self.trace_values(self.problem)
            self._dtypes = {k: v.dtype for k, v in vals.items() if isinstance(v, torch.Tensor)}
        return self._dtypes

    # ------------------------------------------------------------------ enhancement

    def expand(self, atoms) -> set[str]:
        """``atoms`` plus the free ops (views, getitem) all of whose floating inputs are enhanced."""
        enh = {a for a in atoms if a in self.ops}
        for n in self.gm.graph.nodes:
            if n.op == "call_function" and n.name not in enh and _is_free(n) and n.name not in self.pinned:
                ins = [a for a in n.all_input_nodes if self._float[a.name]]
                if ins and all(a.name in enh for a in ins):
                    enh.add(n.name)
        return enh

    def enhanced_module(self, atoms) -> torch.fx.GraphModule:
        """A copy of the graph with ``atoms`` (op node names) run in float64, cast at the borders."""
        enh = self.expand(atoms)
        dtypes = self.plain_dtypes() if enh else {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # pytree spec deprecation inside deepcopy
            g = copy.deepcopy(self.gm.graph)
        up: dict[str, Node] = {}
        down: dict[str, Node] = {}
        f64 = torch.float64
        for n in list(g.nodes):
            inside = n.name in enh

            def fix(a, n=n, inside=inside):
                if not isinstance(a, Node) or not self._float.get(a.name, False):
                    return a
                if inside and a.name not in enh:
                    if a.name not in up:
                        with g.inserting_before(n):
                            up[a.name] = g.call_function(torch.ops.aten._to_copy.default, (a,), {"dtype": f64})
                    return up[a.name]
                if not inside and a.name in enh and a.name in dtypes:
                    if a.name not in down:
                        with g.inserting_before(n):
                            down[a.name] = g.call_function(torch.ops.aten._to_copy.default, (a,),
                                                           {"dtype": dtypes[a.name]})
                    return down[a.name]
                return a

            if n.op in ("call_function", "call_method", "call_module", "output"):
                n.args = torch.fx.node.map_arg(n.args, fix)
                n.kwargs = torch.fx.node.map_arg(n.kwargs, fix)
                if inside and isinstance(n.kwargs.get("dtype"), torch.dtype) and n.kwargs["dtype"].is_floating_point:
                    n.kwargs = {**n.kwargs, "dtype": f64}
        _retarget(g, self.problem.device)
        g.lint()
        return torch.fx.GraphModule(self.gm, g)

    def run(self, atoms) -> object:
        """Outputs of the problem configuration with ``atoms`` enhanced."""
        return run_config(self.enhanced_module(atoms), self.flat_inputs, self.problem)

    # ------------------------------------------------------------------ regions

    def _module_region(self, path: str) -> Region:
        atoms = frozenset(k for k, o in self.ops.items() if not path or path in o.chain)
        return Region("module", path, atoms, path or f"<{self.module_types['']}>")

    def root(self) -> Region:
        """Everything: the whole model."""
        return self._module_region("")

    def sort_key(self, atom: str) -> int:
        return self.order[atom]

    def split(self, region: Region, level: str) -> list[Region]:
        """The next-finer regions of ``region`` at ``level`` (``module``, ``line`` or ``op``)."""
        if level == "module" and region.kind == "module":
            children: dict[str, None] = {}
            own = []
            for a in sorted(region.atoms, key=self.sort_key):
                chain = self.ops[a].chain
                if region.key:
                    chain = chain[chain.index(region.key) + 1:] if region.key in chain else ()
                if chain:
                    children.setdefault(chain[0], None)
                else:
                    own.append(a)
            if not children:
                return [region]  # a leaf module: its ops are the next level's business
            out = [self._module_region(c) for c in children]
            if own:
                name = region.key or "<root>"
                out.append(Region("ops", region.key, frozenset(own), f"{name} (own ops)"))
            return out
        if level == "line" and region.kind in ("module", "ops"):
            by_line: dict[str, list[str]] = {}
            for a in sorted(region.atoms, key=self.sort_key):
                by_line.setdefault(self.ops[a].line, []).append(a)
            mod = region.key or "<root>"
            return [Region("line", f"{mod}@{ln}", frozenset(v), f"{mod} @ {short_line(ln)}")
                    for ln, v in by_line.items()]
        if level == "op" and region.kind != "op":
            return [Region("op", a, frozenset([a]), f"{a} ({self.ops[a].op})")
                    for a in sorted(region.atoms, key=self.sort_key)]
        return [region]

    def describe(self, atoms) -> list[dict]:
        """The culprits as JSON rows (node, op, module, line), in graph order."""
        return [self.ops[a].as_json() for a in sorted(atoms, key=self.sort_key)]


class ModuleProgram:
    """A model FX cannot capture: atoms are module paths, enhanced by float64 wrappers in eager mode."""

    kind = "module"

    def __init__(self, model: torch.nn.Module, inputs: Sequence, problem: Precision, reason: str = ""):
        self.model, self.inputs, self.problem, self.reason = model, tuple(inputs), problem, reason
        self.paths = [p for p, m in model.named_modules()
                      if not isinstance(m, (torch.nn.ModuleList, torch.nn.ModuleDict))]
        self.order = {p: i for i, p in enumerate(p for p, _ in model.named_modules())}
        self.module_types = {p: type(m).__name__ for p, m in model.named_modules()}
        self.ops = {p: None for p in self.paths if p}
        self._dtypes: dict[str, object] | None = None

    def plain_dtypes(self) -> dict[str, object]:
        """Each module's output dtypes in a plain run of the problem configuration (forward hooks)."""
        if self._dtypes is None:
            from .recipe import output_dtypes
            seen: dict[str, object] = {}

            def record(path):
                def hook(_m, _i, out):
                    seen.setdefault(path, output_dtypes(out))  # returns None: the output is unchanged
                return hook

            hooks = [m.register_forward_hook(record(p)) for p, m in self.model.named_modules() if p]
            try:
                run_config(self.model, self.inputs, self.problem)
            finally:
                for h in hooks:
                    h.remove()
            self._dtypes = seen
        return self._dtypes

    def run(self, atoms) -> object:
        from .recipe import keep_high_precision
        dtypes = self.plain_dtypes() if atoms else {}
        with keep_high_precision(self.model, sorted(atoms), out_dtypes=dtypes) as fn:
            return run_config(fn, self.inputs, self.problem)

    def root(self) -> Region:
        return Region("module", "", frozenset([""]), f"<{self.module_types['']}>")

    def sort_key(self, atom: str) -> int:
        return self.order[atom]

    def split(self, region: Region, level: str) -> list[Region]:
        if level != "module" or region.kind != "module":
            return [region]
        return [Region("module", p, frozenset([p]), p) for p in self._children(region.key)] or [region]

    def _children(self, path: str) -> list[str]:
        """Child module paths; containers (ModuleList, ModuleDict) are not callable: their children instead."""
        parent = self.model.get_submodule(path) if path else self.model
        out = []
        for name, sub in parent.named_children():
            p = f"{path}.{name}" if path else name
            if isinstance(sub, (torch.nn.ModuleList, torch.nn.ModuleDict)):
                out.extend(self._children(p))
            else:
                out.append(p)
        return out

    def describe(self, atoms) -> list[dict]:
        return [{"node": None, "op": None, "module": a or "<root>", "module_type": self.module_types.get(a, ""),
                 "line": None, "code": ""} for a in sorted(atoms, key=self.sort_key)]


__all__ = ["GraphProgram", "ModuleProgram", "OpInfo", "Region", "short_line"]
