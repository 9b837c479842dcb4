"""Compile Triton kernels for an NVIDIA H200 (sm_90) on a machine without a GPU.

Triton compiles for any target it knows; only launching needs a device.  :func:`compiling_for_h200`
installs a stand-in driver whose current target is ``GPUTarget("cuda", 90, 32)`` and turns every kernel
launch into a compile-only call (``warmup``): a launcher then runs as it would on the GPU, with its own
argument values, so every specialisation Triton would make there is made here (an int equal to 1 becomes a
constexpr, ints divisible by 16 and 16-byte-aligned pointers get hints, a Python float arrives as fp32),
down to PTX and a cubin.  The kernels' outputs are never written (nothing runs), so a launcher must not be
trusted to return meaningful values under it.

It must run in a process where ``TRITON_INTERPRET`` is unset before the kernel modules are imported:
``@triton.jit`` builds interpreted functions otherwise.  The suite runs it in a child process
(``tests/triton_kernels/sm90_cases.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterator

H200 = ("cuda", 90, 32)


@dataclasses.dataclass
class Compiled:
    """One kernel specialisation compiled for the H200."""

    kernel: str
    signature: dict[str, str]
    constants: dict[str, object]
    ttir: str
    ptx: str
    cubin_bytes: int
    num_warps: int = 4
    shared_bytes: int = 0
    """shared memory a launch asks for (Triton's layout conversions and pipelining buffers)"""

    def base_offsets(self) -> list[tuple[str, str]]:
        """``(pointer argument, offset type)`` of every ``tt.addptr`` applied to a kernel argument (or a
        splat/broadcast of one): an ``i32`` there is an offset that wraps past 2^31 elements."""
        return addptr_offsets(self.ttir)

    def resources(self) -> dict[str, int]:
        """What one program of this kernel holds on an SM, by the ptxas Triton ships (``-v`` on the PTX):
        ``registers`` per thread, ``spill_stores``/``spill_loads`` (bytes moved to and from local memory per
        thread because the registers did not suffice), ``stack`` bytes, and ``threads``/``shared_bytes`` of
        the launch."""
        return ptxas_resources(self.ptx) | {"threads": 32 * self.num_warps, "shared_bytes": self.shared_bytes}

    def fp64_mma(self) -> bool:
        """Whether the PTX runs FP64 tensor-core MMAs (``mma.sync... .f64``)."""
        return bool(re.search(r"\bmma\.sync\.aligned\.[^\s;]*\.f64", self.ptx))

    def fused_fp(self) -> int:
        """Floating-point multiply-adds in the PTX (``fma.rn.f32/f64``): one rounding where the source rounds
        twice (the compiler contracts ``a * b + c``), so the result can differ from the torch twin's."""
        return len(re.findall(r"\bfma\.rn(?:\.ftz)?\.f(?:32|64)\b", self.ptx))


_FUNC = re.compile(r"^\s*tt\.func\b")
_ARG = re.compile(r"%(\w+): !tt\.ptr<")
_DEF = re.compile(r"^\s*(%[\w.#]+) = ([\w.]+)")
_DERIVE = re.compile(r"^\s*%([\w.]+) = tt\.(?:splat|broadcast|expand_dims) %([\w.]+)\b")
_ADDPTR = re.compile(r"^\s*%[\w.]+ = tt\.addptr %([\w.]+), (%[\w.#]+) : [^,]+, (?:tensor<[^>]*x)?(i\d+)>?")


def addptr_offsets(ttir: str) -> list[tuple[str, str]]:
    """``(pointer argument, offset integer type)`` for each address computed straight from a function's
    pointer argument (or a splat/broadcast of it) in TTIR text, function by function, reading definitions
    in order; offsets that are literal constants are left out (they cannot grow with the problem)."""
    out: list[tuple[str, str]] = []
    origin: dict[str, str] = {}
    kind: dict[str, str] = {}
    for line in ttir.splitlines():
        if _FUNC.match(line):  # a new function: its own pointer arguments and SSA names
            origin = {name: name for name in _ARG.findall(line)}
            kind = {}
            continue
        m = _DEF.match(line)
        if m:  # names are reused across regions (loop bodies): the latest definition is the one in use
            kind[m[1]] = m[2]
            origin.pop(m[1][1:], None)
        m = _DERIVE.match(line)
        if m and m[2] in origin:
            origin[m[1]] = origin[m[2]]
            continue
        m = _ADDPTR.match(line)
        if m and m[1] in origin and kind.get(m[2]) != "arith.constant":
            out.append((origin[m[1]], m[3]))
    return out


_USAGE = {"registers": re.compile(r"Used (\d+) registers"), "spill_stores": re.compile(r"(\d+) bytes spill stores"),
          "spill_loads": re.compile(r"(\d+) bytes spill loads"), "stack": re.compile(r"(\d+) bytes stack frame")}


def ptxas_resources(ptx: str) -> dict[str, int]:
    """Registers, spill bytes and stack of the one kernel in ``ptx``, from ``ptxas -v`` for the PTX's own
    target (``sm_90a``), the ptxas Triton compiles with."""
    import subprocess
    import tempfile

    from triton.backends.nvidia.compiler import get_ptxas

    arch = re.search(r"^\.target\s+(\w+)", ptx, re.M)[1]
    with tempfile.TemporaryDirectory() as tmp:
        src = f"{tmp}/k.ptx"
        with open(src, "w") as f:
            f.write(ptx)
        res = subprocess.run([get_ptxas(H200[1]).path, f"-arch={arch}", "-v", src, "-o", f"{tmp}/k.cubin"],
                             capture_output=True, text=True, check=True)
    return {name: int(pat.search(res.stderr)[1]) for name, pat in _USAGE.items()}


class _H200Driver:
    """The parts of Triton's driver that compiling needs: device 0, stream 0, target sm_90."""

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget(*H200)

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")


@contextlib.contextmanager
def compiling_for_h200() -> Iterator[list[Compiled]]:
    """Within the block every Triton launch compiles for sm_90 instead of running; yields the list the
    compiled specialisations are appended to (in launch order).

    Raises:
        RuntimeError: ``TRITON_INTERPRET`` is set (kernels are interpreted, nothing would compile).
    """
    import os

    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    if os.environ.get("TRITON_INTERPRET") == "1":
        raise RuntimeError("unset TRITON_INTERPRET before importing the kernels: they would be interpreted")
    compiled: list[Compiled] = []
    original = JITFunction.run

    def compile_only(self, *args, grid, warmup, **kwargs):
        kernel = original(self, *args, grid=grid, warmup=True, **kwargs)
        src = kernel.src
        compiled.append(Compiled(
            kernel=self.fn.__name__,
            signature=dict(src.signature),
            constants={",".join(map(str, k)): v for k, v in src.constants.items()},
            ttir=kernel.asm["ttir"], ptx=kernel.asm["ptx"], cubin_bytes=len(kernel.asm["cubin"]),
            num_warps=kernel.metadata.num_warps, shared_bytes=kernel.metadata.shared,
        ))
        return kernel

    previous = driver._active  # None without a GPU: there is no default driver to go back to
    driver.set_active(_H200Driver())
    JITFunction.run = compile_only
    try:
        yield compiled
    finally:
        JITFunction.run = original
        driver._active = previous
