"""``torchhpc fperror trace FILE.py:f``: every way the user's code can go wrong is one line and exit 1.

The function is imported and called through the shared guard ``torchhpc.ext.core.usercode`` (the same
one ``pliner find --model`` uses); its own checks are at the end of this file.
"""

from __future__ import annotations

import pytest
from harness.cli import one_line_from

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.core.usercode import describe_exception, load_function
from torchhpc.trainers.fperror import main

KERNELS = '''
import torch

def raises(x):
    return _helper(x)

def _helper(x):
    raise ValueError("the grid is empty")

def step(x):
    return x * 0.3 + 1.0

def count(x):
    return 3

def branch(x):
    if x.item() > 0.5:
        return x * 100.0
    return x

def masked(x):
    if (x > 0.5).any():
        return x * 100.0
    return x
'''


@pytest.fixture()
def kernels(tmp_path):
    f = tmp_path / "kernels.py"
    f.write_text(KERNELS)
    return f


def _one_line(capsys, argv: list[str]) -> str:
    """Run the CLI in-process: exit 1 and exactly one stderr line, no traceback."""
    return one_line_from(main, capsys, argv)


def test_an_exception_in_the_function_is_one_line(kernels, capsys):
    """f raises: the line names the function, the exception and where in the user's file it was raised."""
    line = _one_line(capsys, ["trace", f"{kernels}:raises", "--ranges", "x=0:1"])
    assert "raises() failed: ValueError: the grid is empty (at kernels.py:8)" in line


def test_a_syntax_error_is_one_line(tmp_path, capsys):
    """A file that does not compile: the line names file:line:column and the error."""
    f = tmp_path / "broken.py"
    f.write_text("def f(x):\n    return (x *\n")
    line = _one_line(capsys, ["trace", f"{f}:f", "--ranges", "x=0:1"])
    assert "broken.py:2:" in line and "SyntaxError" in line


def test_ranges_naming_an_argument_the_function_does_not_take(kernels, capsys):
    """--ranges y=... for step(x): refused before tracing, naming the argument and the signature."""
    line = _one_line(capsys, ["trace", f"{kernels}:step", "--ranges", "x=0:1,y=0:1"])
    assert "step() takes no argument 'y'" in line and "step(x)" in line


def test_ranges_missing_an_argument(kernels, capsys):
    """No range for a required argument: refused, naming it."""
    line = _one_line(capsys, ["trace", f"{kernels}:step", "--ranges", "z=0:1"])
    assert "'z'" in line and "step(x)" in line


@pytest.mark.parametrize("shape", ["0", "4x0", "-2"])
def test_shapes_with_a_dimension_below_one(kernels, capsys, shape):
    """--shapes x=0 (or negative): a one-line option error."""
    line = _one_line(capsys, ["trace", f"{kernels}:step", "--ranges", "x=0:1", "--shapes", f"x={shape}"])
    assert f"--shapes: x={shape}: every dimension must be at least 1" in line


def test_a_result_that_is_not_tensors(kernels, capsys):
    """f returns an int: the line names the function and what it returned."""
    line = _one_line(capsys, ["trace", f"{kernels}:count", "--ranges", "x=0:1"])
    assert "count() must return a floating-point tensor" in line and "got int" in line


@pytest.mark.parametrize("fn, shape", [("branch", []), ("masked", ["--shapes", "x=4"])])
def test_a_data_dependent_branch_is_refused(kernels, capsys, fn, shape):
    """``if x.item() > 0.5`` / ``if (x > 0.5).any()``: the bound of the traced path would not hold for the
    other path (the outputs reach 100 where the traced range ends at 1), so the trace is refused."""
    line = _one_line(capsys, ["trace", f"{kernels}:{fn}", "--ranges", "x=0:1", *shape])
    assert f"{fn}() cannot be traced: kernels.py:" in line and "control flow may depend on the inputs" in line


