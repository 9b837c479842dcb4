"""Counting what a GPU code path costs on the host, on a machine without a GPU.

On CUDA a kernel launch costs a few microseconds of CPU time, and every op whose result the host must
read (``.item()``, ``.tolist()``, ``.cpu()``, ``nonzero``, boolean-mask indexing, ``unique``, ``int(t)``)
stalls the CPU until the GPU has caught up.  Both are properties of the code, not of the device: run the
CUDA code path on CPU tensors (Triton kernels under ``TRITON_INTERPRET=1``) inside :func:`count_host_work`
and count them::

    with count_host_work() as work:
        compress(field, backend="triton")
    assert work.syncs <= 1 and work.launches <= 12      # the path's declared budget

What counts as a **sync**: reading a tensor's value on the host (``_local_scalar_dense``, behind
``item()``, ``int()``, ``float()``, ``bool()``), ``tolist()``, ``numpy()``, ``cpu()`` and ``to("cpu")``,
and the ops whose output size depends on the data (``nonzero``, ``masked_select``, boolean-mask indexing
and assignment, ``unique``, ``repeat_interleave`` without ``output_size``).  What counts as a **launch**:
every ATen op that computes (views, reshapes and metadata queries are free on CUDA too) and every Triton
kernel launch.  The counts are upper bounds of what CUDA does (an in-place ``add_`` and its fused
neighbours may be one kernel with torch.compile), which is what a budget wants.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .budgets import HostBudget, HostWork  # HostBudget: where it was first imported from

aten = torch.ops.aten

#: ops whose output size depends on the data: the host must wait for the GPU to size the result
_DATA_SIZED = {aten.nonzero.default, aten.masked_select.default, aten._unique2.default, aten.unique_dim.default,
               aten.unique_consecutive.default, aten._unique.default}

#: allocation without a fill: the caching allocator, no kernel
_ALLOCATIONS = {aten.empty.memory_format, aten.empty_strided.default, aten.new_empty.default,
                aten.new_empty_strided.default, aten.empty_like.default, aten.set_.source_Storage,
                aten.set_.source_Storage_storage_offset, aten.set_.source_Tensor, aten.set_.default}

#: Tensor methods that hand a value to the host
_HOST_METHODS = ("tolist", "numpy", "cpu")


def _is_free(func) -> bool:
    """Views, reshapes and metadata: no kernel on CUDA."""
    tags = getattr(func, "tags", ())
    if torch.Tag.view_copy in tags or torch.Tag.pointwise in tags:
        return False
    schema = func._schema
    if any(a.alias_info is not None and not a.alias_info.is_write for a in schema.returns):
        return True  # returns a view of an input
    return func in (aten._unsafe_view.default, aten.alias.default, aten.sym_size.int, aten.sym_stride.int, aten.sym_numel.default, aten.sym_storage_offset.default,
                    aten.is_contiguous.default, aten.size.default, aten.stride.default, aten.dim.default)


class _Counting(TorchDispatchMode):
    def __init__(self, work: HostWork) -> None:
        super().__init__()
        self.work = work

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.work._inside_kernel:  # the interpreter's own tensor traffic is the kernel, counted once
            return func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if func is aten._local_scalar_dense.default:
            self.work.sync_ops["item"] += 1
        elif func in _DATA_SIZED:
            self.work.sync_ops[name] += 1
            self.work.launch_ops[name] += 1
        elif func in (aten.repeat_interleave.Tensor, aten.repeat_interleave.self_Tensor) and \
                kwargs.get("output_size") is None:
            self.work.sync_ops["repeat_interleave"] += 1
            self.work.launch_ops[name] += 1
        elif func in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default) and any(
                i is not None and i.dtype == torch.bool for i in (args[1] if len(args) > 1 else ())):
            self.work.sync_ops["boolean mask index"] += 1
            self.work.launch_ops[name] += 1
        elif func is aten._to_copy.default and str(kwargs.get("device", "")) == "cpu":
            self.work.sync_ops["to(cpu)"] += 1
        elif func not in _ALLOCATIONS and not _is_free(func):
            self.work.launch_ops[name] += 1
        return func(*args, **kwargs)


@contextlib.contextmanager
def count_host_work() -> Iterator[HostWork]:
    """Count host syncs and kernel launches of the code run inside the block (see the module docstring).

    Tensor methods that hand values to the host (``tolist``, ``numpy``, ``cpu``) are wrapped for the
    duration; Triton launches are counted whether compiled or interpreted.
    """
    work = HostWork()
    saved = {name: getattr(torch.Tensor, name) for name in _HOST_METHODS}

    def wrap(name):
        original = saved[name]

        def method(self, *args, **kwargs):
            work.sync_ops[name] += 1
            return original(self, *args, **kwargs)
        return method

    triton_saved = _patch_triton_launches(work)
    for name in _HOST_METHODS:
        setattr(torch.Tensor, name, wrap(name))
    try:
        with _Counting(work):
            yield work
    finally:
        for name, fn in saved.items():
            setattr(torch.Tensor, name, fn)
        for owner, attr, fn in triton_saved:
            setattr(owner, attr, fn)


def _patch_triton_launches(work: HostWork) -> list[tuple[type, str, object]]:
    """Count ``kernel[grid](...)`` launches, compiled (``JITFunction.run``) or interpreted."""
    try:
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction
    except ImportError:  # no Triton: nothing to count
        return []
    saved = []
    for owner in (JITFunction, InterpretedFunction):
        original = owner.run

        def run(self, *args, _original=original, **kwargs):
            work.launch_ops[f"triton:{getattr(self.fn, '__name__', 'kernel')}"] += 1
            outer, work._inside_kernel = work._inside_kernel, True
            try:
                return _original(self, *args, **kwargs)
            finally:
                work._inside_kernel = outer

        saved.append((owner, "run", original))
        owner.run = run
    return saved


__all__ = ["HostBudget", "HostWork", "count_host_work"]
