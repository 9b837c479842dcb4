"""Command lines generated from the config dataclasses, and the one way every entry point ends.

The options of a system are defined once, as :func:`~torchhpc.ext.core.config.option` fields of
the dataclasses in ``ext/<system>/config.py``.  :func:`add_options` turns such a tree into
argparse flags (``--train.steps N``; a flat dataclass gives ``--steps N``), each listed by
``--help`` with its default and its one-line doc; :func:`options_from_args` builds the dataclass
from defaults < ``--config FILE`` < ``--set a.b=v`` < the flags, with the same checks and the same
one-line errors as the YAML loader.  :func:`run_main` turns every
:class:`~torchhpc.ext.core.errors.TorchHPCError` into one line on stderr and a non-zero exit, and
:func:`module_main` is the whole body of a ``python -m`` / ``torchrun -m`` entry point::

    p = sub.add_parser("train", help="...")
    add_options(p, KrakenConfig, config_file=True)
    p.set_defaults(func=lambda args: train(options_from_args(KrakenConfig, args)))
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from .config import _MISSING, ConfigError, add_config_arguments, load_config
from .errors import TorchHPCError, warn

OPTIONS_ATTR = "_torchhpc_options"
"""Parser default that records which dataclass a command's flags come from (tests read it)."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (``torchhpc X: error: ... (see --help)``), exit 2."""

    def error(self, message: str):  # noqa: D401 - argparse API
        renamed = self._renamed_flags(message)
        if renamed:
            message = f"{message}: {renamed}"
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _renamed_flags(self, message: str) -> str:
        """For an unrecognized flag that is the flag of a key the options renamed (``cls.RENAMED``), what it
        is called now (``--dist-timeout is now --timeout-s``); files and ``--set`` take the old key with a
        warning, a flag cannot."""
        cls = self.get_default(OPTIONS_ATTR)
        if not message.startswith("unrecognized arguments:") or cls is None:
            return ""
        given = {tok.split("=", 1)[0] for tok in message.split(":", 1)[1].split()}
        leaves = {key: f for key, f, _, _ in _leaf_fields(cls)}
        out = []
        for old, new in getattr(cls, "RENAMED", {}).items():
            old_flag = "--" + old.replace("_", "-")
            if old_flag in given and new in leaves:
                out.append(f"{old_flag} is now {option_flag(new, leaves[new])}")
        return "; ".join(out)


# ----------------------------------------------------------------------------- flags from dataclasses


def _unwrap_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _leaf_fields(cls: type, prefix: str = "") -> list[tuple[str, dataclasses.Field, Any, str]]:
    """``(dotted key, field, type, section help)`` for every leaf option of ``cls``, depth first."""
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        tp = hints[f.name]
        inner = _unwrap_optional(tp)
        if dataclasses.is_dataclass(inner):
            out.extend(_leaf_fields(inner, prefix + f.name + "."))
        else:
            out.append((prefix + f.name, f, tp, cls.__doc__ or ""))
    return out


def option_flag(key: str, field: dataclasses.Field) -> str:
    """The command-line flag of option ``key`` (its ``flag=`` or ``--`` + key with ``-`` for ``_``)."""
    return field.metadata.get("flag") or "--" + key.replace("_", "-")


def default_of(field: dataclasses.Field) -> Any:
    """A field's default value (``None`` shown as ``null``; required fields as ``(required)``)."""
    if field.default is not _MISSING:
        return field.default
    if field.default_factory is not _MISSING:
        return field.default_factory()
    return "(required)"


def format_default(value: Any) -> str:
    """A default as it would be typed on the command line (YAML flow style)."""
    if isinstance(value, str) and value != "(required)":
        return value if value else "''"
    if isinstance(value, Path):
        return str(value)
    if value == "(required)":
        return value
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def _metavar(tp: Any) -> str:
    tp = _unwrap_optional(tp)
    if typing.get_origin(tp) is Literal:
        return "{" + ",".join(str(a) for a in typing.get_args(tp)) + "}"
    if tp is int:
        return "INT"
    if tp is float:
        return "FLOAT"
    if tp is bool:
        return "BOOL"
    if typing.get_origin(tp) in (list, tuple) or tp in (list, tuple):
        return "LIST"
    if tp is Path:
        return "PATH"
    return "VALUE"


def _is_bool(tp: Any) -> bool:
    return _unwrap_optional(tp) is bool


