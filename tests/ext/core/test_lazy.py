"""Modules imported on first use (``lazy_module``), and the modules that must import without torch."""

from __future__ import annotations

import subprocess
import sys

from torchhpc.ext.core.lazy import lazy_module


def test_a_lazy_module_imports_at_the_first_attribute_read():
    """The stand-in imports nothing until an attribute is read, then hands out the module's own objects; a
    module already imported is returned as it is."""
    code = ("import sys\nfrom torchhpc.ext.core.lazy import lazy_module\nm = lazy_module('fractions')\n"
            "print('fractions' in sys.modules)\nF = m.Fraction\nprint('fractions' in sys.modules, F(1, 2) == 0.5)\n"
            "import fractions\nprint(F is fractions.Fraction, m.Fraction is F)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True", "True", "True", "True"]
    assert lazy_module("sys") is sys


def test_the_cpu_aligners_modules_import_without_torch():
    """The command and every module of the CPU aligner's array path import without loading torch (the core's
    device and process-group helpers included: they load it at first use)."""
    code = ("import sys\nimport torchhpc.trainers.cli, torchhpc.ext.segalign.commands, torchhpc.ext.segalign.align\n"
            "import torchhpc.ext.core.distributed, torchhpc.ext.core.device, torchhpc.ext.core.budgets\n"
            "print('torch' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.split() == ["False"]
