"""numba kernels compiled on first use, or ahead of time for a command that must start at once.

numba's JIT costs a process about half a second before its first kernel runs, however small the input and
even when every kernel comes from numba's cache: importing numba (~0.25 s on a 2-core VM) and loading its CPU
target's implementations (~0.3 s, SciPy's BLAS among them).  A system whose command should start at once
(``torchhpc align`` on a small pair: LASTZ takes 0.7 s) declares its kernels in a :class:`Library`::

    KERNELS = Library("segalign", ("torchhpc.ext.segalign.index_kernels", ...))

    @KERNELS.kernel(nogil=True, cache=True, aot=("u1[::1], i8[::1], i8",))
    def _count(codes, care, n): ...

A kernel is a stand-in that numba does not see until it must:

* where the library's ahead-of-time module is built (:meth:`Library.build`: numba's ``pycc`` compiles every
  declared signature into one extension module for this CPU, kept in :func:`cache_dir` under a key of the
  sources and the compiler's versions, in a directory of the CPU's own) and a call's arguments have one of the declared types exactly (an
  array's dtype, dimensions, C order, writable; ``i8`` a Python or NumPy int, ``b1`` a bool), the call runs
  the compiled function: no numba import.  Arguments of any other type are never handed to it (the module
  does not check them);
* otherwise every kernel of the calling kernel's module becomes ``numba.njit(**options)`` of its function
  (numba's own cache as before; ``prange`` the real one) and the call runs that; later calls from Python go
  to the dispatcher directly.

The same source through the same compiler: the two give the same results (the systems' tests compare them
byte for byte).  The ahead-of-time functions release the GIL, as ``nogil=True`` kernels do, so that Python
threads can run them side by side.  ``TORCHHPC_AOT=0`` keeps a process on the JIT.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
import sysconfig
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

prange = range
"""numba's ``prange`` in a kernel's module: plain ``range`` until the module's kernels are JIT-compiled,
then ``numba.prange`` (imported from here, so that declaring a parallel kernel does not import numba)."""

_AOT_OPTIONS = {"nogil", "cache"}
"""numba options of a kernel built ahead of time (pycc compiles with its own flags; the GIL released)."""
_BUILDING = threading.Lock()  # a build patches pycc's flags and the temporary directory for the process
_DTYPES = {"u1": np.uint8, "i4": np.int32, "i8": np.int64, "f8": np.float64, "b1": np.bool_}
_TYPE = re.compile(r"^(u1|i4|i8|f8|b1)(?:\[([:, 1]*)\])?$")


def aot_enabled() -> bool:
    """False where ``TORCHHPC_AOT=0``: kernels always run through numba's JIT."""
    return os.environ.get("TORCHHPC_AOT", "1") != "0"


