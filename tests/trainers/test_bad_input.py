"""Bad input on every command gets one clear line and a non-zero exit, never a traceback.

The cases are generated from the CLI itself (every command, every option of its dataclass), so a
new command or option is covered the day it is added.  They run in-process through ``main()``:
each fails while the config is built, before any work starts.
"""

from __future__ import annotations

import dataclasses
import typing

import pytest

from torchhpc.ext.core.cli import OPTIONS_ATTR, _leaf_fields, _unwrap_optional, option_flag
from torchhpc.trainers.cli import leaf_commands, main

COMMANDS = [(p, parser) for p, parser in leaf_commands() if parser.get_default(OPTIONS_ATTR)]


def _required_positionals(cls) -> list[str]:
    """Placeholder values for required options (the error must come before they are read)."""
    out = []
    for key, f, _tp, _ in _leaf_fields(cls):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            out += ["placeholder-input"] if f.metadata.get("positional") else [option_flag(key, f), "placeholder"]
    return out


def _main(argv) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        return exc.code


def _bad_values(cls):
    """(flag, bad value, what the message must say) for every option with a type or range to break."""
    cases = []
    for key, f, tp, _ in _leaf_fields(cls):
        meta = f.metadata
        if meta.get("positional") or not meta.get("cli", True):
            continue
        flag = option_flag(key, f)
        inner = _unwrap_optional(tp)
        if inner is float:
            cases.append((flag, "nan", "finite number"))
        if inner in (int, float):
            cases.append((flag, "abc", "must be"))
            for bound, delta in (("ge", -1), ("gt", 0)):
                if meta.get(bound) is not None:
                    cases.append((flag, repr(meta[bound] + delta) if inner is float or bound == "ge"
                                  else str(int(meta[bound])), "out of range"))
        if meta.get("choices") and inner is not bool:
            cases.append((flag, "no-such-choice", "must be one of"))
        if typing.get_origin(inner) is typing.Literal:
            cases.append((flag, "no-such-choice", "must be one of"))
    return cases


CASES = [
    pytest.param(path, flag, value, needle, id=f"{' '.join(path)} {flag}={value}")
    for path, parser in COMMANDS
    for flag, value, needle in _bad_values(parser.get_default(OPTIONS_ATTR))
]


def _check_one_line(capsys, rc, needle):
    out = capsys.readouterr()
    assert rc not in (0, None), f"exit {rc} on bad input; stdout: {out.out[-300:]}"
    lines = [ln for ln in out.err.splitlines() if ln.strip()]
    assert len(lines) == 1, out.err[-2000:]
    assert "Traceback" not in out.err and needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("path, flag, value, needle", CASES)
def test_bad_option_value_is_one_line(capsys, path, flag, value, needle):
    """A value of the wrong type or out of range: one line naming the flag, exit non-zero."""
    cls = next(p.get_default(OPTIONS_ATTR) for pp, p in COMMANDS if pp == path)
    rc = _main([*path, *_required_positionals(cls), flag, value])
    line = _check_one_line(capsys, rc, needle)
    assert flag in line


def test_the_corpus_covers_every_command():
    """Every command with options has at least one bad-value case (a new command is covered too)."""
    covered = {c.values[0] for c in CASES}
    missing = [" ".join(p) for p, parser in COMMANDS
               if p not in covered and _bad_values(parser.get_default(OPTIONS_ATTR))]
    assert not missing, missing


CONFIG_COMMANDS = [(p, parser) for p, parser in COMMANDS
                   if any(a.dest == "config" for a in parser._actions)]


@pytest.mark.parametrize("fault", ["missing", "folder", "bytes", "duplicate", "unknown-key", "not-mapping"])
@pytest.mark.parametrize("path, parser", CONFIG_COMMANDS, ids=[" ".join(p) for p, _ in CONFIG_COMMANDS])
def test_bad_config_file_is_one_line(tmp_path, capsys, path, parser, fault):
    """A missing, binary, duplicated-key, unknown-key or non-mapping config file: one line naming it."""
    cfg = tmp_path / "bad.yaml"
    if fault == "folder":
        cfg = tmp_path
    elif fault == "bytes":
        cfg.write_bytes(bytes(range(256)))
    elif fault == "duplicate":
        cfg.write_text("seed: 1\nseed: 2\n")
    elif fault == "unknown-key":
        cfg.write_text("no_such_option_anywhere: 1\n")
    elif fault == "not-mapping":
        cfg.write_text("- 1\n- 2\n")
    cls = parser.get_default(OPTIONS_ATTR)
    rc = _main([*path, *_required_positionals(cls), "--config", str(cfg)])
    line = _check_one_line(capsys, rc, str(cfg))
    assert line.startswith("torchhpc")


