"""Kernels compiled by numba's JIT or ahead of time (torchhpc.ext.core.compiled), on a small library of
kernels written to a temporary directory and built there (a few seconds: numba's pycc and the C compiler)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from torchhpc.ext.core.compiled import argument_checks

pytest.importorskip("numba")

_KERNELS = textwrap.dedent('''
    import numpy as np

    from torchhpc.ext.core.compiled import Library, prange

    LIB = Library("demo", ("kdemo",))

    @LIB.kernel(nogil=True)
    def _twice(x):
        return 2 * x

    @LIB.kernel(nogil=True, cache=True, aot=["i8[::1], i8, i8[::1]"])
    def scaled_sum(a, k, out):
        s = 0
        for i in range(a.shape[0]):
            out[i] = _twice(a[i]) * k
            s += out[i]
        return s, out[:1].copy()

    @LIB.kernel(nogil=True, parallel=True)
    def squares(out):
        for i in prange(out.shape[0]):
            out[i] = i * i
''')

_BROKEN = _KERNELS + textwrap.dedent('''
    @LIB.kernel(aot=["i8[::1]"])
    def untypable(a):
        return {1: "one", "two": 2}[a[0]]
''')

_RUN = textwrap.dedent('''
    import json, sys
    import numpy as np
    import kdemo
    a = np.arange(5, dtype=np.int64)
    out = np.zeros(5, np.int64)
    s, first = kdemo.scaled_sum(a, 3, out)
    report = {"sum": int(s), "first": int(first[0]), "out": out.tolist(), "numba": "numba" in sys.modules}
    s32, _ = kdemo.scaled_sum(a.astype(np.int32), 3, np.zeros(5, np.int32))  # not the declared type: the JIT
    sq = np.zeros(6, np.int64)
    kdemo.squares(sq)
    report.update(sum32=int(s32), numba_after=True if "numba" in sys.modules else False, squares=sq.tolist())
    print(json.dumps(report))
''')


def _write(tmp_path, source):
    d = tmp_path / "src"
    d.mkdir(exist_ok=True)
    (d / "kdemo.py").write_text(source)
    return d


def _env(tmp_path, **extra):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "src"), os.environ.get("PYTHONPATH", "")]),
           "TORCHHPC_CACHE": str(tmp_path / "cache")}
    env.pop("TORCHHPC_AOT", None)
    return {**env, **extra}


def _python(tmp_path, code, **extra):
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(tmp_path, **extra),
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout.strip().splitlines()


_BUILD = ("import kdemo\npath = kdemo.LIB.ensure_built(notice=print)\nprint(path)")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The demo library built once: (tmp dir, the build's printed lines, the module's path)."""
    tmp = tmp_path_factory.mktemp("compiled")
    _write(tmp, _KERNELS)
    # a build of older sources of this install for this CPU: the new build removes it; another install's stays
    probe, key = _python(tmp, "import kdemo\nprint(kdemo.LIB.path())\nprint(kdemo.LIB.key())")[-2:]
    stale = probe.replace(key, "0" * 20)
    other = os.path.join(os.path.dirname(probe), "torchhpc_demo_ffffffff_" + "0" * 20 + ".so")
    os.makedirs(os.path.dirname(stale), exist_ok=True)
    for p in (stale, other):
        open(p, "wb").close()
    lines = _python(tmp, _BUILD)
    return tmp, lines, lines[-1], stale, other


def test_a_built_kernel_runs_without_numba_and_gives_the_jits_results(built):
    tmp, lines, path, _, _ = built
    assert "compiling the CPU kernels once" in lines[0] and path.endswith(".so") and os.path.exists(path)
    aot = json.loads(_python(tmp, _RUN)[-1])
    jit = json.loads(_python(tmp, _RUN, TORCHHPC_AOT="0")[-1])
    expect = {"sum": 60, "first": 0, "out": [0, 6, 12, 18, 24], "sum32": 60, "squares": [0, 1, 4, 9, 16, 25]}
    for r in (aot, jit):
        assert {k: r[k] for k in expect} == expect
    assert aot["numba"] is False  # the ahead-of-time function ran: numba never imported
    assert jit["numba"] is True  # TORCHHPC_AOT=0: numba's JIT
    assert aot["numba_after"] is True  # int32 arrays are not the declared type: they went to numba's JIT


