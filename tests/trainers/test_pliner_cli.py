"""``torchhpc pliner find``: JSON output, progress lines, one-line errors for bad input."""

from __future__ import annotations

import argparse
import json

import pytest

from torchhpc.trainers.pliner import main, register

MODELS = '''
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.l1, self.l2 = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

    def forward(self, x):
        h = torch.tanh(self.l1(x))
        d = self.l2(h + 500.0) - self.l2(torch.full_like(h, 500.0))
        return torch.tanh(d)

def build():
    return Net().eval(), torch.randn(8, 16, generator=torch.Generator().manual_seed(1))

def agree():
    return torch.nn.Tanh(), (torch.randn(4),)

def broken():
    raise ValueError("dataset not found")

def not_a_pair():
    return torch.nn.Tanh()

class Shapes(torch.nn.Module):
    def forward(self, x):
        y = torch.nn.functional.linear(x, torch.eye(4))
        return y[:2] if y.dtype == torch.bfloat16 else y

def shapes():
    return Shapes(), torch.randn(4, 4)
'''


@pytest.fixture()
def models(tmp_path):
    f = tmp_path / "models.py"
    f.write_text(MODELS)
    return f


def test_find_json_names_the_culprit_line(models, capsys):
    """--json prints one object: status found, errors, runs, and culprits with node, op, module and file:line."""
    assert main(["find", "--model", f"{models}:build", "--problem", "tf32", "--tol", "1e-3", "--json"]) == 0
    cap = capsys.readouterr()
    out = json.loads(cap.out)
    assert out["status"] == "found" and out["error_after"] <= 1e-3 < out["error_before"] and out["runs"] >= 2
    assert out["culprits"] and all(c["module"] == "l2" for c in out["culprits"])
    assert all(c["line"].endswith("models.py:12") and c["node"] and c["op"].startswith("aten.") for c in out["culprits"])
    assert cap.err.count("[pliner] level") == 3  # one progress line per search level


def test_agreeing_configurations(models, capsys):
    """Configurations that already agree: status no_divergence, one run."""
    assert main(["find", "--model", f"{models}:agree", "--problem", "autocast-bf16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "no_divergence" and out["runs"] == 1


@pytest.mark.parametrize("target, words", [
    ("broken", "broken() failed: ValueError: dataset not found"),
    ("not_a_pair", "must return (model, inputs)"),
    ("missing", "has no function 'missing'"),
    ("shapes", "(2, 4) in the problem configuration"),
])
def test_bad_input_is_one_line(models, capsys, target, words):
    """A failing or malformed build function, and outputs of different shapes, exit 1 with one line."""
    assert main(["find", "--model", f"{models}:{target}", "--problem", "autocast-bf16"]) == 1
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if "Warning" not in ln and "return cls" not in ln]
    assert len(err) == 1 and words in err[0]


@pytest.mark.parametrize("spec, words", [
    ("fp8", "unknown configuration 'fp8'"),
    ("autocast-bf16+autocast-fp16", "sets autocast twice (bfloat16 and float16)"),
    ("", "has an empty configuration"),
    ("fp32+", "has an empty configuration"),
    ("tf32:foo", "only compile takes an argument"),
    ("compile:", "name the torch.compile backend"),
])
def test_a_bad_configuration_is_one_line(models, capsys, spec, words):
    """An unknown preset, two presets that set one field two ways (the last won without a word), an empty one
    (it ran fp32 against fp32), or an argument a preset does not take (it was dropped): one line each."""
    assert main(["find", "--model", f"{models}:build", "--problem", spec]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err


def test_bad_configuration_and_missing_cuda(models, capsys):
    """An unknown preset, and cuda where there is none, are one-line config errors."""
    assert main(["find", "--model", f"{models}:build", "--problem", "fp8"]) == 1
    assert "unknown configuration 'fp8'" in capsys.readouterr().err
    import torch
    if not torch.cuda.is_available():
        assert main(["find", "--model", f"{models}:build", "--problem", "cuda"]) == 1
        assert "no CUDA device" in capsys.readouterr().err


def test_register_adds_the_subcommand():
    """register() adds `pliner find` whose flags come from FindOptions."""
    p = argparse.ArgumentParser()
    register(p.add_subparsers(dest="cmd"))
    args = p.parse_args(["pliner", "find", "--model", "m.py:b", "--problem", "tf32", "--tol", "1e-4"])
    assert args.pliner_command == "find" and callable(args.func)


def test_debug_config_pinned(capsys):
    """configs/pliner/debug.yaml: the rotary-angle ops of the RoPE transformer, pinned runs and errors."""
    from pathlib import Path

    cfg = Path(__file__).resolve().parents[2] / "configs" / "pliner" / "debug.yaml"
    assert main(["find", "--config", str(cfg), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "found" and out["minimal"] is True
    assert [c["op"] for c in out["culprits"]] == ["aten.matmul.default", "aten.cat.default", "aten.cos.default",
                                                 "aten.sin.default"]
    assert out["runs"] == 10 and out["n_candidates"] == 57
    assert out["error_before"] == pytest.approx(2.816e-2, rel=1e-2)
    assert out["error_after"] == pytest.approx(3.291e-3, rel=1e-2)
    assert out["recipe"]["lines"] and out["recipe_error"] <= 1e-2
