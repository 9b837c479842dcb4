"""Dynamic embedding collection: equality with torchrec's EBC, admission, eviction, budgets, deltas."""

from __future__ import annotations

import pytest
import torch

from torchhpc.ext.core.errors import ConfigError, InputError
from torchhpc.ext.kraken.embedding import DynamicEmbeddingCollection, DynamicTableConfig
from torchhpc.ext.kraken.optim import SparseOptimizer

torchrec = pytest.importorskip("torchrec")
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor  # noqa: E402


def kjt(keys, values, lengths, weights=None):
    return KeyedJaggedTensor.from_lengths_sync(
        keys=keys, values=torch.as_tensor(values, dtype=torch.int64), lengths=torch.as_tensor(lengths),
        weights=None if weights is None else torch.as_tensor(weights, dtype=torch.float32))


def collection(max_rows=64, dim=4, opt=None, **kw):
    return DynamicEmbeddingCollection([DynamicTableConfig("t", dim, ["f"], max_rows=max_rows, **kw)],
                                      opt or SparseOptimizer("sgd", lr=1.0))


# (torchrec's EBC refuses mean pooling with per-sample weights on the CPU; ours allows it, see ops.py)
@pytest.mark.parametrize("pooling,weighted", [("sum", False), ("sum", True), ("mean", False)])
def test_equals_torchrec_ebc_for_identical_rows(pooling, weighted):
    """Same rows (raw ID i <-> EBC row i): forward bit-equal, and one SGD step moves the same rows."""
    g = torch.Generator().manual_seed(0)
    N, D = 40, 6
    lengths = torch.tensor([3, 0, 5, 2, 4, 1, 0, 7, 2, 3])  # 2 features x 5 samples
    values = torch.randint(0, N, (int(lengths.sum()),), generator=g)
    w = torch.rand(values.numel(), generator=g) if weighted else None
    x = kjt(["a", "b"], values, lengths, w)
    ebc = EmbeddingBagCollection(
        tables=[EmbeddingBagConfig(name="t", embedding_dim=D, num_embeddings=N, feature_names=["a", "b"],
                                   pooling=torchrec.PoolingType.SUM if pooling == "sum" else torchrec.PoolingType.MEAN)],
        is_weighted=weighted)
    ours = DynamicEmbeddingCollection([DynamicTableConfig("t", D, ["a", "b"], max_rows=64, pooling=pooling)],
                                      SparseOptimizer("sgd", lr=0.5))
    table = ebc.embedding_bags["t"].weight
    ours.set_rows("t", torch.arange(N), table.detach())
    a, b = ebc(x), ours(x)
    assert a.keys() == b.keys()
    assert torch.equal(b.values(), a.values())  # the same pooling arithmetic: bit-equal
    grad = torch.randn(a.values().shape, generator=g)
    a.values().backward(grad)
    b.values().backward(grad)
    ours.apply_gradients()
    with torch.no_grad():
        expect = table - 0.5 * table.grad
    got, present = ours.get_rows("t", torch.arange(N))
    assert bool(present.all())
    torch.testing.assert_close(got, expect, rtol=1e-6, atol=1e-6)


def test_admission_after_n_sightings_and_zero_vector_before():
    m = collection(admit_count=3)
    seen = []
    for step in range(4):
        out = m(kjt(["f"], [7, 7 if step < 2 else 9], [2]))
        seen.append(bool(m.tables["t"].index.contains(torch.tensor([7]))))
        if step == 0:  # nothing admitted yet: the bag reads zeros
            assert torch.equal(out.values(), torch.zeros(1, 4))
        m.apply_gradients()
    # ID 7: 2 sightings in batch 0, 1 in batch 1 -> admitted at the 3rd sighting
    assert seen == [False, True, True, True]
    assert not bool(m.tables["t"].index.contains(torch.tensor([9])))  # seen twice only


