"""The walls of the gapped stage: the cells of the alignments found so far, which later extensions may
neither share nor cross (LASTZ's way of giving a repeat its own block).  Kept per query base, so that
the NumPy extension (:mod:`.gapped`) and the compiled one (:mod:`.gapped_kernels`) read the same arrays.
"""

from __future__ import annotations

import numpy as np


class Walls:
    """The cells of the alignments found so far, as target intervals per query base.

    The ``k``-th alignment through query base ``q`` passes the cells ``(t, q)`` with
    ``lo <= t <= hi`` of its interval: its aligned pair, or for a gap the cells ``(last target
    consumed, last query consumed)`` of each column, so the path is a connected chain of cells
    that a later extension cannot cross.  Each base's first interval is ``lo[q, 0]`` / ``hi[q, 0]``
    (``-1``: none; 8 bytes a query base, 16 where the target has 2^31 bases or more: ``n_t``).  A base with more (a repeat stacking alignments on it)
    keeps the rest in row ``row[q]`` of the overflow table ``olo`` / ``ohi`` (``-1`` ends a row);
    ``row`` (4 bytes a query base, ``-1``: none) is made when the first base overflows, and the
    table grows with the stacked bases only.
    """

    PRIMARY = 1

    def __init__(self, n_q: int, n_t: int = 0):
        # target positions in int32 (half the bytes) where every one fits, else int64: a target of 2^31
        # bases or more (a mammalian genome's records end to end) would wrap to "no wall" in int32
        self.dtype = np.dtype(np.int64 if n_t > np.iinfo(np.int32).max else np.int32)
        self.lo = np.full((n_q, self.PRIMARY), -1, dtype=self.dtype)
        self.hi = np.full((n_q, self.PRIMARY), -1, dtype=self.dtype)
        self.row: np.ndarray | None = None
        self.ocount = np.zeros(0, dtype=np.int32)  # intervals used in each overflow row
        self.olo = np.full((0, 2), -1, dtype=self.dtype)
        self.ohi = np.full((0, 2), -1, dtype=self.dtype)
        self.rows = 0  # overflow rows in use

    @classmethod
    def from_cover(cls, cover: np.ndarray) -> Walls:
        """One aligned cell ``(cover[q], q)`` per query base (``-1``: none)."""
        w = cls(cover.size, int(cover.max()) + 1 if cover.size else 0)
        w.lo[:, 0] = w.hi[:, 0] = cover
        return w

    def _rows_of(self, q: np.ndarray) -> np.ndarray:
        """The overflow row of each query base ``q`` (``-1``: none)."""
        return np.full(q.size, -1, dtype=np.int32) if self.row is None else self.row[q]

    def stacked(self, q: np.ndarray) -> np.ndarray:
        """How many intervals (alignments) each query base ``q`` carries."""
        r = self._rows_of(q)
        return (self.lo[q, 0] >= 0).astype(np.int32) + np.where(r >= 0, self.ocount[np.maximum(r, 0)], 0)

    def intervals(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(lo, hi)``, each ``(len(q), K)``: every interval of the query bases ``q`` (``-1``: none)."""
        lo, hi = self.lo[q], self.hi[q]
        if self.rows:
            r = self._rows_of(q)
            has = r >= 0
            olo = np.full((q.size, self.olo.shape[1]), -1, dtype=self.dtype)
            ohi = olo.copy()
            olo[has], ohi[has] = self.olo[r[has]], self.ohi[r[has]]
            lo, hi = np.concatenate([lo, olo], axis=1), np.concatenate([hi, ohi], axis=1)
        return lo, hi

    def on(self, t: int, q: int) -> bool:
        """Whether cell ``(t, q)`` lies on an alignment found before (scalar reads: the committing thread asks
        this of every anchor ahead of it)."""
        lo = int(self.lo[q, 0])
        if lo < 0:  # a base's first interval is filled first: none, no others
            return False
        if lo <= t <= int(self.hi[q, 0]):
            return True
        r = -1 if self.row is None else int(self.row[q])
        if r < 0:
            return False
        k = int(self.ocount[r])
        return bool(((self.olo[r, :k] <= t) & (t <= self.ohi[r, :k])).any())

    @staticmethod
    def cells(tpos: np.ndarray, qpos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The cells of an alignment's columns (``-1``: gap): the last target and query base consumed."""
        ct = np.maximum.accumulate(tpos)
        cq = np.maximum.accumulate(qpos)
        keep = (ct >= 0) & (cq >= 0)
        return ct[keep], cq[keep]

    def add(self, tpos: np.ndarray, qpos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Add an alignment's path (columns, ``-1`` on the gapped side); returns its cells."""
        ct, cq = self.cells(tpos, qpos)
        if not cq.size:
            return ct, cq
        # cq is nondecreasing: one interval per query base, from its first cell to its last
        first = np.flatnonzero(np.r_[True, cq[1:] != cq[:-1]])
        last = np.r_[first[1:] - 1, cq.size - 1]
        uq, lo, hi = cq[first], ct[first], ct[last]
        prim = self.lo[uq, 0] < 0
        self.lo[uq[prim], 0] = lo[prim]
        self.hi[uq[prim], 0] = hi[prim]
        over = ~prim
        if over.any():
            oq = uq[over]  # distinct
            if self.row is None:
                self.row = np.full(self.lo.shape[0], -1, dtype=np.int32)
            new = oq[self.row[oq] < 0]
            if self.rows + new.size > self.olo.shape[0]:
                nrows = max(2 * self.olo.shape[0], self.rows + new.size, 16)
                pad = np.full((nrows - self.olo.shape[0], self.olo.shape[1]), -1, dtype=self.dtype)
                self.olo, self.ohi = np.concatenate([self.olo, pad]), np.concatenate([self.ohi, pad])
                self.ocount = np.concatenate([self.ocount, np.zeros(nrows - self.ocount.size, dtype=np.int32)])
            self.row[new] = np.arange(self.rows, self.rows + new.size, dtype=np.int32)
            self.rows += new.size
            r = self.row[oq]
            oslot = self.ocount[r]
            if oslot.max() >= self.olo.shape[1]:
                pad = np.full((self.olo.shape[0], 2 * (int(oslot.max()) + 1) - self.olo.shape[1]), -1,
                              dtype=self.dtype)
                self.olo, self.ohi = np.concatenate([self.olo, pad], axis=1), np.concatenate([self.ohi, pad], axis=1)
            self.olo[r, oslot] = lo[over]
            self.ohi[r, oslot] = hi[over]
            self.ocount[r] += 1
        return ct, cq


__all__ = ["Walls"]
