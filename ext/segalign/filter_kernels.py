"""Compiled CPU kernels of the ungapped X-drop filter (numba), beside the torch twin of :mod:`.ops`.

On a GPU the X-drop filter is the Triton kernel; on the CPU the vectorised torch twin
pays a dozen full tensor passes per tile of cells, several times LASTZ's cost per cell.
These kernels do the same arithmetic one cell at a time in machine code:

* :func:`xdrop_extend_numba` — the op of :func:`.ops.xdrop_extend` (one direction,
  many diagonals), result-identical to :func:`.ops.xdrop_extend_torch`;
* :func:`ungapped_scan_numba` / :func:`ungapped_scan_hits` — the diagonal bookkeeping of
  :func:`.ops.ungapped_hsps` in one pass: hits are visited in query order, a hit whose word
  ends inside the part of its diagonal that an earlier extension scanned is skipped (LASTZ's
  diagonal table), every other hit is extended both ways.  It extends exactly the hits the
  torch path extends in its rounds (per diagonal, the leftmost hit not yet scanned);
* :func:`seed_scan_numba` — seeding and that scan fused (``AlignConfig.fused``): the query's
  keys and their transition variants are looked up in the target's counting-sort table
  (:mod:`.index_kernels`) inside the kernel, so no tensors of look-ups or hits are built.

Threads split the diagonals (``diagonal % threads``), so no two threads touch the same
diagonal and results do not depend on the thread count; ``threads=1`` runs a kernel with
no parallel region, for callers that run several query intervals side by side.  numba is
optional (``pip install torchhpc[align]``); :func:`torchhpc.ext.core.dispatch.numba_available` tells.
"""

from __future__ import annotations

import numpy as np

from torchhpc.ext.core.dispatch import numba_available
from torchhpc.ext.core.lazy import lazy_module

from .torch_numba import KERNELS, as_array, cpu_threads, host, keep_torch_threads, like, numba_threads

torch = lazy_module("torch")  # the tensor entry points only: the fused pass runs on arrays without it

if numba_available():  # pragma: no cover - exercised where numba is installed (make setup installs it)
    from torchhpc.ext.core.compiled import prange  # noqa: F401 - numba's, once the kernels are JIT-compiled

    kernel = KERNELS.kernel


DENSE_BYTES_PER_HIT = 64
"""Above this many bytes of diagonal table per hit, the scan hashes diagonals instead."""


