"""The table-batched pass (one compiled lookup/admission/eviction pass over all tables, one gather, one
pooling, one optimizer step) leaves exactly the state of the per-table reference ops, step by step."""

from __future__ import annotations

import pytest
import torch

from torchhpc.ext.core.dispatch import numba_available
from torchhpc.ext.kraken.embedding import DynamicEmbeddingCollection, DynamicTableConfig
from torchhpc.ext.kraken.optim import SparseOptimizer

pytest.importorskip("torchrec")
from torchrec import KeyedJaggedTensor  # noqa: E402

if not numba_available():  # make setup installs numba; without it only the reference path exists
    pytest.skip("numba is not installed (pip install numba): the batched pass cannot run", allow_module_level=True)

CASES = {
    "lru+ttl+count+window/adam": (dict(eviction="lru", ttl=5, admit_count=2, admit_window=3), "rowwise_adam"),
    "lfu+coin/adagrad": (dict(eviction="lfu", admit_prob=0.6), "rowwise_adagrad"),
    "full-no-eviction/sgd": (dict(eviction="none", admit_count=2, admit_window=0), "sgd"),
    "lru/elementwise-adam": (dict(eviction="lru"), "adam"),
}


def _collections(options: dict, kind: str):
    """Two identical collections: two tables (one pools two features), growing from 8 rows to 24."""
    def make():
        tables = [DynamicTableConfig("a", 4, ["f0", "f1"], max_rows=24, init_rows=8, init_scale=0.1, **options),
                  DynamicTableConfig("b", 4, ["f2"], max_rows=24, init_rows=8, init_scale=0.1, **options)]
        return DynamicEmbeddingCollection(tables, SparseOptimizer(kind, lr=0.05), seed=3)

    fast, ref = make(), make()
    ref.batched = False
    return fast, ref


def _batch(g: torch.Generator, step: int) -> KeyedJaggedTensor:
    """3 features x 6 samples of Zipf-like IDs drifting with the step (new IDs keep arriving)."""
    lengths = torch.randint(0, 4, (18,), generator=g)
    ranks = (60 * torch.rand(int(lengths.sum()), generator=g).pow(2.0)).long()
    values = (ranks + 3 * step) * 7919 + 11
    w = torch.rand(values.numel(), generator=g)
    return KeyedJaggedTensor.from_lengths_sync(keys=["f0", "f1", "f2"], values=values, lengths=lengths, weights=w)


def _per_table_update(m: DynamicEmbeddingCollection) -> None:
    """The optimizer step as it was written before the store: one DynamicTable.update per table."""
    for _, rows, emb in m._pending:
        for t in m.tables.values():
            mine = (rows >= t.base) & (rows < t.base + t.rows_allocated)
            t.update(rows[mine] - t.base, emb.grad[mine])
    m._pending = []


def _snapshot(m: DynamicEmbeddingCollection) -> dict:
    out = {}
    for name, t in m.tables.items():
        ids, rows = t.index.items()
        order = torch.argsort(ids)
        out[name] = {"weight": t.weight.clone(), **{f"state.{k}": v.clone() for k, v in t.state.items()},
                     "row_id": t.row_id.clone(), "last_seen": t.last_seen.clone(), "freq": t.freq.clone(),
                     "dirty": t.dirty.clone(), "index": torch.stack([ids[order], rows[order]]),
                     "sketch": t.sketch.table.clone() if t.sketch is not None else torch.empty(0),
                     # (not the slot layout, nor so its tombstone count: the index is compared as a set)
                     "counters": torch.tensor([t.rows_used, t.index.capacity, t.evictions, t.admissions,
                                               t.opt_steps])}
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_batched_pass_equals_per_table_reference(case):
    """Rows, IDs, optimizer state, metadata, index, sketch, evictions and outputs are bit-equal every step,
    through growth, TTL, count/coin admission and LRU/LFU/no eviction; the batched pass did run."""
    options, kind = CASES[case]
    fast, ref = _collections(options, kind)
    g = torch.Generator().manual_seed(1)
    for step in range(40):
        x = _batch(g, step)
        a, b = fast(x), ref(x)
        assert torch.equal(a.values(), b.values()), f"step {step}: pooled outputs differ"
        grad = torch.randn(a.values().shape, generator=g)
        a.values().backward(grad)
        b.values().backward(grad)
        fast.apply_gradients()
        _per_table_update(ref)
        sa, sb = _snapshot(fast), _snapshot(ref)
        for name in sa:
            for k in sa[name]:
                assert torch.equal(sa[name][k], sb[name][k]), f"step {step}: table {name} {k} differs"
    assert fast.lookup_passes["batched"] >= 25 and ref.lookup_passes["batched"] == 0
    assert sum(t.evictions for t in fast.tables.values()) > 0 or options["eviction"] == "none"
    fast.eval()
    ref.eval()
    with torch.no_grad():
        x = _batch(g, 40)
        assert torch.equal(fast(x).values(), ref(x).values())  # the read-only pass too


def test_pooled_output_equals_per_feature_pooling():
    """One pooling over every feature gives each feature's bags as pooling that feature alone (torch's op)."""
    fast, _ = _collections({"eviction": "lru"}, "sgd")
    g = torch.Generator().manual_seed(2)
    x = _batch(g, 0)
    out = fast(x).to_dict()
    for f, jt in x.to_dict().items():
        table = fast.tables[fast.feature_to_table[f]]
        rows, present = fast.get_rows(table.cfg.name, jt.values())
        want = torch.nn.functional.embedding_bag(torch.arange(rows.shape[0]), rows, jt.offsets(), mode="sum",
                                                 per_sample_weights=jt.weights(), include_last_offset=True)
        torch.testing.assert_close(out[f], want, rtol=0, atol=1e-7)
