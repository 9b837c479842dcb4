"""An alpha-beta-gamma cost model of one SymNMF iteration on the 1D and 2D grids (the paper's Sec. 5).

Per iteration and per process, for dense ``A`` (``n x n``), rank ``k`` and ``p`` processes::

    A @ H, 1D (p x 1):   all-gather of H over p ranks        words (p-1)/p * n k,         msgs log2 p
    A @ H, 2D (pr x pc): all-gather of H[C_j] over pr ranks  words (pr-1)/pr * n k / pc
                         reduce-scatter over pc ranks        words (pc-1)/pc * n k / pr
                         owner swap (pr = pc)                words n k / p                msgs 1
                         local product                       flops 2 n^2 k / p
    H^T H:               local k x k, all-reduce             flops 2 n k^2 / p,  words 2 k^2, msgs 2 log2 p
    ANLS:                2 x (A @ H + H^T H) + 2 NNLS over n/p rows, ~ c_bpp k^3 flops per row
    Gauss-Newton:        1 A @ H + ``cg`` CG steps (each one H^T X all-reduce and 2 scalar all-reduces,
                         4 n k^2 / p flops) + ``ls`` line-search trials of A @ H + H^T H

with time ``gamma * flops + beta * words + alpha * messages`` (collectives as in Chan et al. 2007:
bandwidth-optimal all-gather / reduce-scatter, all-reduce = reduce-scatter + all-gather).  The
model counts what :class:`~torchhpc.ext.symnmf.distributed.GridSimilarity` sends, not what gloo
happens to do (gloo all-reduces where a reduce-scatter would do).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass
class Machine:
    """Machine parameters: seconds per flop, per 8-byte word, per message."""

    gamma: float = 1.0 / 20e9     # one core of a recent CPU on GEMM, ~20 GFLOP/s
    beta: float = 8.0 / 10e9      # 10 GB/s per process
    alpha: float = 2e-6           # 2 us latency


@dataclass
class Cost:
    flops: float
    words: float
    messages: float

    def time(self, m: Machine) -> float:
        return m.gamma * self.flops + m.beta * self.words + m.alpha * self.messages

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.flops + other.flops, self.words + other.words, self.messages + other.messages)

    def scale(self, c: float) -> Cost:
        return Cost(c * self.flops, c * self.words, c * self.messages)


def _log2(p: int) -> float:
    return math.log2(p) if p > 1 else 0.0


def grid_for(p: int, grid: str) -> tuple[int, int]:
    """``(pr, pc)``: ``p x 1`` for 1D; the most square grid for 2D."""
    if grid == "1d":
        return p, 1
    pr = max(d for d in range(1, math.isqrt(p) + 1) if p % d == 0)
    return pr, p // pr


def matmul_cost(n: int, k: int, p: int, grid: str, nnz: float | None = None) -> Cost:
    """``A @ H`` on a ``grid`` of ``p`` ranks (``nnz``: sparse A with that many nonzeros)."""
    pr, pc = grid_for(p, grid)
    flops = 2.0 * (nnz if nnz is not None else float(n) * n) * k / p
    words = (pr - 1) / pr * n * k / pc + (pc - 1) / pc * n * k / pr
    msgs = _log2(pr) + _log2(pc)
    if pr > 1 and pc > 1:
        words += n * k / p
        msgs += 1
    return Cost(flops, words, msgs)


def gram_cost(n: int, k: int, p: int) -> Cost:
    return Cost(2.0 * n * k * k / p, 2.0 * k * k * (p - 1) / p, 2 * _log2(p))


def iteration_cost(algo: str, n: int, k: int, p: int, grid: str, *, nnz: float | None = None, cg: int = 20,
                   line_search: int = 1, c_bpp: float = 4.0) -> Cost:
    """Modelled cost of one iteration of ``algo`` (``anls`` or ``gn``) per process."""
    mm = matmul_cost(n, k, p, grid, nnz)
    gr = gram_cost(n, k, p)
    if algo == "anls":
        nnls = Cost(c_bpp * k ** 3 * n / p, 0.0, 0.0)
        return (mm + gr + nnls).scale(2.0)
    if algo == "gn":
        cg_step = Cost(4.0 * n * k * k / p, 2.0 * k * k * (p - 1) / p + 2.0, 3 * 2 * _log2(p))
        return mm + gr + cg_step.scale(cg) + (mm + gr).scale(line_search)
    raise ValueError(f"cost model knows anls and gn, not {algo!r}")


def strong_scaling(algo: str, n: int, k: int, ps: list[int], grid: str, machine: Machine | None = None,
                   **kw) -> list[dict]:
    """Modelled time per iteration and parallel efficiency ``T(1) / (p T(p))`` for each ``p``."""
    m = machine or Machine()
    t1 = iteration_cost(algo, n, k, 1, grid, **kw).time(m)
    rows = []
    for p in ps:
        c = iteration_cost(algo, n, k, p, grid, **kw)
        t = c.time(m)
        rows.append({"p": p, "grid": list(grid_for(p, grid)), "time_s": t, "efficiency": t1 / (p * t),
                     "words": c.words, "messages": c.messages, "flops": c.flops,
                     "comm_fraction": (m.beta * c.words + m.alpha * c.messages) / t})
    return rows


def machine_dict(m: Machine) -> dict:
    return asdict(m)
