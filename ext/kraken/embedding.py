"""Dynamic, collision-free embedding tables that admit and evict IDs while training.

:class:`DynamicEmbeddingCollection` is the Kraken counterpart of torchrec's
``EmbeddingBagCollection``: it takes a ``KeyedJaggedTensor`` of raw 64-bit
feature IDs and returns a ``KeyedTensor`` of pooled embeddings.  Unlike EBC it
does not need the vocabulary up front, and two IDs never share a row:

* **Index.** Raw IDs map to rows through :class:`~torchhpc.ext.kraken.hashing.IdIndex`
  (open addressing over tensors).  Tables start small and double up to
  ``max_rows`` (the memory budget).
* **Admission.** An unseen ID gets a row after ``admit_count`` sightings (counted
  in a count-min sketch, so candidates cost no rows) and/or with probability
  ``admit_prob`` per batch.  Until then it reads a zero vector and gets no update.
  A new row is initialised from a hash of its ID, so a re-admitted ID, or the
  same ID on another shard, starts from the same vector.
* **Eviction.** When admission needs rows and the table is at ``max_rows``, the
  least recently (``lru``) or least frequently (``lfu``) used rows not touched by
  the batch make room; ``ttl`` expires rows not seen for that many batches.  An
  evicted row's optimizer state is zeroed with it.
* **Sparse optimizer.** Rows are not ``nn.Parameter``s: ``forward`` gathers the
  touched rows into a small leaf tensor, autograd fills its gradient, and
  :meth:`apply_gradients` updates exactly those rows with a
  :class:`~torchhpc.ext.kraken.optim.SparseOptimizer` (fused Triton kernel on CUDA).
  On the Triton backend with row-wise AdaGrad (one store, one pooling mode) there is no gathered
  copy: ``forward`` pools straight from the store with one ``tbe_pool`` launch, its backward only
  records the output gradient, and :meth:`apply_gradients` runs the backward fused with the
  row-wise AdaGrad step of every touched row as one ``tbe_backward_rowwise_adagrad`` launch.
* **Deltas.** Rows changed since the last :meth:`export_delta` are tracked, so a
  checkpoint or a serving replica receives only those (:meth:`apply_delta`).

* **Table-batched.** The tables of one dim live side by side in a :class:`RowStore` (rows, state,
  metadata, index slots, sketch counters: one flat tensor each); a training step is one compiled pass
  over all tables (:mod:`~torchhpc.ext.kraken.batched`), one gather, one pooling over every feature and
  one optimizer step — bit-identical to each :class:`DynamicTable`'s readable ops, which run where the
  pass cannot (CUDA, no numba, a step in which a table grows).

Given identical rows, the output equals torchrec's EBC exactly (a test checks it).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import nn

from torchhpc.ext.core.config import option
from torchhpc.ext.core.errors import ConfigError, InputError

from .config import TableOptions
from .hashing import CountMinSketch, IdIndex, check_ids, hash_uniform
from .ops import jagged_embedding_bag
from .optim import SparseOptimizer

_META_BYTES_PER_ROW = 8 + 8 + 4 + 1  # row id, last seen, frequency, dirty flag
_SKETCH_DEPTH = 4


@dataclass
class DynamicTableConfig(TableOptions):
    """One dynamic table: a name, a dimension, the features it pools, and its :class:`TableOptions`.

    The per-table options (budget, admission, eviction, pooling, initialisation) are the fields of
    :class:`~torchhpc.ext.kraken.config.TableOptions`, inherited (keyword-only); see their docs there
    or in ``torchhpc kraken train --help``.  :meth:`of` builds one from the ``tables:`` section of
    a config.

    Attributes:
        name: table name.
        dim: embedding dimension.
        features: the KJT keys pooled through this table (default: ``[name]``).
    """

    name: str = option(help="table name")
    dim: int = option(help="embedding dimension", ge=1)
    features: list[str] = option(default_factory=list, help="the KJT keys pooled through this table (default: [name])")

    @classmethod
    def of(cls, options: TableOptions, name: str, dim: int, features: list[str] | None = None) -> DynamicTableConfig:
        """Table ``name`` of dimension ``dim`` pooling ``features`` with the per-table ``options``."""
        shared = {f.name: getattr(options, f.name) for f in fields(TableOptions)}
        return cls(name, dim, list(features or []), **shared)

    def validate(self, optimizer: SparseOptimizer) -> None:
        """Fix ``max_rows`` from the memory budget (the most rows whose whole table fits) and ``features``.

        Raises:
            InputError: the budget is too small for one row.
            ConfigError: neither ``max_rows`` nor a budget.
        """
        if self.memory_budget:
            one = self.table_bytes(1, optimizer)
            if self.memory_budget < one:
                raise InputError(
                    f"table {self.name!r}: memory budget {self.memory_budget} B is too small for one row "
                    f"({one} B for a table of one row of dim {self.dim} with {optimizer.kind})"
                )
            lo, hi = 1, max(1, self.memory_budget // self.bytes_per_row(optimizer))
            while lo < hi:  # the most rows whose whole table (weights, state, index, sketch) fits
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if self.table_bytes(mid, optimizer) <= self.memory_budget else (lo, mid - 1)
            self.max_rows = min(self.max_rows, lo) if self.max_rows else lo
        if self.max_rows < 1:
            raise ConfigError(f"table {self.name!r}: give max_rows >= 1 or a memory_budget_mb")
        if not self.features:
            self.features = [self.name]

    def bytes_per_row(self, optimizer: SparseOptimizer) -> int:
        """Weights + optimizer state + row metadata of one fp32 row (the index and sketch come on top)."""
        return self.dim * 4 + optimizer.state_bytes_per_row(self.dim) + _META_BYTES_PER_ROW

    def sketch_columns(self, rows: int) -> int:
        """Counters per sketch row: ``sketch_width``, or by default one per table row (a power of two)."""
        return self.sketch_width or (1 << max(10, int(rows - 1).bit_length()))

    def table_bytes(self, rows: int, optimizer: SparseOptimizer) -> int:
        """Everything a full table of ``rows`` rows holds: rows, state, metadata, index, admission sketch."""
        index = IdIndex.capacity_for(rows) * IdIndex.BYTES_PER_SLOT
        sketch = 4 * _SKETCH_DEPTH * self.sketch_columns(rows) if self.admit_count > 1 else 0
        return rows * self.bytes_per_row(optimizer) + index + sketch


def pool_features(cfg: DynamicTableConfig, feats: list, rows: torch.Tensor, slot: torch.Tensor,
                  device: torch.device, backend: str = "auto") -> dict[str, torch.Tensor]:
    """Pool each feature of one table: ``feats`` are its JaggedTensors (in ``cfg.features`` order),
    ``rows`` the gathered rows and ``slot`` the row of every value of the concatenated features."""
    out, start = {}, 0
    for f, jt in zip(cfg.features, feats, strict=True):
        n = jt.values().numel()
        w = jt.weights_or_none()
        out[f] = jagged_embedding_bag(rows, slot[start:start + n], jt.offsets().to(device), cfg.pooling,
                                      w.to(device) if w is not None else None, backend=backend, validate=False)
        start += n
    return out


class RowStore:
    """Every table of one dim side by side: weights, optimizer state, row metadata, ID index, sketch.

    Each field is one flat tensor; table ``slot`` owns one contiguous segment of it (its rows, its
    index slots, its sketch counters), which it sees as a view.  This is the layout of fbgemm's
    table-batched embeddings: one gather reads the rows of all tables, one optimizer step updates
    them, and the compiled pass of :mod:`~torchhpc.ext.kraken.batched` walks one ID index whose key
    is ``(table, ID)`` — the table picks the segment.  Replacing one table's segment (growth, a
    loaded checkpoint, an index rehash) re-lays out that field; that is rare (tables double up to
    their budget).
    """

    ROW_FIELDS = ("weight", "dirty", "row_id", "last_seen", "freq")

    def __init__(self, optimizer: SparseOptimizer, dim: int, device):
        self.device, self.dim = torch.device(device), dim
        self.state_keys = tuple(optimizer.state_shapes(dim))
        self.flat: dict[str, torch.Tensor] = {}
        self.shapes: dict[str, list[tuple[int, ...]]] = {}
        self.offsets: dict[str, list[int]] = {}
        self.slots = 0

    # flat views of all tables' rows
    @property
    def weight(self) -> torch.Tensor:
        """``(R, D)``: the rows of every table."""
        return self.flat["weight"].view(-1, self.dim)

    @property
    def state(self) -> dict[str, torch.Tensor]:
        return {k: self.flat["state." + k].view(-1, *self.shapes["state." + k][0][1:]) for k in self.state_keys}

    @property
    def dirty(self) -> torch.Tensor:
        return self.flat["dirty"]

    def add(self, **fields: torch.Tensor) -> int:
        """A new table's segment of each field; returns its slot."""
        slot = self.slots
        self.slots += 1
        for name, t in fields.items():
            self.shapes.setdefault(name, []).append((0,))
            self.offsets.setdefault(name, [0])
            self.offsets[name].append(self.offsets[name][-1])
            self.flat.setdefault(name, t.new_empty(0))
        self.put(slot, **fields)
        return slot

    def put(self, slot: int, **fields: torch.Tensor) -> None:
        """Replace table ``slot``'s segment of the given fields (any size) and re-lay them out."""
        for name, t in fields.items():
            off, flat = self.offsets[name], self.flat[name]
            parts = [t.reshape(-1) if i == slot else flat[off[i]:off[i + 1]] for i in range(self.slots)]
            self.flat[name] = torch.cat(parts).to(t.dtype)
            self.shapes[name][slot] = tuple(t.shape)
            sizes = [off[i + 1] - off[i] for i in range(self.slots)]
            sizes[slot] = t.numel()
            self.offsets[name] = [0]
            for n in sizes:
                self.offsets[name].append(self.offsets[name][-1] + n)

    def get(self, name: str, slot: int) -> torch.Tensor:
        """Table ``slot``'s segment of field ``name``, as a view of its shape."""
        off = self.offsets[name]
        return self.flat[name][off[slot]:off[slot + 1]].view(self.shapes[name][slot])

    def base(self, name: str, slot: int) -> int:
        """Where table ``slot``'s segment of ``name`` starts (in elements; rows for 1-D row fields)."""
        return self.offsets[name][slot]


