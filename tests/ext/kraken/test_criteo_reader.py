"""The fast Criteo reader (compiled numba parser, pyarrow) against the readable reference: the same batches,
the same errors."""

from __future__ import annotations

import gzip
import random
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("torchrec")
pytest.importorskip("pyarrow")

from torchhpc.ext.core.dispatch import numba_available  # noqa: E402
from torchhpc.ext.core.errors import InputError  # noqa: E402
from torchhpc.ext.kraken import criteo_columns, criteo_tsv  # noqa: E402
from torchhpc.ext.kraken.criteo import read_criteo  # noqa: E402
from torchhpc.ext.kraken.criteo_reference import CRITEO_COLUMNS, criteo_ids, read_criteo_reference  # noqa: E402
from torchhpc.ext.kraken.hashing import mix64  # noqa: E402
from torchhpc.ext.kraken.stream import SyntheticClickStream  # noqa: E402


def _line(rng: random.Random, hex_digits=lambda r: 8) -> str:
    dense = [str(rng.choice([rng.randint(0, 9), rng.randint(0, 5000), rng.randint(-3, 0), rng.randint(0, 1 << 31)]))
             if rng.random() > 0.2 else "" for _ in range(13)]
    cats = []
    for _ in range(26):
        w = hex_digits(rng)
        cats.append(f"{rng.getrandbits(4 * w):0{w}x}" if rng.random() > 0.15 else "")
    return "\t".join([str(int(rng.random() < 0.3)), *dense, *cats])


def _lines(n: int, seed: int = 0, **kw) -> list[str]:
    rng = random.Random(seed)
    return [_line(rng, **kw) for _ in range(n)]


def _write(path: Path, lines: list[str], end: str = "\n") -> Path:
    data = ("\n".join(lines) + end).encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def _assert_same(fast, ref) -> None:
    fast, ref = list(fast), list(ref)
    assert len(fast) == len(ref) and len(ref) > 0
    for a, b in zip(fast, ref, strict=True):
        assert torch.equal(a.labels, b.labels) and torch.equal(a.dense, b.dense)
        assert a.sparse.keys() == b.sparse.keys()
        assert torch.equal(a.sparse.values(), b.sparse.values()) and torch.equal(a.sparse.lengths(), b.sparse.lengths())
        assert a.sparse.length_per_key() == b.sparse.length_per_key()
        assert a.sparse.offset_per_key() == b.sparse.offset_per_key()


def _error(it) -> str:
    with pytest.raises(InputError) as exc:
        list(it)
    return str(exc.value)


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("name,batch,start,end", [("day.tsv", 64, 0, "\n"), ("day.tsv.gz", 100, 0, "\n"),
                                                  ("day.tsv", 33, 517, ""), ("day.tsv.gz", 1000, 5, "crlf")])
def test_fast_reader_equals_reference(tmp_path, name, batch, start, end, compiled):
    """Plain and gzip, missing fields, negative and 31-bit dense values, CRLF, no final newline, skipped
    lines, batches across blocks: the arrow reader's batches (with the compiled parser, and with pyarrow
    alone as without numba) equal the Python reference's bit for bit."""
    lines = _lines(1500)
    if end == "crlf":
        lines, end = [x + "\r" for x in lines], "\n"
    path = _write(tmp_path / name, lines, end)
    fast = criteo_tsv.read_criteo_arrow(path, batch, start=start, block_bytes=20_000, compiled=compiled)  # ~80 lines a block
    _assert_same(fast, read_criteo_reference(path, batch, start=start))
    _assert_same(read_criteo(path, batch, start=start), read_criteo_reference(path, batch, start=start))


def test_ids_of_any_width_and_case_equal_reference(tmp_path):
    """IDs of 1..16 hex digits, upper and lower case (users' own logs), take pyarrow's vectorised path
    (without the compiled parser) and the compiled parser, and both equal the reference."""
    lines = _lines(400, seed=3, hex_digits=lambda r: r.randint(1, 16))
    lines = [x.upper() if i % 3 == 0 else x for i, x in enumerate(lines)]
    path = _write(tmp_path / "wide.tsv", lines)
    parser = criteo_tsv._TsvParser(path, compiled=False)
    first, text, table = parser.table(next(criteo_tsv._text_blocks(path, 0, 1 << 20)))
    assert table is not None and parser.widths_seen  # pyarrow took it (not the fallback)
    for compiled in (False, True):
        _assert_same(criteo_tsv.read_criteo_arrow(path, 50, block_bytes=8000, compiled=compiled),
                     read_criteo_reference(path, 50))