def test_admission_counts_decay_over_the_window():
    """Sightings count over a recent window: an ID seen once every 8 batches never reaches 2."""
    m = collection(admit_count=2, admit_window=4)
    for step in range(1, 41):
        m(kjt(["f"], [5] if step % 8 == 1 else [100 + step], [1]))
    assert not bool(m.tables["t"].index.contains(torch.tensor([5])))
    m2 = collection(admit_count=2, admit_window=0)  # no decay: the sightings add up
    for step in range(1, 41):
        m2(kjt(["f"], [5] if step % 8 == 1 else [100 + step], [1]))
    assert bool(m2.tables["t"].index.contains(torch.tensor([5])))


def test_probabilistic_admission_is_a_per_id_coin():
    m = collection(max_rows=4096, admit_prob=0.25)
    ids = torch.arange(4000) * 13 + 5
    m(kjt(["f"], ids, [ids.numel()]))
    frac = m.tables["t"].rows_used / ids.numel()
    assert 0.2 < frac < 0.3


def test_lru_evicts_least_recently_used_and_frees_optimizer_state():
    m = collection(max_rows=3, opt=SparseOptimizer("rowwise_adagrad", lr=0.1))
    for ids in ([1], [2], [3], [1]):  # 2 is now the least recently used
        out = m(kjt(["f"], ids, [1]))
        out.values().sum().backward()
        m.apply_gradients()
    t = m.tables["t"]
    row2 = int(t.index.lookup(torch.tensor([2])))
    assert float(t.state["v"][row2]) > 0
    m(kjt(["f"], [4], [1]))
    assert t.index.lookup(torch.tensor([1, 2, 3, 4])).ge(0).tolist() == [True, False, True, True]
    assert t.evictions == 1
    row4 = int(t.index.lookup(torch.tensor([4])))
    assert row4 == row2 and float(t.state["v"][row4]) == 0.0  # the freed row's state was zeroed


def test_lfu_evicts_least_frequent_and_never_rows_of_the_batch():
    m = collection(max_rows=3, eviction="lfu")
    m(kjt(["f"], [1, 1, 1, 2, 3, 3], [6]))
    m(kjt(["f"], [2, 5], [2]))  # 2 is the least frequent but in this batch, so 3 (seen twice) goes
    t = m.tables["t"]
    present = t.index.lookup(torch.tensor([1, 2, 3, 5])).ge(0).tolist()
    assert present == [True, True, False, True]


def test_full_table_without_eviction_admits_nothing_more():
    m = collection(max_rows=2, eviction="none")
    m(kjt(["f"], [1, 2, 3], [3]))
    assert m.tables["t"].rows_used == 2
    m(kjt(["f"], [4], [1]))
    assert not bool(m.tables["t"].index.contains(torch.tensor([4])))


def test_ttl_expires_rows_not_seen():
    m = collection(ttl=2)
    m(kjt(["f"], [1, 2], [2]))
    m(kjt(["f"], [1], [1]))
    m(kjt(["f"], [1], [1]))
    m(kjt(["f"], [1], [1]))  # step 4: ID 2 last seen at step 1 -> 3 > ttl
    assert m.tables["t"].index.lookup(torch.tensor([1, 2])).tolist()[1] == -1


def test_memory_budget_is_respected_and_reported():
    cfg = DynamicTableConfig("t", 16, ["f"], memory_budget_mb=200_000 / 2**20, admit_count=2)
    m = DynamicEmbeddingCollection([cfg], SparseOptimizer("rowwise_adagrad"))
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        ids = torch.randint(0, 20_000, (3000,), generator=g)
        m(kjt(["f"], ids, [ids.numel()]))
        m.apply_gradients()
    mem = m.memory()["t"]
    assert m.tables["t"].rows_used == cfg.max_rows  # it filled up ...
    assert mem["total"] <= 200_000  # ... within the budget
    assert mem["weights"] == cfg.max_rows * 16 * 4 and mem["optimizer"] == cfg.max_rows * 4


def test_new_rows_depend_only_on_the_id():
    a, b = collection(), collection()
    a(kjt(["f"], [5, 9, 11], [3]))
    b(kjt(["f"], [11, 5], [2]))
    wa, _ = a.get_rows("t", torch.tensor([5, 11]))
    wb, _ = b.get_rows("t", torch.tensor([5, 11]))
    assert torch.equal(wa, wb) and 0 < float(wa.abs().max()) <= 0.01  # uniform in [-init_scale, init_scale]


