"""Scoring: HOXD70's code table and LASTZ scoring files (good and malformed)."""

from __future__ import annotations

import pytest

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.segalign.fasta import SEPARATOR
from torchhpc.ext.segalign.scoring import hoxd70, read_scoring_file


def test_table_codes():
    """Upper and lowercase score alike (HOXD70), separators are a wall below -10 xdrop."""
    t = hoxd70().table(910)
    assert t[0, 0] == 91 and t[4, 0] == 91 and t[1, 6] == -125 and t[7, 7] == 91
    assert t[SEPARATOR, 0] < -9100 and t[2, SEPARATOR] < -9100


def test_read_lastz_scoring_file(tmp_path):
    """A LASTZ scoring file sets the matrix (any column order) and the gap penalties."""
    f = tmp_path / "s.txt"
    f.write_text("# comment\nbad_score = X:-1000\ngap_open_penalty = 600\ngap_extend_penalty = 55\n\n"
                 "   T    G    C    A\nA -1  -1  -1   2\nC -1  -1   2  -1\nG -1   2  -1  -1\nT  2  -1  -1  -1\n")
    sc = read_scoring_file(f)
    assert sc.gap_open == 600 and sc.gap_extend == 55
    assert sc.matrix == [[2, -1, -1, -1], [-1, 2, -1, -1], [-1, -1, 2, -1], [-1, -1, -1, 2]]


@pytest.mark.parametrize("text, words", [
    ("A C G\nA 1 2 3\n", ["A C G T"]),
    ("A C G T\nA 1 2 3 x\n", ["bad.txt:2", "a matrix score must be an integer", "'x'"]),
    ("A C G T\nA 1 -1 -1 -1\n", ["no complete"]),
    ("A C G T\nA 99999999999 -1 -1 -1\n", ["bad.txt:2", "99999999999", "beyond +-100000"]),
    ("gap_open_penalty = abc\nA C G T\n", ["bad.txt:1", "gap_open_penalty must be an integer", "'abc'"]),
    ("gap_open_penalty = -400\n", ["bad.txt:1", "gap_open_penalty must be >= 0", "-400"]),
    ("gap_extend_penalty = -30\n", ["bad.txt:1", "gap_extend_penalty must be >= 0"]),
    (b"\x89PNG\r\n\x1a\n\xff\xfe\x00", ["bad.txt", "not a text file"]),
])
def test_bad_scoring_file(tmp_path, text, words):
    """Malformed scoring files raise InputError naming the file (and line)."""
    f = tmp_path / "bad.txt"
    if isinstance(text, bytes):
        f.write_bytes(text)
    else:
        f.write_text(text)
    with pytest.raises(InputError) as err:
        read_scoring_file(f)
    for w in words:
        assert w in str(err.value)
    with pytest.raises(InputError, match="not found"):
        read_scoring_file(tmp_path / "none.txt")
