"""Criteo-format Parquet logs: the columns ``label, I1..I13, C1..C26``, row groups streamed in a background
thread into the batches the TSV readers give (dense integers, null = 0; categorical hex strings, or
integers taken as the IDs' bits)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from torchhpc.ext.core.errors import InputError

from .batch import Batch
from .criteo_columns import Columns, columns_from_arrow, need_pyarrow, no_samples, queue_depth, rebatch
from .criteo_reference import CRITEO_COLUMNS
from .prefetch import prefetched


def read_criteo_parquet(path: Path, batch_size: int = 512, start: int = 0) -> Iterator[Batch]:
    """Batches from a Parquet file with the columns ``label, I1..I13, C1..C26`` (row groups streamed,
    ``start`` rows skipped).

    Raises:
        InputError: not a Parquet file, a missing column, a null or non-0/1 label, a dense column that
            is not integer, a categorical value that is not a hex string of up to 16 digits or an
            integer (naming the column and the first bad row).
    """
    need_pyarrow("reading Parquet")
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
            raise no_samples(path, start)

    return prefetched(rebatch(blocks(), batch_size), queue_depth(batch_size))


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


__all__ = ["read_criteo_parquet"]