def test_eval_mode_reads_only():
    m = collection()
    m.eval()
    out = m(kjt(["f"], [1, 2], [2]))
    assert m.tables["t"].rows_used == 0 and torch.equal(out.values(), torch.zeros(1, 4))


def test_delta_replica_mirrors_the_trainer_exactly():
    opt = SparseOptimizer("rowwise_adam", lr=0.05)
    trainer = collection(max_rows=20, opt=opt, admit_count=2, ttl=5)
    replica = collection(max_rows=20, opt=opt, admit_count=2, ttl=5)
    g = torch.Generator().manual_seed(3)
    for step in range(30):
        ids = torch.randint(0, 60, (25,), generator=g)
        trainer(kjt(["f"], ids, [10, 15])).values().pow(2).sum().backward()
        trainer.apply_gradients()
        if step % 4 == 3:
            replica.apply_delta(trainer.export_delta())
    replica.apply_delta(trainer.export_delta())
    assert trainer.tables["t"].evictions > 0  # the stream evicted rows, so deltas carried frees
    sa, sb = trainer.state_dict(), replica.state_dict()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
    probe = torch.arange(60)
    assert torch.equal(trainer.get_rows("t", probe)[0], replica.get_rows("t", probe)[0])


def test_state_dict_round_trip():
    m = collection(opt=SparseOptimizer("adam", lr=0.1))
    m(kjt(["f"], [3, 4, 5], [3])).values().sum().backward()
    m.apply_gradients()
    other = collection(opt=SparseOptimizer("adam", lr=0.1))
    other.load_state_dict(m.state_dict())
    x = kjt(["f"], [5, 3, 8], [3])
    m.eval()
    other.eval()
    assert torch.equal(m(x).values(), other(x).values())
    assert torch.equal(m.tables["t"].state["m"], other.tables["t"].state["m"])


def test_bad_input_errors():
    m = collection()
    with pytest.raises(InputError, match="non-negative"):
        m(kjt(["f"], [1, -5], [2]))
    bad = KeyedJaggedTensor(keys=["f"], values=torch.tensor([1, 2, 3]), lengths=torch.tensor([2]))
    with pytest.raises(InputError, match="lengths sum to 2 but it holds 3"):
        m(bad)
    with pytest.raises(InputError, match="lacks features"):
        m(kjt(["g"], [1], [1]))
    with pytest.raises(InputError, match="too small for one row"):
        DynamicEmbeddingCollection([DynamicTableConfig("t", 64, ["f"], memory_budget_mb=100 / 2**20)])
    with pytest.raises(ConfigError, match="eviction"):
        DynamicEmbeddingCollection([DynamicTableConfig("t", 4, ["f"], max_rows=4, eviction="fifo")])
    with pytest.raises(ConfigError, match="pooled by two tables"):
        DynamicEmbeddingCollection([DynamicTableConfig("a", 4, ["f"], max_rows=4),
                                    DynamicTableConfig("b", 4, ["f"], max_rows=4)])


@pytest.mark.gpu
def test_cuda_collection_with_triton_kernels_equals_cpu():
    """On CUDA the pooling and the sparse optimizer run as fused Triton kernels: same rows as on the CPU."""
    results = []
    for device in ("cpu", "cuda"):
        m = DynamicEmbeddingCollection([DynamicTableConfig("t", 24, ["f"], max_rows=50, admit_count=2)],
                                       SparseOptimizer("rowwise_adagrad", lr=0.1), device=device)
        g = torch.Generator().manual_seed(0)
        for _ in range(10):
            ids = torch.randint(0, 80, (64,), generator=g)
            x = kjt(["f"], ids, [30, 34]).to(torch.device(device))
            m(x).values().pow(2).sum().backward()
            m.apply_gradients()
        results.append(m.get_rows("t", torch.arange(80))[0].cpu())
    torch.testing.assert_close(results[0], results[1], rtol=1e-5, atol=1e-6)
