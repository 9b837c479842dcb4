"""Typed YAML configs.

A job's configuration is one tree of dataclasses.  Each field documents itself
with :func:`option` (a help line and, where it makes sense, a range or a set
of choices).  :func:`load_config` reads a YAML file into that tree and applies
``--set a.b=value`` overrides, checking every key and value on the way:

* an unknown key, a missing required key, a wrong type, a value out of range
  or a missing file is a :class:`~torchhpc.ext.core.errors.ConfigError` whose
  one-line message names the file (or ``--set``) and the dotted key;
* precedence is command line > config file > dataclass defaults;
* ``__post_init__`` may check relations between fields and raise
  ``ConfigError`` naming the option to change.

Example::

    @dataclass
    class Optim:
        lr: float = option(3e-4, help="learning rate", gt=0)

    @dataclass
    class Job:
        optim: Optim = option(default_factory=Optim, help="optimizer")
        epochs: int = option(10, help="passes over the data", ge=1)

    cfg = load_config(Job, "configs/x/debug.yaml", ["optim.lr=1e-3"])
"""

from __future__ import annotations

import argparse
import contextvars
import dataclasses
import math
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar, Union

import yaml

from .errors import ConfigError, warn

T = TypeVar("T")

_MISSING = dataclasses.MISSING


def option(
    default: Any = _MISSING,
    *,
    default_factory: Any = _MISSING,
    help: str = "",
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: Sequence[Any] | None = None,
    flag: str | None = None,
    neg_flag: str | None = None,
    positional: bool = False,
    cli: bool = True,
    input_file: bool = False,
) -> Any:
    """A documented, range-checked dataclass field.

    Args:
        default / default_factory: as for :func:`dataclasses.field`; neither means required.
        help: one line shown by ``torchhpc <system> ... --help`` and in error messages.
        ge, gt, le, lt: inclusive / exclusive bounds for numbers (checked on load).
        choices: the allowed values (checked on load).
        flag: the command-line spelling (default ``--`` + the dotted key, ``_`` as ``-``).
        neg_flag: for a bool, a second flag that sets it false (e.g. LASTZ's ``--nogapped``).
        positional: a positional argument on the command line (e.g. an input file).
        cli: ``False`` leaves the option out of the command line (file and ``--set`` only).
        input_file: a file the command reads (unless ``None``): the command line checks that it can be
            read before the command starts (before torch loads), one line naming the option if not.
    """
    meta = {"help": help, "ge": ge, "gt": gt, "le": le, "lt": lt, "choices": tuple(choices) if choices else None,
            "flag": flag, "neg_flag": neg_flag, "positional": positional, "cli": cli,
            "input_file": input_file}
    if default_factory is not _MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


# ----------------------------------------------------------------------------- type checking


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(tp))
    if origin in (list, tuple, dict):
        return f"{origin.__name__}[{', '.join(_type_name(a) for a in typing.get_args(tp) if a is not Ellipsis)}]"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


class _Bad(Exception):
    """Internal: a value does not fit a type (message completed by the caller)."""