def cache_dir() -> Path:
    """Where ahead-of-time modules live: ``$TORCHHPC_CACHE``, else ``$XDG_CACHE_HOME/torchhpc``, else
    ``~/.cache/torchhpc`` (per user and machine; the key keeps builds for different CPUs apart)."""
    root = os.environ.get("TORCHHPC_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "torchhpc")
    return Path(root) / "kernels"


def _split_args(spec: str) -> list[str]:
    """``"u1[:, ::1], i8"`` -> ``["u1[:, ::1]", "i8"]`` (commas inside brackets kept)."""
    out, depth, cur = [], 0, ""
    for ch in spec:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += (ch == "[") - (ch == "]")
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def argument_checks(spec: str) -> tuple[Callable[[object], bool], ...]:
    """One check per argument of a signature in numba's notation (scalars ``i8``, ``f8``, ``b1``; C-ordered
    arrays of ``u1``, ``i4``, ``i8``, ``f8``, ``b1``: ``i8[::1]``, ``i4[:, ::1]``, ...): whether a value is
    exactly of that type.

    Raises:
        ValueError: any other type (a narrower scalar, an array not declared C-ordered).
    """
    checks = []
    for arg in _split_args(spec):
        m = _TYPE.match(arg)
        dims = None if m is None or m.group(2) is None else [d.strip() for d in m.group(2).split(",")]
        if m is None or (dims is not None and (dims[-1] != "::1" or any(d != ":" for d in dims[:-1]))):
            raise ValueError(f"an ahead-of-time argument is a scalar or a C-ordered array, not {arg!r}")
        dtype = np.dtype(_DTYPES[m.group(1)])
        if dims is not None:
            checks.append(_array_check(dtype, len(dims)))
        elif m.group(1) == "b1":
            checks.append(lambda a: isinstance(a, (bool, np.bool_)))
        elif m.group(1) == "f8":
            checks.append(lambda a: type(a) is float or isinstance(a, np.float64))
        elif m.group(1) == "i8":
            checks.append(lambda a: (type(a) is int or isinstance(a, np.int64)) and -(1 << 63) <= a < (1 << 63))
        else:  # numba types a Python int as int64: a narrower scalar would be truncated where the JIT is not
            raise ValueError(f"an ahead-of-time scalar is i8, f8 or b1, not {arg!r}")
    return tuple(checks)


def _array_check(dtype: np.dtype, ndim: int) -> Callable[[object], bool]:
    def check(a) -> bool:
        return (type(a) is np.ndarray and a.dtype == dtype and a.ndim == ndim and a.flags.c_contiguous
                and a.flags.writeable and a.flags.aligned)

    return check


class Kernel:
    """A kernel of a :class:`Library`: the ahead-of-time function where built and the arguments match, else
    numba's JIT dispatcher of ``py_func`` (see the module docstring)."""

    def __init__(self, library: Library, func: Callable, options: dict, aot: Sequence[str]) -> None:
        self.library, self.py_func, self.options, self.aot = library, func, dict(options), tuple(aot)
        self.__name__, self.__qualname__ = func.__name__, func.__qualname__
        self.__module__, self.__doc__ = func.__module__, func.__doc__
        self.checks = tuple(argument_checks(s) for s in self.aot)  # a bad declaration fails at import
        if self.aot and set(self.options) - _AOT_OPTIONS:  # pycc compiles with its own flags
            raise ValueError(f"{func.__name__}: a kernel built ahead of time takes only {sorted(_AOT_OPTIONS)}, "
                             f"not {sorted(set(self.options) - _AOT_OPTIONS)}")
        self._variants: list | None = None

    def export_name(self, i: int) -> str:
        """The name of signature ``i`` in the ahead-of-time module."""
        return f"{self.__module__.rsplit('.', 1)[-1]}__{self.__name__}__{i}"

    def __call__(self, *args, **kwargs):
        if kwargs:
            return self.jit()(*args, **kwargs)
        variants = self._variants
        if variants is None:
            variants = self._variants = self.library.variants(self)
        for fn, checks in variants:
            if len(args) == len(checks) and all(ok(a) for ok, a in zip(checks, args, strict=True)):
                return fn(*args)
        return self.jit()(*args)

    def jit(self):
        """numba's dispatcher of this kernel (its module's kernels compiled by numba from here on)."""
        return self.library.materialize(self.__module__)[self.__name__]

    def __repr__(self) -> str:
        return f"<kernel {self.__module__}.{self.__name__}>"


class Library:
    """The numba kernels of one system's ``modules``, JIT-compiled on first use or built ahead of time."""

    def __init__(self, name: str, modules: Sequence[str]) -> None:
        self.name, self.modules = name, tuple(modules)
        self._lock = threading.RLock()
        self._loaded: object = None  # the ahead-of-time module; False: looked for, not there
        self._key: str | None = None
        self._kernels: list[Kernel] = []

    def kernel(self, *, aot: Sequence[str] = (), **options) -> Callable[[Callable], Kernel]:
        """Decorator: ``func`` as a kernel compiled with ``numba.njit(**options)``, and ahead of time for each
        signature of ``aot`` (argument types only, numba's notation; the result type is numba's inference)."""

        def wrap(func: Callable) -> Kernel:
            k = Kernel(self, func, options, aot)
            self._kernels.append(k)
            return k

        return wrap

    # --- numba's JIT --------------------------------------------------------------------------------------

    def materialize(self, module: str) -> dict:
        """Replace every kernel stand-in of ``module`` (and of the modules whose kernels it names) by numba's
        dispatcher, ``prange`` by numba's; returns the module's namespace."""
        with self._lock:
            ns = vars(importlib.import_module(module))
            if not any(isinstance(v, Kernel) for v in ns.values()):
                return ns
            import numba

            if ns.get("prange") is prange:
                ns["prange"] = numba.prange
            mine = [k for k, v in ns.items() if isinstance(v, Kernel) and v.__module__ == module]
            for k in mine:
                ns[k] = numba.njit(**ns[k].options)(ns[k].py_func)
            for k, v in list(ns.items()):  # kernels of other modules named here (their own replaced first)
                if isinstance(v, Kernel):
                    home = vars(importlib.import_module(v.__module__))
                    ns[k] = home[v.__name__] if not isinstance(home[v.__name__], Kernel) else \
                        v.library.materialize(v.__module__)[v.__name__]
            return ns

    # --- ahead of time ------------------------------------------------------------------------------------

    def key(self) -> str:
        """What the built module depends on: the kernels' sources and this file, numba's, llvmlite's, NumPy's
        and Python's versions (the CPU, whose features it is compiled for, names its directory)."""
        if self._key is None:
            h = hashlib.sha256()
            files = [importlib.util.find_spec(m).origin for m in self.modules] + [__file__]
            for name in ("numba", "llvmlite"):
                spec = importlib.util.find_spec(name)
                if spec is not None and spec.origin:
                    files.append(os.path.join(os.path.dirname(spec.origin), "_version.py"))
            for f in files:
                h.update(f.encode())
                h.update(Path(f).read_bytes() if f and os.path.exists(f) else b"-")
            h.update(f"{sys.version}|{np.__version__}|{sysconfig.get_platform()}".encode())
            self._key = h.hexdigest()[:20]
        return self._key

    def path(self) -> Path:
        """The ahead-of-time module's file for :meth:`key`, in this CPU's directory of :func:`cache_dir` (a
        home directory shared by machines of different CPUs keeps a build for each)."""
        cpu = hashlib.sha256(_cpu_identity().encode()).hexdigest()[:12]
        return cache_dir() / f"cpu-{cpu}" / f"{self._module_name()}{importlib.machinery.EXTENSION_SUFFIXES[0]}"

    def _prefix(self) -> str:
        """The name of this install's builds (another checkout or environment keeps its own)."""
        where = os.path.dirname(importlib.util.find_spec(self.modules[0]).origin)
        return f"torchhpc_{self.name}_{hashlib.sha256(where.encode()).hexdigest()[:8]}_"

    def _module_name(self) -> str:
        return f"{self._prefix()}{self.key()}"

    def loaded(self):
        """The ahead-of-time module where built for this key (and ``TORCHHPC_AOT`` is not 0), else None."""
        with self._lock:
            if self._loaded is None:
                self._loaded = False
                path = self.path() if aot_enabled() else None
                if path is not None and _intact(path):
                    loader = importlib.machinery.ExtensionFileLoader(self._module_name(), str(path))
                    spec = importlib.util.spec_from_file_location(self._module_name(), str(path), loader=loader)
                    try:
                        mod = importlib.util.module_from_spec(spec)
                        loader.exec_module(mod)
                        self._loaded = mod
                    except (ImportError, OSError):  # not loadable here: the JIT runs
                        pass
            return self._loaded or None

    def variants(self, kernel: Kernel) -> list:
        """``[(function, checks)]`` of ``kernel``'s declared signatures in the ahead-of-time module (empty
        where it is not built)."""
        mod = self.loaded()
        if mod is None:
            return []
        found = [(getattr(mod, kernel.export_name(i), None), checks) for i, checks in enumerate(kernel.checks)]
        return [(fn, checks) for fn, checks in found if fn is not None]

    def declared(self) -> list[Kernel]:
        """Every kernel of the library's modules with an ahead-of-time signature (imports the modules)."""
        out = []
        for m in self.modules:
            for v in vars(importlib.import_module(m)).values():
                if isinstance(v, Kernel) and v.__module__ == m and v.aot:
                    out.append(v)
        return out

    def build(self) -> Path:
        """Compile every declared signature into the ahead-of-time module (numba's ``pycc`` and the C
        compiler; tens of seconds) and put it at :meth:`path` in one rename.  Returns the path.

        Raises:
            Exception: whatever the compilation raised (no C compiler, a kernel numba cannot type).
        """
        import shutil
        import tempfile
        import time
        import warnings

        from .runs import atomic_write_text

        kernels = self.declared()  # stand-ins, taken before their modules become numba's
        out = self.path()
        out.parent.mkdir(parents=True, exist_ok=True)
        for old in out.parent.glob(f".build-{self.name}-*"):  # left by a build that was killed an hour ago or more
            try:
                if time.time() - old.stat().st_mtime > 3600:
                    shutil.rmtree(old, ignore_errors=True)
            except OSError:  # removed meanwhile by the build that owned it
                pass
        with _BUILDING:
            work = tempfile.mkdtemp(prefix=f".build-{self.name}-", dir=out.parent)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    from numba.core import sigutils
                    from numba.pycc import CC

                    cc = CC(self._module_name())
                    cc.output_dir = work
                    cc.target_cpu = "host"
                    for k in kernels:
                        dispatcher = k.jit()
                        for i, spec in enumerate(k.aot):
                            args, _ = sigutils.normalize_signature(f"({spec},)")
                            dispatcher.compile(args)  # numba's inference gives the result type
                            cc.export(k.export_name(i), dispatcher.overloads[args].signature)(k.py_func)
                    with pycc_patched(work):
                        cc.compile()
                built = [p for p in Path(work).iterdir() if p.name.startswith(self._module_name())]
                if len(built) != 1:
                    raise RuntimeError(f"pycc wrote {[p.name for p in Path(work).iterdir()]}")
                # the module's digest beside it, then the module: a file that does not match its digest
                # (truncated, damaged) is never loaded (loading a truncated library kills the process)
                atomic_write_text(out.with_suffix(".sha256"), hashlib.sha256(built[0].read_bytes()).hexdigest())
                os.replace(built[0], out)
                for old in out.parent.glob(f"{self._prefix()}*"):  # this install's builds of older sources
                    if not old.name.startswith(self._module_name()):
                        old.unlink(missing_ok=True)
                return out
            finally:
                shutil.rmtree(work, ignore_errors=True)

    def ensure_built(self, notice: Callable[[str], None] | None = None, force: bool = False) -> Path | None:
        """The ahead-of-time module's path, built first where missing or not loadable; None where it cannot be
        had (numba missing, ``TORCHHPC_AOT=0``, an unreadable cache, a build that failed): the kernels then run
        through the JIT.  A failed build leaves a note beside it and is tried again only once the C compiler
        or Python's headers change (or with ``force``).  ``notice`` hears one line before a build and one on a
        failure."""
        if not aot_enabled() or importlib.util.find_spec("numba") is None:
            return None
        try:
            path = self.path()
            failed = path.with_suffix(".failed")
            if path.exists():
                with self._lock:
                    if self._loaded is False:  # looked for before another process built it: look again
                        self._loaded = None
                if self.loaded() is not None:
                    return path
                # not loadable (damaged): built again, replacing it in one rename
            elif not force and failed.exists() and failed.read_text().split("\n", 1)[0] == _toolchain():
                return None
        except (OSError, ValueError):  # a cache this process cannot read: the JIT
            return None
        if notice:
            notice(f"{self.name}: compiling the CPU kernels once into {path.parent} (about half a minute)")
        try:
            self.build()
        except Exception as e:  # noqa: BLE001 - any failure leaves the JIT, which works without a C compiler
            from .runs import atomic_write_text

            try:
                atomic_write_text(failed, f"{_toolchain()}\n{type(e).__name__}: {e}\n")
            except OSError:  # an unwritable cache: the next command tries again
                pass
            first = (str(e).strip().splitlines() or [""])[0]
            if notice:
                notice(f"{self.name}: the ahead-of-time kernels could not be built ({type(e).__name__}: {first}); "
                       f"numba's JIT runs them (the error: {failed})")
            return None
        with self._lock:
            self._loaded = None  # look again, and so do kernels that ran before the build
            for k in self._kernels:
                k._variants = None
        return path


def _intact(path: Path) -> bool:
    """Whether the module at ``path`` is there and matches the digest its build wrote beside it."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() == path.with_suffix(".sha256").read_text().strip()
    except OSError:
        return False


def _toolchain() -> str:
    """What a build needs from the system: the C compiler it would use (``$CC``, else Python's ``CC``,
    resolved on PATH, with its modification time) and whether Python's headers are there.  A failed build
    is tried again when this changes."""
    import shutil

    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    found = shutil.which(cc)
    try:
        compiler = f"{found} {os.stat(found).st_mtime_ns}" if found else f"{cc}: none"
    except OSError:
        compiler = f"{cc}: unreadable"
    headers = os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))
    return f"{compiler} | Python.h {'present' if headers else 'missing'}"


@contextlib.contextmanager
def pycc_patched(work: str):
    """numba's pycc as :meth:`Library.build` needs it, for the ``with`` block: its compile flags with the GIL
    released around each call (what ``nogil=True`` does for the JIT), this CPU's features as the JIT reads
    them (pycc's ``host`` takes the CPU model's, which a virtual machine may mask), and its temporary build
    directory inside ``work``.  Process-wide: hold the build lock."""
    import tempfile
    import warnings

    from numba.core import codegen

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba's notice that pycc is pending deprecation
        from numba.pycc import compiler as pycc_compiler

    saved = pycc_compiler.Flags, codegen.AOTCPUCodegen._customize_tm_features, tempfile.tempdir
    pycc_compiler.Flags = _releasing_gil(saved[0])
    codegen.AOTCPUCodegen._customize_tm_features = codegen.CPUCodegen._get_host_cpu_features
    tempfile.tempdir = work
    try:
        yield
    finally:
        pycc_compiler.Flags, codegen.AOTCPUCodegen._customize_tm_features, tempfile.tempdir = saved


@functools.cache
def _cpu_identity() -> str:
    """This CPU's model and feature flags (Linux: the first processor of /proc/cpuinfo), else the platform's
    processor string: the ahead-of-time module is compiled for this CPU's features."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = []
            for line in f:
                if not line.strip():
                    break
                if line.startswith(("vendor_id", "model name", "flags", "Features", "CPU part")):
                    lines.append(line.strip())
            return "|".join(lines)
    except OSError:
        import platform

        return platform.processor() or platform.machine()


def _releasing_gil(flags: type) -> type:
    """pycc's compile flags with the GIL released around each call (what ``nogil=True`` does for the JIT)."""

    class ReleaseGil(flags):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.release_gil = True

    return ReleaseGil


__all__ = ["Kernel", "Library", "aot_enabled", "argument_checks", "cache_dir", "prange"]
