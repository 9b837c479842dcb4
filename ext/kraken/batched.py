"""Table-batched lookup, admission and eviction: one compiled pass over every table of a collection.

:class:`~torchhpc.ext.kraken.embedding.DynamicTable` spells each step of a training
lookup out as tensor ops (the readable reference): deduplicate a table's IDs,
probe its :class:`~torchhpc.ext.kraken.hashing.IdIndex`, count misses in the
admission sketch, draw the admission coin, find free rows or evict the least
recently / frequently used ones, insert the new IDs, record use.  At DLRM batch
sizes each of those ops touches a few thousand IDs, so the cost is dozens of
small ops per table per batch — Python and dispatch, repeated table by table.

:func:`lookup_all_tables` does the same for **all tables of a collection in one
call** of a compiled (numba) kernel, the way fbgemm's table-batched embedding
serves static tables with one launch: the key of an ID is ``(table, ID)``, each
table's rows and index segment are addressed through the table id, and the whole
batch's unique/lookup/TTL/admission/eviction/record pass runs without leaving
the kernel.  The weights and optimizer state are then touched by torch in one
pass per step (zero evicted rows, initialise admitted ones), so every float the
model sees is computed by the same torch ops as in the reference: the two paths
give the same rows, optimizer state, evictions and counters (tests pin it,
and the debug run's pinned metrics are produced by this path).

The pass first looks every ID up read-only and bounds the rows each table may
need; if some table might grow in this step (rows or index slots), it changes
nothing and the caller runs the reference path for that (rare) step.  numba is optional: without it (or on
CUDA) every step runs the reference path.
"""

from __future__ import annotations

import numpy as np
import torch

from torchhpc.ext.core.dispatch import numba_available

_M64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_EMPTY, _DELETED = -1, -2
_EVICTION_KIND = {"none": 0, "lru": 1, "lfu": 2}


def mix_offset(seed: int) -> np.uint64:
    """The additive constant of :func:`~torchhpc.ext.kraken.hashing.mix64` for ``seed``, as uint64."""
    return np.uint64(((seed + 1) * _GAMMA) & _M64)