@pytest.mark.skipif(not numba_available(), reason="the compiled parser needs numba (make setup installs it)")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compiled_parser_equals_reference_on_random_valid_text(tmp_path, seed):
    """Random lines of the strict layout (IDs of 1..16 hex digits in both cases, dense values from -1e17
    to 18 digits around the log1p table's end 2**20, empty fields, CRLF or no final newline): the compiled
    parser takes every line (no fallback) and its arrays equal the reference line parser's bit for bit."""
    rng = random.Random(seed)
    edges = [0, 1, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 10**18 - 1, -(10**17), (1 << 53) + 1, (1 << 59) + (1 << 35) + 1]
    lines = _lines(600, seed=seed, hex_digits=lambda r: r.choice([8, 8, 8, r.randint(1, 16)]))
    for k in range(0, 600, 3):
        f = lines[k].split("\t")
        f[rng.randint(1, 13)] = "-0" if k % 5 == 0 else str(rng.choice(edges))
        if k % 2:
            f[rng.randint(14, 39)] = f"{rng.getrandbits(64):016X}"
        lines[k] = "\t".join(f)
    text = "\n".join(x + "\r" * (k % 3 == 0) for k, x in enumerate(lines)).encode() + (b"\n" if seed else b"")
    got = criteo_tsv.parse_block(text, len(lines))
    want = criteo_tsv._columns_reference(tmp_path / "t.tsv", 1, text)
    assert isinstance(got, criteo_columns.Columns)
    for a, b in [(got.labels, want.labels), (got.dense, want.dense), (got.ids, want.ids), (got.present, want.present)]:
        assert a.dtype == b.dtype and np.array_equal(a, b)
    path = tmp_path / "t.tsv"
    path.write_bytes(text)
    _assert_same(criteo_tsv.read_criteo_arrow(path, 37, block_bytes=7000), read_criteo_reference(path, 37))


@pytest.mark.parametrize("odd", [
    {1: "+5", 2: " 7", 14: "00000000000000000abc"},  # a sign, a space, 20 digits (fits 64 bits for int(s, 16))
    {3: "1_000", 6: "7 "},  # int() takes underscores and trailing spaces
    {0: "01", 4: "1234567890123456789"},  # a label with a leading zero, a 19-digit count
    {20: "0x1f"},  # int("0x1f", 16) == 31
    {7: "\u0663"},  # ARABIC-INDIC DIGIT THREE: int() reads 3
])
def test_values_only_pythons_int_reads_take_the_reference_path(tmp_path, odd):
    """Values Python's int() reads but the strict layout does not hold: the compiled parser flags the
    line, pyarrow rejects or reads them differently, the block falls back to the reference's parser and
    the values still agree."""
    lines = _lines(200, seed=5)
    f = lines[50].split("\t")
    for k, v in odd.items():
        f[k] = v
    lines[50] = "\t".join(f)
    path = _write(tmp_path / "odd.tsv", lines)
    for compiled in (True, False):
        _assert_same(criteo_tsv.read_criteo_arrow(path, 32, block_bytes=3000, compiled=compiled),
                     read_criteo_reference(path, 32))
    if numba_available():
        assert criteo_tsv.parse_block(path.read_bytes(), 200) == 50


