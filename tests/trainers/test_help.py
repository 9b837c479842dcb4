"""Every command's --help lists every option of its dataclass with its default, so the two cannot drift."""

from __future__ import annotations

import pytest

from torchhpc.ext.core.cli import OPTIONS_ATTR, describe_flags
from torchhpc.trainers.cli import leaf_commands

COMMANDS = list(leaf_commands())


def test_cli_has_commands():
    """The walk finds the suite's commands (a broken walk would make the next test vacuous)."""
    names = {" ".join(p) for p, _ in COMMANDS}
    assert {"sched train", "kraken train", "gems train", "align", "ccsdt", "demo"} <= names


@pytest.mark.parametrize("path, parser", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_help_lists_every_option(path, parser):
    """Each command takes its options from one dataclass, and --help shows each with its default."""
    cls = parser.get_default(OPTIONS_ATTR)
    assert cls is not None, f"torchhpc {' '.join(path)}: options are not generated from a config dataclass"
    text = " ".join(parser.format_help().split())
    for flag, default, _doc in describe_flags(cls):
        assert flag in text, f"{flag} missing from torchhpc {' '.join(path)} --help"
        assert f"(default: {' '.join(default.split())})" in text, f"{flag}'s default {default} not shown"


def test_a_command_loads_only_its_own_options():
    """`torchhpc align ...` builds the align parser alone (no other system's trainer module is imported,
    so every command starts quicker); `torchhpc --help` and an unknown command still list them all."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import sys
        from torchhpc.trainers.cli import COMMANDS, main
        try:
            main(["align", "--help"])
        except SystemExit:
            pass
        others = [m for name, m in COMMANDS if name != "align" and m in sys.modules]
        print("loaded:", others)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "usage: torchhpc align" in out.stdout and out.stdout.strip().endswith("loaded: []")
    bad = subprocess.run([sys.executable, "-m", "torchhpc.trainers.cli", "alignn"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "'align'" in bad.stderr and "'collectives'" in bad.stderr