if numba_available():  # pragma: no branch - make setup installs numba
    from numba import njit

    _U30, _U27, _U31, _U40, _U1 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(40), np.uint64(1)
    _M1 = np.uint64(0xBF58476D1CE4E5B9)
    _M2 = np.uint64(0x94D049BB133111EB)

    @njit(cache=True, inline="always")
    def _mix(x, off):
        """splitmix64 of ``x + off`` on uint64: bit-equal to ``hashing.mix64`` (torch int64 wraps alike)."""
        z = np.uint64(x) + off
        z = (z ^ (z >> _U30)) * _M1
        z = (z ^ (z >> _U27)) * _M2
        return z ^ (z >> _U31)

    @njit(cache=True)
    def _find(keys, ident, home_off):
        """Slot of ``ident`` in one table's open-addressing index, or -1 (linear probing, EMPTY ends it)."""
        mask = keys.shape[0] - 1
        pos = np.int64(_mix(ident, home_off) & np.uint64(mask))
        for _ in range(keys.shape[0]):
            k = keys[pos]
            if k == ident:
                return pos
            if k == _EMPTY:
                return -1
            pos = (pos + 1) & mask
        return -1

    @njit(cache=True)
    def _place(keys, vals, ident, row, home_off):
        """Store ``ident -> row`` in the first free slot from its home; returns 1 if it reused a tombstone."""
        mask = keys.shape[0] - 1
        pos = np.int64(_mix(ident, home_off) & np.uint64(mask))
        while keys[pos] >= 0:
            pos = (pos + 1) & mask
        reused = 1 if keys[pos] == _DELETED else 0
        keys[pos] = ident
        vals[pos] = row
        return reused

    @njit(cache=True)
    def _sweep(keys, vals, home_off):
        """Rehash in place at the same capacity (drops tombstones), as ``IdIndex._rehash(capacity)``."""
        n = 0
        for s in range(keys.shape[0]):
            if keys[s] >= 0:
                n += 1
        ids = np.empty(n, np.int64)
        rows = np.empty(n, np.int32)
        n = 0
        for s in range(keys.shape[0]):
            if keys[s] >= 0:
                ids[n] = keys[s]
                rows[n] = vals[s]
                n += 1
        keys[:] = _EMPTY
        vals[:] = -1
        for i in range(n):
            _place(keys, vals, ids[i], rows[i], home_off)

    @njit(cache=True)
    def _evict(rows, n, keys, vals, row_id, last_seen, freq, dirty, home_off, idx, weight, state_a, state_b, base):
        """``DynamicTable.evict_rows`` for ``rows[:n]``: drop the IDs, zero weights, optimizer state and metadata."""
        for i in range(n):
            r = rows[i]
            weight[base + r, :] = 0.0
            if state_a.shape[0] > 1:
                state_a[base + r, :] = 0.0
            if state_b.shape[0] > 1:
                state_b[base + r, :] = 0.0
            s = _find(keys, row_id[r], home_off)
            if s >= 0:
                keys[s] = _DELETED
                vals[s] = -1
                idx[0] -= 1
                idx[1] += 1
            row_id[r] = -1
            last_seen[r] = 0
            freq[r] = 0.0
            dirty[r] = True
        idx[2] += n
        if idx[1] > keys.shape[0] // 4:  # IdIndex.remove: sweep tombstones past a quarter of the slots
            _sweep(keys, vals, home_off)
            idx[1] = 0

    @njit(cache=True)
    def _init_row(weight, row, ident, off1, off2, scale):
        """``DynamicTable.init_rows`` for one row: ``(hash_uniform(id) * 2 - 1) * init_scale``, bit-equal in fp32."""
        h0 = _mix(ident, off1)
        for c in range(weight.shape[1]):
            h = _mix(h0 + np.uint64(c), off2)
            u = (np.float32(h >> _U40) + np.float32(0.5)) / np.float32(16777216.0)
            weight[row, c] = (u * np.float32(2.0) - np.float32(1.0)) * scale

    @njit(cache=True)
    def _argsort2(k1, k2):
        """Stable bottom-up merge sort: the permutation ordering by ``(k1, k2)``, ties by position."""
        n = k1.shape[0]
        idx = np.arange(n)
        tmp = np.empty(n, np.int64)
        width = 1
        while width < n:
            for lo in range(0, n, 2 * width):
                mid = min(lo + width, n)
                hi = min(lo + 2 * width, n)
                i, j, o = lo, mid, lo
                while i < mid and j < hi:
                    x, y = idx[i], idx[j]
                    if k1[y] < k1[x] or (k1[y] == k1[x] and k2[y] < k2[x]):
                        tmp[o] = y
                        j += 1
                    else:
                        tmp[o] = x
                        i += 1
                    o += 1
                while i < mid:
                    tmp[o] = idx[i]
                    i += 1
                    o += 1
                while j < hi:
                    tmp[o] = idx[j]
                    j += 1
                    o += 1
            idx, tmp = tmp, idx
            width *= 2
        return idx

    @njit(cache=True)
    def _lru_threshold(score, k):
        """The ``k``-th smallest of integral ``score`` (step numbers) by counting, or +inf when their span
        is too wide to count (then every candidate is sorted)."""
        lo, hi = score[0], score[0]
        for x in score:
            lo = min(lo, x)
            hi = max(hi, x)
        span = np.int64(hi - lo) + 1
        if span > 4 * score.shape[0] + 1024:
            return np.inf
        hist = np.zeros(span, np.int64)
        for x in score:
            hist[np.int64(x - lo)] += 1
        acc = 0
        for i in range(span):
            acc += hist[i]
            if acc >= k:
                return lo + i
        return np.inf

    @njit(cache=True)
    def _fits(t, u0, u1, uniq, cnt, rows, step, params, prob, coin_off1, coin_off2, sk_offs, segs, row_id_f,
              last_seen_f, sketch_f, counters):
        """Read only: whether table ``t`` can take this step's admissions without growing its rows or index.

        Counts exactly the IDs the pass will admit — misses (TTL-expired rows included) that pass the
        sketch, as it will read after its decay and this batch's sightings, and the coin — and the rows
        TTL frees; the sketch cells touched are restored."""
        base, alloc, cap, sb, depth, width = segs[t, 0], segs[t, 1], segs[t, 3], segs[t, 4], segs[t, 5], segs[t, 6]
        ttl, admit_count, admit_window, has_sketch, max_rows = (
            params[t, 1], params[t, 2], params[t, 3], params[t, 4], params[t, 5])
        row_id = row_id_f[base:base + alloc]
        last_seen = last_seen_f[base:base + alloc]
        size = counters[t, 0]
        if ttl > 0:
            for r in range(alloc):
                if row_id[r] >= 0 and step - last_seen[r] > ttl:
                    size -= 1
        miss = np.empty(u1 - u0, np.int64)
        nm = 0
        for j in range(u0, u1):
            r = rows[j]
            if r < 0 or (ttl > 0 and step - last_seen[r] > ttl):
                miss[nm] = j
                nm += 1
        ok = np.ones(nm, np.bool_)
        if has_sketch and nm > 0:
            sk = sketch_f[sb:sb + depth * width].reshape((depth, width))
            decay = admit_window > 0 and step % admit_window == 0
            cols = np.empty((nm, depth), np.int64)
            orig = np.empty((nm, depth), np.int32)
            for i in range(nm):
                for d in range(depth):
                    c = np.int64((_mix(np.uint64(uniq[miss[i]]) ^ np.uint64(sk_offs[t, d]),
                                       sk_offs[t, sk_offs.shape[1] - 1]) >> _U1) % np.uint64(width))
                    cols[i, d] = c
                    orig[i, d] = sk[d, c]
            for i in range(nm):
                for d in range(depth):
                    sk[d, cols[i, d]] += np.int32(cnt[miss[i]])
            for i in range(nm):
                est = np.int64(1) << 62
                for d in range(depth):
                    o = orig[i, d]
                    before = np.int32(np.floor(np.float32(o) * np.float32(0.5))) if decay else o
                    e = np.int64(before) + np.int64(sk[d, cols[i, d]]) - np.int64(o)
                    est = min(est, e)
                ok[i] = est >= admit_count
            for i in range(nm):
                for d in range(depth):
                    sk[d, cols[i, d]] = orig[i, d]
        n = 0
        for i in range(nm):
            if ok[i] and prob[t] < np.float32(1.0):
                h = _mix(_mix(uniq[miss[i]], coin_off1[t]), coin_off2[t])
                ok[i] = (np.float32(h >> _U40) + np.float32(0.5)) / np.float32(16777216.0) < prob[t]
            n += ok[i]
        if alloc < max_rows and alloc - size < n:
            return False
        return cap >= 2 * min(alloc, size + n)

    @njit(cache=True)
    def _lookup_all(vals_in, voff, training, step, params, prob, coin_off1, coin_off2, home_offs, sk_offs,
                    keys_f, ivals_f, row_id_f, last_seen_f, freq_f, dirty_f, sketch_f, counters,
                    weight, state_a, state_b, segs, init_offs, init_scale):
        """The pass of :func:`lookup_all_tables`; table ``t``'s rows, index slots and sketch counters are
        ``segs[t] = (row base, rows, slot base, slots, sketch base, depth, width)`` of the flat fields."""
        T = voff.shape[0] - 1
        nnz = vals_in.shape[0]
        inv = np.empty(nnz, np.int64)
        uniq_all = np.empty(nnz, np.int64)
        rows_all = np.empty(nnz, np.int64)
        uoff = np.zeros(T + 1, np.int64)
        u_n = 0
        f32_half = np.float32(0.5)
        f32_scale = np.float32(16777216.0)
        cnt_all = np.empty(nnz, np.int64)
        # ---- 0. read only, every table: unique IDs (ascending, with counts: torch.unique's order) and their
        # rows; then check that this step can grow no table (rows or index slots), else touch nothing
        fits = True
        for t in range(T):
            base, alloc, kb, cap = segs[t, 0], segs[t, 1], segs[t, 2], segs[t, 3]
            keys = keys_f[kb:kb + cap]
            ivals = ivals_f[kb:kb + cap]
            lo, hi = voff[t], voff[t + 1]
            v = vals_in[lo:hi]
            order = _argsort2(v, v)
            u0 = u_n
            for i in range(hi - lo):
                x = v[order[i]]
                if i == 0 or x != uniq_all[u_n - 1]:
                    uniq_all[u_n] = x
                    cnt_all[u_n] = 0
                    u_n += 1
                cnt_all[u_n - 1] += 1
                inv[lo + order[i]] = u_n - 1
            uoff[t + 1] = u_n
            for j in range(u0, u_n):
                s = _find(keys, uniq_all[j], home_offs[t]) if counters[t, 0] > 0 else -1
                rows_all[j] = ivals[s] if s >= 0 else -1
            if training and fits:
                fits = _fits(t, u0, u_n, uniq_all, cnt_all, rows_all, step, params, prob, coin_off1, coin_off2,
                             sk_offs, segs, row_id_f, last_seen_f, sketch_f, counters)
        if not fits:
            return rows_all[:0], uoff, inv, False
        for t in range(T):
            base, alloc, kb, cap, sb, depth, width = (
                segs[t, 0], segs[t, 1], segs[t, 2], segs[t, 3], segs[t, 4], segs[t, 5], segs[t, 6])
            keys = keys_f[kb:kb + cap]
            ivals = ivals_f[kb:kb + cap]
            row_id = row_id_f[base:base + alloc]
            last_seen = last_seen_f[base:base + alloc]
            freq = freq_f[base:base + alloc]
            dirty = dirty_f[base:base + alloc]
            sk = sketch_f[sb:sb + depth * width].reshape((depth, width))
            eviction, ttl, admit_count, admit_window, has_sketch = (
                params[t, 0], params[t, 1], params[t, 2], params[t, 3], params[t, 4])
            home_off = home_offs[t]
            idx = counters[t]  # [index size, tombstones, evictions, admissions]
            # ---- 1. TTL: rows not seen for more than ttl batches go first (DynamicTable.expire)
            expired = False
            if training and ttl > 0:
                buf = np.empty(alloc, np.int64)
                n = 0
                for r in range(alloc):
                    if row_id[r] >= 0 and step - last_seen[r] > ttl:
                        buf[n] = r
                        n += 1
                if n > 0:
                    _evict(buf, n, keys, ivals, row_id, last_seen, freq, dirty, home_off, idx, weight, state_a,
                           state_b, base)
                    expired = True
            # ---- 2. the rows of the unique IDs (looked up again if TTL dropped some)
            u0, u1 = uoff[t], uoff[t + 1]
            U = u1 - u0
            counts = cnt_all[u0:u1]
            rows = rows_all[u0:u1]
            if expired:
                for j in range(U):
                    s = _find(keys, uniq_all[u0 + j], home_off) if idx[0] > 0 else -1
                    rows[j] = ivals[s] if s >= 0 else -1
            if not training:
                continue
            # ---- 4. the admission sketch halves every admit_window batches
            if has_sketch and admit_window > 0 and step % admit_window == 0:
                for d in range(sk.shape[0]):
                    for c in range(sk.shape[1]):
                        sk[d, c] = np.int32(np.floor(np.float32(sk[d, c]) * f32_half))
            # ---- 5. admission of the misses that pass the sketch and the coin (DynamicTable.admit)
            miss = np.empty(U, np.int64)
            nm = 0
            for j in range(U):
                if rows[j] < 0:
                    miss[nm] = j
                    nm += 1
            if nm > 0:
                ok = np.ones(nm, np.bool_)
                if has_sketch:
                    width = sk.shape[1]
                    depth = sk.shape[0]
                    for i in range(nm):  # add every miss's sightings first, then read the estimates
                        j = miss[i]
                        for d in range(depth):
                            c = np.int64((_mix(np.uint64(uniq_all[u0 + j]) ^ np.uint64(sk_offs[t, d]), sk_offs[t, sk_offs.shape[1] - 1])
                                          >> _U1) % np.uint64(width))
                            sk[d, c] += np.int32(counts[j])
                    for i in range(nm):
                        j = miss[i]
                        est = np.int64(1) << 62
                        for d in range(depth):
                            c = np.int64((_mix(np.uint64(uniq_all[u0 + j]) ^ np.uint64(sk_offs[t, d]), sk_offs[t, sk_offs.shape[1] - 1])
                                          >> _U1) % np.uint64(width))
                            if sk[d, c] < est:
                                est = sk[d, c]
                        ok[i] = est >= admit_count
                if prob[t] < np.float32(1.0):
                    for i in range(nm):
                        h = _mix(_mix(uniq_all[u0 + miss[i]], coin_off1[t]), coin_off2[t])
                        u = (np.float32(h >> _U40) + f32_half) / f32_scale
                        ok[i] = ok[i] and u < prob[t]
                pos = np.empty(nm, np.int64)
                npos = 0
                for i in range(nm):
                    if ok[i]:
                        pos[npos] = miss[i]
                        npos += 1
                if npos > 0:
                    # free rows: unused ones (ascending), then the LRU/LFU victims not read by this batch
                    free = np.empty(npos, np.int64)
                    nfree = 0
                    if idx[0] < alloc:
                        for r in range(alloc):
                            if nfree == npos:
                                break
                            if row_id[r] < 0:
                                free[nfree] = r
                                nfree += 1
                    if nfree < npos and eviction != 0:
                        protect = np.zeros(alloc, np.bool_)
                        for j in range(U):
                            if rows[j] >= 0:
                                protect[rows[j]] = True
                        ncand = 0
                        cand = np.empty(alloc, np.int64)
                        for r in range(alloc):
                            if row_id[r] >= 0 and not protect[r]:
                                cand[ncand] = r
                                ncand += 1
                        k = min(npos - nfree, ncand)
                        if k > 0:
                            score = np.empty(ncand, np.float64)
                            for i in range(ncand):
                                score[i] = last_seen[cand[i]] if eviction == 1 else freq[cand[i]]
                            # the k lowest (score, ID), as kthvalue + a stable sort by ID then score; LRU
                            # scores are step numbers, so a count finds the threshold and only ties get sorted
                            thr = _lru_threshold(score, k) if eviction == 1 else np.inf
                            npool = 0
                            for i in range(ncand):
                                if score[i] <= thr:
                                    cand[npool] = cand[i]
                                    score[npool] = score[i]
                                    npool += 1
                            pid = np.empty(npool, np.int64)
                            for i in range(npool):
                                pid[i] = row_id[cand[i]]
                            order = _argsort2(score[:npool], pid)
                            victims = np.empty(k, np.int64)
                            for i in range(k):
                                victims[i] = cand[order[i]]
                            _evict(victims, k, keys, ivals, row_id, last_seen, freq, dirty, home_off, idx, weight,
                                   state_a, state_b, base)
                            for i in range(k):
                                free[nfree + i] = victims[i]
                            nfree += k
                    take = min(npos, nfree)
                    if take < npos:  # full and nothing to evict: the most frequent first (stable)
                        negc = np.empty(npos, np.int64)
                        for i in range(npos):
                            negc[i] = -counts[pos[i]]
                        order = _argsort2(negc, np.arange(npos))
                        kept = np.empty(take, np.int64)
                        for i in range(take):
                            kept[i] = pos[order[i]]
                        pos = kept
                    if take > 0:
                        if 2 * (idx[0] + take) > cap:
                            raise RuntimeError("kraken: table-batched pass needs index growth (caller bug)")
                        if 4 * (idx[0] + idx[1] + take) > 3 * cap:  # IdIndex.insert: sweep at 3/4 use
                            _sweep(keys, ivals, home_off)
                            idx[1] = 0
                        for i in range(take):
                            j = pos[i]
                            r = free[i]
                            ident = uniq_all[u0 + j]
                            idx[1] -= _place(keys, ivals, ident, r, home_off)
                            row_id[r] = ident
                            last_seen[r] = step
                            freq[r] = 0.0
                            dirty[r] = True
                            rows[j] = r
                            _init_row(weight, base + r, ident, init_offs[t, 0], init_offs[t, 1], init_scale[t])
                        idx[0] += take
                        idx[3] += take
            # ---- 6. record use of every row the batch reads
            for j in range(U):
                r = rows[j]
                if r >= 0:
                    last_seen[r] = step
                    freq[r] += np.float32(counts[j])
        # rows in the store's numbering (-1: none)
        for t in range(T):
            for j in range(uoff[t], uoff[t + 1]):
                if rows_all[j] >= 0:
                    rows_all[j] += segs[t, 0]
        return rows_all[:u_n], uoff, inv, True


