"""Jagged embedding-bag pooling: the Triton kernels (interpreted on the CPU) against their torch twin,
torch's embedding_bag and torchrec's EmbeddingBagCollection, forward and backward."""

from __future__ import annotations

import pytest
import torch

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.kraken.ops import (
    jagged_embedding_bag,
    jagged_embedding_bag_reference,
    pooled_embeddings,
)


def make_bags(N, D, B, max_len, dtype, seed, device="cpu", empty=(0,)):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, max_len + 1, (B,), generator=g)
    for e in empty:
        if e < B:
            lengths[e] = 0
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    idx = torch.randint(0, N, (int(offsets[-1]),), generator=g)
    w = torch.randn(N, D, generator=g, dtype=dtype)
    psw = torch.rand(idx.numel(), generator=g, dtype=dtype) + 0.5
    return w.to(device), idx.to(device), offsets.to(device), psw.to(device)


CASES = [
    # N, D, B, max_len, dtype  (odd sizes, D above and below one column block, long bags)
    (37, 19, 11, 5, torch.float64),
    (5, 1, 7, 40, torch.float64),
    (101, 130, 9, 23, torch.float32),
    (3, 8, 1, 0, torch.float32),  # one empty bag, no ids at all
]


@pytest.mark.parametrize("N,D,B,max_len,dtype", CASES)
@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("sparse", [False, True])
def test_triton_kernel_matches_torch_twin(kernel_device, N, D, B, max_len, dtype, mode, weighted, sparse):
    """Forward, table gradient (dense and sparse) and per-sample-weight gradient equal the twin."""
    w, idx, offsets, psw = make_bags(N, D, B, max_len, dtype, seed=N * D + B, device=kernel_device)
    tol = {"rtol": 1e-10, "atol": 1e-10} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-5}
    results = []
    for backend, fn in [("triton", jagged_embedding_bag), ("torch", jagged_embedding_bag_reference)]:
        wt = w.clone().requires_grad_()
        pt = psw.clone().requires_grad_() if weighted else None
        kw = {"backend": backend} if backend == "triton" else {}
        out = fn(wt, idx, offsets, mode, pt, sparse=sparse, **kw)
        grad_out = torch.linspace(-1, 1, out.numel(), dtype=dtype, device=out.device).reshape(out.shape)
        out.backward(grad_out)
        gw = wt.grad.to_dense() if wt.grad.is_sparse else wt.grad
        results.append((out.detach(), gw, pt.grad if weighted else None))
    (o1, g1, p1), (o2, g2, p2) = results
    torch.testing.assert_close(o1, o2, **tol)
    torch.testing.assert_close(g1, g2, **tol)
    if weighted:
        torch.testing.assert_close(p1, p2, **tol)


@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_matches_torch_embedding_bag(kernel_device, mode, backend):
    """Every path equals torch.nn.functional.embedding_bag, output and gradients."""
    w, idx, offsets, psw = make_bags(50, 13, 17, 9, torch.float64, seed=1, device=kernel_device)
    weighted = mode == "sum"  # torch refuses per-sample weights with mean
    a, b = w.clone().requires_grad_(), w.clone().requires_grad_()
    pa = psw.clone().requires_grad_() if weighted else None
    pb = psw.clone().requires_grad_() if weighted else None
    ours = jagged_embedding_bag(a, idx, offsets, mode, pa, backend=backend)
    ref = torch.nn.functional.embedding_bag(idx, b, offsets, mode=mode, per_sample_weights=pb,
                                            include_last_offset=True)
    torch.testing.assert_close(ours, ref)
    ours.square().sum().backward()
    ref.square().sum().backward()
    torch.testing.assert_close(a.grad, b.grad)
    if weighted:
        torch.testing.assert_close(pa.grad, pb.grad)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_matches_torchrec_embedding_bag_collection(kernel_device, weighted, backend):
    """Pooling a KeyedJaggedTensor equals torchrec's EmbeddingBagCollection for the same weights (skipped,
    this comparison alone, where torchrec is not installed, as on a GPU machine without it)."""
    torchrec = pytest.importorskip("torchrec")
    EmbeddingBagCollection, EmbeddingBagConfig = torchrec.EmbeddingBagCollection, torchrec.EmbeddingBagConfig
    KeyedJaggedTensor = torchrec.KeyedJaggedTensor

    torch.manual_seed(0)
    keys, B = ["user", "item", "tag"], 6
    lengths = torch.tensor([1, 0, 3, 2, 5, 1, 0, 0, 2, 4, 1, 1, 3, 3, 0, 1, 2, 7])
    values = torch.randint(0, 23, (int(lengths.sum()),))
    weights = torch.rand(values.numel()) if weighted else None
    kjt = KeyedJaggedTensor.from_lengths_sync(keys=keys, values=values, lengths=lengths, weights=weights)
    ebc = EmbeddingBagCollection(
        tables=[EmbeddingBagConfig(name="t_user", embedding_dim=5, num_embeddings=23, feature_names=["user"]),
                EmbeddingBagConfig(name="t_shared", embedding_dim=7, num_embeddings=23,
                                   feature_names=["item", "tag"])],
        is_weighted=weighted,
        device=torch.device("cpu"),
    )
    ref = ebc(kjt).to_dict()
    tables = {n: bag.weight.detach().clone().to(kernel_device) for n, bag in ebc.embedding_bags.items()}
    ours = pooled_embeddings(kjt.to(kernel_device), tables, {"user": "t_user", "item": "t_shared", "tag": "t_shared"},
                             backend=backend)
    assert set(ours) == set(keys)
    for k in keys:
        assert ours[k].shape == (B, tables["t_user" if k == "user" else "t_shared"].shape[1])
        torch.testing.assert_close(ours[k].cpu(), ref[k].detach())


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda w, i, o: (w, i[:-1], o), "end at len"),
        (lambda w, i, o: (w, i + 100, o), "must lie in"),
        (lambda w, i, o: (w, -i - 1, o), "must lie in"),
        (lambda w, i, o: (w, i, o.flip(0)), "start at 0"),
        (lambda w, i, o: (w[0], i, o), "2-D"),
        (lambda w, i, o: (w, i.double(), o), "integer"),
    ],
)
def test_bad_input_is_a_clear_error(mutate, message):
    """Inconsistent offsets, out-of-range ids and wrong shapes raise InputError, not garbage."""
    w, idx, offsets, _ = make_bags(10, 4, 5, 3, torch.float32, seed=3, empty=())
    with pytest.raises(InputError, match=message):
        jagged_embedding_bag(*mutate(w, idx, offsets))


