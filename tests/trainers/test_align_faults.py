"""``torchhpc align``'s bad-file corpus: inputs that align to nothing or that are not read as the user meant.

In-process through the CLI's ``main()``; small simulated sequences.
"""

from __future__ import annotations

import pytest

from torchhpc.ext.segalign.recall import lastz_available
from torchhpc.ext.segalign.simulate import simulate_pair


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("pair")
    sim = simulate_pair(4000, inversions=0, inversion_length=1000, duplications=0, seed=3)
    sim.write(d / "t.fa", d / "q.fa")
    return d


def _align(capsys, *argv: str) -> tuple[int, str, str]:
    from torchhpc.trainers.cli import main

    capsys.readouterr()
    try:
        rc = main(["align", *argv])
    except SystemExit as exc:
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def _lower(src, dst) -> None:
    lines = src.read_text().splitlines()
    dst.write_text("\n".join(ln if ln.startswith(">") else ln.lower() for ln in lines) + "\n")


def test_an_all_lowercase_fasta_warns_that_it_is_soft_masked(capsys, pair, tmp_path):
    """LASTZ starts no seed in lowercase (soft-masked) bases: an all-lowercase file aligns to nothing, and the
    user is told why in one warning line naming the file and what to do."""
    low = tmp_path / "low.fa"
    _lower(pair / "q.fa", low)
    rc, out, err = _align(capsys, str(pair / "t.fa"), str(low), "--format", "general")
    assert rc == 0
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("torchhpc: warning:") and str(low) in lines[0]
    assert "soft-masked" in lines[0] and "lowercase" in lines[0] and "uppercase" in lines[0]
    # the upper-case file is not warned about, and does align
    rc, out, err = _align(capsys, str(pair / "t.fa"), str(pair / "q.fa"), "--format", "general")
    assert rc == 0 and err.strip() == "" and len(out.splitlines()) > 1


def test_a_partly_lowercase_fasta_does_not_warn(capsys, pair, tmp_path):
    """Soft-masking some records or repeats is normal: no warning."""
    mixed = tmp_path / "mixed.fa"
    lines = (pair / "q.fa").read_text().splitlines()
    mixed.write_text("\n".join([lines[0], lines[1].lower(), *lines[2:]]) + "\n")
    rc, _, err = _align(capsys, str(pair / "t.fa"), str(mixed), "--format", "general")
    assert rc == 0 and err.strip() == ""


@pytest.mark.parametrize("gapped_by", ["native", "lastz"])
def test_a_utf8_byte_order_mark_is_accepted(capsys, pair, tmp_path, gapped_by):
    """A FASTA saved with a UTF-8 byte-order mark (some Windows editors) aligns like the file without it, also
    when LASTZ does the gapped stage (it is handed a copy without the mark)."""
    if gapped_by == "lastz" and not lastz_available():
        pytest.skip("lastz is not on PATH (apt-get install lastz)")
    t, q = tmp_path / "t.fa", tmp_path / "q.fa"
    for src, dst in ((pair / "t.fa", t), (pair / "q.fa", q)):
        dst.write_bytes(b"\xef\xbb\xbf" + src.read_bytes())
    opts = ["--format", "general", "--gapped-by", gapped_by]
    rc, with_bom, err = _align(capsys, str(t), str(q), *opts)
    assert rc == 0 and err == "", err
    rc, plain, _ = _align(capsys, str(pair / "t.fa"), str(pair / "q.fa"), *opts)
    assert rc == 0 and with_bom == plain and len(plain.splitlines()) > 1


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_a_utf16_fasta_is_one_precise_line(capsys, pair, tmp_path, encoding):
    """A UTF-16 file is named as such (not 'not FASTA'), in one line, exit 1."""
    wide = tmp_path / "wide.fa"
    text = (pair / "q.fa").read_text()
    wide.write_bytes(text.encode(encoding) if encoding == "utf-16" else b"\xfe\xff" + text.encode(encoding))
    rc, out, err = _align(capsys, str(pair / "t.fa"), str(wide))
    assert rc == 1 and out == ""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "UTF-16" in lines[0] and str(wide) in lines[0], err
