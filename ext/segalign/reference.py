"""Slow, plain-Python versions of each stage, written straight from LASTZ's description (for tests).

* :func:`seed_hits_reference` — every (target, query) window pair whose care bases are
  equal, or differ by one transition.
* :func:`xdrop_extend_reference` — LASTZ's ``xdrop_extend_seed_hit`` loop for one side.
* :func:`extension_score_reference` — the best score of a gapped extension from an
  origin by the full affine-gap DP (no Y-drop): an upper bound the Y-drop DP reaches when
  ``ydrop`` is large enough.
"""

from __future__ import annotations

import numpy as np

from .fasta import SEPARATOR


def seed_hits_reference(t_codes: np.ndarray, q_codes: np.ndarray, pattern: str, transition: bool,
                        step: int = 1) -> set[tuple[int, int]]:
    """``{(t_end, q_end)}`` of all seed hits, by comparing every window pair."""
    L = len(pattern)
    care = [i for i, c in enumerate(pattern) if c == "1"]

    def windows(codes, stride):
        out = {}
        for i in range(0, len(codes) - L + 1, stride):
            w = codes[i:i + L]
            if all(c < 4 for c in w):
                out[i] = tuple(int(w[k]) for k in care)
        return out

    tw, qw = windows(t_codes, step), windows(q_codes, 1)
    hits = set()
    for i, a in tw.items():
        for j, b in qw.items():
            diff = [(x, y) for x, y in zip(a, b, strict=True) if x != y]
            if not diff or (transition and len(diff) == 1 and diff[0][0] ^ 2 == diff[0][1]):
                hits.add((i + L, j + L))
    return hits


def xdrop_extend_reference(t_codes, q_codes, t_first: int, q_first: int, direction: int, table, xdrop: int):
    """One side of LASTZ's gap-free X-drop extension: ``(best, length, scanned)``."""
    run = best = length = n = 0
    i, j = t_first, q_first
    while True:
        tc = t_codes[i] if 0 <= i < len(t_codes) else SEPARATOR
        qc = q_codes[j] if 0 <= j < len(q_codes) else SEPARATOR
        run += int(table[tc][qc])
        n += 1
        if run > best:
            best, length = run, n
        if run < best - xdrop:
            return best, length, n
        i += direction
        j += direction


def extension_score_reference(t: np.ndarray, q: np.ndarray, table, gap_open: int, gap_extend: int) -> int:
    """Best score over all cells of the affine-gap DP anchored at the origin (``t``/``q`` read outwards)."""
    n, m = len(t), len(q)
    neg = -(1 << 40)
    H = np.full((n + 1, m + 1), neg, dtype=np.int64)
    E = np.full((n + 1, m + 1), neg, dtype=np.int64)
    F = np.full((n + 1, m + 1), neg, dtype=np.int64)
    H[0, 0] = 0
    best = 0
    for i in range(n + 1):
        for j in range(m + 1):
            if i == 0 and j == 0:
                continue
            if j > 0:
                E[i, j] = max(H[i, j - 1] - gap_open - gap_extend, E[i, j - 1] - gap_extend)
            if i > 0:
                F[i, j] = max(H[i - 1, j] - gap_open - gap_extend, F[i - 1, j] - gap_extend)
            h = max(E[i, j], F[i, j])
            if i > 0 and j > 0:
                h = max(h, H[i - 1, j - 1] + int(table[t[i - 1]][q[j - 1]]))
            H[i, j] = h
            best = max(best, h)
    return int(best)


def path_score(t_letters: str, q_letters: str, table, gap_open: int, gap_extend: int) -> int:
    """Score of an alignment's two rows (``-`` for gaps) under a 4x4 ACGT table and affine gaps."""
    code = {c: i for i, c in enumerate("ACGT")} | {"U": 3}  # U is read as T
    score = 0
    gap = None
    for a, b in zip(t_letters.upper(), q_letters.upper(), strict=True):
        if a == "-" or b == "-":
            kind = "t" if a == "-" else "q"
            score -= gap_extend + (gap_open if gap != kind else 0)
            gap = kind
        else:
            score += int(table[code.get(a, 0)][code.get(b, 0)])
            gap = None
    return score
