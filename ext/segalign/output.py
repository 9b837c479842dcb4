"""Alignments and the writers: MAF (LASTZ ``maf-``), LASTZ ``general`` and the HSP ``segments`` file.

Coordinates follow LASTZ: 0-based half-open in MAF and general (``zstart``/``end``),
1-based closed in segments files; on the minus strand the query coordinates
count along its reverse complement.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TextIO

import numpy as np

from torchhpc.ext.core.errors import InputError

from .fasta import SequenceSet, dna_upper
from .ops import HSPs


@dataclass
class Alignment:
    """One local alignment, in record coordinates.

    ``t_text``/``q_text`` are the aligned rows (``-`` for gaps); ``q_start``/``q_end``
    count along the reverse complement when ``strand == '-'``.
    """

    t_name: str
    t_size: int
    t_start: int
    t_end: int
    q_name: str
    q_size: int
    q_start: int
    q_end: int
    strand: str
    score: int
    t_text: str
    q_text: str

    def identity(self) -> tuple[int, int]:
        """``(matches, columns)`` over the columns where both bases are A, C, G or T (either case; U is T, as
        it was aligned), as LASTZ counts them: gaps and columns with N or another ambiguous base are left out."""
        a, b = dna_upper(self.t_text), dna_upper(self.q_text)
        both = _NUCLEOTIDE[a] & _NUCLEOTIDE[b]
        return int(((a == b) & both).sum()), int(both.sum())


_NUCLEOTIDE = np.zeros(256, dtype=bool)
_NUCLEOTIDE[list(b"ACGT")] = True


def hsps_to_alignments(h: HSPs, target: SequenceSet, query: SequenceSet) -> list[Alignment]:
    """Ungapped HSPs (concatenated coordinates) -> :class:`Alignment` s; ``query`` is the strand's set."""
    if len(h) == 0:
        return []
    tr = target.record_of(h.t_start).tolist()
    qr = query.record_of(h.q_start).tolist()
    ts = (h.t_start - target.starts[tr]).tolist()
    qs = (h.q_start - query.starts[qr]).tolist()
    out = []
    for i, (a, b, x, y, n, s) in enumerate(zip(tr, qr, ts, qs, h.length.tolist(), h.score.tolist(), strict=True)):
        t0 = int(h.t_start[i])
        q0 = int(h.q_start[i])
        out.append(Alignment(target.names[a], int(target.lengths[a]), x, x + n, query.names[b], int(query.lengths[b]),
                             y, y + n, h.strand, int(s), target.letters[t0:t0 + n].tobytes().decode(),
                             query.letters[q0:q0 + n].tobytes().decode()))
    return out


def write_maf(alns: list[Alignment], fh: TextIO) -> None:
    """MAF blocks without header, as LASTZ ``--format=maf-`` (columns padded per block, as LASTZ does)."""
    for a in alns:
        wn = max(len(a.t_name), len(a.q_name))
        ws = max(len(str(a.t_start)), len(str(a.q_start)))
        wl = max(len(str(a.t_end - a.t_start)), len(str(a.q_end - a.q_start)))
        wz = max(len(str(a.t_size)), len(str(a.q_size)))
        fh.write(f"a score={a.score}\n")
        fh.write(f"s {a.t_name:<{wn}} {a.t_start:>{ws}} {a.t_end - a.t_start:>{wl}} + {a.t_size:>{wz}} {a.t_text}\n")
        fh.write(f"s {a.q_name:<{wn}} {a.q_start:>{ws}} {a.q_end - a.q_start:>{wl}} {a.strand} {a.q_size:>{wz}} "
                 f"{a.q_text}\n\n")


def write_maf_file(alns: list[Alignment], fh: TextIO) -> None:
    """MAF with its header line (``--format maf``, as LASTZ's): ``##maf version=1``, which MAF readers
    expect first, then the blocks of :func:`write_maf`."""
    fh.write("##maf version=1 scoring=torchhpc.align\n")
    write_maf(alns, fh)


