"""``torchhpc pliner find --model FILE.py:build``: the user's code through the shared guard, and a reference
that is not finite -- one line and exit 1 each."""

from __future__ import annotations

import pytest
from harness.cli import one_line_from

from torchhpc.trainers.pliner import main

MODELS = '''
import torch

class Log(torch.nn.Module):
    def forward(self, x):
        return torch.log(x - 1.0)

class Broken(torch.nn.Module):
    def forward(self, x):
        raise RuntimeError("the cache is cold")

def nan_reference():
    return Log(), torch.zeros(4)

def needs_size(n):
    return Log(), torch.ones(n)

def fails_in_forward():
    return Broken(), torch.ones(3)

def tensor_as_model():
    return torch.ones(3), torch.ones(3)
'''


@pytest.fixture()
def models(tmp_path):
    f = tmp_path / "models.py"
    f.write_text(MODELS)
    return f


def _one_line(capsys, argv: list[str]) -> str:
    """Run the CLI in-process: exit 1 and exactly one stderr line, no traceback."""
    return one_line_from(main, capsys, argv)


def test_a_reference_that_is_not_finite_is_an_error(models, capsys):
    """log(x - 1) at x = 0 is NaN in the reference itself: an error line, not a not_fixable report."""
    line = _one_line(capsys, ["find", "--model", f"{models}:nan_reference", "--problem", "autocast-bf16"])
    assert "the reference configuration fp32 is not finite: 4 NaN and 0 infinite values" in line


def test_a_build_function_that_needs_arguments(models, capsys):
    """build functions are called with no argument: one that needs one is refused, naming it."""
    line = _one_line(capsys, ["find", "--model", f"{models}:needs_size"])
    assert "needs_size() needs 'n'" in line and "needs_size(n)" in line


def test_a_syntax_error_names_file_and_line(tmp_path, capsys):
    """A model file that does not compile: one line with file:line."""
    f = tmp_path / "bad.py"
    f.write_text("import torch\ndef build(:\n    pass\n")
    line = _one_line(capsys, ["find", "--model", f"{f}:build"])
    assert "--model: cannot import" in line and "bad.py:2:" in line and "SyntaxError" in line


def test_an_exception_in_forward_names_the_users_line(models, capsys):
    """The model raising under the reference configuration: the line says where in the user's file."""
    line = _one_line(capsys, ["find", "--model", f"{models}:fails_in_forward"])
    assert "RuntimeError: the cache is cold (at models.py:10)" in line


def test_a_wrong_return_value_names_what_came_back(models, capsys):
    """(tensor, inputs) instead of (module, inputs): one line naming the function and what it returned."""
    line = _one_line(capsys, ["find", "--model", f"{models}:tensor_as_model"])
    assert "tensor_as_model() must return (model, inputs) with a torch.nn.Module as model, got a Tensor" in line
