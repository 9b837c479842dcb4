"""Writing alignments: an unwritable --output is refused up front, a failed write is one clear error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.segalign.output import Alignment, check_output, write_alignments


def _aln() -> Alignment:
    return Alignment("t", 10, 2, 6, "q", 12, 1, 5, "+", 300, "ACGT", "ACGA")


def test_check_output_accepts_stdout_and_new_files(tmp_path):
    """None, '-', a new file in an existing folder and an existing file pass; the file is not touched."""
    existing = tmp_path / "old.maf"
    existing.write_text("keep")
    for path in (None, "-", tmp_path / "new.maf", existing):
        check_output(path)
    assert existing.read_text() == "keep" and not (tmp_path / "new.maf").exists()


@pytest.mark.parametrize("make, words", [("folder", ["is a folder"]), ("missing", ["does not exist"]),
                                         ("file", ["afile is a file, not a folder"])])
def test_check_output_refuses(tmp_path, make, words):
    """A folder, a file in a missing folder or a file "in" a file is an InputError naming --output."""
    (tmp_path / "afile").write_text("")
    path = {"folder": tmp_path, "missing": tmp_path / "no" / "x.maf", "file": tmp_path / "afile" / "x.maf"}[make]
    with pytest.raises(InputError) as exc:
        check_output(path)
    assert "--output" in str(exc.value) and all(w in str(exc.value) for w in words)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_write_failure_is_one_line():
    """A full device is an InputError naming the file and the reason, not an OSError traceback."""
    with pytest.raises(InputError, match="/dev/full: No space left on device"):
        write_alignments([_aln()] * 2000, "maf", "/dev/full")


def test_check_output_read_only_folder(tmp_path, monkeypatch):
    """A folder or file without write permission is refused (permissions as the OS reports them;
    root may write anywhere, so the answer of os.access is set here rather than by chmod)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "old.maf").write_text("")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p).startswith(str(ro)) else real_access(p, mode))
    with pytest.raises(InputError, match="cannot create a file in .* \\(permission denied\\)"):
        check_output(ro / "x.maf")
    with pytest.raises(InputError, match="not writable \\(permission denied\\)"):
        check_output(ro / "old.maf")


def test_write_formats(tmp_path, capsys):
    """Every format writes to a file or to standard output; an unknown one is an InputError."""
    write_alignments([_aln()], "segments", tmp_path / "a.seg")
    assert (tmp_path / "a.seg").read_text().splitlines()[1] == "t\t3\t6\tq\t2\t5\t+\t300"
    write_alignments([_aln()], "general", "-")
    assert capsys.readouterr().out.startswith("#score")
    with pytest.raises(InputError, match="--format"):
        write_alignments([_aln()], "sam", tmp_path / "x.sam")


def test_u_is_counted_as_the_t_it_was_aligned_as():
    """A U (RNA input) is read as T: it scored as T, so the identity counts it as T (it was left out of the
    count and the denominator), the recall's matching pairs and the reference score read it as T too; the
    rows keep the letters as given."""
    import numpy as np

    from torchhpc.ext.segalign.recall import _pairs_from_rows
    from torchhpc.ext.segalign.reference import path_score
    from torchhpc.ext.segalign.scoring import HOXD70

    dna = Alignment("t", 10, 0, 8, "q", 12, 0, 8, "+", 0, "ACGTTGCA", "ACGTTGCC")
    rna = Alignment("t", 10, 0, 8, "q", 12, 0, 8, "+", 0, "ACGTTGCA", "ACGuUGCC")
    assert dna.identity() == rna.identity() == (7, 8)
    assert np.array_equal(_pairs_from_rows(0, rna.t_text, 0, rna.q_text, True),
                          _pairs_from_rows(0, dna.t_text, 0, dna.q_text, True))
    assert path_score(rna.t_text, rna.q_text, HOXD70, 400, 30) == path_score(dna.t_text, dna.q_text, HOXD70, 400, 30)
    assert rna.q_text == "ACGuUGCC"