def _is_list(tp: Any) -> bool:
    inner = _unwrap_optional(tp)
    return typing.get_origin(inner) in (list, tuple) or inner in (list, tuple)


def add_options(
    parser: argparse.ArgumentParser, cls: type, *, config_file: bool = False, default_config: str | None = None,
) -> None:
    """Add one flag per option of the dataclass tree ``cls`` (and ``--config``/``--set`` if asked).

    Every flag is listed by ``--help`` with its default and its doc, grouped by section.  Flags take
    one value, parsed as YAML (``--model.bottom [64,32]``); a bool flag alone means true
    (``--run.resume``) and never takes the next word as its value, ``--run.resume false`` (or
    ``=false``) sets it false, and so does an option's ``neg_flag``.  Flags left out keep the value
    from the config file or the default: the parser itself has no defaults.

    Args:
        parser: the command's parser.
        cls: the options dataclass (nested dataclasses become ``--section.key`` flags).
        config_file: also add ``--config FILE`` and ``--set KEY=VALUE``.
        default_config: the config file used when ``--config`` is not given.
    """
    if config_file:
        add_config_arguments(parser, default=default_config)
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    groups: dict[str, Any] = {}
    for key, f, tp, section_doc in _leaf_fields(cls):
        meta = f.metadata
        if not meta.get("cli", True):
            continue
        section = key.rpartition(".")[0]
        if section not in groups:
            doc = section_doc.strip().splitlines()[0] if section_doc.strip() and section else None
            groups[section] = parser.add_argument_group(f"settings of {section}" if section else "settings", doc)
        group = groups[section]
        default = default_of(f)
        help_text = (meta.get("help") or "").replace("%", "%%")
        help_text = f"{help_text} (default: {format_default(default).replace('%', '%%')})"
        if _is_bool(tp) and default is True and not meta.get("neg_flag"):  # a flag alone sets true: say how to
            help_text += f"; {option_flag(key, f)} false turns it off"            # turn it off
        dest = f"{_DEST}{key}"
        if meta.get("positional"):
            nargs = None if default == "(required)" else "?"
            group.add_argument(dest, metavar=key.upper().replace(".", "_"), nargs=nargs, default=argparse.SUPPRESS,
                               help=help_text)
            continue
        flag = option_flag(key, f)
        names = [flag]
        alt = "--" + key  # the underscore spelling of a hyphenated flag is accepted too
        if alt != flag and not meta.get("flag"):
            names.append(alt)
        if _is_bool(tp):
            # ``--flag`` alone sets true and never takes the next word (which may be an input file);
            # ``--flag false`` / ``--flag=false`` reach a hidden twin that takes the value.
            group.add_argument(*names, dest=dest, action="store_const", const="true",
                               default=argparse.SUPPRESS, help=help_text)
            for name in names:
                parser.add_argument(name + _BOOL_VALUE, dest=dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
                _bool_flags(parser).add(name)
            if meta.get("neg_flag"):
                group.add_argument(meta["neg_flag"], dest=dest, action="store_const", const="false",
                                   default=argparse.SUPPRESS, help=f"set {flag} false")
        else:
            choices = meta.get("choices")
            metavar = "{" + ",".join(map(str, choices)) + "}" if choices else _metavar(tp)
            required = default == "(required)" and not config_file
            if _is_list(tp):  # repeatable: --policy sjf --policy f1, or --policy sjf,f1, or --policy [sjf, f1]
                group.add_argument(*names, dest=dest, metavar=metavar, default=argparse.SUPPRESS, help=help_text,
                                   action="append", required=required)
            else:
                group.add_argument(*names, dest=dest, metavar=metavar, default=argparse.SUPPRESS, help=help_text,
                                   required=required)
    parser.set_defaults(**{OPTIONS_ATTR: cls})


_DEST = "opt:"
_BOOL_VALUE = ":value"
_BOOL_WORDS = {"true", "false", "yes", "no", "on", "off", "1", "0"}


def _bool_flags(parser: argparse.ArgumentParser) -> set[str]:
    """The parser's bool flags; the first call makes its parse accept ``--flag false``."""
    flags = getattr(parser, "_torchhpc_bool_flags", None)
    if flags is None:
        flags = set()
        parser._torchhpc_bool_flags = flags
        plain = parser.parse_known_args

        def parse_known_args(args=None, namespace=None):
            argv = list(sys.argv[1:] if args is None else args)
            return plain(_bool_values(argv, flags), namespace)

        parser.parse_known_args = parse_known_args
    return flags


def _bool_values(argv: list[str], flags: set[str]) -> list[str]:
    """Rewrite ``--flag false`` and ``--flag=false`` into the hidden ``--flag:value false``."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        name, eq, value = tok.partition("=")
        if name in flags and eq:
            out += [name + _BOOL_VALUE, value]
        elif tok in flags and i + 1 < len(argv) and argv[i + 1].lower() in _BOOL_WORDS:
            out += [tok + _BOOL_VALUE, argv[i + 1]]
            i += 1
        elif tok == "--":
            out += argv[i:]
            break
        else:
            out.append(tok)
        i += 1
    return out


def flag_overrides(cls: type, args: argparse.Namespace) -> list[tuple[str, list[str], Any]]:
    """The flags given on the command line as ``(flag, key parts, value)`` overrides.

    A string or path option takes the text as typed (``--seed 0110`` stays ``"0110"``); other values
    are read as YAML (``--model.bottom [64,32]``, ``--tables.ttl 5``, ``--device.threads null``).
    """
    leaves = {key: (f, tp) for key, f, tp, _ in _leaf_fields(cls)}
    out = []
    for name, raw in vars(args).items():
        if not name.startswith(_DEST):
            continue
        key = name[len(_DEST):]
        f, tp = leaves[key]
        label = key.upper().replace(".", "_") if f.metadata.get("positional") else option_flag(key, f)
        inner = _unwrap_optional(tp)
        optional = inner is not tp
        if isinstance(raw, list):  # a repeatable list flag: each occurrence adds items
            value = []
            for item in raw:
                try:
                    parsed = yaml.safe_load(item) if item.strip() else []
                except yaml.YAMLError:
                    parsed = item
                if isinstance(parsed, list):
                    value.extend(parsed)
                elif isinstance(parsed, str) and "," in parsed:
                    value.extend(_yaml_scalar(x.strip()) for x in parsed.split(",") if x.strip())
                else:
                    value.append(parsed)
        elif not isinstance(raw, str):
            value = raw
        elif inner in (str, Path) and not (optional and raw in ("null", "~")):
            value = raw
        else:
            try:
                value = yaml.safe_load(raw) if raw.strip() else raw
            except yaml.YAMLError:
                value = raw
        out.append((label, key.split("."), value))
    return out


def _yaml_scalar(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def options_from_args(cls: type, args: argparse.Namespace) -> Any:
    """Build ``cls``: defaults < ``--config`` file < ``--set`` < flags, all checked.

    Raises:
        ConfigError: as :func:`~torchhpc.ext.core.config.load_config`; flags are named as typed.
    """
    path = getattr(args, "config", None)
    overrides: list[Any] = list(getattr(args, "overrides", []) or [])
    overrides.extend(flag_overrides(cls, args))
    try:
        return load_config(cls, path, overrides)
    except ConfigError as exc:
        # a required option left out is named as the user would type it
        missing = re.search(r"missing required key '([^']+)'", str(exc))
        if path is None and missing:
            leaves = {key: f for key, f, _, _ in _leaf_fields(cls)}
            f = leaves.get(missing[1])
            if f is not None:
                name = missing[1].upper().replace(".", "_") if f.metadata.get("positional") else option_flag(
                    missing[1], f)
                raise ConfigError(f"{name} is required ({f.metadata.get('help', '')})") from None
        raise


def check_input_files(cfg: Any = None, *, cls: type | None = None, args: argparse.Namespace | None = None) -> None:
    """Every ``option(input_file=True)`` that is set must be a readable file: those of the built options
    ``cfg`` (the command line checks them once the options are built, their own checks first: "add
    --stream criteo" says more than "no such file"), or, with ``cls`` and ``args``, those typed as flags,
    before anything is built (for options whose own checks load torch: ``config_command(files_first=True)``).
    Either way before the command runs, so that a mistyped path costs a tenth of a second rather than
    torch's and the kernels' start-up.  One line names the option as typed.

    Raises:
        InputError: a missing, unreadable or folder path (:func:`~torchhpc.ext.core.paths.check_input`).
    """
    from .paths import check_input

    files = {key: f for key, f, _, _ in _leaf_fields(cls or type(cfg)) if f.metadata.get("input_file")}
    if cfg is None:
        given = [(".".join(parts), value) for _, parts, value in flag_overrides(cls, args) if ".".join(parts) in files]
    else:
        given = []
        for key in files:
            value = cfg
            for part in key.split("."):
                value = getattr(value, part)
            given.append((key, value))
    for key, value in given:
        if value is not None and value != "":  # ("" is "not given" to the commands, as None is)
            f = files[key]
            check_input(value, what=key.rsplit(".", 1)[-1] if f.metadata.get("positional") else option_flag(key, f))


def describe_flags(cls: type) -> list[tuple[str, str, str]]:
    """``(flag, default as shown, help)`` for every command-line option of ``cls`` (for tests/docs)."""
    rows = []
    for key, f, _tp, _ in _leaf_fields(cls):
        if not f.metadata.get("cli", True):
            continue
        flag = key.upper().replace(".", "_") if f.metadata.get("positional") else option_flag(key, f)
        rows.append((flag, format_default(default_of(f)), f.metadata.get("help", "")))
    return rows


# ----------------------------------------------------------------------------- running a command


def say(line: str) -> None:
    """``line`` and its newline on stderr in one write, flushed: the ranks of a torchrun job share one pipe,
    and a line written in two pieces (``print`` writes the text, then the newline) can take another
    rank's line between them."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def run_main(fn: Callable[[argparse.Namespace], int | None], args: argparse.Namespace, prog: str = "torchhpc") -> int:
    """Call ``fn(args)``; user errors become one line on stderr and exit status 1 (2 for usage)."""
    debug = getattr(args, "debug", False) or os.environ.get("TORCHHPC_DEBUG") == "1"
    try:
        return int(fn(args) or 0)
    except TorchHPCError as exc:
        if debug:
            raise
        say(f"{prog}: error: {exc}")
        return 1
    except BrokenPipeError:  # output piped into `head` or similar: stop quietly, as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
        return 0
    except (FileNotFoundError, IsADirectoryError, PermissionError, NotADirectoryError) as exc:
        if debug:
            raise
        say(f"{prog}: error: {exc.strerror or exc}: {exc.filename}")
        return 1
    except OSError as exc:  # a full disk, a device error: name the file when there is one
        if debug:
            raise
        where = f": {exc.filename}" if exc.filename else ""
        say(f"{prog}: error: {exc.strerror or exc}{where}")
        return 1
    except KeyboardInterrupt:
        say(f"{prog}: interrupted")
        return 130
    except RuntimeError as exc:  # torch.distributed: a peer died or a collective timed out
        if debug or not _is_dist_error(exc):
            raise
        say(f"{prog}: error: {_dist_error_line(exc)}")
        return 1


_DIST_ERRORS = ("DistBackendError", "DistNetworkError", "DistStoreError", "DistError")


def _is_dist_error(exc: BaseException) -> bool:
    """A failure of torch.distributed's transport (its errors are plain RuntimeErrors from C++)."""
    if type(exc).__name__ in _DIST_ERRORS:
        return True
    text = str(exc)
    return any(mark in text for mark in ("/gloo/", "gloo::", "ProcessGroupNCCL", "NCCL error", "c10d"))


def _dist_error_line(exc: BaseException) -> str:
    """One line for a torch.distributed failure (gloo/NCCL messages run to many lines of C++ frames)."""
    text = str(exc)
    low = text.lower()
    rank = os.environ.get("RANK")
    who = f"rank {rank}: " if rank is not None else ""
    if "timed out" in low or "timeout" in low:
        return f"{who}a collective timed out: a peer rank is hung or too slow (raise the job's timeout if it is slow)"
    if "connection" in low or "closed" in low or "reset by peer" in low or "broken pipe" in low:
        return f"{who}a peer rank died (its connection closed); see that rank's own error above"
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    return f"{who}distributed failure: {first[:200]}"


def module_main(
    build: Callable[[], argparse.ArgumentParser], fn: Callable[[argparse.Namespace], int | None],
    argv: Sequence[str] | None = None,
) -> int:
    """``python -m torchhpc.trainers.<job>`` / torchrun entry: parse ``argv``, then :func:`run_main`."""
    parser = build()
    args = parser.parse_args(argv)
    return run_main(fn, args, parser.prog)


def config_command(
    sub: Any, name: str, cls: type, fn: Callable[[Any], Any], *, help: str, description: str | None = None,
    config_file: bool = False, default_config: str | None = None, unused: Sequence[str] = (), unused_why: str = "",
    files_first: bool = False,
) -> argparse.ArgumentParser:
    """Add subcommand ``name`` whose every option comes from ``cls``; it calls ``fn(config)``.

    ``fn`` receives the built dataclass; its return value (an int, or ``None`` for 0) is the exit status.
    ``unused``: dotted keys of ``cls`` this command accepts (``cls`` is shared with another command, and a
    saved config holds them) but does not use; given on the command line (a flag or ``--set``) they are
    named in one warning line, with ``unused_why``.  The files the options name (``option(input_file=True)``)
    are checked before ``fn`` runs (:func:`check_input_files`); ``files_first``: those given as flags even
    before the options are built (for a ``cls`` whose own checks load torch).
    """
    p = sub.add_parser(name, help=help, description=description or help,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(p, cls, config_file=config_file, default_config=default_config)

    def run(args: argparse.Namespace) -> Any:
        if files_first:
            check_input_files(cls=cls, args=args)
        cfg = options_from_args(cls, args)
        check_input_files(cfg)
        given = unused_given(cls, args, unused)
        if given:
            warn(f"{p.prog} does not use {', '.join(given)}{f' ({unused_why})' if unused_why else ''}: ignored")
        return fn(cfg)

    p.set_defaults(func=run)
    return p


def unused_given(cls: type, args: argparse.Namespace, keys: Sequence[str]) -> list[str]:
    """Of the dotted ``keys``, those given on the command line, as typed (``--nproc``, ``--set run.resume``);
    a ``--set`` of a key's old name (``cls.RENAMED``) counts as the key."""
    if not keys:
        return []
    renamed = getattr(cls, "RENAMED", {})
    out = [label for label, parts, _ in flag_overrides(cls, args) if ".".join(parts) in keys]
    for item in getattr(args, "overrides", None) or []:
        key, _, text = str(item).partition("=")
        key = renamed.get(key.strip(), key.strip())
        if key in keys:
            out.append(f"--set {key}")
        elif any(k.startswith(key + ".") for k in keys):  # a section given whole: --set 'run={resume: true}'
            try:
                value = yaml.safe_load(text)
            except yaml.YAMLError:
                continue
            if isinstance(value, dict) and any(f"{key}.{sub}" in keys for sub in value):
                out.append(f"--set {key}")
    return out


def command_group(sub: Any, name: str, *, help: str, description: str | None = None) -> Any:
    """Add ``torchhpc <name> SUBCOMMAND`` and return its subparsers (``<name>`` alone prints the help)."""
    p = sub.add_parser(name, help=help, description=description or help,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    group = p.add_subparsers(dest=f"{name}_command", metavar="SUBCOMMAND", parser_class=ArgumentParser)
    p.set_defaults(func=lambda _args: (p.print_help(), 2)[1])
    return group


def subcommands_main(prog: str, add_commands: Callable[[Any], None], description: str | None = None,
                     argv: Sequence[str] | None = None) -> int:
    """The ``main()`` of a ``python -m`` / ``torchrun -m`` entry whose first word is a subcommand:
    ``add_commands(subparsers)`` adds them (the same function ``register`` uses)."""

    def build() -> ArgumentParser:
        p = ArgumentParser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
        add_commands(p.add_subparsers(dest="command", metavar="SUBCOMMAND", required=True,
                                      parser_class=ArgumentParser))
        return p

    return module_main(build, lambda args: args.func(args), argv)


def job_main(prog: str, cls: type, fn: Callable[[Any], Any], description: str | None = None,
             argv: Sequence[str] | None = None, *, config_file: bool = True) -> int:
    """The whole ``main()`` of a ``python -m`` / ``torchrun -m`` entry: flags from ``cls``, then ``fn(config)``."""
    def run(args: argparse.Namespace) -> Any:
        cfg = options_from_args(cls, args)
        if os.environ.get("RANK", "0") == "0":  # rank 0 (the launcher checked already): some jobs read on it only
            check_input_files(cfg)
        return fn(cfg)

    return module_main(lambda: job_parser(prog, cls, description, config_file=config_file), run, argv)


def job_parser(prog: str, cls: type, description: str | None = None, **kwargs: Any) -> ArgumentParser:
    """A stand-alone parser (``python -m`` / ``torchrun -m`` entry) whose options come from ``cls``."""
    p = ArgumentParser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(p, cls, **kwargs)
    return p


__all__ = [
    "ArgumentParser", "ConfigError", "OPTIONS_ATTR", "add_options", "check_input_files", "command_group",
    "config_command",
    "describe_flags", "flag_overrides", "job_main", "subcommands_main", "job_parser", "module_main", "option_flag", "options_from_args",
    "run_main",
]