def lookup_all_tables(tables: list, values: torch.Tensor, value_offsets: list[int], step: int | None):
    """One compiled pass of lookup (and, with ``step``, TTL, admission, eviction, use) over all tables.

    Args:
        tables: :class:`~torchhpc.ext.kraken.embedding.DynamicTable` objects on the CPU sharing one
            :class:`~torchhpc.ext.kraken.embedding.RowStore`.
        values: ``(nnz,)`` int64 IDs of every table, table after table.
        value_offsets: ``T + 1`` boundaries of each table's IDs in ``values``.
        step: the training step (``None``: read only).

    Returns:
        ``None`` and nothing changed if a table may grow (rows or index slots) in this step; else
        ``(rows (U,), unique_offsets (T+1 ints), inverse (nnz,))``: the store row of every table's unique
        IDs (ascending within a table, ``-1``: no row), where each table's start, and for each value the
        position of its ID in ``rows``.  Evicted rows are zeroed and admitted ones initialised in the
        store, exactly as :meth:`DynamicTable.lookup` leaves them.
    """
    T = len(tables)
    store = tables[0].store
    training = step is not None
    params = np.zeros((T, 6), np.int64)
    prob = np.ones(T, np.float32)
    coin1 = np.zeros(T, np.uint64)
    coin2 = np.zeros(T, np.uint64)
    homes = np.zeros(T, np.uint64)
    init_offs = np.zeros((T, 2), np.uint64)
    init_scale = np.zeros(T, np.float32)
    depth = max((t.sketch.depth for t in tables if t.sketch is not None), default=1)
    sk_offs = np.zeros((T, depth + 1), np.uint64)
    counters = np.zeros((T, 4), np.int64)
    segs = np.zeros((T, 7), np.int64)
    for i, t in enumerate(tables):
        c = t.cfg
        params[i] = (_EVICTION_KIND[c.eviction], c.ttl, c.admit_count, c.admit_window, t.sketch is not None,
                     c.max_rows)
        prob[i] = c.admit_prob
        if training and c.admit_prob < 1.0:  # the per-(ID, batch) coin of DynamicTable.admit
            s = t.seed * 1_000_003 + step
            coin1[i], coin2[i] = mix_offset(s), mix_offset(s + 7)
        homes[i] = mix_offset(t.index.seed)
        init_offs[i] = mix_offset(t.seed), mix_offset(t.seed + 7)
        init_scale[i] = c.init_scale
        sk_shape = store.shapes["sketch"][t.slot]
        if t.sketch is not None:
            for d in range(t.sketch.depth):  # CountMinSketch._cols: ids ^ (d * 0x51ED27 + seed), mixed with seed 11
                sk_offs[i, d] = np.uint64((d * 0x51ED27 + t.sketch.seed) & _M64)
            sk_offs[i, depth] = mix_offset(11)
        segs[i] = (store.base("row_id", t.slot), t.rows_allocated, store.base("index.keys", t.slot),
                   t.index.capacity, store.base("sketch", t.slot), *(sk_shape if len(sk_shape) == 2 else (0, 0)))
        counters[i] = (t.index.size, t.index.tombstones, 0, 0)
    R = store.weight.shape[0]
    states = [v.view(R, -1).numpy() for v in store.state.values()]
    states += [np.zeros((1, 1), np.float32)] * (2 - len(states))
    f = store.flat
    rows, uoff, inv, done = _lookup_all(
        values.numpy(), np.asarray(value_offsets, np.int64), training, step or 0, params, prob, coin1, coin2, homes,
        sk_offs, f["index.keys"].numpy(), f["index.values"].numpy(), f["row_id"].numpy(), f["last_seen"].numpy(),
        f["freq"].numpy(), f["dirty"].numpy(), f["sketch"].numpy(), counters, store.weight.numpy(), states[0],
        states[1], segs, init_offs, init_scale)
    if not done:
        return None
    for i, t in enumerate(tables):
        t.index.size, t.index.tombstones = int(counters[i, 0]), int(counters[i, 1])
        t.evictions += int(counters[i, 2])
        t.admissions += int(counters[i, 3])
    return torch.from_numpy(rows), uoff.tolist(), torch.from_numpy(inv)

__all__ = ["lookup_all_tables", "mix_offset"]