def test_a_branch_on_a_constant_is_fine(tmp_path, capsys):
    """Reading a value that does not come from the inputs is not a data-dependent branch."""
    f = tmp_path / "k.py"
    f.write_text("import torch\ndef f(x):\n    c = torch.tensor(2.0, dtype=torch.float64)\n"
                 "    return x * 3.0 if c.item() > 1 else x\n")
    assert main(["trace", f"{f}:f", "--ranges", "x=0:1", "--bb-iters", "0", "--json"]) == 0


# ----------------------------------------------------------------------------- the shared guard


def test_guard_keeps_our_own_errors_and_names_user_lines(tmp_path):
    """A TorchHPCError raised inside the call passes unchanged; any other exception names the user's line."""
    f = tmp_path / "m.py"
    f.write_text("from torchhpc.ext.core.errors import InputError\n"
                 "def ours():\n    raise InputError('x.txt:3: bad')\n"
                 "def theirs():\n    return 1 / 0\n")
    with pytest.raises(InputError, match=r"^x\.txt:3: bad$"):
        load_function(f"{f}:ours", "--model")()
    with pytest.raises(InputError) as exc:
        load_function(f"{f}:theirs", "--model")()
    assert str(exc.value) == f"--model: {f}:theirs() failed: ZeroDivisionError: division by zero (at m.py:5)"
    assert isinstance(exc.value.__cause__, ZeroDivisionError)  # kept for TORCHHPC_DEBUG=1


def test_a_file_that_is_not_python_is_named_so(tmp_path, monkeypatch):
    """``--model genome.fa:build`` names the file as not Python (it read as a module ``genome`` that would not
    import); a dotted module name that is no file still imports as a module, and so does a module with a
    non-Python file of its name beside it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "genome.fa").write_text(">x\nACGT\n")
    with pytest.raises(InputError, match="^--model: genome.fa is a file but not a Python file"):
        load_function("genome.fa:build", "--model")
    assert load_function("os.path:join", "--model")("a", "b") == "a/b"
    (tmp_path / "netdef").write_bytes(b"\x7fELF")  # a file named as the module, beside the module itself
    (tmp_path / "netdef.py").write_text("def f():\n    return 7\n")
    assert load_function("netdef:f", "--model")() == 7


def test_guard_describes_exceptions_in_one_line():
    """A multi-line message keeps its first line."""
    assert describe_exception(ValueError("first\nsecond")) == "ValueError: first"


def test_a_module_in_the_current_directory_is_found(tmp_path, monkeypatch, capsys):
    """`trace mymodule:step` in the folder that holds mymodule.py works from the installed `torchhpc` script
    too (which, unlike `python -m`, does not put the current directory on sys.path)."""
    import sys

    (tmp_path / "fperror_cwd_kernels.py").write_text("def step(u):\n    return u * 0.5 + 0.25\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "fperror_cwd_kernels", raising=False)
    assert main(["trace", "fperror_cwd_kernels:step", "--ranges", "u=0:1"]) == 0
    assert "out" in capsys.readouterr().out
    assert sys.path[-1] == str(tmp_path)
    sys.modules.pop("fperror_cwd_kernels", None)


def test_a_file_imports_the_modules_beside_it(tmp_path, monkeypatch, capsys):
    """`trace pkg/kernels.py:step` where kernels.py does `from helpers_beside import scale`: the file's folder
    is on the import path, as `python pkg/kernels.py` would have it (was ModuleNotFoundError)."""
    import sys

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "helpers_beside.py").write_text("def scale(u):\n    return u * 0.5\n")
    (pkg / "kernels.py").write_text("from helpers_beside import scale\n\ndef step(u):\n    return scale(u) + 0.25\n")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(pkg)])
    monkeypatch.delitem(sys.modules, "helpers_beside", raising=False)
    assert main(["trace", f"{pkg / 'kernels.py'}:step", "--ranges", "u=0:1"]) == 0
    assert "out" in capsys.readouterr().out
    sys.modules.pop("helpers_beside", None)
