"""Spaced seeds, the target seed index and seed-hit generation, all as tensor ops.

A spaced seed is a 0/1 pattern; only the ``1`` ("care") positions enter the key.
With LASTZ's default 12of19 ``1110100110010101111`` the key of the 19-base
window starting at ``i`` packs the 12 care bases, 2 bits each, into 24 bits::

    window   A C G T T A C ...            pattern  1 1 1 0 1 0 0 1 ...
    key      bits of A,C,G,_,T,_,_,C ...  (care positions only)

A window gives a key only if all its bases are uppercase A/C/G/T (lowercase is
soft-masked, N/IUPAC/separators break it), as in LASTZ.  The target index is the
(key, position) list sorted by key; a query key's hits are one ``searchsorted``
range.  With one transition allowed (LASTZ ``--transition``, the default) each
query key is also looked up with one care base flipped A<->G / C<->T (``xor 2``),
so 12of19 makes 13 look-ups per query window.  Hits are reported at the end of
the seed word (exclusive ends ``(t_end, q_end)``), as LASTZ does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from torchhpc.ext.core.dispatch import resolve_backend
from torchhpc.ext.core.errors import InputError
from torchhpc.ext.core.lazy import lazy_module

from .seed_patterns import MAX_SEED_WEIGHT, SEEDS, parse_seed
from .torch_numba import is_tensor

torch = lazy_module("torch")  # the tensor ops; numba's compiled seeding runs on NumPy arrays without it

#: seeds of at most this weight get a direct-address (counting-sort) table: 4**12 entries = 128 MiB
DIRECT_TABLE_MAX_WEIGHT = 12

#: seeding's implementations: tensor ops (the reference) or numba's compiled passes (CPU tensors)
SEED_BACKENDS = ("torch", "numba")


def compiled_seeding(backend: str, device) -> bool:
    """Whether seeding runs numba's compiled passes: ``backend`` (``auto``, ``torch`` or ``numba``) as
    :func:`~torchhpc.ext.core.dispatch.resolve_backend` resolves it for data on ``device`` (``auto``:
    numba on the CPU where installed, else torch).

    Raises:
        InputError: an unknown backend, or numba asked for where it cannot run.
    """
    return resolve_backend(backend, device, choices=SEED_BACKENDS, what="seeding backend") == "numba"


def _device_of(codes):
    """Where ``codes`` live: a tensor's device, the CPU for a NumPy array."""
    return codes.device if is_tensor(codes) else "cpu"


def seed_keys(codes, pattern: str, start: int = 0, end: int | None = None, backend: str = "auto"):
    """Seed keys of the windows starting at ``start .. end-1`` of ``codes``.

    Args:
        codes: ``(N,)`` uint8 codes (see :mod:`.fasta`): a tensor, or a NumPy array (numba's seeding only).
        pattern: the 0/1 seed pattern, length ``L``.
        backend: ``auto``, ``torch`` or ``numba`` (see :func:`compiled_seeding`): the same keys either way.

    Returns:
        ``(end - start,)`` int64 keys, ``-1`` where the window is not all uppercase ACGT
        or runs past the end.
    """
    n = len(codes)
    L = len(pattern)
    end = n if end is None else min(end, n)
    m = max(end - start, 0)
    if is_tensor(codes):
        out = torch.full((m,), -1, dtype=torch.int64, device=codes.device)
    else:
        out = np.full(m, -1, dtype=np.int64)
    last = min(end, n - L + 1)  # windows that fit
    if last <= start:
        return out
    if compiled_seeding(backend, _device_of(codes)):
        from .index_kernels import seed_keys_numba

        seed_keys_numba(codes, pattern, start, last, out)  # one compiled pass, same keys
        return out
    return _seed_keys_torch(codes, pattern, start, last, out)


def _seed_keys_torch(codes: torch.Tensor, pattern: str, start: int, last: int, out: torch.Tensor) -> torch.Tensor:
    """:func:`seed_keys` as tensor ops (the reference of the compiled pass): fills ``out``."""
    L = len(pattern)
    c = codes[start:last + L - 1].to(torch.int64)
    w = last - start
    bad = (c >= 4).to(torch.int32)
    cbad = torch.cat([bad.new_zeros(1), bad.cumsum(0)])
    valid = (cbad[L:L + w] - cbad[:w]) == 0
    key = torch.zeros(w, dtype=torch.int64, device=codes.device)
    k = 0
    for off, ch in enumerate(pattern):
        if ch == "1":
            key |= (c[off:off + w] & 3) << (2 * k)
            k += 1
    out[:w] = torch.where(valid, key, torch.full_like(key, -1))
    return out


