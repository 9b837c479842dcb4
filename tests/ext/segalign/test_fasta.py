"""FASTA reading and the code encoding: records, soft-masking, N/IUPAC, gzip and one-line errors."""

from __future__ import annotations

import gzip

import pytest
import torch

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.segalign.fasta import SEPARATOR, from_strings, parse_fasta, read_fasta


def test_codes_records_and_separators():
    """Upper/lowercase get their codes, records are separated, starts and lengths are right."""
    s = from_strings({"chr1": "ACGTa", "chr2 desc": "cgT"})
    assert s.names == ["chr1", "chr2"]
    assert s.codes.tolist() == [SEPARATOR, 0, 1, 2, 3, 4, SEPARATOR, 5, 6, 3, SEPARATOR]
    assert s.starts.tolist() == [1, 7] and s.lengths.tolist() == [5, 3]
    assert s.record_of(torch.tensor([1, 5, 7, 9])).tolist() == [0, 0, 1, 1]


def test_lastz_style_names():
    """A header like '>gi|123|ref|X|' is named 'gi', as LASTZ names it."""
    assert from_strings({"gi|308183796|ref|NC_014560.1| H. pylori": "ACGT"}).names == ["gi"]


def test_n_is_an_ambiguous_base_scored_minus_100_or_0_with_ambiguous():
    """N is an ambiguous base (not a wall) either way, as LASTZ 1.04 reads it; it scores HOXD70's fill
    score, -100, by default and 0 with --ambiguous n or iupac; the separator stays a wall."""
    from torchhpc.ext.segalign.config import AlignConfig

    assert from_strings({"a": "ANA"}).codes.tolist()[2] == 8
    assert from_strings({"a": "ANA"}, ambiguous="n").codes.tolist()[2] == 8
    assert int(AlignConfig().scoring_scheme().table(910)[8, 0]) == -100
    for amb in ("n", "iupac"):
        t = AlignConfig(ambiguous=amb).scoring_scheme().table(910)
        assert int(t[8, 0]) == int(t[9, 3]) == 0 and int(t[SEPARATOR, 0]) < -9100


def test_reverse_complement_maps_positions():
    """The reverse complement reverses records and complements bases, keeping soft-masking."""
    s = from_strings({"r1": "AACg", "r2": "GT"})
    rc = s.reverse_complement()
    assert rc.names == ["r2", "r1"]
    assert rc.letters.tobytes().decode() == "|AC|cGTT|"
    assert rc.codes.tolist() == [SEPARATOR, 0, 1, SEPARATOR, 5, 2, 3, 3, SEPARATOR]


def test_reverse_complement_of_every_code_equals_complementing_the_letters():
    """Codes of the reverse complement (N, IUPAC, lowercase, CR/tab/space-broken lines) equal the codes
    of the complemented, reversed letters read afresh, and reverse-complementing twice is the identity."""
    text = "ACGTacgtNnRYswKMbdhvACGTTGCAacgtnNtt"
    s = parse_fasta(f">a\r\n{text[:12]}\t\n{text[12:20]} \n>b\n{text[20:]}\n".encode(), ambiguous="iupac")
    rc = s.reverse_complement()
    again = parse_fasta(b">b\n" + bytes(rc.letters[1:1 + 16]) + b"\n>a\n" + bytes(rc.letters[18:-1]) + b"\n",
                        ambiguous="iupac")
    assert rc.names == ["b", "a"] and torch.equal(rc.codes, again.codes)
    assert torch.equal(rc.reverse_complement().codes, s.codes)
    assert bytes(rc.reverse_complement().letters) == bytes(s.letters)


def test_gzip_and_plain_read_alike(tmp_path):
    """A gzipped FASTA reads exactly like the plain file."""
    text = b">x\nACGTACGT\nacgtNN\n>y\nTTTT\n"
    (tmp_path / "a.fa").write_bytes(text)
    (tmp_path / "a.fa.gz").write_bytes(gzip.compress(text))
    a, b = read_fasta(tmp_path / "a.fa"), read_fasta(tmp_path / "a.fa.gz")
    assert a.names == b.names and torch.equal(a.codes, b.codes)


@pytest.mark.parametrize(
    "text, words",
    [
        (b"", ["empty file"]),
        (b"   \n\n", ["empty file"]),
        (b"ACGT\n", ["not FASTA"]),
        (b">a\nACGT\n>b\n\n", ["record 2", "'b'", "no sequence"]),
        (b">a\nACGT\n>b\nACGTXACGT\n", ["record 2", "position 5", "'X'"]),
        (b">a\nAC1T\n", ["record 1", "position 3", "'1'"]),
        (b">p\nMEEPQSDPSVEPPLSQETFSDLWKLLPENNVLSPLPSQAMDDLMLSPDDIEQWFTEDPGP\n", ["protein"]),
        (b">a\nACGTRYACGT\n", ["position 5", "IUPAC", "--ambiguous=iupac"]),
    ],
)
def test_bad_fasta_gives_one_clear_error(text, words):
    """Empty files, protein, invalid characters and unaccepted IUPAC codes raise InputError naming where."""
    with pytest.raises(InputError) as err:
        parse_fasta(text, "in.fa")
    msg = str(err.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, msg


def test_iupac_accepted_with_ambiguous():
    """--ambiguous=iupac accepts R, Y, ... as ambiguous bases."""
    s = parse_fasta(b">a\nACRY\n", ambiguous="iupac")
    assert s.codes.tolist()[3:5] == [9, 9]


def test_missing_and_bad_gzip(tmp_path):
    """A missing file and a corrupt gzip are InputErrors naming the file."""
    with pytest.raises(InputError, match="not found"):
        read_fasta(tmp_path / "nope.fa")
    (tmp_path / "bad.fa.gz").write_bytes(b"\x1f\x8b\x08garbage")
    with pytest.raises(InputError, match="bad.fa.gz"):
        read_fasta(tmp_path / "bad.fa.gz")


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_lf_crlf_and_cr_line_endings_read_alike(eol):
    text = b">chr1 first\nACGTAC\nGGTA\n>chr2\nTTTTGGGG\n".replace(b"\n", eol)
    s = parse_fasta(text)
    assert s.names == ["chr1", "chr2"] and s.lengths.tolist() == [10, 8]
    assert torch.equal(s.codes, parse_fasta(text.replace(eol, b"\n")).codes)


def test_duplicate_names_are_an_error_and_shortened_names_stay_distinct():
    with pytest.raises(InputError, match="records 1 and 3 are both named 'chr1'"):
        parse_fasta(b">chr1 a\nACGT\n>chr2\nACGT\n>chr1 b\nGGCC\n")
    # LASTZ's short name (cut at '|') where it is unique; the whole first word where it is not
    assert parse_fasta(b">gi|1|ref|A\nACGT\n>gi|2|ref|B\nGGCC\n").names == ["gi|1|ref|A", "gi|2|ref|B"]
    assert parse_fasta(b">gi|1|ref|A\nACGT\n>sp|2|ref|B\nGGCC\n").names == ["gi", "sp"]
