"""Substitution scores: HOXD70 (LASTZ's default) or a LASTZ scoring file, as an 11x11 code table.

The table is indexed by the codes of :mod:`torchhpc.ext.segalign.fasta`: uppercase
and lowercase bases score alike (soft-masking only removes seeds, as in LASTZ),
ambiguous bases (N; the other IUPAC codes with ``--ambiguous=iupac``) score the ``fill``
value (-100; 0 with ``--ambiguous``), and the record separator scores ``-10 * xdrop`` against
everything so that no extension crosses it (SegAlign's choice).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from torchhpc.ext.core.errors import InputError

from .fasta import IUPAC_CODE, N_CODE, NUM_CODES, SEPARATOR

#: HOXD70 (Chiaromonte, Yap and Miller 2002), rows/columns A, C, G, T
HOXD70 = [
    [91, -114, -31, -123],
    [-114, 100, -125, -31],
    [-31, -125, 100, -114],
    [-123, -31, -114, 91],
]


@dataclass
class Scoring:
    """A nucleotide scoring scheme.

    Attributes:
        matrix: 4x4 substitution scores for A, C, G, T.
        gap_open: penalty of opening a gap (LASTZ ``gap_open_penalty``, 400).
        gap_extend: penalty per gap base (LASTZ ``gap_extend_penalty``, 30); a gap
            of length k costs ``gap_open + k * gap_extend``.
        ambiguous_score: score of an ambiguous base against anything.
    """

    matrix: list[list[int]]
    gap_open: int = 400
    gap_extend: int = 30
    ambiguous_score: int = -100

    def table(self, xdrop: int, device="cpu"):
        """``(11, 11)`` int32 score of code pairs (see the module docstring), a tensor on ``device``; with
        ``device=None``, a NumPy array (the CPU path without torch)."""
        t = np.full((NUM_CODES, NUM_CODES), self.ambiguous_score, dtype=np.int32)
        m = np.array(self.matrix, dtype=np.int32)
        for a in (0, 4):
            for b in (0, 4):
                t[a:a + 4, b:b + 4] = m
        wall = -10 * max(int(xdrop), 1) - 1000
        t[N_CODE, :] = t[:, N_CODE] = self.ambiguous_score
        t[IUPAC_CODE, :] = t[:, IUPAC_CODE] = self.ambiguous_score
        t[SEPARATOR, :] = wall
        t[:, SEPARATOR] = wall
        if device is None:
            return t
        import torch

        return torch.from_numpy(t).to(device)

    @property
    def match_max(self) -> int:
        return max(max(r) for r in self.matrix)


#: the largest score or penalty magnitude a scoring file may give (HOXD70's are below 500; the DP sums
#: scores in 32 bits)
MAX_SCORE = 100_000


def hoxd70() -> Scoring:
    """LASTZ's default scoring: HOXD70, gap open 400, gap extend 30."""
    return Scoring([row[:] for row in HOXD70])


def read_scoring_file(path: str | Path) -> Scoring:
    """Read a LASTZ scoring file: ``key = value`` settings and an ``A C G T`` matrix.

    Recognised settings: ``gap_open_penalty``, ``gap_extend_penalty``; other settings
    (``bad_score``, ``fill_score``, ...) are accepted; ``fill_score`` sets the ambiguous score.

    Raises:
        InputError: a missing or binary file, a matrix that is not 4x4 over A, C, G, T, a non-integer
            score or setting among those above, a score beyond +-:data:`MAX_SCORE` or a negative gap
            penalty (naming the file and line).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: scoring file not found")
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file (a LASTZ scoring file is 'key = value' lines and an "
                         "A C G T matrix)") from None
    sc = hoxd70()
    header: list[str] | None = None
    rows: dict[str, list[int]] = {}

    def score(val: str, ln: int, what: str) -> int:
        try:
            v = int(val)
        except ValueError:
            raise InputError(f"{path}:{ln}: {what} must be an integer, got {val!r}") from None
        if abs(v) > MAX_SCORE:
            raise InputError(f"{path}:{ln}: {what} {v} is beyond +-{MAX_SCORE} (scores are 32-bit sums)")
        return v

    for ln, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if "=" in line:
            key, _, val = (s.strip() for s in line.partition("="))
            if key not in ("gap_open_penalty", "gap_extend_penalty", "fill_score"):
                continue  # LASTZ's other settings (bad_score = X:-1000, ...) are not ours to read
            v = score(val, ln, key)
            if key != "fill_score" and v < 0:
                raise InputError(f"{path}:{ln}: {key} must be >= 0 (a penalty, subtracted), got {v}")
            if key == "gap_open_penalty":
                sc.gap_open = v
            elif key == "gap_extend_penalty":
                sc.gap_extend = v
            elif key == "fill_score":
                sc.ambiguous_score = v
            continue
        parts = line.split()
        if header is None:
            header = [p.upper() for p in parts]
            if sorted(header) != ["A", "C", "G", "T"]:
                raise InputError(f"{path}:{ln}: the matrix header must name A C G T, got {line!r}")
            continue
        if len(parts) != 5 or parts[0].upper() not in header:
            raise InputError(f"{path}:{ln}: expected a matrix row 'X s s s s', got {line!r}")
        rows[parts[0].upper()] = [score(p, ln, "a matrix score") for p in parts[1:]]
    if header is None or sorted(rows) != ["A", "C", "G", "T"]:
        raise InputError(f"{path}: no complete A C G T substitution matrix found")
    order = [header.index(b) for b in "ACGT"]
    sc.matrix = [[rows[a][j] for j in order] for a in "ACGT"]
    return sc