@dataclass
class SeedIndex:
    """The target's seed table: keys sorted, with the end position of each word.

    Attributes:
        keys: ``(M,)`` int64 sorted seed keys (``None`` where the compiled counting sort built
            ``offsets``, which say the same).
        ends: ``(M,)`` exclusive end (``start + L``) of each word in the target codes, in key order
            (int64; int32 from the compiled counting sort).
        pattern: the seed pattern.
    """

    keys: torch.Tensor | None
    ends: torch.Tensor
    pattern: str
    offsets: torch.Tensor | None = None
    """``(4**weight + 1,)`` start of each key's run in ``ends`` (int64; int32 from the compiled counting
    sort): a counting-sort table, as SegAlign's index table; built for weights up to 12, by the compiled
    counting sort whatever the target's size (its one-pass filter needs it), by tensor ops when the target
    fills it well enough; else look-ups use ``searchsorted`` on ``keys``"""
    present: torch.Tensor | None = None
    """``(4**weight,)`` bool: the key occurs (with ``offsets``); an eighth of the table's bytes, so the
    many look-ups of absent keys stay in cache"""

    @property
    def length(self) -> int:
        return len(self.pattern)

    @property
    def weight(self) -> int:
        return self.pattern.count("1")


def build_index(codes, pattern: str, step: int = 1, backend: str = "auto") -> SeedIndex:
    """Index every ``step``-th window of the target (LASTZ ``--step``) by its seed key.

    ``backend``: ``auto``, ``torch`` or ``numba`` (see :func:`compiled_seeding`): the same table either
    way (numba's counting sort keeps no ``keys`` and stores int32 where every position fits; given the
    codes as a NumPy array, it builds the table as arrays).

    Raises:
        InputError: ``step < 1``, or a backend that cannot run here.
    """
    if step < 1:
        raise InputError(f"--step must be >= 1, got {step}")
    weight = pattern.count("1")
    compiled = compiled_seeding(backend, _device_of(codes))
    if compiled and weight <= DIRECT_TABLE_MAX_WEIGHT:
        from .index_kernels import count_index_numba

        # the same table as below, by a compiled counting sort over the codes (no keys, argsort or bincount)
        ends, offsets, present = count_index_numba(codes, pattern, step)
        return SeedIndex(None, ends, pattern, offsets, present)
    return _build_index_torch(seed_keys(codes, pattern, backend="numba" if compiled else "torch"), pattern, step)


def _build_index_torch(keys: torch.Tensor, pattern: str, step: int) -> SeedIndex:
    """The index as tensor ops (argsort, bincount): the reference of the compiled counting sort."""
    pos = torch.arange(keys.numel(), device=keys.device)
    keep = keys >= 0
    if step > 1:
        keep &= (pos % step) == 0
    keys, pos = keys[keep], pos[keep]
    keys, order = torch.sort(keys, stable=True)
    offsets = None
    weight = pattern.count("1")
    if weight <= DIRECT_TABLE_MAX_WEIGHT and 4 ** weight <= 64 * max(keys.numel(), 1):
        counts = torch.bincount(keys, minlength=4 ** weight)
        offsets = torch.zeros(4 ** weight + 1, dtype=torch.int64, device=keys.device)
        torch.cumsum(counts, 0, out=offsets[1:])
        return SeedIndex(keys, pos[order] + len(pattern), pattern, offsets, counts > 0)
    return SeedIndex(keys, pos[order] + len(pattern), pattern, offsets)


def transition_variants(keys: torch.Tensor, weight: int, transition: bool) -> torch.Tensor:
    """``(W,)`` keys -> ``(W, V)`` keys to look up: the key, then one per care base flipped by a transition."""
    if not transition:
        return keys[:, None]
    flips = torch.tensor([2 << (2 * k) for k in range(weight)], dtype=torch.int64, device=keys.device)
    var = torch.cat([keys[:, None], keys[:, None] ^ flips[None, :]], dim=1)
    return torch.where(keys[:, None] >= 0, var, torch.full_like(var, -1))