def _coerce(value: Any, tp: Any, where: str, key: str) -> Any:
    """Convert a YAML value to ``tp`` or raise ConfigError naming ``where`` and ``key``."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: key '{key}' must be a mapping of options, got {type(value).__name__}")
        return _from_mapping(tp, value, where, key + ".")
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where, key)
            except ConfigError as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        raise ConfigError(f"{where}: key '{key}' must be {_type_name(tp)}, got {value!r}")
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{where}: key '{key}' must be one of {', '.join(map(repr, allowed))}; got {value!r}")
        return value
    if origin in (list, tuple) or tp in (list, tuple):
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise ConfigError(f"{where}: key '{key}' must be a list, got {value!r}")
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        elem = args[0] if args else Any
        items = [_coerce(v, elem, where, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if (origin is tuple or tp is tuple) else items
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: key '{key}' must be a mapping, got {value!r}")
        args = typing.get_args(tp)
        vt = args[1] if len(args) == 2 else Any
        return {str(k): _coerce(v, vt, where, f"{key}.{k}") for k, v in value.items()}
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: key '{key}' must be true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{where}: key '{key}' must be an integer, got {value!r}")
    if tp is float:
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):  # YAML 1.1 reads "1e-3" (no dot) as a string
            try:
                number = float(value)
            except ValueError:
                pass
        if number is not None and math.isfinite(number):
            return number
        raise ConfigError(f"{where}: key '{key}' must be a finite number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{where}: key '{key}' must be a string, got {value!r}")
    if tp is Path:
        if isinstance(value, (str, Path)):
            return Path(value)
        raise ConfigError(f"{where}: key '{key}' must be a path, got {value!r}")
    if isinstance(tp, type) and isinstance(value, tp):
        return value
    raise ConfigError(f"{where}: key '{key}' must be {_type_name(tp)}, got {value!r}")


def _check_range(value: Any, meta: Mapping[str, Any], where: str, key: str) -> None:
    if value is None:
        return
    choices = meta.get("choices")
    if choices and value not in choices:
        raise ConfigError(f"{where}: key '{key}' must be one of {', '.join(map(repr, choices))}; got {value!r}")
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    if isinstance(value, float) and math.isnan(value):
        raise ConfigError(f"{where}: key '{key}' must be a number, got nan")
    for name, ok, sign in (
        ("ge", lambda v, b: v >= b, ">="),
        ("gt", lambda v, b: v > b, ">"),
        ("le", lambda v, b: v <= b, "<="),
        ("lt", lambda v, b: v < b, "<"),
    ):
        bound = meta.get(name)
        if bound is not None and not ok(value, bound):
            raise ConfigError(f"{where}: key '{key}' = {value!r} is out of range (must be {sign} {bound})")


def check_ranges(options: Any, where: str | None = None) -> None:
    """Check every field of the dataclass instance ``options`` against its ``option(ge=, gt=, le=, lt=,
    choices=)``: what the YAML loader checks, for an object built directly in Python (call it from
    ``__post_init__``).

    Raises:
        ConfigError: ``"<where>: key '<field>' ..."`` for the first value out of range.
    """
    where = where or type(options).__name__
    for f in dataclasses.fields(options):
        _check_range(getattr(options, f.name), f.metadata, where, f.name)


class Options:
    """Base of every options dataclass: the fields are range-checked whenever an instance is made, by the
    YAML loader, the CLI or a library caller in Python (``option(ge=, gt=, le=, lt=, choices=)``).

    A subclass that checks relations between its fields in ``__post_init__`` calls
    ``super().__post_init__()`` first.  A top-level config lists keys it has renamed in ``RENAMED``
    (``{"old.dotted.key": "new.dotted.key"}``): files and ``--set`` that use the old key still load,
    with one warning line.
    """

    RENAMED: ClassVar[Mapping[str, str]] = {}
    LEGACY_VALUES: ClassVar[Mapping[str, Mapping[Any, Any]]] = {}
    """Per renamed key's new name, values that meant something else under the old name (e.g.
    ``{"dist.threads": {None: 0}}``: ``threads: null`` meant torch's default, which is now 0)."""

    def __post_init__(self) -> None:
        check_ranges(self)


def _from_mapping(cls: type[T], data: Mapping[str, Any], where: str, prefix: str = "") -> T:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for k in data:
        if k not in fields:
            valid = ", ".join(sorted(fields)) or "(none)"
            raise ConfigError(f"{where}: unknown key '{prefix}{k}' (valid keys here: {valid})")
    kwargs = {}
    for name, f in fields.items():
        key = prefix + name
        if name in data:
            value = _coerce(data[name], hints[name], where, key)
            _check_range(value, f.metadata, where, key)
            kwargs[name] = value
        elif f.default is _MISSING and f.default_factory is _MISSING:
            raise ConfigError(f"{where}: missing required key '{key}'")
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        msg = str(exc)
        raise ConfigError(msg if msg.startswith(where) else f"{where}: {msg}") from None


# ----------------------------------------------------------------------------- public API


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses a key written twice in one mapping (YAML would keep the last)."""


def _construct_unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False):
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *defaults`: merged below, its keys may be overridden
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            continue
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} appears twice (first on line {seen[key] + 1})", key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping from ``path`` (an empty file is ``{}``).

    Raises:
        ConfigError: the file is missing or unreadable, is not UTF-8 text, is not valid YAML,
            repeats a key, or is not a mapping.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: config file not found" + (" (it is a folder)" if p.is_dir() else ""))
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not a YAML text file (byte {exc.start} is not UTF-8)") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read config file ({exc.strerror})") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(f"{p}: not valid YAML{at}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: a config file must be a mapping of keys, got {type(data).__name__}")
    return data


def parse_override(item: str) -> tuple[list[str], Any]:
    """Split ``"a.b=value"`` into ``(["a", "b"], value)``; the value is parsed as YAML.

    Raises:
        ConfigError: no ``=`` or an empty key.
    """
    if "=" not in item:
        raise ConfigError(f"--set {item}: expected KEY=VALUE, e.g. --set train.lr=1e-3")
    key, raw = item.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(f"--set {item}: empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return parts, value


def _check_override_path(cls: type, parts: list[str], label: str) -> None:
    """Fail early, naming the key, when an override's path does not exist in ``cls``."""
    tp: Any = cls
    for i, part in enumerate(parts):
        if not dataclasses.is_dataclass(tp):
            raise ConfigError(f"{label}: '{'.'.join(parts[:i])}' is not a section")
        names = {f.name for f in dataclasses.fields(tp)}
        if part not in names:
            where = ".".join(parts[:i]) or "the top level"
            raise ConfigError(
                f"{label}: unknown key '{'.'.join(parts[: i + 1])}' "
                f"(valid keys in {where}: {', '.join(sorted(names))})"
            )
        tp = typing.get_type_hints(tp)[part]
        if typing.get_origin(tp) in (Union, types.UnionType):
            inner = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)]
            tp = inner[0] if inner else tp


