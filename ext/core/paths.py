"""Input and output paths, checked before any work starts.

Every command that reads files and writes results asks the same questions first, in the parent
process (before torchrun starts ranks, before a benchmark runs for minutes): can each input be
read, can each output be written, and is no output one of the inputs?  :func:`check_output` and
:func:`check_input` answer with one :class:`~torchhpc.ext.core.errors.InputError` line.
:func:`open_text` reads a text input the way the fields write them: plain or gzip-compressed (told
by the file's magic bytes, not its name), with LF, CRLF or CR-only line endings; :func:`load_numpy`
reads a ``.npy`` or ``.npz`` file, or says in one line why it cannot.

    check_input(args.trace, what="the trace")
    check_output(args.output, inputs=[args.trace], what="--output")
    with open_text(args.trace) as fh:
        for line in fh: ...
"""

from __future__ import annotations

import gzip
import io
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from .errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")  # an .npz is a zip archive (the second: with no arrays)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


def check_input(path: str | os.PathLike, *, what: str = "input") -> Path:
    """``path`` as a :class:`Path` when it is a readable file; else one line saying why not."""
    p = Path(path)
    if not p.exists():
        where = "" if p.is_absolute() else f" (a relative path is read from the current directory, {Path.cwd()})"
        raise InputError(f"{what} {p}: no such file{where}")
    if p.is_dir():
        raise InputError(f"{what} {p}: is a folder, not a file")
    if not os.access(p, os.R_OK):
        raise InputError(f"{what} {p}: not readable (permission denied)")
    return p


def check_not_an_input(path: str | os.PathLike, inputs: Iterable[str | os.PathLike | None],
                       what: str = "output") -> Path:
    """``path`` as a :class:`Path` unless it names one of ``inputs`` (under any spelling, or a link to
    it): writing it would destroy the input."""
    p = Path(path)
    for src in inputs:
        if src is not None and _same_file(p, Path(src)):
            raise InputError(f"{what} {p} is also an input; writing it would destroy the input (choose another path)")
    return p


def check_output(path: str | os.PathLike, *, inputs: Iterable[str | os.PathLike | None] = (),
                 what: str = "output", overwrite: bool = True) -> Path:
    """``path`` as a :class:`Path` when a file can be written there and it is none of ``inputs``.

    Checked without leaving anything behind: the folder above must exist or be creatable (a file is
    created and removed at once in its nearest existing ancestor, which also catches read-only file
    systems such as ``/proc`` that permission bits do not show to root), and the path itself must not
    be a folder.  With ``overwrite=False`` an existing file is refused too.
    """
    p = check_not_an_input(path, inputs, what=what)
    if p.is_dir():
        raise InputError(f"{what} {p}: is a folder; give a file name")
    if p.exists() and not overwrite:
        raise InputError(f"{what} {p}: already exists (remove it or choose another path)")
    if p.exists() and not os.access(p, os.W_OK):
        raise InputError(f"{what} {p}: not writable (permission denied)")
    parent = p.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"{what} {p}: {parent} is not a folder")
    try:
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as exc:
        raise InputError(f"{what} {p}: cannot write in {parent} ({exc.strerror or exc})") from None
    return p


def is_gzip(path: str | os.PathLike) -> bool:
    """True when the file starts with gzip's magic bytes (whatever its name)."""
    with open(path, "rb") as fh:
        return fh.read(2) == GZIP_MAGIC


def open_text(path: str | os.PathLike, *, what: str = "input", encoding: str = "utf-8") -> TextIO:
    """A text stream over ``path``, un-gzipped when it is gzip data, with ``\\n`` for LF, CRLF and CR.

    Undecodable bytes are replaced (and so show up in the caller's own parse errors) rather than
    raising ``UnicodeDecodeError`` from the middle of a read.
    """
    p = check_input(path, what=what)
    raw = gzip.open(p, "rb") if is_gzip(p) else open(p, "rb")
    return io.TextIOWrapper(raw, encoding=encoding, errors="replace", newline=None)


def load_numpy(path: str | os.PathLike, *, what: str = "input", one_array: bool = False):
    """``np.load(path)`` without pickles: an ``ndarray`` (``.npy``) or an open ``NpzFile`` (``.npz``; use it
    in a ``with`` block); ``one_array``: an ``ndarray`` only.

    Raises:
        InputError: the file is missing, empty, truncated, not NumPy's format, or holds Python objects; with
            ``one_array``, an ``.npz`` archive (one line naming ``what`` and the file).
    """
    import numpy as np

    obj = _load_numpy(path, what)
    if one_array and not isinstance(obj, np.ndarray):
        obj.close()
        raise InputError(f"{what} {path}: an .npz archive; give one array as a .npy file")
    return obj


def _load_numpy(path: str | os.PathLike, what: str):
    import zipfile

    import numpy as np

    p = check_input(path, what=what)
    with open(p, "rb") as fh:
        head = fh.read(len(NPY_MAGIC))
    if head and not head.startswith((NPY_MAGIC, *(m[:len(head)] for m in ZIP_MAGICS))):  # (np.load would try it as a pickle)
        raise InputError(f"{what} {p}: not a NumPy .npy/.npz file (it does not start with NumPy's header; a text "
                         "or other file under that name?)")
    try:
        return np.load(p, allow_pickle=False)
    except EOFError:
        raise InputError(f"{what} {p}: empty or truncated, not a NumPy .npy/.npz file") from None
    except zipfile.BadZipFile as exc:
        raise InputError(f"{what} {p}: a damaged .npz file ({exc})") from None
    except ValueError as exc:
        why = "it holds Python objects, which are not read" if "allow_pickle" in str(exc) else str(exc)
        raise InputError(f"{what} {p}: not a NumPy .npy/.npz array ({why})") from None
    except OSError as exc:
        raise InputError(f"{what} {p}: cannot read it as a NumPy file ({exc.strerror or exc})") from None


__all__ = ["check_input", "check_not_an_input", "check_output", "is_gzip", "load_numpy", "open_text"]