@pytest.mark.parametrize("bad", [
    lambda f: "\t".join(f[:-1]),  # 39 fields
    lambda f: "\t".join([*f, "1"]),  # 41 fields
    lambda f: "",  # an empty line
    lambda f: "\t".join([f[0], "abc", *f[2:]]),
    lambda f: "\t".join([f[0], *f[1:5], "1.5", *f[6:]]),
    lambda f: "\t".join([f[0], "0x1f", *f[2:]]),  # pyarrow would read 31
    lambda f: "\t".join([*f[:14], "xyz", *f[15:]]),
    lambda f: "\t".join([*f[:20], "12345g78", *f[21:]]),
    lambda f: "\t".join([*f[:20], "1" + "0" * 16, *f[21:]]),  # wider than 64 bits
    lambda f: "\t".join(["2", *f[1:]]),
    lambda f: "\t".join(["", *f[1:]]),
    lambda f: "\t".join([*f[:3], "1\r2", *f[4:]]),  # a lone carriage return
    lambda f: "\t".join(f) + "\r" + "\t".join(f),  # two good rows for pyarrow, 79 fields for the reference
    lambda f: "\t".join([*f[:6], "-", *f[7:]]),  # a sign without digits
    lambda f: "\t".join([*f[:30], "ab\u00e9", *f[31:]]),  # a non-hex (non-ASCII) letter
    lambda f: "\t".join(f[:14]) + "\t\t" + "\t".join(f[14:]),  # 41 fields, an empty one among them
])
def test_bad_line_gives_the_references_error(tmp_path, bad):
    """A bad line deep in the file (a later block): the same one-line error as the reference, naming
    the file, the line and the column; the reader's threads have stopped when the error arrives (the
    block reader's thread lived on while the error's traceback kept its generator alive)."""
    lines = _lines(300, seed=7)
    lines[211] = bad(lines[211].split("\t"))
    path = _write(tmp_path / "bad.tsv", lines)
    want = _error(read_criteo_reference(path, 16))
    assert want.startswith(f"{path}:212: ")
    before = threading.active_count()
    assert _error(criteo_tsv.read_criteo_arrow(path, 16, block_bytes=4000)) == want
    assert _error(criteo_tsv.read_criteo_arrow(path, 16, block_bytes=4000, compiled=False)) == want
    assert threading.active_count() == before
    if numba_available():  # the compiled parser flags the line itself (its block goes to the fallback)
        text = path.read_bytes()
        assert criteo_tsv.parse_block(text, text.count(b"\n")) == 211