Override = str | tuple[str, Sequence[str], Any]
"""``"a.b=value"`` (``--set``), or ``(label, ["a", "b"], value)`` from a generated flag: errors name the label."""


def load_config(cls: type[T], path: str | Path | None = None, overrides: Sequence[Override] = ()) -> T:
    """Build ``cls`` from defaults, then the YAML file ``path``, then ``overrides``.

    Args:
        cls: the top-level config dataclass.
        path: a YAML file (``None`` = defaults only).
        overrides: ``"a.b=value"`` strings (``--set``) or ``(label, parts, value)`` triples (the
            generated flags, see :mod:`torchhpc.ext.core.cli`), applied in order.

    Raises:
        ConfigError: missing file, invalid YAML, unknown key, wrong type or value out of range;
            the message names the file (or the flag) and the dotted key.
    """
    pending: list[str] = []  # the renamed keys' warnings: said once the config has loaded (an error is one line)
    token = _PENDING.set(pending)
    try:
        config = _load_config(cls, path, overrides)
    finally:
        _PENDING.reset(token)
    for line in pending:
        warn(line)
    return config


#: where the renamed keys' warnings of the config being loaded wait (None: say them at once)
_PENDING: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("torchhpc_config_warnings", default=None)


def _warn(line: str) -> None:
    """A warning about the config being loaded: kept until it has loaded (see :func:`load_config`)."""
    pending = _PENDING.get()
    if pending is None:
        warn(line)
    else:
        pending.append(line)


def _load_config(cls: type[T], path: str | Path | None, overrides: Sequence[Override]) -> T:
    data = read_yaml(path) if path is not None else {}
    where = str(path) if path is not None else "<defaults>"
    _rename_keys(cls, data, where)
    if overrides:
        # Overrides are validated on their own first so that the error names the flag, not the file.
        for item in overrides:
            if isinstance(item, str):
                parts, value = parse_override(item)
                label = f"--set {item}"
            else:
                label, parts, value = item[0], list(item[1]), item[2]
            renamed = _renamed_path(cls, parts, label)
            if renamed != parts:
                value = _legacy_value(cls, ".".join(renamed), value, label)
            parts = renamed
            _check_override_path(cls, parts, label)
            one: dict[str, Any] = {}
            node = one
            for p in parts[:-1]:
                node = node.setdefault(p, {})
            node[parts[-1]] = value
            _coerce_partial(cls, one, label)
            _merge(data, one)
        where = f"{where} (with command-line overrides)" if path is not None else "command line"
    return _from_mapping(cls, data, where)


def _renamed_path(cls: type, parts: list[str], where: str) -> list[str]:
    """``parts`` with a renamed key (``cls.RENAMED``) replaced by its new name, with one warning line."""
    dotted = ".".join(parts)
    for old, new in getattr(cls, "RENAMED", {}).items():
        if dotted == old or dotted.startswith(old + "."):
            _warn(f"{where}: key '{old}' is now '{new}' (the old name still loads; please rename it)")
            return new.split(".") + parts[len(old.split(".")):]
    return parts


def _legacy_value(cls: type, new_key: str, value: Any, where: str) -> Any:
    """``value`` of an old key in the meaning of its new name (``cls.LEGACY_VALUES``), with a warning."""
    table = getattr(cls, "LEGACY_VALUES", {}).get(new_key, {})
    try:
        if value in table:
            _warn(f"{where}: '{new_key}: {yaml.safe_dump(value).split(chr(10))[0]}' now reads "
                 f"'{new_key}: {table[value]}' (the same meaning under the new name)")
            return table[value]
    except TypeError:  # an unhashable value (a list, a mapping) has no legacy meaning
        pass
    return value