class _StoredIndex(IdIndex):
    """An :class:`IdIndex` whose slots are table ``slot``'s segment of a :class:`RowStore`."""

    def __init__(self, store: RowStore, slot: int, capacity: int, device, seed: int):
        self.store, self.slot = store, slot
        super().__init__(capacity, device, seed)

    keys = property(lambda self: self.store.get("index.keys", self.slot),
                    lambda self, t: self.store.put(self.slot, **{"index.keys": t}))
    values = property(lambda self: self.store.get("index.values", self.slot),
                      lambda self, t: self.store.put(self.slot, **{"index.values": t}))


class _StoredSketch(CountMinSketch):
    """A :class:`CountMinSketch` whose counters are table ``slot``'s segment of a :class:`RowStore`."""

    def __init__(self, store: RowStore, slot: int, width: int, depth: int, device, seed: int):
        self.store, self.slot = store, slot
        super().__init__(width, depth, device, seed)

    table = property(lambda self: self.store.get("sketch", self.slot),
                     lambda self, t: self.store.put(self.slot, sketch=t))


class DynamicTable:
    """Storage of one table: rows, their optimizer state, metadata and the ID index (not a Module).

    Everything it holds is a view of its segment of a :class:`RowStore` shared by the tables of one
    dim (``store``; by default a store of its own)."""

    def __init__(self, cfg: DynamicTableConfig, optimizer: SparseOptimizer, device, seed: int,
                 store: RowStore | None = None):
        self.cfg, self.opt, self.device, self.seed = cfg, optimizer, torch.device(device), seed
        rows = max(1, min(cfg.init_rows, cfg.max_rows))
        self.store = store if store is not None else RowStore(optimizer, cfg.dim, self.device)
        dev = self.device
        self.slot = self.store.add(
            weight=torch.zeros((rows, cfg.dim), device=dev),
            **{f"state.{k}": v for k, v in optimizer.init_state(rows, cfg.dim, dev).items()},
            dirty=torch.zeros(rows, dtype=torch.bool, device=dev),
            row_id=torch.full((rows,), -1, dtype=torch.int64, device=dev),
            last_seen=torch.zeros(rows, dtype=torch.int64, device=dev),
            freq=torch.zeros(rows, dtype=torch.float32, device=dev),
            **{"index.keys": torch.empty(0, dtype=torch.int64, device=dev),
               "index.values": torch.empty(0, dtype=torch.int32, device=dev)},
            sketch=torch.empty((0, 0), dtype=torch.int32, device=dev),
        )
        self.index = _StoredIndex(self.store, self.slot, 2 * rows, dev, seed)
        self.sketch = (
            _StoredSketch(self.store, self.slot, cfg.sketch_columns(cfg.max_rows), _SKETCH_DEPTH, dev, seed)
            if cfg.admit_count > 1 else None
        )
        self.opt_steps = 0
        self.evictions = 0
        self.admissions = 0

    # ------------------------------------------------------------------ views of the shared store
    @property
    def base(self) -> int:
        """This table's first row in its :class:`RowStore`."""
        return self.store.base("row_id", self.slot)

    weight = property(lambda self: self.store.get("weight", self.slot))
    dirty = property(lambda self: self.store.get("dirty", self.slot))
    row_id = property(lambda self: self.store.get("row_id", self.slot))
    last_seen = property(lambda self: self.store.get("last_seen", self.slot))
    freq = property(lambda self: self.store.get("freq", self.slot))

    @property
    def state(self) -> dict[str, torch.Tensor]:
        return {k: self.store.get("state." + k, self.slot) for k in self.store.state_keys}

    def set_rows_storage(self, weight: torch.Tensor, state: dict[str, torch.Tensor], dirty: torch.Tensor,
                         row_id: torch.Tensor, last_seen: torch.Tensor, freq: torch.Tensor) -> None:
        """Replace every per-row tensor (grown or loaded; all of one length) in the store."""
        self.store.put(self.slot, weight=weight, **{f"state.{k}": v for k, v in state.items()}, dirty=dirty,
                       row_id=row_id, last_seen=last_seen, freq=freq)

    # ------------------------------------------------------------------ sizes
    @property
    def rows_allocated(self) -> int:
        return self.weight.shape[0]

    @property
    def rows_used(self) -> int:
        return self.index.size

    def memory(self) -> dict[str, int]:
        """Bytes held now: weights, optimizer state, index (+ sketch) and row metadata."""
        state = sum(t.numel() * t.element_size() for t in self.state.values())
        meta = sum(t.numel() * t.element_size() for t in (self.row_id, self.last_seen, self.freq, self.dirty))
        index = self.index.nbytes() + (self.sketch.nbytes() if self.sketch is not None else 0)
        weights = self.weight.numel() * self.weight.element_size()
        return {"weights": weights, "optimizer": state, "index": index, "metadata": meta,
                "total": weights + state + index + meta}

    def _grow(self, need: int) -> None:
        R = self.rows_allocated
        new = min(self.cfg.max_rows, max(2 * R, need))
        if new <= R:
            return
        extra = new - R

        def pad(t, fill=0):
            return torch.cat([t, torch.full((extra, *t.shape[1:]), fill, dtype=t.dtype, device=t.device)])

        self.set_rows_storage(pad(self.weight), {k: pad(v) for k, v in self.state.items()}, pad(self.dirty, False),
                              pad(self.row_id, -1), pad(self.last_seen), pad(self.freq))

    # ------------------------------------------------------------------ admission / eviction
    def _free_rows(self, n: int, protect: torch.Tensor, step: int) -> torch.Tensor:
        """Up to ``n`` free rows: unused ones first, then grow, then evict (never rows in ``protect``)."""
        if self.rows_used < self.rows_allocated:
            free = torch.nonzero(self.row_id < 0).squeeze(1)
        else:  # the usual case once a table is full: skip the scan
            free = self.row_id.new_empty(0)
        if free.numel() < n and self.rows_allocated < self.cfg.max_rows:
            self._grow(self.rows_used + n)
            free = torch.nonzero(self.row_id < 0).squeeze(1)
        if free.numel() < n and self.cfg.eviction != "none":
            used = self.row_id >= 0
            used[protect] = False
            cand = torch.nonzero(used).squeeze(1)
            k = min(n - free.numel(), cand.numel())
            if k > 0:
                score = (self.last_seen if self.cfg.eviction == "lru" else self.freq)[cand].double()
                # the k lowest scores, ties broken by ID so the choice does not depend on row order
                thr = torch.kthvalue(score, k).values
                pool = cand[score <= thr]
                pool = pool[torch.argsort(self.row_id[pool], stable=True)]
                pscore = (self.last_seen if self.cfg.eviction == "lru" else self.freq)[pool].double()
                victims = pool[torch.sort(pscore, stable=True).indices[:k]]
                self.evict_rows(victims)
                free = torch.cat([free, victims])
        return free[:n]

    def evict_rows(self, rows: torch.Tensor) -> None:
        """Drop rows: remove their IDs from the index, zero weights and optimizer state."""
        if rows.numel() == 0:
            return
        self.index.remove(self.row_id[rows])
        self.row_id[rows] = -1
        self.weight[rows] = 0
        for v in self.state.values():
            v[rows] = 0
        self.last_seen[rows] = 0
        self.freq[rows] = 0
        self.dirty[rows] = True
        self.evictions += rows.numel()

    def expire(self, step: int) -> int:
        """TTL: evict rows last seen more than ``ttl`` batches before ``step``; returns how many."""
        if not self.cfg.ttl:
            return 0
        old = torch.nonzero((self.row_id >= 0) & (step - self.last_seen > self.cfg.ttl)).squeeze(1)
        self.evict_rows(old)
        return old.numel()

    def admit(self, ids: torch.Tensor, counts: torch.Tensor, step: int, protect: torch.Tensor) -> torch.Tensor:
        """Give rows to those of ``ids`` (unique, not in the index) that pass admission; returns
        the row of each ID (``-1``: not admitted)."""
        out = torch.full_like(ids, -1)
        if ids.numel() == 0:
            return out
        ok = torch.ones_like(ids, dtype=torch.bool)
        if self.sketch is not None:
            ok &= self.sketch.add(ids, counts) >= self.cfg.admit_count
        if self.cfg.admit_prob < 1.0:
            # a per-(ID, batch) coin from a hash, identical on every shard layout
            ok &= hash_uniform(ids, 1, seed=self.seed * 1_000_003 + step).squeeze(1) < self.cfg.admit_prob
        pos = torch.nonzero(ok).squeeze(1)
        if pos.numel() == 0:
            return out
        rows = self._free_rows(pos.numel(), protect, step)
        if rows.numel() < pos.numel():  # table full and no eviction: admit the most frequent first
            keep = torch.argsort(counts[pos], descending=True, stable=True)[: rows.numel()]
            pos = pos[keep]
        new = ids[pos]
        out[pos] = rows
        self.index.insert(new, rows)
        self.row_id[rows] = new
        self.init_rows(rows, new)
        self.last_seen[rows] = step
        self.freq[rows] = 0
        self.dirty[rows] = True
        self.admissions += new.numel()
        return out

    def init_rows(self, rows: torch.Tensor, ids: torch.Tensor) -> None:
        """Initialise new rows from their IDs alone (uniform in ``[-init_scale, init_scale)``)."""
        self.weight[rows] = (hash_uniform(ids, self.cfg.dim, seed=self.seed) * 2 - 1) * self.cfg.init_scale

    # ------------------------------------------------------------------ lookup
    def lookup(self, ids: torch.Tensor, counts: torch.Tensor | None, step: int | None) -> torch.Tensor:
        """Rows of unique ``ids`` (``-1`` = no row).  With ``step`` (training), admit, evict and record use."""
        rows = self.index.lookup(ids)
        if step is None:
            return rows
        if counts is None:
            counts = torch.ones_like(ids)
        if self.sketch is not None and self.cfg.admit_window and step % self.cfg.admit_window == 0:
            self.sketch.decay(0.5)  # every shard decays at the same steps, whatever IDs it saw
        miss = rows < 0
        if bool(miss.any()):
            rows[miss] = self.admit(ids[miss], counts[miss], step, protect=rows[~miss])
        hit = rows >= 0
        self.last_seen[rows[hit]] = step
        self.freq[rows[hit]] += counts[hit].float()
        return rows

    def update(self, rows: torch.Tensor, grads: torch.Tensor, backend: str = "auto") -> None:
        """One sparse optimizer step on ``rows`` (unique) with their gradients."""
        self.opt_steps += 1
        self.opt.step(self.weight, self.state, rows, grads, self.opt_steps, backend=backend)
        self.dirty[rows] = True

    # ------------------------------------------------------------------ state / deltas
    def state_dict(self) -> dict:
        return {
            "weight": self.weight.clone(), "row_id": self.row_id.clone(), "last_seen": self.last_seen.clone(),
            "freq": self.freq.clone(), **{f"state.{k}": v.clone() for k, v in self.state.items()},
            "sketch": self.sketch.table.clone() if self.sketch is not None else torch.empty(0),
            "counters": torch.tensor([self.opt_steps, self.evictions, self.admissions]),
        }

    def load_state_dict(self, sd: dict) -> None:
        row_id = sd["row_id"].to(self.device)
        self.set_rows_storage(sd["weight"].to(self.device), {k: sd[f"state.{k}"].to(self.device) for k in self.state},
                              torch.zeros(row_id.shape, dtype=torch.bool, device=self.device), row_id,
                              sd["last_seen"].to(self.device), sd["freq"].to(self.device))
        if self.sketch is not None and sd["sketch"].numel():
            self.sketch.table = sd["sketch"].to(self.device).clone()
        self.opt_steps, self.evictions, self.admissions = (int(x) for x in sd["counters"])
        self.index = _StoredIndex(self.store, self.slot, 2 * self.rows_allocated, self.device, self.seed)
        used = torch.nonzero(self.row_id >= 0).squeeze(1)
        self.index.insert(self.row_id[used], used)

    def export_delta(self, with_state: bool = True, clear: bool = True) -> dict:
        """The rows changed since the last export (their IDs, weights and, optionally, optimizer state).

        ``clear=False`` keeps them marked as changed (clear them once the delta is safely stored)."""
        rows = torch.nonzero(self.dirty).squeeze(1)
        out = {"rows": rows.cpu(), "ids": self.row_id[rows].cpu(), "weight": self.weight[rows].cpu(),
               "rows_allocated": self.rows_allocated}
        if with_state:
            out.update({"last_seen": self.last_seen[rows].cpu(), "freq": self.freq[rows].cpu(),
                        **{f"state.{k}": v[rows].cpu() for k, v in self.state.items()},
                        "sketch": self.sketch.table.cpu().clone() if self.sketch is not None else torch.empty(0),
                        "counters": torch.tensor([self.opt_steps, self.evictions, self.admissions])})
        if clear:
            self.dirty.zero_()
        return out

    def apply_delta(self, delta: dict) -> None:
        """Apply an exported delta: this table then mirrors the exporter's rows exactly."""
        if delta["rows_allocated"] > self.rows_allocated:
            self._grow(delta["rows_allocated"])
        rows = delta["rows"].to(self.device)
        ids = delta["ids"].to(self.device)
        old = self.row_id[rows]
        self.index.remove(old[old >= 0])
        self.row_id[rows] = ids
        live = ids >= 0
        self.index.insert(ids[live], rows[live])
        self.weight[rows] = delta["weight"].to(self.device, self.weight.dtype)
        if "last_seen" in delta:
            self.last_seen[rows] = delta["last_seen"].to(self.device)
            self.freq[rows] = delta["freq"].to(self.device)
            for k, v in self.state.items():
                v[rows] = delta[f"state.{k}"].to(self.device, v.dtype)
            if self.sketch is not None and delta["sketch"].numel():
                self.sketch.table = delta["sketch"].to(self.device).clone()
            self.opt_steps, self.evictions, self.admissions = (int(x) for x in delta["counters"])


