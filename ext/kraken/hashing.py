"""Tensor-based ID hashing for kraken: a mixing hash, a collision-free open-addressing
index from raw 64-bit feature IDs to table rows, and a count-min sketch for admission.

Everything here is batched tensor code: a call handles every ID of a batch at
once and loops only over probe steps (a handful at the index's load factor),
never over IDs.  No Python dict sits on the lookup path.

IDs are non-negative int64 values (``0 .. 2**63 - 1``); the index reserves the
negative values ``-1`` (empty slot) and ``-2`` (deleted slot).
"""

from __future__ import annotations

import torch

from torchhpc.ext.core.errors import InputError

MASK63 = (1 << 63) - 1
"""IDs are 63-bit: a hash masked with this is a valid (non-negative) ID."""
EMPTY = -1
DELETED = -2
_W = 8  # slots probed per step

# splitmix64 constants as signed int64 (torch integer arithmetic wraps modulo 2**64)
_GAMMA = -7046029254386353131  # 0x9E3779B97F4A7C15
_M1 = -4658895280553007687  # 0xBF58476D1CE4E5B9
_M2 = -7723592293110705685  # 0x94D049BB133111EB


def _srl(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic)."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def mix64(x: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """The splitmix64 finaliser of ``x + seed * gamma``: a bijective, well-spread int64 hash."""
    off = ((seed + 1) * _GAMMA) & 0xFFFFFFFFFFFFFFFF
    z = x.long() + (off - (1 << 64) if off >= 1 << 63 else off)
    z = (z ^ _srl(z, 30)) * _M1
    z = (z ^ _srl(z, 27)) * _M2
    return z ^ _srl(z, 31)


def hash_uniform(ids: torch.Tensor, dim: int, seed: int = 0) -> torch.Tensor:
    """Deterministic uniform(0, 1) numbers per (id, column): ``(len(ids), dim)`` float32.

    Used to initialise a new row from its ID alone, so a row gets the same initial
    vector however the IDs are sharded, and again when an evicted ID is re-admitted.
    """
    cols = torch.arange(dim, device=ids.device, dtype=torch.int64)
    h = mix64(mix64(ids.long(), seed).unsqueeze(1) + cols, seed + 7)
    return (_srl(h, 40).to(torch.float32) + 0.5) / float(1 << 24)


def check_ids(ids: torch.Tensor, what: str = "feature IDs") -> None:
    """IDs must be an integer tensor of non-negative values.

    Raises:
        InputError: a float tensor or a negative ID.
    """
    if ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise InputError(f"{what} must be an integer tensor, got {ids.dtype}")
    if ids.numel() and int(ids.min()) < 0:
        raise InputError(
            f"{what} must be non-negative (unsigned 63-bit IDs); found {int(ids.min())}. "
            "Hash signed IDs to non-negative values first (e.g. ids & (2**63 - 1))."
        )


class IdIndex:
    """Collision-free map from raw int64 IDs to int64 row numbers (open addressing, linear probing).

    Every stored ID keeps its own slot, so two IDs never share a row (unlike a table
    indexed by ``id % N``).  Capacity is a power of two with live IDs in at most half the
    slots; deleted slots are tombstones (reused by inserts), swept by a rehash when live
    IDs and tombstones together fill three quarters of the slots.

    Attributes:
        keys: ``(capacity,)`` int64 — the ID in each slot, ``EMPTY`` or ``DELETED``.
        values: ``(capacity,)`` int32 — the row of each occupied slot (tables hold < 2**31 rows).
    """

    BYTES_PER_SLOT = 12  # int64 key + int32 row

    def __init__(self, capacity: int = 1024, device: torch.device | str = "cpu", seed: int = 0):
        cap = 1 << max(4, int(capacity - 1).bit_length())
        self.seed = seed
        self.keys = torch.full((cap,), EMPTY, dtype=torch.int64, device=device)
        self.values = torch.full((cap,), -1, dtype=torch.int32, device=device)
        self.size = 0
        self.tombstones = 0

    # ------------------------------------------------------------------ queries
    @property
    def capacity(self) -> int:
        return self.keys.numel()

    def nbytes(self) -> int:
        return self.keys.numel() * 8 + self.values.numel() * 4

    def _home(self, ids: torch.Tensor) -> torch.Tensor:
        return mix64(ids, self.seed) & (self.capacity - 1)

    def _find(self, ids: torch.Tensor) -> torch.Tensor:
        """Slot of each ID, or -1 where absent.  Probes a window of ``_W`` slots per step."""
        n = ids.numel()
        slot = torch.full((n,), -1, dtype=torch.int64, device=ids.device)
        if n == 0 or self.size == 0:
            return slot
        mask = self.capacity - 1
        win = torch.arange(_W, device=ids.device)
        pos = self._home(ids)
        todo = torch.arange(n, device=ids.device)
        for _ in range(self.capacity // _W + 1):
            cand = (pos.unsqueeze(1) + win) & mask  # (m, W)
            k = self.keys[cand]
            hit = k == ids[todo].unsqueeze(1)
            stop = hit | (k == EMPTY)
            # the first slot that is a hit or empty ends the probe; a hit before any empty is a find
            first = torch.where(stop.any(1), stop.int().argmax(1), torch.full_like(pos, _W))
            done = first < _W
            found = done & hit.gather(1, first.clamp(max=_W - 1).unsqueeze(1)).squeeze(1)
            slot[todo[found]] = cand[found, first[found]]
            if bool(done.all()):
                break
            go = ~done
            todo, pos = todo[go], (pos[go] + _W) & mask
        return slot

    def lookup(self, ids: torch.Tensor) -> torch.Tensor:
        """Row of each ID (any shape), ``-1`` for IDs not in the index."""
        flat = ids.reshape(-1).long()
        slot = self._find(flat)
        rows = torch.where(slot >= 0, self.values[slot.clamp(min=0)].long(), torch.full_like(slot, -1))
        return rows.view(ids.shape)

    def contains(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lookup(ids) >= 0

    def items(self) -> tuple[torch.Tensor, torch.Tensor]:
        """All stored ``(ids, rows)``, in slot order."""
        occ = self.keys >= 0
        return self.keys[occ], self.values[occ].long()

    # ------------------------------------------------------------------ updates
    def insert(self, ids: torch.Tensor, rows: torch.Tensor) -> None:
        """Store ``ids -> rows``.  ``ids`` must be unique and not yet in the index."""
        ids, rows = ids.reshape(-1).long(), rows.reshape(-1).long()
        n = ids.numel()
        if n == 0:
            return
        if 2 * (self.size + n) > self.capacity:  # live IDs stay at most half of the slots
            self._rehash(max(self.capacity, 2 * (self.size + n)))
        elif 4 * (self.size + self.tombstones + n) > 3 * self.capacity:  # sweep tombstones at 3/4 use
            self._rehash(self.capacity)
        pos = self._home(ids)
        mask = self.capacity - 1
        win = torch.arange(_W, device=ids.device)
        claim = torch.empty_like(self.keys)
        big = torch.iinfo(torch.int64).max
        todo = torch.arange(n, device=ids.device)
        for _ in range(2 * self.capacity):
            # each pending ID looks for the first free slot in its window
            cand = (pos.unsqueeze(1) + win) & mask
            free = self.keys[cand] < 0
            has = free.any(1)
            first = free.int().argmax(1)
            target = torch.gather(cand, 1, first.unsqueeze(1)).squeeze(1)
            # IDs aiming at one slot race for it; the smallest ID wins (deterministic), the rest probe on
            tpos, tid = target[has], ids[todo[has]]
            claim[tpos] = big
            claim.scatter_reduce_(0, tpos, tid, reduce="amin")
            won = torch.zeros_like(has)
            won[has] = claim[tpos] == tid
            wpos, widx = target[won], todo[won]
            self.tombstones -= int((self.keys[wpos] == DELETED).sum())
            self.keys[wpos] = ids[widx]
            self.values[wpos] = rows[widx].int()
            left = ~won
            if not bool(left.any()):
                break
            # losers retry from the slot they lost; IDs with a full window skip it
            nxt = torch.where(has, target, (pos + _W) & mask)
            todo, pos = todo[left], nxt[left]
        self.size += n

    def remove(self, ids: torch.Tensor) -> torch.Tensor:
        """Delete IDs (absent ones are ignored); returns the rows they held."""
        slot = self._find(ids.reshape(-1).long())
        slot = torch.unique(slot[slot >= 0])  # an ID listed twice is removed once
        rows = self.values[slot].long()
        self.keys[slot] = DELETED
        self.values[slot] = -1
        self.size -= slot.numel()
        self.tombstones += slot.numel()
        if self.tombstones > self.capacity // 4:
            self._rehash(self.capacity)
        return rows

    @staticmethod
    def capacity_for(rows: int) -> int:
        """Slots the index needs for ``rows`` IDs (a power of two, at most half full)."""
        return 1 << max(4, int(2 * rows - 1).bit_length())

    def _rehash(self, capacity: int) -> None:
        ids, rows = self.items()
        cap = 1 << max(4, int(capacity - 1).bit_length())
        self.keys = torch.full((cap,), EMPTY, dtype=torch.int64, device=self.keys.device)
        self.values = torch.full((cap,), -1, dtype=torch.int32, device=self.keys.device)
        self.size = self.tombstones = 0
        self.insert(ids, rows)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        ids, rows = self.items()
        return {"ids": ids.cpu(), "rows": rows.cpu(), "capacity": self.capacity, "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        self.seed = int(state["seed"])
        cap = int(state["capacity"])
        device = self.keys.device
        self.keys = torch.full((cap,), EMPTY, dtype=torch.int64, device=device)
        self.values = torch.full((cap,), -1, dtype=torch.int32, device=device)
        self.size = self.tombstones = 0
        self.insert(state["ids"].to(device), state["rows"].to(device))


class CountMinSketch:
    """Approximate sighting counts of IDs in fixed memory (depth × width int32 counters).

    ``add`` and ``query`` are vectorised; an estimate never undercounts and overcounts
    by at most ``e * total / width`` with probability ``1 - exp(-depth)``.  Use
    :meth:`decay` on long streams so the int32 counters stay small.  Used for frequency admission: an ID gets a row once it
    has been seen ``N`` times, without storing every candidate ID.
    """

    def __init__(self, width: int = 1 << 16, depth: int = 4, device: torch.device | str = "cpu", seed: int = 0):
        if width < 1 or depth < 1:
            raise InputError(f"count-min sketch needs width >= 1 and depth >= 1, got {width} x {depth}")
        self.width, self.depth, self.seed = int(width), int(depth), seed
        self.table = torch.zeros((self.depth, self.width), dtype=torch.int32, device=device)

    def nbytes(self) -> int:
        return self.table.numel() * 4

    def _cols(self, ids: torch.Tensor) -> torch.Tensor:
        salts = torch.arange(self.depth, device=ids.device, dtype=torch.int64) * 0x51ED27 + self.seed
        h = mix64(ids.long().unsqueeze(0) ^ salts.unsqueeze(1), 11)
        return _srl(h, 1) % self.width  # (depth, n)

    def add(self, ids: torch.Tensor, counts: torch.Tensor | None = None) -> torch.Tensor:
        """Count ``ids`` (``counts`` sightings each, default 1); returns the new estimates."""
        ids = ids.reshape(-1)
        if counts is None:
            counts = torch.ones_like(ids)
        cols = self._cols(ids)
        flat = (cols + torch.arange(self.depth, device=ids.device).unsqueeze(1) * self.width).reshape(-1)
        self.table.view(-1).index_add_(0, flat, counts.to(torch.int32).repeat(self.depth))
        return self.query(ids)

    def query(self, ids: torch.Tensor) -> torch.Tensor:
        cols = self._cols(ids.reshape(-1))
        return self.table.gather(1, cols).amin(0).long()

    def reset(self) -> None:
        """Forget every sighting."""
        self.table.zero_()

    def decay(self, factor: float = 0.5) -> None:
        """Scale every counter by ``factor`` (forgetting old sightings on a drifting stream)."""
        self.table = (self.table.float() * factor).floor().to(torch.int32)

    def state_dict(self) -> dict:
        return {"table": self.table.cpu(), "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        self.table = state["table"].to(self.table.device).clone()
        self.depth, self.width = self.table.shape
        self.seed = int(state["seed"])
