"""Criteo-format TSV logs (plain or gzip) at disk speed: a compiled parser (numba), pyarrow's CSV parser
for blocks off the strict layout, the reference's line parser for the rest, in two background threads.

The readable reference is :func:`~torchhpc.ext.kraken.criteo_reference.read_criteo_reference` (one line at a
time in Python); this module gives the same :class:`~torchhpc.ext.kraken.batch.Batch` objects with
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

import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from torchhpc.ext.core.dispatch import numba_available
from torchhpc.ext.core.errors import InputError

from .batch import Batch
from .criteo_columns import (
    BLOCK_BYTES,
    HEX_VALUE,
    LOG1P_TABLE,
    PREFETCH,
    Columns,
    columns_from_arrow,
    log1p_values,
    need_pyarrow,
    no_samples,
    queue_depth,
    rebatch,
)
from .criteo_reference import (
    CRITEO_COLUMNS,
    CRITEO_DENSE,
    CRITEO_FEATURES,
    CRITEO_SPARSE,
    criteo_ids,
    decode_criteo_line,
    parse_criteo_line,
)
from .prefetch import prefetched

PARSE_CHUNK = 1 << 20  # pyarrow parses a block in chunks of this size: 1.5x fewer CPU-seconds than
#                         one chunk per block (cache-sized pieces; docs/kraken/io-notes.md)

# the additive constant of criteo_ids' splitmix64 for column c (seed 99 + c): (seed + 1) * gamma mod 2**64
_OFFSETS = np.array([((100 + c) * 0x9E3779B97F4A7C15) & ((1 << 64) - 1) for c in range(CRITEO_SPARSE)], np.uint64)


# ----------------------------------------------------------------------------- the compiled parser

if numba_available():  # pragma: no branch - make setup installs numba
    from numba import njit

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
    :func:`~torchhpc.ext.kraken.criteo_reference.criteo_ids`), or the index (from 0) of the first line off the
    layout: anything else (a field count, a sign or space, ``0x``, a 17th digit, a non-ASCII byte, an
    empty line) is left to the reference's parser, which gives its values or its error."""
    buf = np.frombuffer(text, np.uint8)
    labels = np.empty(lines, np.float32)
    dense = np.empty((lines, CRITEO_DENSE), np.float32)
    ids = np.empty((CRITEO_SPARSE, lines), np.int64)
    present = np.empty((CRITEO_SPARSE, lines), bool)
    got, big = _parse_tsv(buf, HEX_VALUE, _OFFSETS, log1p_values(), labels, dense, ids, present)
    if got != lines:
        return -1 - got if got < 0 else min(got, lines)
    if big:  # values of 2**20 and more, as float32: torch's log1p (the table ends at log1p(2**20 - 1) < 14)
        where = dense >= LOG1P_TABLE
        dense[where] = torch.log1p(torch.from_numpy(dense[where])).numpy()
    return Columns(labels, dense, ids, present)



# ----------------------------------------------------------------------------- TSV


def csv_options(categorical_type):
    """pyarrow's read, parse and convert options for a Criteo TSV block whose IDs are ``categorical_type``."""
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
        self.compiled = compiled and numba_available()  # strict-layout blocks through parse_block
        self.fixed = csv_options(pa.binary(8))
        self.any_width = csv_options(pa.binary())
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


def read_criteo_arrow(path: Path, batch_size: int = 512, start: int = 0,
                      block_bytes: int = BLOCK_BYTES, compiled: bool = True) -> Iterator[Batch]:
    """:func:`~torchhpc.ext.kraken.criteo.read_criteo` for TSV files (see the module doc); ``compiled=False``
    leaves out the compiled parser (pyarrow for every block, as without numba)."""
    need_pyarrow("the arrow Criteo reader")
    path = Path(path)

    parser = _TsvParser(path, compiled)
    tables = prefetched(map(parser.table, _text_blocks(path, start, block_bytes)), PREFETCH)

    def counted():
        n = 0
        try:
            for cols in map(parser.columns, tables):
                n += len(cols)
                yield cols
        finally:  # a bad block raises here, not in the block reader: stop its thread now, not at garbage collection
            tables.close()
        if n == 0:
            raise no_samples(path, start)

    return prefetched(rebatch(counted(), batch_size), queue_depth(batch_size))


__all__ = ["PARSE_CHUNK", "csv_options", "parse_block", "read_criteo_arrow"]
