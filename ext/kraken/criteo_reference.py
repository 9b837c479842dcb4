"""The Criteo log format, and the readable reference reader every faster reader is tested against.

A Criteo line is ``label \\t I1..I13 \\t C1..C26``: a click label (0 or 1), 13 integer dense features
(empty = 0) and 26 categorical values, each a hexadecimal ID of up to 64 bits (empty = no ID for that
sample).  :func:`parse_criteo_line` reads one line, or raises one error naming the file, the line and the
column; :func:`criteo_ids` turns the hex values into 63-bit IDs (a bijective mix seeded by the column, so
equal strings in different columns stay different IDs); :func:`criteo_kjt` builds a batch's
``KeyedJaggedTensor``.  :func:`read_criteo_reference` reads a file one line at a time with them (about
50 k lines/s); :mod:`.criteo_tsv` and :mod:`.criteo_parquet` give the same batches and the same errors
faster, and :func:`~torchhpc.ext.kraken.criteo.read_criteo` picks one of them.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from torchhpc.ext.core.errors import InputError

from .batch import Batch
from .hashing import MASK63, mix64

CRITEO_DENSE, CRITEO_SPARSE = 13, 26
CRITEO_FIELDS = 1 + CRITEO_DENSE + CRITEO_SPARSE
CRITEO_COLUMNS = ["label", *(f"I{i + 1}" for i in range(CRITEO_DENSE)), *(f"C{i + 1}" for i in range(CRITEO_SPARSE))]
CRITEO_FEATURES = CRITEO_COLUMNS[1 + CRITEO_DENSE:]


def _signed64(v: int) -> int:
    """A hexadecimal ID of up to 64 bits as the int64 with the same bits."""
    if v >= 1 << 64:
        raise ValueError(f"categorical value {v:x} is wider than 64 bits")
    return v - (1 << 64) if v >= 1 << 63 else v


def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def decode_criteo_line(path, lineno: int, raw: bytes) -> str:
    """One line's bytes as text; a byte that is not UTF-8 is an :class:`InputError` naming file, line, column."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}:{lineno}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column "
                         f"{exc.start + 1})") from None


def _criteo_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of a Criteo file; a non-UTF-8 byte, a truncated or corrupt ``.gz`` is an
    :class:`InputError` naming the file and the line."""
    import zlib

    lineno = 0
    with _open_binary(path) as fh:
        it = iter(fh)
        while True:
            try:
                raw = next(it)
            except StopIteration:
                return
            except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
                what = "truncated gzip file" if isinstance(exc, EOFError) else "not valid gzip data"
                raise InputError(f"{path}:{lineno + 1}: {what} ({exc})") from None
            lineno += 1
            yield lineno, decode_criteo_line(path, lineno, raw)


def _parse_criteo(parts: list[str]) -> tuple[int, list[int], list[int]]:
    """label, dense and categorical values of one line's fields (``ValueError`` naming the column)."""
    col = 0
    try:
        lab = int(parts[0])
        dv = []
        for col in range(1, 1 + CRITEO_DENSE):
            dv.append(int(parts[col]) if parts[col] else 0)
        cv = []
        for col in range(1 + CRITEO_DENSE, len(parts)):
            cv.append(_signed64(int(parts[col], 16)) if parts[col] else 0)
    except ValueError as exc:
        kind = "an integer" if col <= CRITEO_DENSE else "a hexadecimal ID of up to 64 bits"
        value = parts[col]
        if "wider than 64 bits" in str(exc):
            raise ValueError(f"column {CRITEO_COLUMNS[col]}: {exc}") from None
        raise ValueError(f"column {CRITEO_COLUMNS[col]}: {value!r} is not {kind}") from None
    return lab, dv, cv


