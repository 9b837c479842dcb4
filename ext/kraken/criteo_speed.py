"""How fast the Criteo readers are: a generated log of the Criteo shape, and every reader timed on it."""

from __future__ import annotations

import time
from pathlib import Path

from .criteo import read_criteo
from .criteo_reference import read_criteo_reference
from .criteo_tsv import csv_options, read_criteo_arrow


def random_criteo_log(path: str | Path, lines: int, seed: int = 0) -> Path:
    """Write a Criteo-format TSV (``.gz``: gzip'd; ``.parquet``: Parquet) of ``lines`` random lines shaped
    like the Criteo logs (about 240 bytes a line): labels 25% clicks, dense counts log-normal with 20%
    missing, 8-hex-digit IDs Zipf-distributed with 10% missing.  For measuring readers (needs pyarrow)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    path = Path(path)
    rng = np.random.default_rng(seed)
    digits = np.frombuffer(b"0123456789abcdef", np.uint8)
    shifts = np.arange(28, -1, -4, dtype=np.uint32)
    cols = {"label": pa.array((rng.random(lines) < 0.25).astype(np.int64))}
    for j in range(13):
        cols[f"I{j + 1}"] = pa.array(np.floor(np.exp(rng.normal(1, 2, lines))).astype(np.int64),
                                     mask=rng.random(lines) < 0.2)
    for j in range(26):
        ids = (rng.zipf(1.1, lines).astype(np.uint64) * np.uint64(2654435761) + np.uint64(j)).astype(np.uint32)
        text = np.ascontiguousarray(digits[(ids[:, None] >> shifts) & 15]).view("S8").ravel()
        cols[f"C{j + 1}"] = pa.array(text, pa.binary(8), mask=rng.random(lines) < 0.1).cast(pa.string())
    table = pa.table(cols)
    if path.suffix == ".parquet":
        pq.write_table(table, path)
        return path
    sink = pa.CompressedOutputStream(str(path), "gzip") if path.suffix == ".gz" else pa.OSFile(str(path), "wb")
    with sink:
        pcsv.write_csv(table, sink, pcsv.WriteOptions(include_header=False, delimiter="\t", quoting_style="none"))
    return path


def reader_speed(lines: int = 1_500_000, reference_lines: int = 100_000, batch_size: int = 512,
                 folder: str | None = None, seed: int = 0, repeats: int = 2) -> list[dict]:
    """Lines/s of the Criteo readers on one generated log (:func:`random_criteo_log`), written to a
    temporary folder and deleted after: the arrow reader on the TSV (with its compiled parser where numba
    is installed, and with pyarrow's parse for every block, as without numba), the gzip'd TSV and Parquet,
    the Python reference on the TSV's first ``reference_lines`` lines, and pyarrow's bare CSV parse of
    the same TSV (columns only, no IDs, no batches).  Wall and CPU seconds (all threads); the
    readers take turns ``repeats`` times and each one's fastest run is kept.

    Returns:
        One row per reader: ``name``, ``lines``, ``seconds``, ``cpu_seconds``, ``lines_per_s``,
        ``lines_per_cpu_s``, ``mb_per_s`` (of TSV text), and ``vs_reference`` (lines/s ratio).
    """
    import resource
    import shutil
    import tempfile

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    def timed(name: str, read, size: int) -> dict:
        c0, t0 = cpu(), time.perf_counter()
        n = read()
        dt, dc = time.perf_counter() - t0, cpu() - c0
        return {"name": name, "lines": n, "seconds": dt, "cpu_seconds": dc, "lines_per_s": n / dt,
                "lines_per_cpu_s": n / dc, "mb_per_s": size / dt / 1e6}

    def count(it) -> int:
        return sum(b.labels.numel() for b in it)

    tmp = Path(tempfile.mkdtemp(prefix="kraken-reader-", dir=folder))
    try:
        tsv = random_criteo_log(tmp / "log.tsv", lines, seed)
        gz = tmp / "log.tsv.gz"
        import pyarrow as pa
        import pyarrow.csv as pcsv

        with open(tsv, "rb") as src, pa.CompressedOutputStream(str(gz), "gzip") as dst:
            shutil.copyfileobj(src, dst, 1 << 24)
        pq_path = random_criteo_log(tmp / "log.parquet", lines, seed)
        head = tmp / "head.tsv"
        with open(tsv, "rb") as src, open(head, "wb") as dst:
            for _ in range(reference_lines):
                dst.write(src.readline())
        size, head_size = tsv.stat().st_size, head.stat().st_size
        ro, po, co = csv_options(pa.binary(8))
        runs = {
            "pyarrow_csv_parse": (lambda: sum(b.num_rows for b in pcsv.open_csv(
                str(tsv), read_options=ro, parse_options=po, convert_options=co)), size),
            "arrow_tsv": (lambda: count(read_criteo(tsv, batch_size, reader="arrow")), size),
            "arrow_tsv_pyarrow_only": (lambda: count(read_criteo_arrow(tsv, batch_size, compiled=False)), size),
            "arrow_gzip": (lambda: count(read_criteo(gz, batch_size, reader="arrow")), size),
            "arrow_parquet": (lambda: count(read_criteo(pq_path, batch_size)), size),
            "python_reference_tsv": (lambda: count(read_criteo_reference(head, batch_size)), head_size),
        }
        count(read_criteo(head, batch_size, reader="arrow"))  # imports (torchrec, pyarrow.compute) out of the timing
        best: dict[str, dict] = {}
        for _ in range(repeats):  # round robin, the fastest of each kept: the machine is shared
            for name, (read, nbytes) in runs.items():
                r = timed(name, read, nbytes)
                if name not in best or r["seconds"] < best[name]["seconds"]:
                    best[name] = r
        rows = list(best.values())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ref = best["python_reference_tsv"]["lines_per_s"]
    for r in rows:
        r["vs_reference"] = r["lines_per_s"] / ref
    return rows


__all__ = ["random_criteo_log", "reader_speed"]
