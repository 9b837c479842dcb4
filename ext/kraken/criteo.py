"""Criteo-format logs at disk speed: TSV (plain or gzip) through a compiled parser (numba) or pyarrow's
CSV parser, and Parquet.

The readable reference is :func:`~torchhpc.ext.kraken.stream.read_criteo_reference` (one line at a
time in Python); this module gives the same :class:`~torchhpc.ext.kraken.stream.Batch` objects with
the same values and the same errors, about 20 times faster, 2-3 times the pyarrow path (docs/kraken/results.md).

How a TSV file is read::

    thread 1: file / gzip (zlib) --read 4 MiB--> text block of whole lines --parse_block (numba, one pass)-->
              labels, dense log1p by a table, hex IDs -> splitmix64 -> 63-bit IDs     (2 blocks ahead)
              [a block off the strict layout, or no numba: pyarrow.csv.read_csv -> table]
    thread 2: [table --> numpy: hex digits by a lookup table -> splitmix64; dense log1p by a table]
              --> slices of batch_size rows --> Batch                                (~2 blocks ahead)
    caller:   takes the ready Batch objects (dense (B, 13), KeyedJaggedTensor of 26 features, labels)

Memory stays bounded (a few blocks: tens of MB) whatever the file's size.

The text is cut into blocks at line ends by this module, not by the parsers, so each block's first
line number is known.  The compiled parser takes only the strict layout (label ``0``/``1``; dense
empty or ``-?[0-9]{1,18}``; IDs empty or 1..16 hex digits; 40 fields; trailing ``\\r`` allowed) and
gives up on a block holding any other line.  Such a block goes to pyarrow; a block that pyarrow cannot
parse or that holds anything the reference would treat differently (a wrong field count, a
non-integer, a non-hex ID, a label other than 0/1, an ``x`` anywhere — pyarrow would read ``0x1f`` as
an integer —, a lone ``\\r``) is parsed again by the reference's line parser: it raises the
reference's error (file, line, column) or gives the reference's values.  IDs of other widths than 8
hex digits (up to 16) take a vectorised path too.
"""

from __future__ import annotations

import queue
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from torchhpc.ext.core.errors import InputError

from .stream import (
    CRITEO_COLUMNS,
    CRITEO_DENSE,
    CRITEO_FEATURES,
    CRITEO_SPARSE,
    Batch,
    criteo_ids,
    criteo_kjt,
    decode_criteo_line,
    parse_criteo_line,
)

BLOCK_BYTES = 4 << 20  # text per block: about 17k Criteo lines, about 10 MB once parsed
PARSE_CHUNK = 1 << 20  # pyarrow parses a block in chunks of this size: 1.5x fewer CPU-seconds than
#                         one chunk per block (cache-sized pieces; docs/kraken/io-notes.md)
PREFETCH = 2  # blocks' worth of batches made ahead of the consumer

