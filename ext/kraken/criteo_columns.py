"""Blocks of Criteo samples as numpy arrays (:class:`Columns`), from Arrow columns or a compiled parse, and
re-cut into :class:`~torchhpc.ext.kraken.batch.Batch` objects: the part the TSV and Parquet readers share.

Every value is bit-equal to the reference's (:mod:`.criteo_reference`): dense values through a table of
torch's own ``log1p``, hex IDs through :func:`criteo_ids_numpy` (the same splitmix64 as
:func:`~torchhpc.ext.kraken.criteo_reference.criteo_ids`), a missing value a zero-length bag.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from torchhpc.ext.core.errors import InputError

from .batch import Batch
from .criteo_reference import CRITEO_DENSE, CRITEO_SPARSE, criteo_kjt

BLOCK_BYTES = 4 << 20  # text per block: about 17k Criteo lines, about 10 MB once parsed
PREFETCH = 2  # blocks' worth of batches made ahead of the consumer

# ASCII -> hex digit value; 255 marks a byte that is not a hex digit
HEX_VALUE = np.full(256, 255, np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    HEX_VALUE[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    HEX_VALUE[_c] = 10 + _i


_GAMMA, _M1, _M2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def criteo_ids_numpy(raw: np.ndarray) -> np.ndarray:
    """:func:`~torchhpc.ext.kraken.criteo_reference.criteo_ids` in numpy: ``(26, n)`` uint64 -> int64.

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


def have_pyarrow() -> bool:
    """Whether pyarrow (its CSV reader) imports."""
    try:
        import pyarrow.csv  # noqa: F401
    except ImportError:
        return False
    return True


def need_pyarrow(what: str) -> None:
    """Raise :class:`InputError` (``<what> needs pyarrow``) when pyarrow is not installed."""
    if not have_pyarrow():
        raise InputError(f"{what} needs pyarrow: pip install pyarrow")


class Columns:
    """One block of samples as numpy arrays: labels ``(n,)`` float32, dense ``(n, 13)`` float32
    already transformed (``log(1 + max(x, 0))``, missing = 0), IDs ``(26, n)`` int64
    (:func:`~torchhpc.ext.kraken.criteo_reference.criteo_ids`), present ``(26, n)`` bool."""

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


LOG1P_TABLE = 1 << 20
_log1p_table: np.ndarray | None = None


def log1p_values() -> np.ndarray:
    """torch's float32 ``log1p`` of ``0 .. 2**20 - 1`` (made once)."""
    global _log1p_table
    if _log1p_table is None:
        _log1p_table = torch.log1p(torch.arange(LOG1P_TABLE, dtype=torch.float32)).numpy()
    return _log1p_table


def dense_transform(x: np.ndarray) -> np.ndarray:
    """``log(1 + max(x, 0))`` of integer dense values ``(n, 13)`` int64 as float32, bit-equal to the
    reference's ``torch.log1p(float32(x).clamp(min=0))``: a table of torch's own values for
    ``0 .. 2**20 - 1`` (one numpy gather), torch for the few larger values."""
    x = np.maximum(x, 0)
    big = x >= LOG1P_TABLE
    out = log1p_values()[np.where(big, 0, x)]
    if big.any():
        out[big] = torch.log1p(torch.from_numpy(x[big].astype(np.float32))).numpy()
    return out


def hex_values(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values of hex strings of one width ``W`` in {8, 16}: ``data`` ``(n, W)`` uint8 ASCII ->
    (``(n,)`` uint64 values, ``(n,)`` bool: every byte a hex digit).

    Each 8 characters are one uint64 word of 8 digit values (the first character in the lowest
    byte); pairs of digits are merged into bytes and the bytes gathered, 8 words at a time in
    numpy rather than one character at a time."""
    nib = np.ascontiguousarray(HEX_VALUE[data]).view("<u8")  # (n, W / 8) words
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



def rebatch(blocks: Iterator[Columns], batch_size: int) -> Iterator[Batch]:
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


def queue_depth(batch_size: int) -> int:
    """Batches the reader thread may hold ready: about ``PREFETCH`` blocks' worth (bounded memory)."""
    return max(2, PREFETCH * (BLOCK_BYTES // 240) // batch_size)


def no_samples(path: Path, start: int) -> InputError:
    return InputError(f"{path}: no samples" + (f" after line {start}" if start else " (an empty file)"))



__all__ = ["BLOCK_BYTES", "Columns", "HEX_VALUE", "LOG1P_TABLE", "PREFETCH", "columns_from_arrow", "criteo_ids_numpy",
           "dense_transform", "have_pyarrow", "hex_values", "log1p_values", "need_pyarrow", "no_samples",
           "queue_depth", "rebatch"]