def test_the_build_releases_the_gil_and_leaves_only_its_module(built):
    """Each function releases the GIL around its call (as a ``nogil`` kernel: Python threads run it side by
    side); the build's work directory is gone, the stale build of older sources removed and another install's
    build kept."""
    tmp, _, path, stale, other = built
    assert b"PyEval_SaveThread" in open(path, "rb").read()
    assert not os.path.exists(stale) and stale != path
    digest = path[: -len(".so")] + ".sha256"  # the module's digest, checked before it is loaded
    assert sorted(os.listdir(os.path.dirname(path))) == sorted(os.path.basename(p) for p in (path, digest, other))
    again = _python(tmp, _BUILD)
    assert again == [path]  # built: found, not built again (no notice)


def test_a_build_that_fails_leaves_the_jit_and_is_not_tried_again(tmp_path):
    _write(tmp_path, _BROKEN)
    first = _python(tmp_path, _BUILD)
    assert first[-1] == "None" and "could not be built" in first[1] and "compiling" in first[0]
    assert _python(tmp_path, _BUILD) == ["None"]  # the failure is remembered for these sources and C compiler
    (marker,) = (tmp_path / "cache").rglob("*.failed")
    marker.write_text("another compiler\n" + marker.read_text().split("\n", 1)[1])
    assert "compiling" in _python(tmp_path, _BUILD)[0]  # a C compiler installed since: tried again
    r = json.loads(_python(tmp_path, _RUN)[-1])
    assert r["sum"] == 60 and r["numba"] is True
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_dir() and p.name.startswith(".build")]


def test_argument_checks_take_exactly_the_declared_types():
    arr, i8, b1 = argument_checks("i4[:, ::1], i8, b1")
    a = np.zeros((3, 4), np.int32)
    assert arr(a) and not arr(a.T) and not arr(a[:, ::2]) and not arr(a.astype(np.int64)) and not arr(a[0])
    ro = a.copy()
    ro.flags.writeable = False
    assert not arr(ro) and not arr(a.tolist())
    assert i8(3) and i8(np.int64(3)) and not i8(True) and not i8(np.int32(3)) and not i8(3.0) and not i8(1 << 64)
    assert b1(True) and b1(np.bool_(False)) and not b1(1)
    (u,) = argument_checks("u1[::1]")
    assert u(np.zeros(0, np.uint8)) and not u(np.zeros(4, np.int8))
    for bad in ("i8[:]", "i8[::1, :]", "c16", "i8[:, :]"):
        with pytest.raises(ValueError, match="C-ordered"):
            argument_checks(bad)
    for narrow in ("i4", "u1"):  # numba types a Python int as int64: a narrower scalar would truncate
        with pytest.raises(ValueError, match="i8, f8 or b1"):
            argument_checks(narrow)


def test_a_kernel_built_ahead_of_time_takes_only_the_options_pycc_keeps():
    from torchhpc.ext.core.compiled import Library

    lib = Library("demo", ())
    lib.kernel(nogil=True, cache=True, aot=["i8"])(lambda x: x)
    lib.kernel(parallel=True, fastmath=True)(lambda x: x)  # JIT only: any option
    with pytest.raises(ValueError, match="only"):
        lib.kernel(fastmath=True, aot=["i8"])(lambda x: x)


def test_pycc_builds_with_this_cpus_features_and_the_gil_released(tmp_path):
    """Inside :func:`pycc_patched` an ahead-of-time code generator for ``host`` gets this CPU's features as
    numba's JIT reads them (pycc alone passes none: the CPU model's defaults, which a VM may mask), pycc's
    flags release the GIL and its temporary files go to the build's directory; all restored after."""
    import tempfile
    import warnings

    from numba.core import codegen

    from torchhpc.ext.core.compiled import pycc_patched

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba's notice that pycc is pending deprecation
        from numba.pycc import compiler as pycc_compiler

    before = tempfile.gettempdir()
    assert codegen.AOTCPUCodegen("plain", cpu_name="host")._tm_features == ""
    with pycc_patched(str(tmp_path)):
        gen = codegen.AOTCPUCodegen("patched", cpu_name="host")
        assert gen._tm_features and gen._tm_features == codegen.CPUCodegen._get_host_cpu_features(gen)
        assert pycc_compiler.Flags().release_gil and tempfile.gettempdir() == str(tmp_path)
    assert codegen.AOTCPUCodegen("after", cpu_name="host")._tm_features == ""
    assert not pycc_compiler.Flags().release_gil and tempfile.gettempdir() == before


def test_a_damaged_module_is_built_again(built):
    """A module file that does not match its build's digest (truncated, say: loading it would kill the
    process) is built again in place and then runs."""
    tmp, _, path, _, _ = built
    with open(path, "r+b") as f:
        f.truncate(1000)
    lines = _python(tmp, _BUILD)
    assert "compiling" in lines[0] and lines[-1] == path
    assert json.loads(_python(tmp, _RUN)[-1])["numba"] is False
