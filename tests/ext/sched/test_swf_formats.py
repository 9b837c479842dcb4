"""SWF traces as they are shipped and edited: gzip-compressed (``.swf.gz``, told by the magic bytes), and
with LF, CRLF or CR-only line endings, all read as the same trace; damaged gzip data is one line."""

from __future__ import annotations

import gzip
import json

import pytest

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.sched.swf import FIELDS, read_swf
from torchhpc.trainers.cli import main

HEADER = "; Version: 2.2\n; MaxProcs: 8\n"


def _text(n: int = 40) -> str:
    """An SWF trace of ``n`` jobs (2-5 processors, 50-250 s), LF line endings."""
    jobs = [f"{i} {i * 7} -1 {50 + 13 * (i % 16)} {2 + i % 4} -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1"
            for i in range(1, n + 1)]
    return HEADER + "\n".join(jobs) + "\n"


VARIANTS = {
    "crlf": lambda t: t.replace("\n", "\r\n").encode(),
    "cr": lambda t: t.replace("\n", "\r").encode(),
    "gzip": lambda t: gzip.compress(t.encode()),
    "gzip-crlf-no-suffix": lambda t: gzip.compress(t.replace("\n", "\r\n").encode()),
    "no-final-newline": lambda t: t.rstrip("\n").encode(),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_encoding_reads_as_the_plain_trace(tmp_path, variant):
    """Gzip (whatever the name) and CR / CRLF endings give the plain LF file's columns and header."""
    plain = tmp_path / "plain.swf"
    plain.write_text(_text())
    other = tmp_path / ("t.swf.gz" if variant == "gzip" else "t.swf")
    other.write_bytes(VARIANTS[variant](_text()))
    a, b = read_swf(plain), read_swf(other)
    assert len(b) == len(a) == 40 and b.max_procs == 8
    assert all((a.columns[f] == b.columns[f]).all() for f in FIELDS)


def test_sched_heuristics_reads_a_gzip_trace(tmp_path, capsys):
    """`sched heuristics --trace t.swf.gz` gives the same table as on the decompressed file."""
    plain, packed = tmp_path / "t.swf", tmp_path / "t.swf.gz"
    plain.write_text(_text())
    packed.write_bytes(gzip.compress(_text().replace("\n", "\r\n").encode()))
    out = []
    for path in (plain, packed):
        rc = main(["sched", "heuristics", "--trace", str(path), "--start", "0", "--length", "30", "--json"])
        captured = capsys.readouterr()
        assert rc == 0, captured.err
        out.append(json.loads(captured.out))
    assert out[0] == out[1]


@pytest.mark.parametrize("cut", [8, 40])
def test_damaged_gzip_is_one_line_naming_the_file(tmp_path, capsys, cut):
    """Gzip data cut short (in its header, or in the stream) is one line naming the file and gzip."""
    p = tmp_path / "t.swf.gz"
    p.write_bytes(gzip.compress(_text().encode())[:cut])
    with pytest.raises(InputError, match=r"t\.swf\.gz:1: damaged or truncated gzip data"):
        read_swf(p)
    rc = main(["sched", "heuristics", "--trace", str(p), "--start", "0", "--length", "10"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "gzip" in err[0] and str(p) in err[0]