if numba_available():

    @kernel(nogil=True, cache=True, inline="always")
    def _extend(t, q, ti, qi, step, table, xdrop):
        # running score; best = highest running score reached (>= 0); stop at the first cell
        # that falls more than xdrop below it.  The separator scores a wall, so a walk never
        # leaves its record (both arrays start and end with one).
        run = 0
        best = 0
        length = 0
        k = 0
        while True:
            run += table[t[ti] * 11 + q[qi]]
            k += 1
            # branch-free (selects): a new best is as likely as not inside a seed word
            up = run > best
            best = run if up else best
            length = k if up else length
            if run < best - xdrop:
                return best, length, k
            ti += step
            qi += step

    @kernel(nogil=True, cache=True, parallel=True)
    def _extend_many(t, q, t_first, q_first, step, table, xdrop, best, length, scanned):
        for i in prange(t_first.shape[0]):
            b, ln, sc = _extend(t, q, t_first[i], q_first[i], step, table, xdrop)
            best[i] = b
            length[i] = ln
            scanned[i] = sc

    _EMPTY = -(1 << 62)
    _GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15 as a signed 64-bit integer

    @kernel(nogil=True, cache=True, parallel=True)
    def _scan(t, q, ends, lo, cnt, first, qend, table, xdrop, thresh, parts, dense, d_min,
              ts, qs, ln, sc, keep, n_ext):
        for p in prange(parts):
            _scan_part(p, t, q, ends, lo, cnt, first, qend, table, xdrop, thresh, parts, dense, d_min,
                       ts, qs, ln, sc, keep, n_ext)

    @kernel(nogil=True, cache=True)
    def _scan_serial(t, q, ends, lo, cnt, first, qend, table, xdrop, thresh, parts, dense, d_min,
                     ts, qs, ln, sc, keep, n_ext):
        # one thread, no parallel region: safe to call from several Python threads at once
        _scan_part(0, t, q, ends, lo, cnt, first, qend, table, xdrop, thresh, 1, dense, d_min,
                   ts, qs, ln, sc, keep, n_ext)

    @kernel(nogil=True, cache=True)
    def _scan_part(p, t, q, ends, lo, cnt, first, qend, table, xdrop, thresh, parts, dense, d_min,
                   ts, qs, ln, sc, keep, n_ext):
        if True:
            # this thread's diagonals: d % parts == p.  Their scanned stretches live in `dense`
            # (indexed by d - d_min, shared: the threads' diagonals are disjoint) when the batch's
            # diagonal range is small, else in a table of this thread's own, sized to its hits.
            hashed = dense.shape[0] == 0
            bits = 1
            if hashed:
                mine = 0
                for l in range(lo.shape[0]):
                    for j in range(lo[l], lo[l] + cnt[l]):
                        if (ends[j] - qend[l]) % parts == p:
                            mine += 1
                bits = 4
                while (1 << bits) < 2 * mine:
                    bits += 1
            mask = (1 << bits) - 1
            slots = np.full((mask + 1 if hashed else 1, 2), _EMPTY, dtype=np.int64)  # (diagonal, reach)
            count = 0
            for l in range(lo.shape[0]):
                qe = qend[l]
                for j in range(cnt[l]):
                    te = ends[lo[l] + j]
                    d = te - qe
                    if d % parts != p:
                        continue
                    if hashed:
                        i = ((d * _GOLDEN) >> (64 - bits)) & mask
                        while slots[i, 0] != d and slots[i, 0] != _EMPTY:
                            i = (i + 1) & mask
                        if slots[i, 0] == d and qe <= slots[i, 1]:
                            continue
                    elif qe <= dense[d - d_min]:
                        continue  # the word ends inside a stretch an earlier extension scanned
                    lb, ll, _ = _extend(t, q, te - 1, qe - 1, -1, table, xdrop)
                    rb, rl, rs = _extend(t, q, te, qe, 1, table, xdrop)
                    if hashed:
                        slots[i, 0] = d
                        slots[i, 1] = qe + rs
                    else:
                        dense[d - d_min] = qe + rs
                    count += 1
                    # LASTZ's entropy factor only lowers a score, so below thresh is final
                    if lb + rb >= thresh:
                        g = first[l] + j
                        ts[g] = te - ll
                        qs[g] = qe - ll
                        ln[g] = ll + rl
                        sc[g] = lb + rb
                        keep[g] = True
            n_ext[p] = count

    @kernel(nogil=True, cache=True)
    def _probe(hkey, d, bits):
        mask = (1 << bits) - 1
        i = ((d * _GOLDEN) >> (64 - bits)) & mask
        while hkey[i] != d and hkey[i] != _EMPTY:
            i = (i + 1) & mask
        return i

    @kernel(nogil=True, cache=True, parallel=True)
    def _seed_scan(t, q, qkeys, start, length, n_var, present, offsets, ends, table, xdrop, thresh,
                   max_hits, parts, dense_n, d_min, cap, out, n_out, n_ext, n_hits):
        for p in prange(parts):
            _seed_scan_part(p, t, q, qkeys, start, length, n_var, present, offsets, ends, table, xdrop, thresh,
                            max_hits, parts, dense_n, d_min, cap, out, n_out, n_ext, n_hits)

    @kernel(nogil=True, cache=True, aot=["u1[::1], u1[::1], i8[::1], i8, i8, i8, b1[::1], i4[::1], i4[::1], i8[::1], "
                                         "i8, i8, i8, i8, i8, i8, i8, i8[:, :, ::1], i8[::1], i8[::1], i8[::1]"])
    def _seed_scan_serial(t, q, qkeys, start, length, n_var, present, offsets, ends, table, xdrop, thresh,
                          max_hits, parts, dense_n, d_min, cap, out, n_out, n_ext, n_hits):
        # one thread, no parallel region: safe to call from several Python threads at once
        _seed_scan_part(0, t, q, qkeys, start, length, n_var, present, offsets, ends, table, xdrop, thresh,
                        max_hits, 1, dense_n, d_min, cap, out, n_out, n_ext, n_hits)

    PENDING_HITS = 2048
    """Hits the fused scan collects before extending them (see :func:`_drain`)."""

    @kernel(nogil=True, cache=True)
    def _drain(h, ht, hq, t, q, table, xdrop, thresh, dense, d_min, hkey, hval, bits, used, cap, out, p,
               stored, count, sink):
        """Extend the pending hits ``ht[:h], hq[:h]`` in order (LASTZ's diagonal rule, as below).

        First a pass of independent loads brings each hit's diagonal slot and target bytes into
        cache; the CPU overlaps those misses.  Inside the dependent pass (extension, then the
        diagonal's update) the same misses would come one at a time: this halves the filter's time.
        """
        hashed = dense.shape[0] == 0
        mask = (1 << bits) - 1
        last = t.shape[0] - 1
        warm = 0
        for i in range(h):
            te = ht[i]
            d = te - hq[i]
            if hashed:
                warm += hkey[((d * _GOLDEN) >> (64 - bits)) & mask]
            else:
                warm += dense[d - d_min]
            warm += t[max(te - 48, 0)] + t[te - 1] + t[min(te + 24, last)]
        sink[0] += warm
        for i in range(h):
            te = ht[i]
            qe = hq[i]
            d = te - qe
            if hashed:
                s = _probe(hkey, d, bits)
                if hkey[s] == d and qe <= hval[s]:
                    continue
            elif qe <= dense[d - d_min]:
                continue  # the word ends inside a stretch an earlier extension scanned
            lb, ll, _ = _extend(t, q, te - 1, qe - 1, -1, table, xdrop)
            rb, rl, rs = _extend(t, q, te, qe, 1, table, xdrop)
            count += 1
            if hashed:
                if hkey[s] != d:
                    used += 1
                    if 2 * used > (1 << bits):  # grow: re-insert the live diagonals
                        old_k, old_v = hkey, hval
                        bits += 1
                        hkey = np.full(1 << bits, _EMPTY, dtype=np.int64)
                        hval = np.zeros(1 << bits, dtype=np.int64)
                        for s_ in range(old_k.shape[0]):
                            if old_k[s_] != _EMPTY:
                                k2 = _probe(hkey, old_k[s_], bits)
                                hkey[k2] = old_k[s_]
                                hval[k2] = old_v[s_]
                        s = _probe(hkey, d, bits)
                hkey[s] = d
                hval[s] = qe + rs
            else:
                dense[d - d_min] = qe + rs
            # LASTZ's entropy factor only lowers a score, so below thresh is final
            if lb + rb >= thresh:
                if stored < cap:
                    out[p, stored, 0] = te - ll
                    out[p, stored, 1] = qe - ll
                    out[p, stored, 2] = ll + rl
                    out[p, stored, 3] = lb + rb
                stored += 1
        return hkey, hval, bits, used, stored, count

    @kernel(nogil=True, cache=True)
    def _seed_scan_part(p, t, q, qkeys, start, length, n_var, present, offsets, ends, table, xdrop, thresh,
                        max_hits, parts, dense_n, d_min, cap, out, n_out, n_ext, n_hits):
        if True:
            # LASTZ's loop: query windows in order, each window's key and its transition variants
            # looked up in the target's counting-sort table, every target occurrence a hit.
            # This thread extends the hits on its diagonals (d % parts == p), in order, a
            # pending buffer at a time (_drain); their scanned stretches live in a flat table
            # over the diagonal range (dense_n > 0) or a hash table that grows with the hits.
            # Tables are cleared where seed_lookups cuts a batch.
            dense = np.full(dense_n, -1, dtype=np.int64)
            bits = 12
            hkey = np.full(1 << bits, _EMPTY, dtype=np.int64)
            hval = np.zeros(1 << bits, dtype=np.int64)
            used = 0
            run = 0
            next_mark = max_hits
            count = 0
            stored = 0
            sink = np.zeros(1, dtype=np.int64)
            ht = np.empty(PENDING_HITS, dtype=np.int64)
            hq = np.empty(PENDING_HITS, dtype=np.int64)
            h = 0
            # windows go in chunks: first every candidate key of the chunk is tested against the
            # presence table, then the offsets of the present ones are read, then their hits are
            # queued; the first two are tight loops of independent loads the CPU overlaps.
            chunk = 512
            buf_k = np.empty(chunk * n_var, dtype=np.int64)
            buf_q = np.empty(chunk * n_var, dtype=np.int64)
            buf_a = np.empty(chunk * n_var, dtype=np.int64)
            buf_c = np.empty(chunk * n_var, dtype=np.int64)
            n_w = qkeys.shape[0]
            for w0 in range(0, n_w, chunk):
                m = 0
                for w in range(w0, min(w0 + chunk, n_w)):
                    key = qkeys[w]
                    if key < 0:
                        continue
                    for v in range(n_var):
                        kv = key if v == 0 else key ^ (2 << (2 * (v - 1)))
                        buf_k[m] = kv
                        buf_q[m] = start + w + length
                        m += present[kv]
                for x in range(m):
                    buf_a[x] = offsets[buf_k[x]]
                    buf_c[x] = offsets[buf_k[x] + 1] - buf_a[x]
                for x in range(m):
                    qe = buf_q[x]
                    a = buf_a[x]
                    c = buf_c[x]
                    if run + c > next_mark:  # a batch boundary of seed_lookups: forget the diagonals
                        if run > 0:
                            hkey, hval, bits, used, stored, count = _drain(
                                h, ht, hq, t, q, table, xdrop, thresh, dense, d_min, hkey, hval, bits, used, cap,
                                out, p, stored, count, sink)
                            h = 0
                            if dense_n > 0:
                                dense.fill(-1)
                            else:
                                bits = 12
                                hkey = np.full(1 << bits, _EMPTY, dtype=np.int64)
                                hval = np.zeros(1 << bits, dtype=np.int64)
                                used = 0
                        while next_mark < run + c:
                            next_mark += max_hits
                    run += c
                    for j in range(a, a + c):
                        te = ends[j]
                        if parts > 1 and (te - qe) % parts != p:
                            continue
                        ht[h] = te
                        hq[h] = qe
                        h += 1
                        if h == PENDING_HITS:
                            hkey, hval, bits, used, stored, count = _drain(
                                h, ht, hq, t, q, table, xdrop, thresh, dense, d_min, hkey, hval, bits, used, cap,
                                out, p, stored, count, sink)
                            h = 0
            hkey, hval, bits, used, stored, count = _drain(
                h, ht, hq, t, q, table, xdrop, thresh, dense, d_min, hkey, hval, bits, used, cap, out, p,
                stored, count, sink)
            n_out[p] = stored
            n_ext[p] = count
            n_hits[p] = run