def _input_file_cases():
    """(command, argv, what the line must name) with one ``option(input_file=True)`` pointing nowhere, every
    other required option given (an existing file where it is an input file too)."""
    cases = []
    for path, parser in COMMANDS:
        cls = parser.get_default(OPTIONS_ATTR)
        leaves = _leaf_fields(cls)
        for key, f, _tp, _ in leaves:
            if not f.metadata.get("input_file"):
                continue
            argv = [*path]
            for k2, f2, _t2, _ in leaves:  # in field order: positionals stay in place
                required = f2.default is dataclasses.MISSING and f2.default_factory is dataclasses.MISSING
                if k2 != key and not required:
                    continue
                value = ("{missing}" if k2 == key else "{existing}" if f2.metadata.get("input_file")
                         else "placeholder")
                argv += [value] if f2.metadata.get("positional") else [option_flag(k2, f2), value]
            name = key.rsplit(".", 1)[-1] if f.metadata.get("positional") else option_flag(key, f)
            # what those options need beside them: kraken bench reads --path with --stream criteo only, --xyz
            # needs a basis, --labels a graph
            extra = {"--path": ["--stream", "criteo"], "--xyz": ["--basis", "sto-3g"],
                     "--labels": ["--graph", "{existing}"]}.get(name, [])
            cases.append((" ".join(path), argv + extra, name))
    return cases


def test_missing_input_files_fail_before_torch_loads(tmp_path):
    """Every option that names a file to read (``option(input_file=True)``), given a path that does not
    exist: one line naming the option and the path, exit 1, and torch never imported (the check comes
    before the command and its imports: a typo costs a tenth of a second, not the start-up's seconds;
    ``foresight run``'s config loads torch, as it checks each compressor setting with the compressor: its
    flags are checked before the config is built).
    Fails when an option is checked by its command only (torch loaded first) or not at all."""
    import json
    import subprocess
    import sys

    # and the FILE.py of a FILE.py:function (what the two commands that run your code take)
    cases = [*_input_file_cases(), ("pliner find", ["pliner", "find", "--model", "{missing}.py:build"], "--model"),
             ("fperror trace", ["fperror", "trace", "{missing}.py:f", "--ranges", "x=0:1"], "target")]
    names = {c[0] for c in cases}
    assert {"align", "ccsdt", "fperror analyze", "foresight compress", "foresight decompress", "foresight run",
            "kraken bench", "sched heuristics", "sched eval", "sched train", "symnmf run"} <= names, names
    existing = tmp_path / "existing.txt"
    existing.write_text("x\n")
    argvs = [[a.format(existing=existing, missing=tmp_path / "nope.dat") for a in argv] for _, argv, _ in cases]
    probe = ("import contextlib, io, json, sys\nfrom torchhpc.trainers.cli import main\nout = []\n"
             "for argv in json.loads(sys.argv[1]):\n    err = io.StringIO()\n"
             "    with contextlib.redirect_stderr(err):\n        try:\n            rc = main(argv)\n"
             "        except SystemExit as exc:\n            rc = exc.code\n"
             "    out.append([rc, err.getvalue(), 'torch' in sys.modules])\nprint(json.dumps(out))\n")
    res = subprocess.run([sys.executable, "-c", probe, json.dumps(argvs)], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads(res.stdout.strip().splitlines()[-1])
    for (command, argv, name), (rc, err, torch_loaded) in zip(cases, report, strict=True):
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert rc == 1 and len(lines) == 1, (command, argv, rc, err[-1000:])
        assert f"{name} {tmp_path / 'nope.dat'}" in lines[0] and ": no such file" in lines[0], (command, lines[0])
        assert not torch_loaded, f"{command} {name}: torch loaded before the check"


def _renamed_flag_cases():
    """(command, old flag, new flag) for every key a command's options renamed whose old flag is gone."""
    cases = []
    for path, parser in COMMANDS:
        cls = parser.get_default(OPTIONS_ATTR)
        leaves = {key: f for key, f, _, _ in _leaf_fields(cls)}
        flags = {s for a in parser._actions for s in a.option_strings}
        for old, new in getattr(cls, "RENAMED", {}).items():
            old_flag = "--" + old.replace("_", "-")
            if new in leaves and not any(f.startswith(old_flag) for f in flags):  # (a prefix is an abbreviation)
                cases.append((path, old_flag, option_flag(new, leaves[new])))
    return cases


def test_a_renamed_flag_says_its_new_name(capsys):
    """A flag of a renamed key (``--dist-timeout``, now ``--timeout-s``) is a usage error that names the new
    flag (files and ``--set`` still take the old key with a warning; argparse alone said "unrecognized")."""
    cases = _renamed_flag_cases()
    assert any(old == "--dist-timeout" for _, old, _ in cases), cases
    for path, old, new in cases:
        cls = next(p.get_default(OPTIONS_ATTR) for pp, p in COMMANDS if pp == path)
        rc = _main([*path, *_required_positionals(cls), old, "1"])
        err = capsys.readouterr().err
        assert rc == 2 and len(err.strip().splitlines()) == 1, (path, err)
        assert f"{old} is now {new}" in err, (path, err)