GENERAL_HEADER = ("#score\tname1\tstrand1\tsize1\tzstart1\tend1\tname2\tstrand2\tsize2\tzstart2\tend2\t"
                  "identity\tidPct\tcoverage\tcovPct\n")


def write_general(alns: list[Alignment], fh: TextIO) -> None:
    """LASTZ ``--format=general`` (its default field list)."""
    fh.write(GENERAL_HEADER)
    for a in alns:
        m, n = a.identity()
        # LASTZ's coverage: the aligned span over the shorter of the two sequences
        short = min(a.t_size, a.q_size)
        cov = (a.q_end - a.q_start) if a.q_size <= a.t_size else (a.t_end - a.t_start)
        fh.write(f"{a.score}\t{a.t_name}\t+\t{a.t_size}\t{a.t_start}\t{a.t_end}\t{a.q_name}\t{a.strand}\t{a.q_size}\t"
                 f"{a.q_start}\t{a.q_end}\t{m}/{n}\t{100.0 * m / max(n, 1):.1f}%\t{cov}/{short}\t"
                 f"{100.0 * cov / max(short, 1):.1f}%\n")


def write_segments(alns: list[Alignment], fh: TextIO, header: bool = True) -> None:
    """LASTZ ``--format=segments`` / ``--segments=`` input: 1-based closed coordinates, one HSP a line."""
    if header:
        fh.write("#name1\tstart1\tend1\tname2\tstart2\tend2\tstrand2\tscore\n")
    for a in alns:
        fh.write(f"{a.t_name}\t{a.t_start + 1}\t{a.t_end}\t{a.q_name}\t{a.q_start + 1}\t{a.q_end}\t{a.strand}\t"
                 f"{a.score}\n")


WRITERS = {"maf": write_maf_file, "maf-": write_maf, "general": write_general, "segments": write_segments}


def _to_stdout(path: str | os.PathLike | None) -> bool:
    return path is None or str(path) in ("", "-")


def check_output(path: str | os.PathLike | None, inputs=()) -> None:
    """Fail before any work when ``path`` cannot be written (``None`` or ``-``: standard output).

    The file itself is not touched: an existing file keeps its contents until the alignments are
    written.

    Raises:
        InputError: ``path`` is one of ``inputs`` (the FASTA files), a folder, its folder does not exist or is a file,
            or it is not writable.
    """
    if _to_stdout(path):
        return
    from torchhpc.ext.core.paths import check_not_an_input

    p = check_not_an_input(path, inputs, what="--output")
    if p.is_dir():
        raise InputError(f"--output {p}: is a folder, not a file")
    if p.exists():
        if not os.access(p, os.W_OK):
            raise InputError(f"--output {p}: not writable (permission denied)")
        return
    parent = p.parent
    if parent.exists() and not parent.is_dir():
        raise InputError(f"--output {p}: {parent} is a file, not a folder")
    if not parent.is_dir():
        raise InputError(f"--output {p}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"--output {p}: cannot create a file in {parent} (permission denied)")


def write_alignments(alns: list[Alignment], fmt: str, path: str | os.PathLike | None = None) -> None:
    """Write ``alns`` in format ``fmt`` (a key of :data:`WRITERS`) to ``path`` (``None`` or ``-``: stdout).

    Raises:
        InputError: an unknown format, or the write failed (a full disk, ``/dev/full``); the
            message names the file and the reason.  A closed pipe (``| head``) is left to the caller.
    """
    if fmt not in WRITERS:
        raise InputError(f"--format must be one of {', '.join(WRITERS)}; got {fmt!r}")
    writer = WRITERS[fmt]
    where = "standard output" if _to_stdout(path) else str(path)
    try:
        if _to_stdout(path):
            writer(alns, sys.stdout)
            sys.stdout.flush()
        else:
            with open(path, "w") as fh:
                writer(alns, fh)
    except BrokenPipeError:
        raise
    except OSError as exc:
        if _to_stdout(path):  # drop what is still buffered, so that the exit's final flush does not fail again
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        raise InputError(f"cannot write the alignments to {where}: {exc.strerror or exc}") from None