def xdrop_extend_numba(t_codes, q_codes, t_first, q_first, direction, table, xdrop):
    """Same contract and results as :func:`.ops.xdrop_extend_torch` (CPU tensors)."""
    H = t_first.numel()
    best = np.zeros(H, np.int64)
    length = np.zeros(H, np.int64)
    scanned = np.zeros(H, np.int64)
    if H:
        numba_threads()
        with keep_torch_threads():
            _extend_many(as_array(t_codes, np.uint8), as_array(q_codes, np.uint8), as_array(t_first, np.int64),
                         as_array(q_first, np.int64), int(direction), as_array(table.reshape(-1), np.int64),
                         int(xdrop), best, length, scanned)
    return torch.from_numpy(best), torch.from_numpy(length), torch.from_numpy(scanned)


def ungapped_scan_numba(t_codes, q_codes, ends, lo, counts, q_end, table, xdrop, hspthresh,
                        threads: int | None = None):
    """Extend the hits LASTZ's diagonal table lets through; keep those scoring at least ``hspthresh``.

    The hits are given as index look-ups (see :func:`.seeds.seed_lookups`): look-up ``l``
    stands for the hits ``(ends[lo[l] + j], q_end[l])``, ``j < counts[l]``, visited in that
    order (query ends must not decrease).  Each thread keeps its own open-addressing table
    of diagonals, sized to its hits, so memory follows the batch, not the genome.

    Returns:
        ``(t_start, q_start, length, score)`` of the raw HSPs scoring ``>= hspthresh`` (before
        the entropy adjustment), in hit order, and the number of hits extended.
    """
    lo_, cnt_, qe_ = as_array(lo, np.int64), as_array(counts, np.int64), as_array(q_end, np.int64)
    if qe_.size > 1 and bool((qe_[1:] < qe_[:-1]).any()):
        raise ValueError("look-ups must come in non-decreasing query order")
    H = int(cnt_.sum())
    first = np.zeros(cnt_.size, np.int64)
    np.cumsum(cnt_[:-1], out=first[1:])
    ts, qs, ln, sc = (np.zeros(H, np.int64) for _ in range(4))
    keep = np.zeros(H, np.bool_)
    parts = 1 if (cpu_threads() if threads is None else threads) == 1 else numba_threads()
    scan = _scan_serial if parts == 1 else _scan
    n_ext = np.zeros(parts, np.int64)
    ends_ = as_array(ends, np.int64)
    d_min = d_max = 0
    if H:  # index entries of one key are in target order: a look-up's first and last hits bound its diagonals
        d_min = int((ends_[lo_] - qe_).min())
        d_max = int((ends_[lo_ + cnt_ - 1] - qe_).max())
    # a flat table over the batch's diagonal range while it costs at most DENSE_BYTES_PER_HIT a hit
    n_diag = d_max - d_min + 1
    dense = np.full(n_diag if n_diag * 8 <= DENSE_BYTES_PER_HIT * max(H, 1) else 0, -1, np.int64)
    with keep_torch_threads():
        scan(as_array(t_codes, np.uint8), as_array(q_codes, np.uint8), ends_, lo_, cnt_, first, qe_,
             as_array(table.reshape(-1), np.int64), int(xdrop), int(hspthresh), parts, dense, d_min,
             ts, qs, ln, sc, keep, n_ext)
    out = (torch.from_numpy(a[keep]) for a in (ts, qs, ln, sc))
    return (*out, int(n_ext.sum()))