# ASCII -> hex digit value; 255 marks a byte that is not a hex digit
_HEX = np.full(256, 255, np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i


_GAMMA, _M1, _M2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
# the additive constant of criteo_ids' splitmix64 for column c (seed 99 + c): (seed + 1) * gamma mod 2**64
_OFFSETS = np.array([((100 + c) * 0x9E3779B97F4A7C15) & ((1 << 64) - 1) for c in range(CRITEO_SPARSE)], np.uint64)


def criteo_ids_numpy(raw: np.ndarray) -> np.ndarray:
    """:func:`~torchhpc.ext.kraken.stream.criteo_ids` in numpy: ``(26, n)`` uint64 -> int64.

    The same splitmix64 finaliser as :func:`~torchhpc.ext.kraken.hashing.mix64` (tested equal); numpy
    runs it in the reader's thread on one core, where torch would split each op over its intra-op
    threads and wait for them on a busy machine.
    """
    seeds = np.arange(99, 99 + raw.shape[0], dtype=np.uint64)[:, None]
    with np.errstate(over="ignore"):
        z = raw + (seeds + np.uint64(1)) * _GAMMA
        z ^= z >> np.uint64(30)
        z *= _M1
        z ^= z >> np.uint64(27)
        z *= _M2
        z ^= z >> np.uint64(31)
    z &= np.uint64((1 << 63) - 1)
    return z.view(np.int64)


# ----------------------------------------------------------------------------- the compiled parser

try:  # pragma: no cover - exercised where numba is installed (make setup installs it)
    from numba import njit

    _HAVE_NUMBA = True
except ImportError:  # pragma: no cover
    _HAVE_NUMBA = False


def numba_available() -> bool:
    """Whether the compiled TSV parser (:func:`parse_block`) can run (numba imports)."""
    return _HAVE_NUMBA


if _HAVE_NUMBA:  # pragma: no branch
    _MASK63 = np.uint64((1 << 63) - 1)

    @njit(cache=True, nogil=True)
    def _parse_tsv(buf, hexv, offs, log1p, labels, dense, ids, present):  # pragma: no cover - compiled
        """Lines of strict Criteo layout -> the arrays; returns ``(lines parsed, dense values past the
        log1p table)``, or ``(-1 - k, 0)`` at line ``k`` (from 0), the first one off the layout.  One
        line: ``0|1``, 13 x (tab, empty or ``-?[0-9]{1,18}``), 26 x (tab, empty or 1..16 hex digits),
        any ``\\r``, then ``\\n`` or the end.  Dense: ``log1p[max(x, 0)]``, or ``float32(x)`` where ``x``
        is past the table (the caller takes torch's log1p of those)."""
        n = buf.shape[0]
        table = log1p.shape[0]
        big = 0
        i = 0
        row = 0
        while i < n:
            c = buf[i]  # the label: exactly '0' or '1'
            if c != 48 and c != 49 or row >= labels.shape[0]:
                return -1 - row, 0
            labels[row] = c - 48
            i += 1
            for j in range(13):  # dense: empty, or an optional '-' and 1..18 decimal digits
                if i >= n or buf[i] != 9:
                    return -1 - row, 0
                i += 1
                neg = i < n and buf[i] == 45
                if neg:
                    i += 1
                v = 0
                d = 0
                while i < n and 48 <= buf[i] <= 57:
                    v = v * 10 + (buf[i] - 48)
                    d += 1
                    i += 1
                if d > 18 or (neg and d == 0):
                    return -1 - row, 0
                if neg:
                    dense[row, j] = log1p[0]
                elif v < table:
                    dense[row, j] = log1p[v]
                else:
                    dense[row, j] = np.float32(v)
                    big += 1
            for j in range(26):  # categorical: empty, or 1..16 hex digits -> splitmix64, 63 bits
                if i >= n or buf[i] != 9:
                    return -1 - row, 0
                i += 1
                v = np.uint64(0)
                d = 0
                if i + 8 < n:  # the common case first, without a branch per digit: 8 hex digits
                    h = np.uint64(0)
                    for k in range(8):
                        h |= np.uint64(hexv[buf[i + k]])
                        v = (v << np.uint64(4)) | np.uint64(hexv[buf[i + k]])
                    if h < 16 and hexv[buf[i + 8]] >= 16:
                        d = 8
                        i += 8
                    else:
                        v = np.uint64(0)
                while i < n and hexv[buf[i]] < 16:
                    v = (v << np.uint64(4)) | np.uint64(hexv[buf[i]])
                    d += 1
                    i += 1
                if d > 16:
                    return -1 - row, 0
                z = v + offs[j]
                z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
                z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
                ids[j, row] = np.int64((z ^ (z >> np.uint64(31))) & _MASK63)
                present[j, row] = d > 0
            while i < n and buf[i] == 13:  # the reference strips trailing '\r' (and '\n')
                i += 1
            if i < n:
                if buf[i] != 10:
                    return -1 - row, 0
                i += 1
            row += 1
        return row, big


def parse_block(text: bytes, lines: int) -> Columns | int:
    """A text block of ``lines`` whole lines in strict Criteo layout -> :class:`Columns` in one
    compiled pass (labels, dense log1p values, hex IDs hashed by splitmix64 as
    :func:`~torchhpc.ext.kraken.stream.criteo_ids`), or the index (from 0) of the first line off the
    layout: anything else (a field count, a sign or space, ``0x``, a 17th digit, a non-ASCII byte, an
    empty line) is left to the reference's parser, which gives its values or its error."""
    buf = np.frombuffer(text, np.uint8)
    labels = np.empty(lines, np.float32)
    dense = np.empty((lines, CRITEO_DENSE), np.float32)
    ids = np.empty((CRITEO_SPARSE, lines), np.int64)
    present = np.empty((CRITEO_SPARSE, lines), bool)
    got, big = _parse_tsv(buf, _HEX, _OFFSETS, _log1p_values(), labels, dense, ids, present)
    if got != lines:
        return -1 - got if got < 0 else min(got, lines)
    if big:  # values of 2**20 and more, as float32: torch's log1p (the table ends at log1p(2**20 - 1) < 14)
        where = dense >= _LOG1P_TABLE
        dense[where] = torch.log1p(torch.from_numpy(dense[where])).numpy()
    return Columns(labels, dense, ids, present)


def have_pyarrow() -> bool:
    try:
        import pyarrow.csv  # noqa: F401
    except ImportError:
        return False
    return True


def is_parquet(path: Path) -> bool:
    """A ``.parquet``/``.pq`` name or the ``PAR1`` magic bytes."""
    if path.suffix in (".parquet", ".pq"):
        return True
    with open(path, "rb") as fh:
        return fh.read(4) == b"PAR1"


def _need_pyarrow(what: str):
    if not have_pyarrow():
        raise InputError(f"{what} needs pyarrow: pip install pyarrow")


# ----------------------------------------------------------------------------- columns -> arrays


class Columns:
    """One block of samples as numpy arrays: labels ``(n,)`` float32, dense ``(n, 13)`` float32
    already transformed (``log(1 + max(x, 0))``, missing = 0), IDs ``(26, n)`` int64
    (:func:`~torchhpc.ext.kraken.stream.criteo_ids`), present ``(26, n)`` bool."""

    def __init__(self, labels, dense, ids, present):
        self.labels, self.dense, self.ids, self.present = labels, dense, ids, present

    def __len__(self) -> int:
        return len(self.labels)

    def slice(self, lo: int, hi: int) -> Columns:
        return Columns(self.labels[lo:hi], self.dense[lo:hi], self.ids[:, lo:hi], self.present[:, lo:hi])

    @staticmethod
    def cat(parts: list[Columns]) -> Columns:
        if len(parts) == 1:
            return parts[0]
        return Columns(np.concatenate([p.labels for p in parts]), np.concatenate([p.dense for p in parts]),
                       np.concatenate([p.ids for p in parts], 1), np.concatenate([p.present for p in parts], 1))

    def batch(self) -> Batch:
        return Batch(torch.from_numpy(self.dense), criteo_kjt(self.ids, self.present), torch.from_numpy(self.labels))


_LOG1P_TABLE = 1 << 20
_log1p_table: np.ndarray | None = None


def _log1p_values() -> np.ndarray:
    """torch's float32 ``log1p`` of ``0 .. 2**20 - 1`` (made once)."""
    global _log1p_table
    if _log1p_table is None:
        _log1p_table = torch.log1p(torch.arange(_LOG1P_TABLE, dtype=torch.float32)).numpy()
    return _log1p_table


def dense_transform(x: np.ndarray) -> np.ndarray:
    """``log(1 + max(x, 0))`` of integer dense values ``(n, 13)`` int64 as float32, bit-equal to the
    reference's ``torch.log1p(float32(x).clamp(min=0))``: a table of torch's own values for
    ``0 .. 2**20 - 1`` (one numpy gather), torch for the few larger values."""
    x = np.maximum(x, 0)
    big = x >= _LOG1P_TABLE
    out = _log1p_values()[np.where(big, 0, x)]
    if big.any():
        out[big] = torch.log1p(torch.from_numpy(x[big].astype(np.float32))).numpy()
    return out


def hex_values(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values of hex strings of one width ``W`` in {8, 16}: ``data`` ``(n, W)`` uint8 ASCII ->
    (``(n,)`` uint64 values, ``(n,)`` bool: every byte a hex digit).

    Each 8 characters are one uint64 word of 8 digit values (the first character in the lowest
    byte); pairs of digits are merged into bytes and the bytes gathered, 8 words at a time in
    numpy rather than one character at a time."""
    nib = np.ascontiguousarray(_HEX[data]).view("<u8")  # (n, W / 8) words
    ok = ((nib & np.uint64(0xF0F0F0F0F0F0F0F0)) == 0).all(1) if nib.shape[1] > 1 else \
        (nib[:, 0] & np.uint64(0xF0F0F0F0F0F0F0F0)) == 0
    t = ((nib & np.uint64(0x00FF00FF00FF00FF)) << np.uint64(4)) | ((nib >> np.uint64(8)) & np.uint64(0x00FF00FF00FF00FF))
    t = (t | (t >> np.uint64(8))) & np.uint64(0x0000FFFF0000FFFF)
    t = (t | (t >> np.uint64(16))) & np.uint64(0xFFFFFFFF)
    words = t.astype(np.uint32).byteswap().astype(np.uint64)  # (n, W / 8): 32 bits of the value each
    vals = words[:, 0]
    for k in range(1, words.shape[1]):
        vals = (vals << np.uint64(32)) | words[:, k]
    return vals, ok


def _valid_mask(arr) -> np.ndarray | None:
    """``(n,)`` bool of non-null entries of an Arrow array (``None``: no nulls)."""
    if arr.null_count == 0:
        return None
    return arr.is_valid().to_numpy(zero_copy_only=False)


def _categorical(arr) -> tuple[np.ndarray, np.ndarray] | None:
    """An Arrow column of hex strings (8-byte fixed-size, or any binary/string) -> (``(n,)`` int64 raw
    bits, ``(n,)`` present); ``None`` when a value is not 1..16 hex digits."""
    import pyarrow as pa

    n = len(arr)
    valid = _valid_mask(arr)
    present = np.ones(n, bool) if valid is None else valid
    if pa.types.is_integer(arr.type):  # Parquet: the ID's bits as an integer
        vals = arr.cast(pa.int64(), safe=False).fill_null(0).to_numpy()
        return vals, present
    if pa.types.is_fixed_size_binary(arr.type):  # the common case: every value 8 hex digits
        buf = np.frombuffer(arr.buffers()[1], np.uint8)[arr.offset * 8:(arr.offset + n) * 8]
        vals, ok = hex_values(buf.reshape(n, 8))
        if not ok[present].all():
            return None
        return vals.view(np.int64), present
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.large_binary() if pa.types.is_large_string(arr.type) else pa.binary())
    if not (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)):
        return None
    off_type = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    offsets = np.frombuffer(arr.buffers()[1], off_type)[arr.offset:arr.offset + n + 1].astype(np.int64)
    data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    present &= lengths > 0  # an empty string is a missing value
    if (lengths[present] > 16).any():
        return None
    if (lengths[present] == 8).all() and len(data) >= offsets[-1]:  # all 8 digits: the text is an (m, 8) block
        vals = np.zeros(n, np.uint64)
        text = data[offsets[0]:offsets[-1]]
        if (lengths[~present] == 0).all():
            got, ok = hex_values(text.reshape(-1, 8))
            if not ok.all():
                return None
            vals[present] = got
            return vals.view(np.int64), present
    # right-align every value in 16 columns, padding with '0' (a no-op digit)
    col = np.arange(16)
    idx = offsets[1:, None] - 16 + col
    inside = col >= 16 - lengths[:, None]
    chars = np.where(inside, data[np.clip(idx, 0, max(len(data) - 1, 0))] if len(data) else 48, 48).astype(np.uint8)
    vals, ok = hex_values(chars)
    if not ok[present].all():
        return None
    vals[~present] = 0
    return vals.view(np.int64), present


def _integers(arr) -> np.ndarray | None:
    """An Arrow integer column -> ``(n,)`` int64 (null = 0); ``None`` for another type."""
    import pyarrow as pa

    if not pa.types.is_integer(arr.type):
        return None
    return arr.cast(pa.int64(), safe=False).fill_null(0).to_numpy()


def columns_from_arrow(table) -> Columns | str:
    """A pyarrow Table/RecordBatch with the Criteo columns -> :class:`Columns`, or a short reason
    why not (a null or non-0/1 label, a non-integer dense column, a non-hex ID)."""
    import pyarrow as pa

    def col(name):
        c = table.column(name)
        return c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c

    lab = col("label")
    if lab.null_count or not pa.types.is_integer(lab.type):
        return "label"
    labels = lab.cast(pa.int64(), safe=False).to_numpy()
    if ((labels != 0) & (labels != 1)).any():
        return "label"
    n = len(labels)
    dense = np.empty((n, CRITEO_DENSE), np.int64)
    for j in range(CRITEO_DENSE):
        v = _integers(col(f"I{j + 1}"))
        if v is None:
            return f"I{j + 1}"
        dense[:, j] = v
    raw = np.empty((CRITEO_SPARSE, n), np.uint64)
    present = np.empty((CRITEO_SPARSE, n), bool)
    for j in range(CRITEO_SPARSE):
        got = _categorical(col(f"C{j + 1}"))
        if got is None:
            return f"C{j + 1}"
        raw[j], present[j] = got[0].view(np.uint64), got[1]
    return Columns(labels.astype(np.float32), dense_transform(dense), criteo_ids_numpy(raw), present)


# ----------------------------------------------------------------------------- TSV


def _csv_options(categorical_type):
    import pyarrow as pa
    import pyarrow.csv as pcsv

    types = {"label": pa.int64(), **{f"I{j + 1}": pa.int64() for j in range(CRITEO_DENSE)},
             **{f: categorical_type for f in CRITEO_FEATURES}}
    return (pcsv.ReadOptions(column_names=CRITEO_COLUMNS, use_threads=False, block_size=PARSE_CHUNK),
            pcsv.ParseOptions(delimiter="\t", quote_char=False, double_quote=False, escape_char=False,
                              ignore_empty_lines=False),
            pcsv.ConvertOptions(column_types=types, null_values=[""], strings_can_be_null=True,
                                quoted_strings_can_be_null=False))


def _columns_reference(path, first: int, text: bytes) -> Columns:
    """A block through the reference's line parser: its error (file, line, column) or its values."""
    labels, dense, cats, has = [], [], [], []
    lines = text.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for k, raw in enumerate(lines):
        lineno = first + k
        lab, dv, cv, hv = parse_criteo_line(path, lineno, decode_criteo_line(path, lineno, raw + b"\n"))
        labels.append(lab)
        dense.extend(dv)
        cats.extend(cv)
        has.extend(hv)
    n = len(labels)
    dense = torch.tensor(dense, dtype=torch.float32).view(n, CRITEO_DENSE)
    return Columns(np.array(labels, np.float32), torch.log1p(dense.clamp(min=0)).numpy(),
                   criteo_ids(torch.tensor(cats, dtype=torch.int64).view(n, CRITEO_SPARSE).t()).numpy(),
                   np.array(has, bool).reshape(n, CRITEO_SPARSE).T.copy())


class _TsvParser:
    """Text blocks -> :class:`Columns` in two steps that run in two threads: pyarrow's parse
    (:meth:`table`), then the arrays (:meth:`columns`; the reference's parser for a block pyarrow
    could not take or whose values it would read differently)."""

    def __init__(self, path: Path, compiled: bool = True):
        import pyarrow as pa

        self.path = path
        self.compiled = compiled and _HAVE_NUMBA  # strict-layout blocks through parse_block
        self.fixed = _csv_options(pa.binary(8))
        self.any_width = _csv_options(pa.binary())
        self.widths_seen = False  # a block had IDs of other widths than 8: start with binary() from then on

    def _read(self, text: bytes, lines: int, options):
        import pyarrow as pa
        import pyarrow.csv as pcsv

        try:
            table = pcsv.read_csv(pa.py_buffer(text), read_options=options[0], parse_options=options[1],
                                  convert_options=options[2])
        except pa.ArrowInvalid:
            return None
        return table if table.num_rows == lines else None  # a lone '\r' ends a row for pyarrow only

    def table(self, block: tuple[int, bytes, int]):
        """``(first line, text, pyarrow Table or None)`` of a text block (``Columns`` in place of the
        table where the compiled parser took it)."""
        first, text, lines = block
        if self.compiled:
            got = parse_block(text, lines)
            if isinstance(got, Columns):
                return first, text, got
        table = None
        if b"x" not in text and b"X" not in text:  # pyarrow reads 0x1f as an integer; Python's int() does not
            if not self.widths_seen:
                table = self._read(text, lines, self.fixed)
            if table is None:
                table = self._read(text, lines, self.any_width)
                self.widths_seen |= table is not None
        return first, text, table

    def columns(self, parsed) -> Columns:
        first, text, table = parsed
        if isinstance(table, Columns):  # parsed by the compiled parser
            return table
        got = columns_from_arrow(table) if table is not None else None
        return got if isinstance(got, Columns) else _columns_reference(self.path, first, text)


class _Gunzip:
    """``read(n)``: up to ``n`` bytes of a gzip file's text (members one after another), in zlib's C
    code.  A read that meets corrupt or truncated data returns the text before it; the next read
    raises (``zlib.error``, or ``EOFError`` for a truncated file), so the lines before the damage
    are read first, as the reference does."""

    def __init__(self, fh):
        self.fh, self.d, self.pending, self.error, self.started = fh, zlib.decompressobj(31), b"", None, False

    def read(self, n: int) -> bytes:
        if self.error is not None:
            raise self.error
        parts, size = [], 0
        try:
            while size < n:
                if self.d.eof:  # a member ended: another may follow
                    rest = self.d.unused_data or self.fh.read(1 << 20)
                    if not rest:
                        break
                    self.d, self.pending = zlib.decompressobj(31), rest
                if not self.pending:
                    self.pending = self.fh.read(1 << 20)
                    if not self.pending:
                        if self.started:
                            raise EOFError("compressed file ended before the end-of-stream marker was reached")
                        break  # an empty file
                self.started = True
                out = self.d.decompress(self.pending, n - size)
                self.pending = self.d.unconsumed_tail
                parts.append(out)
                size += len(out)
        except (EOFError, zlib.error) as exc:
            if not size:
                raise
            self.error = exc
        return b"".join(parts)


def _read_after(reader, carry: bytes, n: int) -> tuple[bytes | bytearray, int]:
    """``(carry + up to n more bytes, how many more)``: a plain file reads straight into the block's
    buffer (one copy of the text, not three: a third of the text-cutting time)."""
    if isinstance(reader, _Gunzip):
        raw = reader.read(n)
        return (carry + raw if carry else raw), len(raw)
    buf = bytearray(len(carry) + n)
    buf[:len(carry)] = carry
    with memoryview(buf) as view:
        got = reader.readinto(view[len(carry):])
    del buf[len(carry) + got:]
    return buf, got


def _text_blocks(path: Path, start: int, block_bytes: int) -> Iterator[tuple[int, bytes, int]]:
    """``(first line number, text of whole lines, line count)`` from line ``start + 1`` on; a truncated or
    corrupt ``.gz`` is an :class:`InputError` naming the line after the last whole one."""
    seen = 0  # lines before the carried-over text
    carry = b""
    error = None
    with open(path, "rb") as fh:
        reader = _Gunzip(fh) if path.suffix == ".gz" else fh
        while True:
            try:
                text, got = _read_after(reader, carry, block_bytes)
            except (EOFError, zlib.error) as exc:
                what = "truncated gzip file" if isinstance(exc, EOFError) else "not valid gzip data"
                error, text, got = f"{what} ({exc})", carry, 0
            if not text:
                break
            if got:
                cut = text.rfind(b"\n") + 1
                if cut == 0:  # a line longer than a block: read on
                    carry = text
                    continue
            else:
                cut = len(text) if error is None else text.rfind(b"\n") + 1  # a truncated line is not a line
            carry = text[cut:]
            if isinstance(text, bytearray):
                del text[cut:]  # in place: no copy of the block
            else:
                text = text[:cut]
            lines = text.count(b"\n") + (0 if text.endswith(b"\n") or not text else 1)
            if lines and seen + lines > start:
                if seen < start:  # the block that holds line `start`: drop the lines before it
                    nl = np.flatnonzero(np.frombuffer(text, np.uint8) == 10)
                    text = text[int(nl[start - seen - 1]) + 1:]
                    lines, seen = lines - (start - seen), start
                yield seen + 1, text, lines
            seen += lines
            if error is not None or not got:
                break
    if error is not None:
        raise InputError(f"{path}:{seen + 1}: {error}")


def _prefetched(make: Iterator, depth: int) -> Iterator:
    """The items of ``make`` computed in a background thread, at most ``depth`` ahead; its exception is
    raised here after the items before it.  Closing this generator stops the thread."""
    q: queue.Queue = queue.Queue(depth)
    stop = threading.Event()
    end = object()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work():
        try:
            for item in make:
                if not put((item, None)):
                    return
        except BaseException as exc:  # handed to the consumer, raised there
            put((None, exc))
            return
        put((end, None))

    thread = threading.Thread(target=work, name="kraken-criteo-reader", daemon=True)
    thread.start()
    try:
        while True:
            item, exc = q.get()
            if exc is not None:
                raise exc
            if item is end:
                return
            yield item
    finally:
        stop.set()
        thread.join(timeout=5)


def _batches(blocks: Iterator[Columns], batch_size: int) -> Iterator[Batch]:
    """:class:`Columns` blocks re-cut into batches of ``batch_size`` samples (the last one shorter)."""
    parts: list[Columns] = []
    have = 0
    for cols in blocks:
        lo = 0
        n = len(cols)
        while lo < n:
            take = min(batch_size - have, n - lo)
            parts.append(cols.slice(lo, lo + take))
            have += take
            lo += take
            if have == batch_size:
                yield Columns.cat(parts).batch()
                parts, have = [], 0
    if parts:
        yield Columns.cat(parts).batch()


def _queue_depth(batch_size: int) -> int:
    """Batches the reader thread may hold ready: about ``PREFETCH`` blocks' worth (bounded memory)."""
    return max(2, PREFETCH * (BLOCK_BYTES // 240) // batch_size)


def _no_samples(path: Path, start: int) -> InputError:
    return InputError(f"{path}: no samples" + (f" after line {start}" if start else " (an empty file)"))


def read_criteo_arrow(path: Path, batch_size: int = 512, start: int = 0,
                      block_bytes: int = BLOCK_BYTES, compiled: bool = True) -> Iterator[Batch]:
    """:func:`~torchhpc.ext.kraken.stream.read_criteo` for TSV files (see the module doc); ``compiled=False``
    leaves out the compiled parser (pyarrow for every block, as without numba)."""
    _need_pyarrow("the arrow Criteo reader")
    path = Path(path)

    parser = _TsvParser(path, compiled)
    tables = _prefetched(map(parser.table, _text_blocks(path, start, block_bytes)), PREFETCH)

    def counted():
        n = 0
        for cols in map(parser.columns, tables):
            n += len(cols)
            yield cols
        if n == 0:
            raise _no_samples(path, start)

    return _prefetched(_batches(counted(), batch_size), _queue_depth(batch_size))


# ----------------------------------------------------------------------------- Parquet


def read_criteo_parquet(path: Path, batch_size: int = 512, start: int = 0) -> Iterator[Batch]:
    """Batches from a Parquet file with the columns ``label, I1..I13, C1..C26`` (row groups streamed,
    ``start`` rows skipped).

    Raises:
        InputError: not a Parquet file, a missing column, a null or non-0/1 label, a dense column that
            is not integer, a categorical value that is not a hex string of up to 16 digits or an
            integer (naming the column and the first bad row).
    """
    _need_pyarrow("reading Parquet")
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        pf = pq.ParquetFile(str(path))
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{path}: not a Parquet file ({exc})") from None
    names = set(pf.schema_arrow.names)
    missing = [c for c in CRITEO_COLUMNS if c not in names]
    if missing:
        raise InputError(f"{path}: no column {missing[0]!r} (a Criteo Parquet file has label, I1..I13, C1..C26)")

    def blocks():
        row = 0  # rows before this record batch
        for rb in pf.iter_batches(batch_size=65536, columns=CRITEO_COLUMNS):
            n = rb.num_rows
            if row + n <= start:
                row += n
                continue
            if row < start:
                rb, row = rb.slice(start - row), start
            got = columns_from_arrow(rb)
            if not isinstance(got, Columns):
                raise InputError(f"{path}: {_parquet_problem(rb, got, row)}")
            row += rb.num_rows
            yield got
        if row <= start:
            raise _no_samples(path, start)

    return _prefetched(_batches(blocks(), batch_size), _queue_depth(batch_size))


def _parquet_problem(rb, column: str, row: int) -> str:
    """What is wrong with ``column`` of a record batch whose first row is data row ``row + 1``."""
    import pyarrow as pa

    arr = rb.column(column)
    if column == "label":
        if not pa.types.is_integer(arr.type):
            return f"column label: expected integers, found {arr.type}"
        vals = arr.to_pylist()
        k = next(i for i, v in enumerate(vals) if v not in (0, 1))
        return f"row {row + k + 1}: label must be 0 or 1, found {vals[k]}"
    if column.startswith("I"):
        return f"column {column}: expected integers, found {arr.type}"
    if not (pa.types.is_binary(arr.type) or pa.types.is_string(arr.type) or pa.types.is_large_binary(arr.type)
            or pa.types.is_large_string(arr.type)):
        return f"column {column}: expected hex strings or integers, found {arr.type}"
    for k, v in enumerate(arr.to_pylist()):
        if v is None or len(v) == 0:
            continue
        s = v.decode("utf-8", "replace") if isinstance(v, bytes) else v
        if len(s) > 16 or any(ch not in "0123456789abcdefABCDEF" for ch in s):
            return f"row {row + k + 1}: column {column}: {s!r} is not a hexadecimal ID of up to 64 bits"
    return f"column {column}: unreadable"
