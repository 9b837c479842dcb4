"""Compiled CPU kernels of seeding (numba): seed keys, the target's counting-sort index and its look-ups.

The same results as the tensor ops of :mod:`.seeds`, which stay their reference, in passes over the
codes that build no ``(W, V)`` tensors of keys and no array of keys the size of the genome:

* :func:`seed_keys_numba` — the keys of a range of windows (:func:`.seeds.seed_keys`);
* :func:`count_index_numba` — :func:`.seeds.build_index`'s direct-address table by a counting sort
  in two passes (count, then fill), the target cut into chunks indexed side by side on several
  threads;
* :func:`lookups_numba` — the successful look-ups of :func:`.seeds.seed_lookups`, in order.

numba is optional (``pip install torchhpc[align]``); :func:`torchhpc.ext.core.dispatch.numba_available`
tells, and :func:`.seeds.compiled_seeding` decides whether these run.
"""

from __future__ import annotations

import numpy as np

from torchhpc.ext.core.dispatch import numba_available

from .torch_numba import KERNELS, as_array, cpu_threads, host, keep_torch_threads, like, numba_threads

if numba_available():  # pragma: no cover - exercised where numba is installed (make setup installs it)
    from torchhpc.ext.core.compiled import prange  # noqa: F401 - numba's, once the kernels are JIT-compiled

    kernel = KERNELS.kernel


if numba_available():

    @kernel(nogil=True, cache=True)
    def _lookups(qkeys, w0, n_var, present, offsets, start, length, lo, cnt, qend, n0):
        """The successful look-ups of ``qkeys[w0:]`` (the key, then its ``n_var - 1`` transition variants), in
        order, written from ``n0`` on; stops before a window that might not fit.  Returns (next window, n)."""
        n = n0
        cap = lo.shape[0]
        for w in range(w0, qkeys.shape[0]):
            k = qkeys[w]
            if k < 0:
                continue
            if n + n_var > cap:
                return w, n
            for v in range(n_var):
                key = k if v == 0 else k ^ (2 << (2 * (v - 1)))
                if present[key]:
                    lo[n] = offsets[key]
                    cnt[n] = offsets[key + 1] - offsets[key]
                    qend[n] = start + w + length
                    n += 1
        return qkeys.shape[0], n

    @kernel(nogil=True, cache=True, aot=["u1[::1], i8[::1], i8, i8, i8, i8[::1]"])
    def _seed_keys_kernel(codes, care, start, last, length, out):
        """Keys of the windows ``start .. last-1`` into ``out[:last-start]`` (-1 where a base code is
        >= 4: soft-masked, N or a separator), one pass: the last such base seen decides validity."""
        lastbad = -1
        for j in range(start, start + length - 1):
            if codes[j] >= 4:
                lastbad = j
        for i in range(start, last):
            j = i + length - 1
            if codes[j] >= 4:
                lastbad = j
            if lastbad >= i:
                out[i - start] = -1
                continue
            key = 0
            for k in range(care.shape[0]):
                key |= (codes[i + care[k]] & 3) << (2 * k)
            out[i - start] = key

    @kernel(nogil=True, cache=True)
    def _index_chunk(codes, care, length, step, lo, hi, slots, ends, fill):
        """The counting sort's scan of the windows ``lo, lo + step, ... < hi`` (``lo`` on the step
        grid), keys computed on the fly; windows over lowercase, N or a record separator are skipped.
        ``fill=False`` counts each key into ``slots[key]``; ``fill=True`` writes each window's end at
        ``slots[key]`` (the next free slot of the key) and advances it.  Returns the valid windows."""
        n = 0
        lastbad = -1
        nxt = lo
        for i in range(lo, hi, step):
            j_end = i + length - 1
            while nxt <= j_end:
                if codes[nxt] >= 4:
                    lastbad = nxt
                nxt += 1
            if lastbad >= i:
                continue
            key = 0
            for k in range(care.shape[0]):
                key |= np.int64(codes[i + care[k]] & 3) << (2 * k)
            n += 1
            if fill:
                slot = slots[key]
                ends[slot] = i + length
                slots[key] = slot + 1
            else:
                slots[key] += 1
        return n

    @kernel(nogil=True, cache=True, aot=["u1[::1], i8[::1], i8, i8, i8, i4[::1], b1[::1], i4[::1], b1"])
    def _index_pass(codes, care, length, step, last, offsets, present, ends, fill):
        """One pass of the counting sort over the keys of the windows ``0, step, ... < last``, computed
        on the fly (as :func:`_seed_keys_kernel`; no array of keys the size of the genome).

        ``fill=False``: count each key into ``offsets[key + 2]`` (zeroed, one longer than the table),
        return the valid windows.  ``fill=True`` (after a count): prefix sums (``offsets[k]``: key k's
        first slot), ``present``, and the word ends in key order (stable: equal keys in position order).
        """
        if not fill:
            return _index_chunk(codes, care, length, step, 0, last, offsets[2:], ends, False)
        for k in range(present.shape[0]):
            present[k] = offsets[k + 2] > 0
            offsets[k + 2] += offsets[k + 1]
        # offsets[key + 1] is key's next free slot; filling advances it to key + 1's first
        return _index_chunk(codes, care, length, step, 0, last, offsets[1:], ends, True)

    @kernel(nogil=True, cache=True, parallel=True)
    def _index_chunks(codes, care, length, step, bounds, slots, ends, fill):
        """:func:`_index_chunk` on each chunk ``bounds[c] .. bounds[c + 1]`` side by side (table ``slots[c]``)."""
        for c in prange(slots.shape[0]):
            _index_chunk(codes, care, length, step, bounds[c], bounds[c + 1], slots[c], ends, fill)

    @kernel(nogil=True, cache=True)
    def _index_offsets(slots, offsets, present):
        """Chunk counts -> each chunk's first slot of each key (chunk by chunk within a key: the windows
        stay in position order), ``offsets[k]`` (key ``k``'s first slot; ``offsets[space]``: the total)
        and ``present``."""
        run = 0
        for k in range(present.shape[0]):
            offsets[k] = run
            for c in range(slots.shape[0]):
                n = slots[c, k]
                slots[c, k] = run
                run += n
            present[k] = run > offsets[k]
        offsets[present.shape[0]] = run