def _rename_keys(cls: type, data: dict[str, Any], where: str) -> None:
    """Move the renamed keys (``cls.RENAMED``) of a loaded YAML mapping to their new place, in place."""
    for old, new in getattr(cls, "RENAMED", {}).items():
        *old_parents, old_leaf = old.split(".")
        node: Any = data
        for p in old_parents:
            node = node.get(p) if isinstance(node, dict) else None
        if not isinstance(node, dict) or old_leaf not in node:
            continue
        value = node.pop(old_leaf)
        for depth in range(len(old_parents), 0, -1):  # drop sections the move left empty
            parent: Any = data
            for p in old_parents[:depth - 1]:
                parent = parent[p]
            if parent[old_parents[depth - 1]] == {}:
                del parent[old_parents[depth - 1]]
        _warn(f"{where}: key '{old}' is now '{new}' (the old name still loads; please rename it)")
        *new_parents, new_leaf = new.split(".")
        target = data
        for p in new_parents:
            target = target.setdefault(p, {})
            if not isinstance(target, dict):
                raise ConfigError(f"{where}: key '{old}' is now '{new}', but '{p}' is not a section")
        if new_leaf in target:
            raise ConfigError(f"{where}: both '{old}' and its new name '{new}' are given; keep '{new}'")
        target[new_leaf] = _legacy_value(cls, new, value, where)


def _coerce_partial(cls: type, data: Mapping[str, Any], where: str, prefix: str = "") -> None:
    """Type- and range-check the keys present in ``data`` against ``cls`` (no required keys)."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for k, v in data.items():
        if k not in fields:  # a section given whole (--set 'run={bogus: 1}'): named as a key would be
            valid = ", ".join(sorted(fields)) or "(none)"
            raise ConfigError(f"{where}: unknown key '{prefix}{k}' (valid keys here: {valid})")
        tp = hints[k]
        inner = tp
        if typing.get_origin(tp) in (Union, types.UnionType):
            dcs = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)]
            inner = dcs[0] if dcs and isinstance(v, Mapping) else tp
        if dataclasses.is_dataclass(inner) and isinstance(v, Mapping):
            _coerce_partial(inner, v, where, prefix + k + ".")
        else:
            value = _coerce(v, tp, where, prefix + k)
            _check_range(value, fields[k].metadata, where, prefix + k)


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> None:
    for k, v in extra.items():
        if isinstance(v, Mapping) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = v


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """The config as plain YAML-friendly data (tuples become lists, paths strings)."""

    def plain(x: Any) -> Any:
        if dataclasses.is_dataclass(x):
            return {f.name: plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
        if isinstance(x, (list, tuple)):
            return [plain(v) for v in x]
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        if isinstance(x, Path):
            return str(x)
        return x

    return plain(cfg)


def dump_config(cfg: Any) -> str:
    """The resolved config as YAML text (what each run saves as ``config.yaml``)."""
    return yaml.safe_dump(config_to_dict(cfg), sort_keys=False)


def describe(cls: type, prefix: str = "") -> list[tuple[str, str, Any, str]]:
    """``(dotted key, type, default, help)`` for every option of ``cls``, depth first."""
    rows = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            rows.extend(describe(tp, prefix + f.name + "."))
            continue
        if f.default is not _MISSING:
            default = f.default
        elif f.default_factory is not _MISSING:
            default = f.default_factory()
        else:
            default = "(required)"
        rows.append((prefix + f.name, _type_name(tp), default, f.metadata.get("help", "")))
    return rows


@dataclasses.dataclass
class DistOptions(Options):
    """Where and on how many processes a job runs (the ``dist:`` section): one name and one meaning for
    each of these options in every system."""

    device: str = option("auto", flag="--device", help="auto (CUDA when present), cpu, cuda or cuda:N")
    threads: int = option(0, flag="--threads", help="CPU threads per process for torch (0: torch's default)", ge=0)
    nproc: int = option(1, flag="--nproc", ge=1,
                        help="processes to run on this machine under torchrun (1: this process only)")
    timeout_s: float = option(300.0, flag="--timeout-s", gt=0,
                              help="seconds a rank waits for its peers before the job fails")


@dataclasses.dataclass
class RunOptions(Options):
    """Where a job writes its run folder (the ``run:`` section of every job's config)."""

    root: str = option("runs", help="parent folder of all runs")
    run_id: str | None = option(None, help="run folder name (null: a new timestamped id)")
    resume: bool = option(False, help="continue run_id from its last checkpoint")
    progress: bool = option(True, help="show progress bars (rank 0)")


def add_config_arguments(parser: argparse.ArgumentParser, default: str | None = None) -> None:
    """Add ``--config FILE`` and repeatable ``--set KEY=VALUE`` to a job's parser."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=default,
        help="YAML config file" + (f" (default: {default})" if default else ""),
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="override one option, e.g. --set train.lr=1e-3 (repeatable; beats the file)",
    )
