"""``torchhpc fperror analyze|trace``: JSON output, one-line errors, flags from the dataclasses."""

from __future__ import annotations

import json

from torchhpc.ext.core.data import shared_data_dir
from torchhpc.trainers.fperror import main

DATA = shared_data_dir() / "fperror"


def test_analyze_json(shared_data, capsys):
    """analyze --json prints one object whose bound covers the output and names culprits."""
    assert main(["analyze", str(DATA / "satire_fpbench_style" / "doppler1.txt"), "--json", "--bb-iters", "10"]) == 0
    out = json.loads(capsys.readouterr().out)
    o = out["outputs"][0]
    assert o["output"] == "doppler1" and 1e-14 < o["abs_bound"] < 1e-12 and o["culprits"]


def test_analyze_bad_file_is_one_line(tmp_path, capsys):
    """A syntax error exits 1 with one line naming file:line:column."""
    f = tmp_path / "bad.txt"
    f.write_text("INPUTS { x fl64 : (0, 1); }\nOUTPUTS { y; }\nEXPRS { y rnd64 = x * ; }\n")
    assert main(["analyze", str(f)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.txt:3:" in err[0]


def test_trace_function(tmp_path, capsys):
    """trace file.py:fn --ranges bounds a user's torch function and prints its line as a culprit."""
    f = tmp_path / "kern.py"
    f.write_text("def step(u):\n    return u[:-2] * 0.3 + u[1:-1] * 0.4 + u[2:] * 0.3\n")
    assert main(["trace", f"{f}:step", "--ranges", "u=0:1", "--shapes", "u=6", "--json", "--bb-iters", "0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["outputs"]) == 4 and out["outputs"][0]["culprits"][0]["source"].startswith("kern.py:2")


def test_trace_bad_range_is_one_line(capsys):
    """A malformed --ranges is a config error, exit 1."""
    assert main(["trace", "math:sin", "--ranges", "x=a:b"]) == 1
    assert "--ranges" in capsys.readouterr().err


def test_register_adds_the_command_group(shared_data, capsys):
    """``torchhpc fperror analyze`` through register(): the subcommand runs and prints the table."""
    from torchhpc.ext.core.cli import ArgumentParser
    from torchhpc.trainers.fperror import register

    p = ArgumentParser(prog="torchhpc")
    register(p.add_subparsers(dest="cmd"))
    args = p.parse_args(["fperror", "analyze", str(DATA / "satire_fpbench_style" / "sqroot.txt"), "--bb-iters", "5"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "sqroot" in out and "abs bound" in out


def test_parser_imports_no_torch():
    """Building the fperror CLI (for ``torchhpc --help``) does not import torch."""
    import subprocess
    import sys

    code = ("import sys, torchhpc.trainers.cli as c; c.build_parser(); "
            "print('torchhpc.trainers.fperror' in sys.modules and 'torch' not in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "True"