def seed_keys_numba(codes, pattern: str, start: int, last: int, out) -> None:
    """:func:`.seeds.seed_keys` of the windows ``start .. last-1`` (all fit) into ``out`` (CPU tensors or
    arrays)."""
    care = np.array([i for i, ch in enumerate(pattern) if ch == "1"], dtype=np.int64)
    _seed_keys_kernel(as_array(codes, np.uint8), care, int(start), int(last), len(pattern), host(out))


INDEX_CHUNK_MIN_WINDOWS = 1 << 20
"""Fewest target windows per chunk of the parallel index build (below, one thread is as fast)."""

INDEX_TABLES_MAX_BYTES = 512 << 20
"""Most bytes of per-chunk key tables the parallel index build may hold (12of19: 64 MiB a chunk, so up
to 8 chunks; 14of22's 1 GiB table is built by one thread)."""


def _count_index_chunks(c, care, length, step, last, space, small, parts, ref):
    """:func:`count_index_numba` with the target cut into ``parts`` chunks counted and filled side by
    side (the same table: within a key, chunk by chunk keeps the windows in position order); as the kind
    of ``ref``."""
    windows = -(-last // step)
    per = -(-windows // parts) * step  # positions per chunk: a multiple of step, so chunks keep the step grid
    bounds = np.minimum(np.arange(parts + 1, dtype=np.int64) * per, last)
    dt = np.int32 if small else np.int64
    slots = np.zeros((parts, space), dt)
    with keep_torch_threads():
        _index_chunks(c, care, length, step, bounds, slots, np.empty(0, dt), False)
    n_valid = int(slots.sum(dtype=np.int64))
    offsets = np.empty(space + 1, dt)
    present = np.empty(space, np.bool_)
    _index_offsets(slots, offsets, present)
    ends = np.empty(n_valid, dt)
    with keep_torch_threads():
        _index_chunks(c, care, length, step, bounds, slots, ends, True)
    return like(ref, ends), like(ref, offsets), like(ref, present)


def count_index_numba(codes, pattern: str, step: int, threads: int | None = None):
    """:func:`.seeds.build_index`'s counting-sort table in two compiled passes over the target codes:
    ``(ends, offsets, present)`` as tensors, ``int32`` where every position fits (half the bytes of
    int64: 64 MiB of offsets for 12of19, 4 bytes a target base; no array of keys is ever built: the
    offsets say it all), whatever the target's size: a small target pays the table's zeroing and prefix
    pass (about 20 ms for 12of19), where looking its keys up by ``searchsorted`` cost the filter its
    one-pass kernel (0.78 s against 0.10 s warm on a 155 kbp pair, 2026-12-04).  With several
    ``threads`` (default: the run's, :func:`.torch_numba.cpu_threads`), chunks of at least :data:`INDEX_CHUNK_MIN_WINDOWS` windows are indexed side by side, a key table each, within
    :data:`INDEX_TABLES_MAX_BYTES`."""
    c = as_array(codes, np.uint8)
    care = np.array([i for i, ch in enumerate(pattern) if ch == "1"], dtype=np.int64)
    length, space = len(pattern), 4 ** care.size
    last = max(c.size - length + 1, 0)  # windows that fit
    small = c.size + length < 2 ** 31  # every position and count fits in 32 bits
    parts = cpu_threads() if threads is None else max(int(threads), 1)
    # chunks of the target side by side, a table each (as many as INDEX_TABLES_MAX_BYTES allows)
    parts = min(parts, INDEX_TABLES_MAX_BYTES // (space * (4 if small else 8)),
                -(-last // int(step)) // INDEX_CHUNK_MIN_WINDOWS)
    if parts > 1 and threads is None:
        parts = min(parts, numba_threads())  # (a parallel launch: numba is loaded, its thread count set)
    if parts > 1:
        return _count_index_chunks(c, care, length, int(step), last, space, small, parts, codes)
    offsets = np.zeros(space + 2, np.int32 if small else np.int64)
    present = np.empty(space, np.bool_)
    n_valid = _index_pass(c, care, length, int(step), last, offsets, present, offsets[:0], False)
    ends = np.empty(n_valid, np.int32 if small else np.int64)
    _index_pass(c, care, length, int(step), last, offsets, present, ends, True)
    return like(codes, ends), like(codes, offsets[:space + 1]), like(codes, present)


def lookups_numba(qkeys, n_var: int, present, offsets, start: int, length: int) -> tuple:
    """The index look-ups of :func:`.seeds.seed_lookups` (with its counting-sort table) in one compiled pass:
    ``(lo, count, q_end)`` of every successful look-up, in the same order, without its ``(W, V)`` tensors."""
    k = as_array(qkeys, np.int64)
    pres, offs = as_array(present, np.bool_), np.ascontiguousarray(host(offsets))
    cap = max(4 * k.size, 1024)  # grown (and the pass resumed) in the rare case of more look-ups
    lo, cnt, qend = np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.int64)
    w, n = 0, 0
    while True:
        w, n = _lookups(k, w, n_var, pres, offs, start, length, lo, cnt, qend, n)
        if w >= k.size:
            break
        cap *= 2
        lo, cnt, qend = (np.concatenate([x[:n], np.empty(cap - n, np.int64)]) for x in (lo, cnt, qend))
    return like(qkeys, lo[:n].copy()), like(qkeys, cnt[:n].copy()), like(qkeys, qend[:n].copy())


__all__ = ["INDEX_CHUNK_MIN_WINDOWS", "INDEX_TABLES_MAX_BYTES", "count_index_numba", "lookups_numba",
           "seed_keys_numba"]