def ungapped_scan_hits(t_codes, q_codes, t_end, q_end, table, xdrop, hspthresh, threads: int | None = None):
    """:func:`ungapped_scan_numba` for plain hits ``(t_end, q_end)`` in any order (seed hits come in
    query order already; others are sorted by query end first)."""
    te, qe = t_end, q_end
    if qe.numel() > 1 and not bool((qe[1:] >= qe[:-1]).all()):
        order = torch.argsort(q_end, stable=True)
        te, qe = t_end.index_select(0, order), q_end.index_select(0, order)
    n = te.numel()
    return ungapped_scan_numba(t_codes, q_codes, te, torch.arange(n), torch.ones(n, dtype=torch.int64), qe,
                               table, xdrop, hspthresh, threads)


FUSED_HSP_CAPACITY = 1 << 16
"""HSPs per thread the fused pass has room for before it runs again with more."""

DENSE_MAX_BYTES = 256 << 20
"""The fused scan keeps a flat diagonal table per thread up to this size, else hashes diagonals."""


def seed_scan_numba(t_codes, q_codes, index, start, qkeys, transition, max_hits, table, xdrop, hspthresh,
                    threads: int | None = None):
    """Seeding and the filter of query windows ``start .. end-1`` in one compiled pass, given their
    seed keys ``qkeys`` (``(end - start,)`` int64, :func:`.seeds.seed_keys`).

    Same hits, in the same order and batches, as :func:`.seeds.seed_lookups` +
    :func:`.seeds.expand_lookups` (``index`` must have its counting-sort table), and the same
    extensions as :func:`.ops.ungapped_hsps` on each batch, without materialising look-ups or hits.

    ``threads=1`` runs it without a parallel region, so that several calls (strands, query
    intervals) can run at once from Python threads; by default the call's diagonals are split
    over the run's thread count (:func:`.torch_numba.cpu_threads`).

    Returns:
        ``(t_start, q_start, length, score)`` of the raw HSPs scoring ``>= hspthresh`` (tensors or
        arrays, as ``t_codes``) and counters ``{"hits", "extended"}``.
    """
    end = start + len(qkeys)
    qkeys = as_array(qkeys, np.int64)
    L = index.length
    n_var = 1 + (index.weight if transition else 0)
    n_t = len(t_codes)
    d_min = L - (end - 1 + L)
    n_diag = n_t - start - L - d_min + 1
    dense_n = n_diag if n_diag * 8 <= DENSE_MAX_BYTES else 0
    parts = 1 if (cpu_threads() if threads is None else threads) == 1 else numba_threads()
    scan = _seed_scan_serial if parts == 1 else _seed_scan
    args = (as_array(t_codes, np.uint8), as_array(q_codes, np.uint8), qkeys, int(start), L, n_var,
            as_array(index.present, np.bool_), np.ascontiguousarray(host(index.offsets)), np.ascontiguousarray(host(index.ends)),
            as_array(table.reshape(-1), np.int64), int(xdrop), int(hspthresh), int(max_hits), parts, dense_n,
            int(d_min))
    cap = FUSED_HSP_CAPACITY  # a call that finds more runs again with room for all
    while True:
        out = np.zeros((parts, cap, 4), np.int64)
        n_out, n_ext, n_hits = (np.zeros(parts, np.int64) for _ in range(3))
        with keep_torch_threads():
            scan(*args, cap, out, n_out, n_ext, n_hits)
        if int(n_out.max()) <= cap:
            break
        cap = int(n_out.max())  # rare: more HSPs than the buffer held; run again with room for all
    raw = np.concatenate([out[p, :n_out[p]] for p in range(parts)])
    cols = (like(t_codes, np.ascontiguousarray(raw[:, k])) for k in range(4))
    return (*cols, {"hits": int(n_hits[0]), "extended": int(n_ext.sum())})



__all__ = ["DENSE_BYTES_PER_HIT", "DENSE_MAX_BYTES", "FUSED_HSP_CAPACITY", "seed_scan_numba", "ungapped_scan_hits",
           "ungapped_scan_numba", "xdrop_extend_numba"]