class _TBEStep:
    """One training forward pooled by :func:`~torchhpc.triton_kernels.kraken.tbe_pool`, waiting for its
    fused backward + row-wise AdaGrad step in :meth:`DynamicEmbeddingCollection.apply_gradients`.

    ``rows (nnz,)`` is the store row of every value (``-1``: no row), ``offsets (K*B + 1,)`` the bags of
    every feature (both int64); ``grad_out (K*B, D)`` is filled (summed over backwards) by
    :class:`_TableBatchedPool`'s backward, ``None`` until then."""

    __slots__ = ("store", "rows", "offsets", "mean", "psw", "grad_out")

    def __init__(self, store: RowStore, rows: torch.Tensor, offsets: torch.Tensor, mean: bool,
                 psw: torch.Tensor | None):
        self.store, self.rows, self.offsets, self.mean, self.psw = store, rows, offsets, mean, psw
        self.grad_out: torch.Tensor | None = None

    def nbytes(self) -> int:
        """What the pending step holds beyond the store: rows, offsets, weights and the output gradient."""
        ts = [self.rows, self.offsets, self.psw, self.grad_out]
        return sum(t.numel() * t.element_size() for t in ts if t is not None)


class _TableBatchedPool(torch.autograd.Function):
    """Every bag of every feature pooled from the store in one ``tbe_pool`` launch (no gathered copy).

    The store is not a leaf of the graph: ``anchor`` (an empty tensor that requires grad) makes the
    output require grad, and the backward only records ``grad_out`` in ``record`` for
    :meth:`DynamicEmbeddingCollection.apply_gradients`, returning no gradient to anything."""

    @staticmethod
    def forward(ctx, anchor, weight, record: _TBEStep):
        from torchhpc.triton_kernels import kraken as K

        ctx.record = record
        return K.tbe_pool(weight, record.rows, record.offsets, record.mean, record.psw)

    @staticmethod
    def backward(ctx, grad_out):
        rec = ctx.record
        rec.grad_out = grad_out if rec.grad_out is None else rec.grad_out + grad_out
        return None, None, None