def seed_lookups(
    index: SeedIndex,
    query_codes: torch.Tensor,
    start: int,
    end: int,
    transition: bool = True,
    max_hits: int = 1 << 22,
    backend: str = "auto",
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The successful index look-ups of query windows ``start .. end-1``, in batches of at most
    ``max_hits`` hits (a look-up stands for ``count`` hits: the index entries ``lo .. lo+count-1``).
    ``backend``: ``auto``, ``torch`` or ``numba`` (see :func:`compiled_seeding`): the same look-ups.

    Yields:
        ``(lo, count, q_end)`` int64 tensors of one batch, look-ups in increasing query order
        (for one query window: the exact key first, then its transition variants).
    """
    if max_hits < 1:
        raise InputError(f"max_hits must be >= 1, got {max_hits}")
    compiled = compiled_seeding(backend, query_codes.device)
    qkeys = seed_keys(query_codes, index.pattern, start, end, "numba" if compiled else "torch")
    n_var = 1 + index.weight if transition else 1
    if index.offsets is not None and compiled:
        # one compiled pass over the windows (no (W, V) tensors of keys); same look-ups, same order
        from .index_kernels import lookups_numba

        lo, counts, qend = lookups_numba(qkeys, n_var, index.present, index.offsets, start, index.length)
        nz = qend  # (only its size is used below)
    else:
        lo, counts, qend, nz = _lookups_torch(index, qkeys, start, transition)
    if nz.numel() == 0:
        return
    csum = counts.cumsum(0)
    total = int(csum[-1])
    # batch boundaries: cut the look-ups where the running hit count crosses a multiple of max_hits
    bounds = [0, counts.numel()]
    if total > max_hits:
        marks = torch.arange(max_hits, total, max_hits, device=csum.device)
        cuts = torch.searchsorted(csum, marks, right=True)
        bounds = [0, *sorted(set(cuts.tolist()) - {0}), counts.numel()]
    for b0, b1 in zip(bounds[:-1], bounds[1:], strict=True):
        if b1 > b0:
            yield lo[b0:b1], counts[b0:b1], qend[b0:b1]


def _lookups_torch(index: SeedIndex, qkeys: torch.Tensor, start: int, transition: bool):
    """The look-ups of :func:`seed_lookups` as tensor ops: ``(lo, count, q_end, nz)``."""
    var = transition_variants(qkeys, index.weight, transition)  # (W, V)
    flat = var.reshape(-1)
    # (index_select, not advanced indexing: several times faster for these large 1-D gathers)
    if index.offsets is not None:
        safe = flat.clamp(min=0)
        # most look-ups miss: test the small presence table first, read offsets only for hits
        hit = index.present.index_select(0, safe) & (flat >= 0)
        nz = torch.nonzero(hit).squeeze(1)
        key = safe.index_select(0, nz)
        lo = index.offsets.index_select(0, key).to(torch.int64)
        counts = index.offsets.index_select(0, key + 1).to(torch.int64) - lo
    else:
        lo = torch.searchsorted(index.keys, flat, right=False)
        hi = torch.searchsorted(index.keys, flat, right=True)
        counts = torch.where(flat >= 0, hi - lo, torch.zeros_like(lo))
        nz = torch.nonzero(counts).squeeze(1)
        counts, lo = counts.index_select(0, nz), lo.index_select(0, nz)
    qend = start + torch.div(nz, var.shape[1], rounding_mode="floor") + index.length
    return lo, counts, qend, nz


def expand_lookups(index: SeedIndex, lo: torch.Tensor, counts: torch.Tensor,
                   qend: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch of look-ups -> its hits ``(t_end, q_end)``, in look-up order."""
    rep = torch.repeat_interleave(torch.arange(counts.numel(), device=counts.device), counts)
    # position of each hit in the index: its look-up's first slot plus its rank within the look-up
    slot = torch.arange(rep.numel(), device=counts.device) + (lo - (torch.cumsum(counts, 0) - counts)).index_select(0, rep)
    return index.ends.index_select(0, slot).to(torch.int64), qend.index_select(0, rep)


def seed_hits(
    index: SeedIndex,
    query_codes: torch.Tensor,
    start: int,
    end: int,
    transition: bool = True,
    max_hits: int = 1 << 22,
    backend: str = "auto",
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Seed hits of query windows ``start .. end-1`` in batches of at most ``max_hits``.

    Yields:
        ``(t_end, q_end)`` int64 tensors of one batch: exclusive ends of the matching words
        in the target and query code arrays, batches in increasing query order.  A single
        query window with more than ``max_hits`` hits forms a batch of its own.
    """
    for lo, counts, qend in seed_lookups(index, query_codes, start, end, transition, max_hits, backend):
        yield expand_lookups(index, lo, counts, qend)


__all__ = ["DIRECT_TABLE_MAX_WEIGHT", "MAX_SEED_WEIGHT", "SEEDS", "SEED_BACKENDS", "SeedIndex", "build_index",
           "compiled_seeding", "expand_lookups", "parse_seed", "seed_hits", "seed_keys", "seed_lookups",
           "transition_variants"]
