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
* **Deltas.** Rows changed since the last :meth:`export_delta` are tracked, so a
  checkpoint or a serving replica receives only those (:meth:`apply_delta`).

Given identical rows, the output equals torchrec's EBC exactly (a test checks it).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import nn

from torchhpc.ext.core.config import option
from torchhpc.ext.core.errors import ConfigError, InputError

from .config import TableOptions, check_ranges
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

    def __post_init__(self) -> None:
        check_ranges(self, f"table {self.name!r}")

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


class DynamicTable:
    """Storage of one table: rows, their optimizer state, metadata and the ID index (not a Module)."""

    def __init__(self, cfg: DynamicTableConfig, optimizer: SparseOptimizer, device, seed: int):
        self.cfg, self.opt, self.device, self.seed = cfg, optimizer, torch.device(device), seed
        rows = max(1, min(cfg.init_rows, cfg.max_rows))
        self.weight = torch.zeros((rows, cfg.dim), device=self.device)
        self.state = optimizer.init_state(rows, cfg.dim, self.device)
        self.row_id = torch.full((rows,), -1, dtype=torch.int64, device=self.device)
        self.last_seen = torch.zeros(rows, dtype=torch.int64, device=self.device)
        self.freq = torch.zeros(rows, dtype=torch.float32, device=self.device)
        self.dirty = torch.zeros(rows, dtype=torch.bool, device=self.device)
        self.index = IdIndex(2 * rows, self.device, seed=seed)
        self.sketch = (
            CountMinSketch(cfg.sketch_columns(cfg.max_rows), _SKETCH_DEPTH, self.device, seed=seed)
            if cfg.admit_count > 1 else None
        )
        self.opt_steps = 0
        self.evictions = 0
        self.admissions = 0

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

        self.weight = pad(self.weight)
        self.state = {k: pad(v) for k, v in self.state.items()}
        self.row_id = pad(self.row_id, -1)
        self.last_seen, self.freq, self.dirty = pad(self.last_seen), pad(self.freq), pad(self.dirty, False)

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
        s = self.cfg.init_scale
        self.weight[rows] = (hash_uniform(new, self.cfg.dim, seed=self.seed) * 2 - 1) * s
        self.last_seen[rows] = step
        self.freq[rows] = 0
        self.dirty[rows] = True
        self.admissions += new.numel()
        return out

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
        self.weight = sd["weight"].to(self.device).clone()
        self.row_id = sd["row_id"].to(self.device).clone()
        self.last_seen = sd["last_seen"].to(self.device).clone()
        self.freq = sd["freq"].to(self.device).clone()
        self.state = {k: sd[f"state.{k}"].to(self.device).clone() for k in self.state}
        self.dirty = torch.zeros(self.row_id.shape, dtype=torch.bool, device=self.device)
        if self.sketch is not None and sd["sketch"].numel():
            self.sketch.table = sd["sketch"].to(self.device).clone()
        self.opt_steps, self.evictions, self.admissions = (int(x) for x in sd["counters"])
        self.index = IdIndex(2 * self.rows_allocated, self.device, seed=self.seed)
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
        self.tables = {t.name: DynamicTable(t, self.optimizer, device, seed + 101 * i) for i, t in enumerate(tables)}
        self.device_ = torch.device(device)
        self.backend = backend
        self.iteration = 0
        self._pending: list[tuple[str, torch.Tensor, torch.Tensor]] = []

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

    def forward(self, kjt):
        from torchrec.sparse.jagged_tensor import KeyedTensor

        jts, training, step = self._start_forward(kjt)
        pooled: dict[str, torch.Tensor] = {}
        for name, table in self.tables.items():
            cfg = table.cfg
            feats, values = self._table_values(jts, cfg)
            if training:
                table.expire(step)
            uniq, inv, counts = torch.unique(values, return_inverse=True, return_counts=True)
            rows = table.lookup(uniq, counts, step)
            hit = rows >= 0
            rows_hit = rows[hit]
            emb = table.weight[rows_hit].detach()
            if training:
                emb.requires_grad_(True)
                self._pending.append((name, rows_hit, emb))
            local = torch.cat([emb, emb.new_zeros((1, cfg.dim))])  # the last row: zeros for IDs with no row
            slot = torch.where(hit, torch.cumsum(hit, 0) - 1, torch.full_like(rows, rows_hit.numel()))[inv]
            pooled.update(pool_features(cfg, feats, local, slot, self.device_, self.backend))
        return KeyedTensor.from_tensor_list(self.feature_names, [pooled[f] for f in self.feature_names])

    @torch.no_grad()
    def apply_gradients(self, scale: float = 1.0) -> int:
        """Sparse optimizer step on every row the last training forward touched; returns rows updated."""
        n = 0
        for name, rows, emb in self._pending:
            # every training step counts as one optimizer step of every table (Adam's bias correction)
            g = emb.grad if emb.grad is not None else torch.zeros_like(emb)
            self.tables[name].update(rows, g * scale if scale != 1.0 else g, backend=self.backend)
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