class DynamicEmbeddingCollection(nn.Module):
    """Pooled embeddings of a ``KeyedJaggedTensor`` of raw IDs through dynamic tables.

    Args:
        tables: one :class:`DynamicTableConfig` per table.
        optimizer: the sparse row optimizer shared by the tables.
        device: where the tables live.
        seed: seeds the index hash and the row initialisation.
        backend: ``auto`` (Triton kernels on CUDA), ``torch`` or ``triton``.

    ``forward(kjt)`` returns a torchrec ``KeyedTensor`` with one ``(B, dim)`` block per
    feature, in the tables' feature order.  In training mode it admits/evicts and
    records the touched rows; call :meth:`apply_gradients` after ``backward`` to update
    them.  In eval mode it only reads (unknown IDs read zeros).
    """

    def __init__(
        self,
        tables: list[DynamicTableConfig],
        optimizer: SparseOptimizer | None = None,
        device: torch.device | str = "cpu",
        seed: int = 0,
        backend: str = "auto",
    ):
        super().__init__()
        self.optimizer = optimizer or SparseOptimizer()
        names = [t.name for t in tables]
        if len(set(names)) != len(names):
            raise ConfigError(f"table names must be unique, got {names}")
        self.configs = {}
        self.feature_to_table: dict[str, str] = {}
        for t in tables:
            t.validate(self.optimizer)
            self.configs[t.name] = t
            for f in t.features:
                if f in self.feature_to_table:
                    raise ConfigError(f"feature {f!r} is pooled by two tables")
                self.feature_to_table[f] = t.name
        self.feature_names = [f for t in tables for f in t.features]
        self.stores: dict[int, RowStore] = {}  # one per dim: the tables' rows side by side
        for t in tables:
            self.stores.setdefault(t.dim, RowStore(self.optimizer, t.dim, device))
        self.tables = {t.name: DynamicTable(t, self.optimizer, device, seed + 101 * i, self.stores[t.dim])
                       for i, t in enumerate(tables)}
        self.device_ = torch.device(device)
        self.backend = backend
        self.batched = True  # the table-batched compiled pass where it can run (False: the reference ops)
        self.tbe = True  # the table-batched Triton step where it applies (False: gather + per-op kernels)
        self.lookup_passes = {"batched": 0, "reference": 0}  # which lookup ran, per forward
        self.iteration = 0
        self._pending: list[tuple[object, torch.Tensor, torch.Tensor] | _TBEStep] = []  # steps for apply_gradients

    # ------------------------------------------------------------------ forward
    def _check_kjt(self, kjt) -> None:
        keys = list(kjt.keys())
        missing = [f for f in self.feature_names if f not in keys]
        if missing:
            raise InputError(f"KeyedJaggedTensor lacks features {missing} (has {keys})")
        lengths = kjt.lengths()
        if lengths.numel() and int(lengths.min()) < 0:
            raise InputError("KeyedJaggedTensor has negative lengths")
        if int(lengths.sum()) != kjt.values().numel():
            raise InputError(
                f"KeyedJaggedTensor lengths sum to {int(lengths.sum())} but it holds {kjt.values().numel()} values"
            )
        check_ids(kjt.values(), "KeyedJaggedTensor values (feature IDs)")

    def _start_forward(self, kjt):
        """Check the KJT, split it by feature and count a training step: ``(jts, training, step)``."""
        self._check_kjt(kjt)
        jts = kjt.to_dict()
        training = self.training and torch.is_grad_enabled()
        if training:
            self.iteration += 1
        return jts, training, (self.iteration if training else None)

    def _table_values(self, jts, cfg: DynamicTableConfig):
        """One table's features (JaggedTensors) and all their IDs, concatenated, on this device."""
        feats = [jts[f] for f in cfg.features]
        return feats, torch.cat([jt.values() for jt in feats]).to(self.device_).long()

    def _in_feature_order(self, kjt):
        """The KJT with exactly this collection's features, in their order (usually as given)."""
        keys = list(kjt.keys())
        if keys == self.feature_names:
            return kjt
        return kjt.permute([keys.index(f) for f in self.feature_names])

    def _lookup(self, values: torch.Tensor, value_offsets: list[int], step: int | None):
        """Store rows of every table's unique IDs: ``(rows (U,), unique offsets (T+1,), inverse (nnz,))``.

        ``rows`` number the rows of each table's :class:`RowStore` (``-1``: no row); ``inverse`` gives
        each value's position in ``rows``.  Runs the table-batched compiled pass
        (:func:`~torchhpc.ext.kraken.batched.lookup_all_tables`) where it can (CPU, numba, one store,
        no table that may grow in this step), else each table's reference ops; the two agree exactly."""
        from torchhpc.ext.core.dispatch import numba_available

        from .batched import lookup_all_tables

        tables = list(self.tables.values())
        if self.batched and self.device_.type == "cpu" and len(self.stores) == 1 and numba_available():
            out = lookup_all_tables(tables, values, value_offsets, step)
            if out is not None:  # None: a table may grow in this step (rare), which the reference ops do
                self.lookup_passes["batched"] += 1
                return out
        self.lookup_passes["reference"] += 1
        rows, inv, uoff = [], [], [0]
        for t, lo, hi in zip(tables, value_offsets[:-1], value_offsets[1:], strict=True):
            if step is not None:
                t.expire(step)
            uniq, inverse, counts = torch.unique(values[lo:hi], return_inverse=True, return_counts=True)
            r = t.lookup(uniq, counts, step)
            rows.append(torch.where(r >= 0, r + t.base, r))
            inv.append(inverse + uoff[-1])
            uoff.append(uoff[-1] + uniq.numel())
        return torch.cat(rows), uoff, torch.cat(inv)

    def forward(self, kjt):
        from torchrec.sparse.jagged_tensor import KeyedTensor

        self._check_kjt(kjt)
        training = self.training and torch.is_grad_enabled()
        if training:
            self.iteration += 1
        step = self.iteration if training else None
        kjt = self._in_feature_order(kjt)
        values = kjt.values().to(self.device_).long()
        per_feature = kjt.length_per_key()
        value_offsets, i = [0], 0
        for cfg in self.configs.values():
            value_offsets.append(value_offsets[-1] + sum(per_feature[i:i + len(cfg.features)]))
            i += len(cfg.features)
        rows, uoff, inv = self._lookup(values, value_offsets, step)
        weights = kjt.weights_or_none()
        weights = weights.to(self.device_) if weights is not None else None
        modes = {c.pooling for c in self.configs.values()}
        if len(self.stores) == 1 and len(modes) == 1 and not kjt.variable_stride_per_key():
            store = next(iter(self.stores.values()))
            if self._uses_tbe(store, weights):
                # every bag of every feature in one launch, straight from the store
                out = self._tbe_forward(store, rows, inv, kjt.offsets(), next(iter(modes)), weights, training)
                K, B, D = len(self.feature_names), kjt.stride(), store.dim
                return KeyedTensor(keys=self.feature_names, length_per_key=[D] * K,
                                   values=out.view(K, B, D).transpose(0, 1).reshape(B, K * D))
            # one gather from the store, one pooling over every feature of the batch
            hit = rows >= 0
            rows_hit = rows[hit]
            emb = store.weight[rows_hit].detach()
            if training:
                emb.requires_grad_(True)
                self._pending.append((store, rows_hit, emb))
            slot = torch.where(hit, torch.cumsum(hit, 0) - 1, torch.full_like(rows, rows_hit.numel()))[inv]
            local = torch.cat([emb, emb.new_zeros((1, emb.shape[1]))])  # the last row: zeros for IDs with no row
            K, B, D = len(self.feature_names), kjt.stride(), emb.shape[1]
            out = jagged_embedding_bag(local, slot, kjt.offsets().to(self.device_), modes.pop(), weights,
                                       backend=self.backend, validate=False)
            return KeyedTensor(keys=self.feature_names, length_per_key=[D] * K,
                               values=out.view(K, B, D).transpose(0, 1).reshape(B, K * D))
        # tables of several dims or pooling modes: gather and pool table by table
        hit = rows >= 0
        pooled: dict[str, torch.Tensor] = {}
        jts = kjt.to_dict()
        for t, table in enumerate(self.tables.values()):
            r, h = rows[uoff[t]:uoff[t + 1]], hit[uoff[t]:uoff[t + 1]]
            rows_hit = r[h]
            emb = table.store.weight[rows_hit].detach()
            if training:
                emb.requires_grad_(True)
                self._pending.append((table, rows_hit, emb))
            local = torch.cat([emb, emb.new_zeros((1, table.cfg.dim))])
            inv_t = inv[value_offsets[t]:value_offsets[t + 1]] - uoff[t]
            slot = torch.where(h, torch.cumsum(h, 0) - 1, torch.full_like(r, rows_hit.numel()))[inv_t]
            pooled.update(pool_features(table.cfg, [jts[f] for f in table.cfg.features], local, slot, self.device_,
                                        self.backend))
        return KeyedTensor.from_tensor_list(self.feature_names, [pooled[f] for f in self.feature_names])

    def _uses_tbe(self, store: RowStore, weights: torch.Tensor | None) -> bool:
        """Whether the step of one store and one pooling mode runs the table-batched Triton kernels:
        row-wise AdaGrad, ``backend`` resolving to ``triton``, fp32 rows of at most 1024 columns (the fused
        update holds a row in one block) and per-sample weights, if any, that need no gradient."""
        from torchhpc.ext.core.dispatch import resolve_backend

        return (self.tbe and self.optimizer.kind == "rowwise_adagrad" and store.dim <= 1024
                and store.weight.dtype == torch.float32 and store.state["v"].dtype == torch.float32
                and (weights is None or not weights.requires_grad)
                and resolve_backend(self.backend, self.device_) == "triton")

    def _tbe_forward(self, store: RowStore, rows: torch.Tensor, inv: torch.Tensor, offsets: torch.Tensor,
                     mode: str, weights: torch.Tensor | None, training: bool) -> torch.Tensor:
        """``(K*B, D)``: every bag pooled from the store by one ``tbe_pool`` launch; in training, through
        :class:`_TableBatchedPool`, whose backward leaves ``grad_out`` for :meth:`apply_gradients`."""
        from torchhpc.triton_kernels import kraken as K

        record = _TBEStep(store, rows.long()[inv], offsets.to(self.device_, torch.int64), mode == "mean", weights)
        if not training:
            return K.tbe_pool(store.weight, record.rows, record.offsets, record.mean, record.psw)
        anchor = torch.empty(0, device=self.device_, requires_grad=True)
        out = _TableBatchedPool.apply(anchor, store.weight, record)
        self._pending.append(record)
        return out

    def _tbe_update(self, rec: _TBEStep, scale: float) -> int:
        """The recorded step's backward fused with row-wise AdaGrad on every touched row (one launch, in
        place: ``store.weight`` and the row-wise state ``store.state["v"]`` with the optimizer's lr and
        eps), then what :meth:`apply_gradients` does after any step: dirty rows, step counters."""
        from torchhpc.triton_kernels import kraken as K

        store = rec.store
        g = rec.grad_out
        if g is None:  # the output took no part in the loss: a step with zero gradients, as the gather path
            g = torch.zeros((rec.offsets.numel() - 1, store.dim), dtype=store.weight.dtype, device=store.device)
        g = g * scale if scale != 1.0 else g
        touched = K.tbe_backward_rowwise_adagrad(g.to(store.weight.dtype), store.weight, store.state["v"],
                                                 rec.rows, rec.offsets, self.optimizer.lr, self.optimizer.eps,
                                                 rec.mean, rec.psw)
        store.dirty[touched] = True
        for t in self.tables.values():  # one optimizer step of every table of the store (as the gather path)
            if t.store is store:
                t.opt_steps += 1
        return touched.numel()

    def pending_bytes(self) -> int:
        """Bytes the steps waiting for :meth:`apply_gradients` hold beyond the tables (gathered rows and
        their gradients, or the table-batched step's rows, offsets and output gradient)."""
        return sum(p.nbytes() if isinstance(p, _TBEStep) else p[2].numel() * p[2].element_size() * 2
                   for p in self._pending)

    @torch.no_grad()
    def apply_gradients(self, scale: float = 1.0) -> int:
        """Sparse optimizer step on every row the last training forward touched; returns rows updated.

        Every training step counts as one optimizer step of every table (Adam's bias correction); the
        rows of all tables of one :class:`RowStore` are updated in one step (on the table-batched Triton
        path, one launch that is also the backward)."""
        n = 0
        for entry in self._pending:
            if isinstance(entry, _TBEStep):
                n += self._tbe_update(entry, scale)
                continue
            owner, rows, emb = entry
            g = emb.grad if emb.grad is not None else torch.zeros_like(emb)
            g = g * scale if scale != 1.0 else g
            if isinstance(owner, DynamicTable):  # one table's rows (tables pooled one by one)
                owner.update(rows - owner.base, g, backend=self.backend)
                n += rows.numel()
                continue
            store = owner
            tables = [t for t in self.tables.values() if t.store is store]
            steps = {t.opt_steps for t in tables}
            if len(steps) == 1:
                step = steps.pop() + 1
                self.optimizer.step(store.weight, store.state, rows, g, step, backend=self.backend)
                store.dirty[rows] = True
                for t in tables:
                    t.opt_steps = step
            else:  # tables restored with different step counts (e.g. from deltas): table by table
                for t in tables:
                    mine = (rows >= t.base) & (rows < t.base + t.rows_allocated)
                    t.update(rows[mine] - t.base, g[mine], backend=self.backend)
            n += rows.numel()
        self._pending = []
        return n

    # ------------------------------------------------------------------ rows, memory, state
    @torch.no_grad()
    def set_rows(self, table: str, ids: torch.Tensor, weights: torch.Tensor) -> None:
        """Put given rows in a table (e.g. to compare with a fixed table); IDs unique."""
        t = self.tables[table]
        ids = ids.to(t.device).long()
        check_ids(ids)
        rows = t.index.lookup(ids)
        new = rows < 0
        if bool(new.any()):
            free = t._free_rows(int(new.sum()), protect=rows[~new], step=self.iteration)
            if free.numel() < int(new.sum()):
                raise InputError(f"table {table!r} has room for {free.numel()} more rows, not {int(new.sum())}")
            t.index.insert(ids[new], free)
            t.row_id[free] = ids[new]
            t.last_seen[free] = self.iteration
            rows = t.index.lookup(ids)
        t.weight[rows] = weights.to(t.weight)
        t.dirty[rows] = True

    def get_rows(self, table: str, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(weights (n, D), present (n,))`` of IDs; absent IDs give zero rows."""
        t = self.tables[table]
        rows = t.index.lookup(ids.to(t.device).long())
        w = t.weight[rows.clamp(min=0)] * (rows >= 0).unsqueeze(1)
        return w, rows >= 0

    def memory(self) -> dict[str, dict[str, int]]:
        """Bytes per table (weights, optimizer, index, metadata, total) and their sum under ``"all"``."""
        out = {name: t.memory() for name, t in self.tables.items()}
        out["all"] = {k: sum(m[k] for m in out.values()) for k in next(iter(out.values()))}
        return out

    def stats(self) -> dict[str, dict[str, int]]:
        return {name: {"rows": t.rows_used, "allocated": t.rows_allocated, "max_rows": t.cfg.max_rows,
                       "admissions": t.admissions, "evictions": t.evictions} for name, t in self.tables.items()}

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        destination[prefix + "iteration"] = torch.tensor(self.iteration)
        for name, t in self.tables.items():
            for k, v in t.state_dict().items():
                destination[f"{prefix}tables.{name}.{k}"] = v

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        key = prefix + "iteration"
        if key not in state_dict:
            missing_keys.append(key)
            return
        self.iteration = int(state_dict[key])
        for name, t in self.tables.items():
            p = f"{prefix}tables.{name}."
            sd = {k[len(p):]: v for k, v in state_dict.items() if k.startswith(p)}
            if "weight" not in sd:
                missing_keys.append(p + "weight")
                continue
            if sd["weight"].shape[1] != t.cfg.dim:
                error_msgs.append(f"table {name}: checkpoint dim {sd['weight'].shape[1]} != {t.cfg.dim}")
                continue
            t.load_state_dict(sd)
        self._pending = []

    def export_delta(self, with_state: bool = True, clear: bool = True) -> dict:
        """Rows changed since the last export, per table (see :meth:`DynamicTable.export_delta`)."""
        return {"iteration": self.iteration,
                "tables": {n: t.export_delta(with_state, clear) for n, t in self.tables.items()}}

    def mark_clean(self) -> None:
        """Forget which rows changed (after a checkpoint holding them is stored)."""
        for t in self.tables.values():
            t.dirty.zero_()

    def apply_delta(self, delta: dict) -> None:
        for name, d in delta["tables"].items():
            if name not in self.tables:
                raise InputError(f"delta holds table {name!r}, which this collection does not have")
            self.tables[name].apply_delta(d)
        self.iteration = int(delta["iteration"])