def parse_criteo_line(path, lineno: int, line: str) -> tuple[int, list[int], list[int], list[bool]]:
    """One Criteo line: ``(label, 13 dense ints (empty = 0), 26 categorical int64 (empty = 0), 26 present)``.

    Raises:
        InputError: a wrong field count, a bad number, a label other than 0/1 (naming file, line, column).
    """
    parts = line.rstrip("\r\n").split("\t")
    if len(parts) != CRITEO_FIELDS:
        raise InputError(
            f"{path}:{lineno}: expected {CRITEO_FIELDS} tab-separated fields "
            f"(label, 13 integer, 26 categorical), found {len(parts)}"
        )
    try:
        lab, dv, cv = _parse_criteo(parts)
    except ValueError as exc:
        raise InputError(f"{path}:{lineno}: {exc}") from None
    if lab not in (0, 1):
        raise InputError(f"{path}:{lineno}: label must be 0 or 1, found {lab}")
    return lab, dv, cv, [bool(x) for x in parts[1 + CRITEO_DENSE:]]


def criteo_ids(raw: torch.Tensor) -> torch.Tensor:
    """Raw IDs of categorical values ``(26, n)`` int64 (the hex value's 64 bits): a bijective 64-bit mix
    per column (the column salts the seed), top bit dropped for 63-bit IDs."""
    return torch.stack([mix64(raw[c], 99 + c) for c in range(raw.shape[0])]) & MASK63


def criteo_kjt(ids: np.ndarray, present: np.ndarray):
    """The ``KeyedJaggedTensor`` of one batch's categorical IDs ``(26, B)`` int64 and present ``(26, B)``
    bool (a missing value is a zero-length bag), built in numpy (no torch op, so no intra-op threads)."""
    from torchrec import KeyedJaggedTensor

    # feature-major layout: all samples of C1, then C2, ...
    per_key = present.sum(1)
    return KeyedJaggedTensor(keys=CRITEO_FEATURES, values=torch.from_numpy(ids[present]),
                             lengths=torch.from_numpy(present.reshape(-1).astype(np.int64)), stride=present.shape[1],
                             length_per_key=per_key.tolist(), offset_per_key=[0, *np.cumsum(per_key).tolist()])


def read_criteo_reference(path: str | Path, batch_size: int = 512, start: int = 0) -> Iterator[Batch]:
    """The readable reference of :func:`~torchhpc.ext.kraken.criteo.read_criteo` (TSV, ``.gz`` too): one
    line at a time in Python (about 50 k lines/s).  The fast reader is tested to give the same batches and
    the same errors."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such Criteo TSV file")

    def flush(labels, dense, cats, has):
        B = len(labels)
        raw = torch.tensor(cats, dtype=torch.int64).view(B, CRITEO_SPARSE).t()
        present = torch.tensor(has, dtype=torch.bool).view(B, CRITEO_SPARSE).t()
        d = torch.tensor(dense, dtype=torch.float32).view(B, CRITEO_DENSE)
        kjt = criteo_kjt(criteo_ids(raw).numpy(), present.numpy())
        return Batch(torch.log1p(d.clamp(min=0)), kjt, torch.tensor(labels, dtype=torch.float32))

    labels, dense, cats, has = [], [], [], []
    lineno = 0
    for lineno, line in _criteo_lines(path):
        if lineno <= start:
            continue
        lab, dv, cv, hv = parse_criteo_line(path, lineno, line)
        labels.append(lab)
        dense.extend(dv)
        cats.extend(cv)
        has.extend(hv)
        if len(labels) == batch_size:
            yield flush(labels, dense, cats, has)
            labels, dense, cats, has = [], [], [], []
    if labels:
        yield flush(labels, dense, cats, has)
    elif lineno <= start:
        raise InputError(f"{path}: no samples" + (f" after line {start}" if start else " (an empty file)"))



__all__ = ["CRITEO_COLUMNS", "CRITEO_DENSE", "CRITEO_FEATURES", "CRITEO_FIELDS", "CRITEO_SPARSE", "criteo_ids",
           "criteo_kjt", "decode_criteo_line", "parse_criteo_line", "read_criteo_reference"]
