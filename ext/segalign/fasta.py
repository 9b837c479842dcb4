"""FASTA input and the 2-bit-plus-flags tensor encoding every stage works on.

Each base becomes one ``uint8`` code::

    code   0  1  2  3 | 4  5  6  7 | 8 | 9           | 10
    base   A  C  G  T | a  c  g  t | N | other IUPAC | record separator   (U, u read as T, t)

so ``code & 3`` is the 2-bit nucleotide for codes 0-7, ``code ^ 2`` is its
transition partner (A<->G, C<->T) and ``3 - code`` its complement.  Lowercase
(soft-masked) bases never start a seed but extensions may run through them, as
in LASTZ.  Records are concatenated with one separator code between them (and
one at each end), which every extension treats as a wall::

    records   >chr1 ACGTN   >chr2 gcA
    codes     10 0 1 2 3 8 10 5 1 0 10
    starts       1            7          (offset of each record's first base)

N never seeds; an extension runs through it at the scoring's fill score (-100 with HOXD70), as
LASTZ 1.04 does, so a lone N in an assembly does not split an alignment and a long run of them ends it
(the X- and Y-drops).  ``--ambiguous=n`` scores N 0, and ``--ambiguous=iupac`` also accepts the other
IUPAC codes (which LASTZ otherwise rejects) and scores them 0 too, as LASTZ does.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from torchhpc.ext.core.errors import InputError

from .torch_numba import host, is_tensor

if TYPE_CHECKING:
    import torch

SEPARATOR = 10
N_CODE = 8
IUPAC_CODE = 9
NUM_CODES = 11

# letters that can only be amino acids (not in the IUPAC nucleotide alphabet)
_PROTEIN_ONLY = set(b"EFILPQZJOXefilpqzjox")

_LUT = np.full(256, 255, dtype=np.uint8)
for _i, _c in enumerate(b"ACGT"):
    _LUT[_c] = _i
    _LUT[_c + 32] = _i + 4
_LUT[ord("U")], _LUT[ord("u")] = 3, 7
_LUT[ord("N")] = _LUT[ord("n")] = N_CODE
for _c in b"RYSWKMBDHV":
    _LUT[_c] = _LUT[_c + 32] = IUPAC_CODE

_DECODE = np.frombuffer(b"ACGTacgtNN|", dtype=np.uint8)


@dataclass
class SequenceSet:
    """The records of one FASTA file as one code tensor (or NumPy array: :meth:`as_arrays`).

    Attributes:
        names: record names (the header up to the first blank).
        codes: ``(total,)`` uint8 codes, separators around every record.
        starts: ``(R,)`` int64 offset of each record's first base in ``codes``.
        lengths: ``(R,)`` int64 record lengths.
        letters: ``(total,)`` uint8 original letters (for output; IUPAC letters kept).
        path: the file it came from.
    """

    names: list[str]
    codes: torch.Tensor
    starts: torch.Tensor
    lengths: torch.Tensor
    letters: np.ndarray
    path: str = "<memory>"
    meta: dict = field(default_factory=dict)

    @property
    def total_bases(self) -> int:
        return int(self.lengths.sum())

    def record_of(self, pos):
        """Record index of each concatenated position ``(M,)`` (a tensor, or an array for an array set)."""
        if is_tensor(self.starts):
            import torch

            return torch.searchsorted(self.starts, pos, right=True) - 1
        return np.searchsorted(self.starts, pos, side="right") - 1

    def as_arrays(self) -> SequenceSet:
        """The set with NumPy arrays for codes, starts and lengths (sharing the memory of CPU tensors): the
        form the CPU path without torch runs on."""
        return SequenceSet(self.names, host(self.codes), host(self.starts), host(self.lengths), self.letters,
                           self.path, dict(self.meta))

    def as_tensors(self) -> SequenceSet:
        """The set with CPU tensors for codes, starts and lengths (sharing the arrays' memory)."""
        import torch

        return SequenceSet(self.names, torch.as_tensor(self.codes), torch.as_tensor(self.starts),
                           torch.as_tensor(self.lengths), self.letters, self.path, dict(self.meta))

    def reverse_complement(self) -> SequenceSet:
        """The whole set reverse-complemented: record r of the result is record R-1-r reversed.

        Positions map as ``p -> len(codes) - 1 - p``; inside a record, a minus-strand
        offset ``x`` (LASTZ's reverse-complement coordinates) is ``length - 1 - x`` on plus.
        """
        # one table look-up per base (no temporaries the size of the genome)
        comp = _COMP_CODE[host(self.codes)[::-1]]
        letters = _complement_letters(self.letters[::-1])
        starts = len(comp) - (self.starts + self.lengths)
        if is_tensor(self.codes):
            import torch

            comp = torch.from_numpy(comp).to(self.codes.device)
            starts, lengths = starts.flip(0), self.lengths.flip(0)
        else:
            starts, lengths = starts[::-1].copy(), self.lengths[::-1].copy()
        return SequenceSet(self.names[::-1], comp, starts, lengths, letters, self.path, dict(self.meta, reversed=True))


_COMP_CODE = np.arange(256, dtype=np.uint8)  # code -> its complement's (case kept; N, IUPAC, separator as they are)
_COMP_CODE[:8] = [(c & 4) | (3 - (c & 3)) for c in range(8)]

_COMP = np.arange(256, dtype=np.uint8)
for _a, _b in zip(b"ACGTUacgtuRYKMBVDHrykmbvdh", b"TGCAAtgcaaYRMKVBHDyrmkvbhd", strict=True):
    _COMP[_a] = _b


def _complement_letters(letters: np.ndarray) -> np.ndarray:
    return _COMP[letters]


def _open_text(path: Path) -> bytes:
    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
        if head == b"\x1f\x8b":
            with gzip.open(path, "rb") as fh:
                return fh.read()
        return path.read_bytes()
    except gzip.BadGzipFile as exc:
        raise InputError(f"{path}: not a valid gzip file ({exc})") from exc
    except EOFError as exc:
        raise InputError(f"{path}: truncated gzip file") from exc


def parse_fasta(data: bytes, path: str = "<memory>", ambiguous: str | None = None, *,
                arrays: bool = False) -> SequenceSet:
    """Parse FASTA bytes into a :class:`SequenceSet`.

    Args:
        data: the file's bytes (already un-gzipped).
        path: name used in error messages.
        ambiguous: ``None`` (N is a wall, other IUPAC codes are an error, as LASTZ),
            ``"n"`` (N is an ambiguous base) or ``"iupac"`` (all IUPAC codes are).
        arrays: keep codes, starts and lengths as NumPy arrays (:meth:`SequenceSet.as_arrays`), not tensors.

    Raises:
        InputError: an empty file, text before the first header, an empty record,
            a protein sequence or an invalid character (naming record and position), UTF-16 text.

    A UTF-8 byte-order mark is skipped.  ``meta["all_soft_masked"]`` is true when no base is uppercase.
    """
    if ambiguous not in (None, "n", "iupac"):
        raise InputError(f"--ambiguous must be n or iupac, got {ambiguous!r}")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError(f"{path}: UTF-16 encoded text; FASTA must be ASCII or UTF-8 (save it as such, e.g. "
                         f"iconv -f UTF-16 -t ASCII)")
    data = data.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark (some editors write one)
    if not data.strip():
        raise InputError(f"{path}: empty file (expected FASTA: '>name' then sequence lines)")
    if not data.lstrip().startswith(b">"):
        raise InputError(f"{path}: not FASTA (the first non-blank character must be '>')")
    if b"\r" in data:  # CRLF (Windows) or CR-only (classic Mac) line endings
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    chunks = data.lstrip().split(b"\n>")
    names: list[str] = []
    words: list[str] = []
    seqs: list[np.ndarray] = []
    for n, chunk in enumerate(chunks, start=1):
        header, _, body = chunk.partition(b"\n")
        header = header.lstrip(b">").strip()
        # LASTZ's short name: the first word, cut at the first '|' (">gi|3081|ref|..." -> "gi")
        word = header.split()[0].decode("utf-8", "replace") if header.split() else ""
        name = word.split("|")[0] or word or f"record{n}"
        seq = np.frombuffer(body.translate(None, b"\r\n \t"), dtype=np.uint8)  # one copy without line breaks
        del body
        if seq.size == 0:
            raise InputError(f"{path}: record {n} ({name!r}) has no sequence")
        codes = _LUT[seq]
        bad = np.flatnonzero(codes == 255)
        if bad.size:
            letters = set(seq[bad].tolist())
            # two or more amino-acid-only letters making up a visible share: a protein, not a typo
            if len(letters & _PROTEIN_ONLY) >= 2 and np.isin(seq, list(_PROTEIN_ONLY)).mean() > 0.05:
                raise InputError(f"{path}: record {n} ({name!r}) looks like a protein sequence "
                                 f"(letters {''.join(sorted(chr(c) for c in letters))}); segalign aligns DNA")
            p = int(bad[0])
            raise InputError(f"{path}: record {n} ({name!r}) position {p + 1}: invalid character "
                             f"{chr(seq[p])!r} (expected A, C, G, T, U, N or an IUPAC code)")
        iupac = np.flatnonzero(codes == IUPAC_CODE)
        if iupac.size and ambiguous != "iupac":
            p = int(iupac[0])
            raise InputError(f"{path}: record {n} ({name!r}) position {p + 1}: ambiguous IUPAC code "
                             f"{chr(seq[p])!r} (use --ambiguous=iupac to accept B,D,H,K,M,R,S,V,W,Y)")
        names.append(name)
        words.append(word)
        seqs.append((seq, codes))
    names = _distinct_names(names, words, path)
    out = _assemble(names, seqs, path, ambiguous)
    # LASTZ starts no seed in lowercase (soft-masked) bases: a file without one uppercase base aligns to nothing
    out.meta["all_soft_masked"] = not any(bool(_UPPER[s].any()) for s, _ in seqs)
    return out if arrays else out.as_tensors()


def _distinct_names(names: list[str], words: list[str], path: str) -> list[str]:
    """Record names as LASTZ shortens them, unless that makes two alike: then those records keep their
    whole first word (">gi|383749063|ref|..." stays itself when another record is also "gi|...").
    Two records whose whole first words are equal are an error: their alignments could not be told
    apart in the output."""
    first: dict[str, int] = {}
    for n, word in enumerate(words, start=1):
        if word and word in first:
            raise InputError(f"{path}: records {first[word]} and {n} are both named {word!r}; give each record "
                             "a distinct name (the first word of its header)")
        first.setdefault(word, n)
    seen: dict[str, int] = {}
    for name in names:
        seen[name] = seen.get(name, 0) + 1
    if all(c == 1 for c in seen.values()):
        return names
    return [word if seen[name] > 1 and word else name for name, word in zip(names, words, strict=True)]


_UPPER = np.zeros(256, dtype=bool)
_UPPER[65:91] = True


def _assemble(names, seqs, path, ambiguous) -> SequenceSet:
    lengths = np.array([s.size for s, _ in seqs], dtype=np.int64)
    total = int(lengths.sum()) + len(seqs) + 1
    codes = np.full(total, SEPARATOR, dtype=np.uint8)
    letters = np.full(total, ord("|"), dtype=np.uint8)
    starts = np.zeros(len(seqs), dtype=np.int64)
    off = 1
    for r, (s, c) in enumerate(seqs):
        starts[r] = off
        codes[off:off + s.size] = c
        letters[off:off + s.size] = s
        off += s.size + 1
    return SequenceSet(names, codes, starts, lengths, letters, path, {"ambiguous": ambiguous})


def read_fasta(path: str | Path, ambiguous: str | None = None, *, arrays: bool = False) -> SequenceSet:
    """Read a FASTA or gzipped FASTA file (many records) into a :class:`SequenceSet` (of NumPy arrays
    with ``arrays``; see :func:`parse_fasta`).

    Raises:
        InputError: a missing file or any problem :func:`parse_fasta` reports.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: FASTA file not found")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a FASTA file")
    return parse_fasta(_open_text(path), str(path), ambiguous, arrays=arrays)


def from_strings(records: dict[str, str] | list[tuple[str, str]], ambiguous: str | None = None) -> SequenceSet:
    """Build a :class:`SequenceSet` from ``{name: sequence}`` (tests, the simulator)."""
    items = records.items() if isinstance(records, dict) else records
    text = "".join(f">{k}\n{v}\n" for k, v in items).encode()
    return parse_fasta(text, "<memory>", ambiguous)


_DNA_UPPER = np.arange(256, dtype=np.uint8)
_DNA_UPPER[np.arange(ord("a"), ord("z") + 1)] -= 32
_DNA_UPPER[[ord("U"), ord("u")]] = ord("T")


def dna_upper(text: str) -> np.ndarray:
    """An alignment row's letters as uppercase bytes with U read as T (as the aligner reads them), for
    comparing two rows: ``u``/``U`` against ``T`` is a match, as it scored."""
    return _DNA_UPPER[np.frombuffer(text.encode(), dtype=np.uint8)]


def decode(letters: np.ndarray) -> str:
    return letters.tobytes().decode("ascii")


def write_fasta(path: str | Path, records: dict[str, str], width: int = 70) -> None:
    """Write ``{name: sequence}`` as FASTA with ``width``-column lines."""
    with open(path, "w") as fh:
        for name, seq in records.items():
            fh.write(f">{name}\n")
            for i in range(0, len(seq), width):
                fh.write(seq[i:i + width] + "\n")
