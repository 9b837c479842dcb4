"""The training step on the Triton backend goes through the table-batched kernels: one ``tbe_pool`` launch
pools every feature straight from the store, and one ``tbe_backward_rowwise_adagrad`` launch is the backward
fused with the row-wise AdaGrad step; it equals the gather + ``embedding_bag`` + optimizer path of the torch
backend.  Here the kernels run interpreted on CPU tensors (``TRITON_INTERPRET=1``, set by the conftest).

Tolerances (tests/README.md): outputs, weights and the row-wise state after a few steps are float32 values
carried through a short trajectory whose sums are ordered otherwise (the kernels accumulate per bag and per
row, ``embedding_bag`` and autograd their own way), compared with ``torch.testing.assert_close``'s float32
defaults (rtol 1.3e-6, atol 1e-5); everything discrete (which IDs hold which rows, admissions, evictions,
last-seen, frequencies, dirty rows, step counters, rows updated) exactly: no float feeds those choices.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("torchrec")
pytest.importorskip("triton")

from torchrec import KeyedJaggedTensor  # noqa: E402

from torchhpc.ext.core.dispatch import triton_interpreted  # noqa: E402
from torchhpc.ext.core.hostsync import count_host_work  # noqa: E402
from torchhpc.ext.kraken.embedding import DynamicEmbeddingCollection, DynamicTableConfig  # noqa: E402
from torchhpc.ext.kraken.optim import SparseOptimizer  # noqa: E402

pytestmark = pytest.mark.skipif(not triton_interpreted(), reason="needs CUDA-free Triton (TRITON_INTERPRET=1)")

FEATURES = ["a", "b", "c"]
TBE_KERNELS = ("triton:_tbe_pool_kernel", "triton:_tbe_backward_rowwise_adagrad_kernel")
GATHER_KERNELS = ("triton:_bag_forward_kernel", "triton:_bag_backward_rows_kernel",
                  "triton:_bag_backward_psw_kernel", "triton:_sparse_row_update_kernel")


def _collection(backend: str, pooling: str | tuple[str, str] = "sum", kind: str = "rowwise_adagrad",
                dim: int = 6) -> DynamicEmbeddingCollection:
    """Two tables of one dim (one store): ``t1`` pools ``a`` and ``b``, ``t2`` pools ``c``; small budgets,
    count admission, LRU/LFU eviction and a TTL, so that the steps admit, evict and expire rows."""
    p1, p2 = (pooling, pooling) if isinstance(pooling, str) else pooling
    tables = [DynamicTableConfig("t1", dim, ["a", "b"], max_rows=24, init_rows=8, admit_count=2, ttl=3,
                                 eviction="lru", pooling=p1),
              DynamicTableConfig("t2", dim, ["c"], max_rows=12, init_rows=12, eviction="lfu", pooling=p2)]
    return DynamicEmbeddingCollection(tables, SparseOptimizer(kind, lr=0.2, eps=1e-6), seed=5, backend=backend)


def _batch(step: int, weighted: bool, B: int = 6) -> KeyedJaggedTensor:
    g = torch.Generator().manual_seed(100 + step)
    lengths = torch.randint(0, 5, (len(FEATURES) * B,), generator=g)
    lengths[1] = 0  # an empty bag
    values = torch.randint(0, 40 + 4 * step, (int(lengths.sum()),), generator=g)  # new IDs drift in
    weights = torch.rand(values.numel(), generator=g) + 0.5 if weighted else None
    return KeyedJaggedTensor.from_lengths_sync(keys=FEATURES, values=values, lengths=lengths, weights=weights)


def _loss(out: torch.Tensor, step: int) -> torch.Tensor:
    target = torch.randn(out.shape, generator=torch.Generator().manual_seed(7 + step))
    return (out - target).pow(2).sum()


def _train(m: DynamicEmbeddingCollection, steps: int, weighted: bool) -> tuple[list, list]:
    """``steps`` training steps; returns every step's output and rows updated.  Step 2 skips the backward
    (the step updates its rows with zero gradients), odd steps scale the gradients, and the changed rows are
    forgotten before step 3 (as after a checkpoint), so that later steps must mark the rows they update."""
    outs, updated = [], []
    for t in range(steps):
        if t == 3:
            m.mark_clean()
        out = m(_batch(t, weighted)).values()
        if t != 2:
            _loss(out, t).backward()
        updated.append(m.apply_gradients(scale=0.5 if t % 2 else 1.0))
        outs.append(out.detach())
    return outs, updated


def _assert_same_collection(got: DynamicEmbeddingCollection, want: DynamicEmbeddingCollection) -> None:
    (sg,), (sw,) = got.stores.values(), want.stores.values()
    torch.testing.assert_close(sg.weight, sw.weight)  # float32 defaults: rtol 1.3e-6, atol 1e-5
    assert sg.state.keys() == sw.state.keys()
    for k in sw.state:
        torch.testing.assert_close(sg.state[k], sw.state[k])
    for field in ("row_id", "last_seen", "freq", "dirty", "index.keys", "index.values", "sketch"):
        assert torch.equal(sg.flat[field], sw.flat[field]), field
    assert got.stats() == want.stats()
    assert {n: t.opt_steps for n, t in got.tables.items()} == {n: t.opt_steps for n, t in want.tables.items()}


@pytest.mark.parametrize("pooling,weighted", [("sum", False), ("mean", False), ("sum", True), ("mean", True)])
def test_triton_training_steps_equal_the_torch_path(pooling, weighted):
    """A few steps through the table-batched kernels (admissions, evictions, a TTL expiry, a table growing,
    a step without backward, scaled gradients) leave the rows and state of the gather + optimizer path."""
    tri, ref = _collection("triton", pooling), _collection("torch", pooling)
    got_out, got_n = _train(tri, 6, weighted)
    want_out, want_n = _train(ref, 6, weighted)
    for g, w in zip(got_out, want_out, strict=True):
        torch.testing.assert_close(g, w)
    assert got_n == want_n
    _assert_same_collection(tri, ref)
    stats = ref.stats()
    assert stats["t1"]["evictions"] > 0 and stats["t2"]["evictions"] > 0, stats  # the steps did evict
    assert stats["t1"]["allocated"] > 8, stats  # and t1 grew
    # the deltas a checkpoint would hold: the same rows
    dg, dw = tri.export_delta(), ref.export_delta()
    for name in dw["tables"]:
        assert torch.equal(dg["tables"][name]["rows"], dw["tables"][name]["rows"])
    # eval reads the rows through tbe_pool too, and records nothing
    tri.eval(), ref.eval()
    with count_host_work() as work:
        out = tri(_batch(9, weighted)).values()
    assert work.launch_ops["triton:_tbe_pool_kernel"] == 1 and tri._pending == []
    torch.testing.assert_close(out, ref(_batch(9, weighted)).values())


def test_debug_config_model_trains_the_same_on_triton():
    """The DLRM the debug config builds (one table per feature, row-wise AdaGrad), its dense MLPs on plain SGD
    (Adam's first steps would turn last-bit differences of near-zero gradients into +-lr): losses, rows and
    state after a few steps on the Triton backend equal the torch backend's."""
    from torchhpc.ext.core.config import load_config
    from torchhpc.ext.kraken.config import KrakenConfig
    from torchhpc.ext.kraken.model import build_model
    from torchhpc.ext.kraken.stream import build_stream

    cfg = load_config(KrakenConfig, Path(__file__).resolve().parents[3] / "configs" / "kraken" / "debug.yaml",
                      ["stream.batch_size=32", "tables.max_rows=16", "tables.admit_count=1"])
    stream = build_stream(cfg)
    losses, models = [], []
    for backend in ("triton", "torch"):
        model = build_model(cfg, "cpu")
        model.sparse.backend = backend
        opt = torch.optim.SGD(model.dense_parameters(), lr=0.05)
        with count_host_work() as work:
            for t in range(4):
                b = stream.batch(t)
                loss = torch.nn.functional.binary_cross_entropy_with_logits(model(b.dense, b.sparse), b.labels)
                opt.zero_grad()
                loss.backward()
                opt.step()
                model.sparse.apply_gradients()
                losses.append(float(loss.detach()))
        assert work.launch_ops["triton:_tbe_pool_kernel"] == (4 if backend == "triton" else 0)
        models.append(model)
    assert losses[:4] == pytest.approx(losses[4:], rel=1e-5)  # FLOAT32_TRAJECTORY
    _assert_same_collection(models[0].sparse, models[1].sparse)
    assert sum(s["evictions"] for s in models[1].sparse.stats().values()) > 0
    for p, q in zip(models[0].dense_parameters(), models[1].dense_parameters(), strict=True):
        torch.testing.assert_close(p, q)


def test_one_pool_and_one_fused_update_launch_per_step():
    """Per step (forward, backward, apply_gradients): one tbe_pool launch, one fused backward + AdaGrad launch,
    and none of the gather path's kernels (per-bag pooling, its backward, the sparse row update)."""
    m = _collection("triton")
    _train(m, 2, weighted=False)  # warm: rows admitted, the table grown
    for t in range(2, 4):
        with count_host_work() as work:
            _loss(m(_batch(t + 10, False)).values(), t).backward()
            n = m.apply_gradients()
        assert n > 0
        for k in TBE_KERNELS:
            assert work.launch_ops[k] == 1, (k, work.summary())
        for k in GATHER_KERNELS:
            assert work.launch_ops[k] == 0, (k, work.summary())


@pytest.mark.parametrize("case", ["adam", "two_pooling_modes", "psw_needs_grad", "tbe_off"])
def test_other_cases_keep_the_gather_path(case):
    """Another sparse optimizer, two pooling modes (tables pooled one by one), per-sample weights that need a
    gradient, or ``tbe = False``: no table-batched launch, and the Triton backend still equals torch."""
    kind = "adam" if case == "adam" else "rowwise_adagrad"
    pooling = ("sum", "mean") if case == "two_pooling_modes" else "sum"
    weighted = case == "psw_needs_grad"
    tri, ref = _collection("triton", pooling, kind), _collection("torch", pooling, kind)
    if case == "tbe_off":
        tri.tbe = False
    psw_grads = []
    for m in (tri, ref):
        with count_host_work() as work:
            for t in range(3):
                x = _batch(t, weighted)
                if weighted:
                    w = x.weights().clone().requires_grad_()
                    x = KeyedJaggedTensor(keys=x.keys(), values=x.values(), lengths=x.lengths(), weights=w)
                out = m(x).values()
                _loss(out, t).backward()
                m.apply_gradients()
            if weighted:
                psw_grads.append(w.grad)
        assert all(work.launch_ops[k] == 0 for k in TBE_KERNELS), work.summary()
        if m is tri:
            assert sum(work.launch_ops[k] for k in GATHER_KERNELS) > 0, work.summary()
    _assert_same_collection(tri, ref)
    if weighted:
        torch.testing.assert_close(psw_grads[0], psw_grads[1])