def test_decreasing_offsets_rejected():
    """Offsets that go down somewhere inside are named."""
    w = torch.randn(4, 2)
    with pytest.raises(InputError, match=r"offsets\[2\] < offsets\[1\]"):
        jagged_embedding_bag(w, torch.tensor([0, 1, 2]), torch.tensor([0, 3, 1, 3]))


@pytest.mark.gpu
def test_cuda_dispatch_runs_the_compiled_kernel():
    """On CUDA the default backend is the compiled Triton kernel, and it equals torch's embedding_bag."""
    w, idx, offsets, psw = make_bags(1000, 96, 257, 30, torch.float32, seed=5, device="cuda")
    ours = jagged_embedding_bag(w, idx, offsets, "sum", psw)
    ref = torch.nn.functional.embedding_bag(idx, w, offsets, mode="sum", per_sample_weights=psw,
                                            include_last_offset=True)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- fused sparse optimizer


@pytest.mark.parametrize("kind", ["sgd", "rowwise_adagrad", "rowwise_adam", "adam"])
@pytest.mark.parametrize("D", [1, 19, 130])
def test_fused_sparse_row_update_matches_torch_twin(kernel_device, kind, D):
    """The fused row-wise optimizer kernel equals the vectorised torch twin over several steps."""
    from torchhpc.ext.kraken.optim import SparseOptimizer

    g = torch.Generator().manual_seed(D)
    N = 23
    opt = SparseOptimizer(kind, lr=0.05)
    w0 = torch.randn(N, D, generator=g)
    outs = []
    for backend in ("triton", "torch"):
        w = w0.clone().to(kernel_device)
        state = opt.init_state(N, D, kernel_device)
        gg = torch.Generator().manual_seed(7)
        for step in range(1, 4):
            rows = torch.randperm(N, generator=gg)[: 5 + step].to(kernel_device)
            grads = torch.randn(rows.numel(), D, generator=gg).to(kernel_device)
            opt.step(w, state, rows, grads, step, backend=backend)
        outs.append((w.cpu(), {k: v.cpu() for k, v in state.items()}))
    (w1, s1), (w2, s2) = outs
    # fp32 sums over D run in another order on a GPU (seen: 1.3e-6 apart for rowwise_adam, D=130)
    torch.testing.assert_close(w1, w2, rtol=1e-5, atol=1e-5)
    for k in s1:
        torch.testing.assert_close(s1[k], s2[k], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("D,mean,weighted", [(7, False, True), (16, True, False), (33, True, True)])
def test_table_batched_kernels_match_the_torch_path(kernel_device, D, mean, weighted):
    """One launch pools every feature from the store (rows -1 read zeros), and one launch does the backward
    fused with row-wise AdaGrad: both equal embedding_bag + autograd + the reference optimizer step."""
    from torchhpc.ext.kraken.optim import SparseOptimizer, sparse_row_update_reference
    from torchhpc.triton_kernels import kraken as K

    g = torch.Generator().manual_seed(D)
    R, nb = 23, 13  # store rows of all tables; bags of all features
    lengths = torch.randint(0, 6, (nb,), generator=g)
    lengths[3] = 0
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    rows = torch.randint(-1, R, (int(offsets[-1]),), generator=g)  # -1: an ID with no row
    weight = torch.randn(R, D, generator=g)
    v = torch.rand(R, generator=g)
    psw = torch.rand(rows.numel(), generator=g) + 0.5 if weighted else None
    grad_out = torch.randn(nb, D, generator=g)
    opt = SparseOptimizer("rowwise_adagrad", lr=0.3, eps=1e-6)
    # torch path: zero row for -1, embedding_bag, autograd, then the optimizer on the touched rows
    table = torch.cat([weight, torch.zeros(1, D)]).requires_grad_()
    idx = torch.where(rows >= 0, rows, R)
    want = jagged_embedding_bag_reference(table, idx, offsets, "mean" if mean else "sum", psw)
    want.backward(grad_out)
    touched = torch.unique(rows[rows >= 0])
    w_ref, v_ref = weight.clone(), v.clone()
    sparse_row_update_reference(opt, w_ref, {"v": v_ref}, touched, table.grad[touched], step=1)
    # the two launches
    dev = kernel_device
    w_k, v_k = weight.to(dev), v.to(dev)
    out = K.tbe_pool(w_k, rows.to(dev), offsets.to(dev), mean, psw.to(dev) if weighted else None)
    torch.testing.assert_close(out.cpu(), want.detach(), rtol=1e-5, atol=1e-5)
    got = K.tbe_backward_rowwise_adagrad(grad_out.to(dev), w_k, v_k, rows.to(dev), offsets.to(dev), opt.lr, opt.eps,
                                         mean, psw.to(dev) if weighted else None)
    assert torch.equal(got.cpu(), touched)
    torch.testing.assert_close(v_k.cpu(), v_ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w_k.cpu(), w_ref, rtol=1e-5, atol=1e-6)