def test_non_utf8_truncated_and_not_gzip_name_file_and_line(tmp_path):
    """A byte that is not UTF-8, a truncated .gz, a .gz that is not gzip: errors name the file and line
    as the reference does."""
    path = tmp_path / "bin.tsv"
    raw = [x.encode() for x in _lines(100)]
    raw[40] = raw[40][:-3] + b"\xff\xfe1"
    path.write_bytes(b"\n".join(raw) + b"\n")
    assert _error(criteo_tsv.read_criteo_arrow(path, 8, block_bytes=2000)) == _error(read_criteo_reference(path, 8))
    gz = _write(tmp_path / "t.tsv.gz", _lines(3000))
    gz.write_bytes(gz.read_bytes()[: gz.stat().st_size * 2 // 3])
    ref, fast = _error(read_criteo_reference(gz, 64)), _error(criteo_tsv.read_criteo_arrow(gz, 64, block_bytes=50_000))
    assert "truncated gzip file" in fast and ref.split(": truncated")[0] == fast.split(": truncated")[0]
    fake = tmp_path / "plain.gz"
    fake.write_text("\n".join(_lines(5)) + "\n")
    assert "not valid gzip data" in _error(criteo_tsv.read_criteo_arrow(fake, 8)) and str(fake) in _error(read_criteo(fake))


def test_empty_file_and_start_past_the_end(tmp_path):
    """No samples: the reference's message, for an empty file and for ``start`` at or past the end."""
    empty = _write(tmp_path / "e.tsv", [], end="")
    assert _error(read_criteo(empty)) == _error(read_criteo_reference(empty)) == f"{empty}: no samples (an empty file)"
    path = _write(tmp_path / "s.tsv", _lines(40))
    assert _error(read_criteo(path, 8, start=40)) == _error(read_criteo_reference(path, 8, start=40))
    assert "no samples after line 40" in _error(read_criteo(path, 8, start=40))
    assert sum(b.labels.numel() for b in read_criteo(path, 8, start=39)) == 1


def test_parquet_equals_tsv(tmp_path):
    """A Parquet file with the Criteo columns (hex strings, or the IDs' bits as integers) gives the TSV
    reader's batches; a missing column and a bad ID name the column (and row)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    tsv = _write(tmp_path / "d.tsv", _lines(700, seed=11))
    names = CRITEO_COLUMNS
    table = pcsv.read_csv(tsv, read_options=pcsv.ReadOptions(column_names=names),
                          parse_options=pcsv.ParseOptions(delimiter="\t"),
                          convert_options=pcsv.ConvertOptions(
                              column_types={n: pa.string() if n.startswith("C") else pa.int64() for n in names},
                              null_values=[""], strings_can_be_null=True))
    c3 = names.index("C3")  # an empty string is a missing value too
    table = table.set_column(c3, "C3", pa.array([v or "" for v in table.column(c3).to_pylist()], pa.string()))
    pq.write_table(table, tmp_path / "d.parquet", row_group_size=128)
    _assert_same(read_criteo(tmp_path / "d.parquet", 64, start=3), read_criteo_reference(tsv, 64, start=3))
    as_int = table.set_column(names.index("C1"), "C1", pa.array(
        [None if v is None else np.uint64(int(v, 16)).astype(np.int64) for v in table.column("C1").to_pylist()],
        pa.int64()))
    pq.write_table(as_int, tmp_path / "i.parquet")
    _assert_same(read_criteo(tmp_path / "i.parquet", 64), read_criteo_reference(tsv, 64))
    pq.write_table(table.drop_columns(["C7"]), tmp_path / "m.parquet")
    assert "no column 'C7'" in _error(read_criteo(tmp_path / "m.parquet"))
    bad = table.set_column(names.index("C2"), "C2", pa.array(["zz"] * table.num_rows))
    pq.write_table(bad, tmp_path / "b.parquet")
    assert _error(read_criteo(tmp_path / "b.parquet")) == f"{tmp_path / 'b.parquet'}: row 1: column C2: 'zz' is not a hexadecimal ID of up to 64 bits"


def test_numpy_hashing_and_dense_transform_equal_torch():
    """The reader's numpy splitmix64 equals hashing.mix64 on all 64-bit patterns tried, and its table
    log1p equals torch.log1p(clamp(x, 0)) for negative, small and large integers."""
    g = torch.Generator().manual_seed(0)
    raw = torch.randint(-(1 << 63), (1 << 63) - 1, (26, 5000), generator=g, dtype=torch.int64)
    raw[:, :3] = torch.tensor([0, -1, -(1 << 63)])
    assert torch.equal(torch.from_numpy(criteo_columns.criteo_ids_numpy(raw.numpy().view(np.uint64))), criteo_ids(raw))
    assert torch.equal(criteo_ids(raw)[4], mix64(raw[4], 103) & ((1 << 63) - 1))
    x = torch.cat([torch.arange(-5, 70_000), torch.randint(0, 1 << 40, (5000,), generator=g)]).view(-1, 5)
    assert torch.equal(torch.from_numpy(criteo_columns.dense_transform(x.numpy())), torch.log1p(x.float().clamp(min=0)))


def test_hex_values_of_known_strings():
    """hex_values reads 8- and 16-digit strings as int(s, 16) does and flags a non-hex byte."""
    words = [b"00000000", b"ffffffff", b"0123abCD", b"8000000g"]
    vals, ok = criteo_columns.hex_values(np.frombuffer(b"".join(words), np.uint8).reshape(4, 8))
    assert vals[:3].tolist() == [0, 0xFFFFFFFF, 0x0123ABCD] and ok.tolist() == [True, True, True, False]
    vals, ok = criteo_columns.hex_values(np.frombuffer(b"fedcba98765432100000000000000001", np.uint8).reshape(2, 16))
    assert vals.tolist() == [0xFEDCBA9876543210, 1] and ok.all()


def test_stopping_early_ends_the_reader_threads(tmp_path):
    """Closing the batch generator after one batch stops the background reader threads."""
    path = _write(tmp_path / "a.tsv", _lines(3000))
    before = threading.active_count()
    it = criteo_tsv.read_criteo_arrow(path, 10, block_bytes=5000)
    next(it)
    it.close()
    assert threading.active_count() == before


def test_synthetic_stream_written_as_criteo_reads_back(tmp_path):
    """SyntheticClickStream.write_criteo: the file reads back with the stream's labels and one ID per
    feature, distinct keys giving distinct IDs."""
    s = SyntheticClickStream(num_sparse=26, batch_size=64, vocab=300, seed=2)
    path = s.write_criteo(tmp_path / "syn.tsv.gz", 3)
    got = list(read_criteo(path, 64))
    assert [b.labels.numel() for b in got] == [64, 64, 64]
    for t, b in enumerate(got):
        want = s.batch(t)
        assert torch.equal(b.labels, want.labels)
        assert b.sparse.lengths().eq(1).all()
        c1 = b.sparse.to_dict()["C1"].values()
        assert torch.unique(c1).numel() == torch.unique(want.keys[:, 0]).numel()
