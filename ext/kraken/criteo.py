"""Criteo-format click logs: :func:`read_criteo` reads a TSV, gzip'd TSV or Parquet file with the reader
that fits it (:func:`criteo_reader`).

* :mod:`.criteo_reference` — the format, its line parser and the readable reference reader (``python``);
* :mod:`.criteo_tsv` — TSV at disk speed: a compiled parser, pyarrow, background threads (``arrow``);
* :mod:`.criteo_parquet` — Parquet row groups (``parquet``);
* :mod:`.criteo_columns` — the numpy blocks both fast readers make, and their batches.

Every reader gives the same :class:`~torchhpc.ext.kraken.batch.Batch` objects and the same errors.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from torchhpc.ext.core.errors import InputError

from .batch import Batch
from .criteo_columns import have_pyarrow
from .criteo_reference import read_criteo_reference


def is_parquet(path: Path) -> bool:
    """A ``.parquet``/``.pq`` name or the ``PAR1`` magic bytes."""
    if path.suffix in (".parquet", ".pq"):
        return True
    with open(path, "rb") as fh:
        return fh.read(4) == b"PAR1"


def criteo_reader(path: str | Path, reader: str = "auto") -> str:
    """Which reader :func:`read_criteo` uses for ``path``: ``parquet``, ``arrow`` or ``python``."""
    path = Path(path)
    if path.is_file() and is_parquet(path):
        return "parquet"
    return "python" if reader == "python" or (reader == "auto" and not have_pyarrow()) else "arrow"


def read_criteo(path: str | Path, batch_size: int = 512, start: int = 0, reader: str = "auto") -> Iterator[Batch]:
    """Batches from a Criteo-format log, from line (row) ``start`` on: TSV, gzip'd TSV (``.gz``) or Parquet.

    Each TSV line: ``label \\t I1..I13 \\t C1..C26`` — integer dense features (empty = 0,
    transformed ``log(1 + max(x, 0))``) and hexadecimal categorical IDs of up to 64 bits
    (empty = no ID for that sample, a zero-length bag).  Raw IDs are a bijective 64-bit
    mix of the value seeded by the column, with the top bit dropped (63-bit IDs), so
    equal hex strings in different columns stay different features.  A Parquet file
    (``.parquet``/``.pq`` or the ``PAR1`` magic) has the columns ``label, I1..I13, C1..C26``
    (dense: integers, null = 0; categorical: hex strings, or integers taken as the ID's bits).

    Args:
        path: the file.
        batch_size: samples per batch (the last batch may be shorter).
        start: lines (rows) to skip first.
        reader: ``arrow`` (a compiled numba parser, pyarrow's CSV parser for blocks off the strict
            layout or without numba, in background threads, bounded memory: about 20x the reference,
            9x without numba), ``python`` (:func:`read_criteo_reference`) or ``auto`` (arrow when
            pyarrow is installed).  Parquet always needs pyarrow.

    Raises:
        InputError: a missing file, no samples from line ``start`` on (an empty file), a line with a
            wrong field count, a bad number or a byte that is not UTF-8, a truncated or corrupt ``.gz``
            (reported with the line number), a Parquet file without the Criteo columns.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such Criteo TSV file")
    if reader not in ("auto", "arrow", "python"):
        raise InputError(f"reader {reader!r}: choose auto, arrow or python")
    used = criteo_reader(path, reader)
    if used == "parquet":
        from .criteo_parquet import read_criteo_parquet

        yield from read_criteo_parquet(path, batch_size, start)
    elif used == "python":
        yield from read_criteo_reference(path, batch_size, start)
    else:
        from .criteo_tsv import read_criteo_arrow

        yield from read_criteo_arrow(path, batch_size, start)


__all__ = ["criteo_reader", "is_parquet", "read_criteo"]
