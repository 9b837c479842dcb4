"""Benchmarks of kraken against torchrec, in one run.

1. ``stream`` — continual training on one synthetic click stream with the embeddings held four
   ways (torchrec EBC with the full vocabulary + Adam, EBC hashed into a third of the rows,
   torchrec's managed-collision EBC with LRU eviction in the same memory, and ours: dynamic
   collision-free tables with row-wise AdaGrad and LRU eviction in the same memory).  Reports
   progressive AUC / log-loss, peak embedding memory and samples/s of each
   (see :mod:`torchhpc.ext.kraken.comparison`; also ``torchhpc kraken bench``).
2. ``step`` — the training step's speed alone: the stream suite's ``ebc_full`` and ``kraken`` DLRMs on the
   same stream, alternating batch by batch so a shared machine's load falls on both alike.
3. ``pooling`` — jagged embedding-bag pooling of a KeyedJaggedTensor, ours vs torchrec's
   EmbeddingBagCollection.

Pooling: same KJT, same weights, one run: forward + backward time of
  * torchhpc ``pooled_embeddings`` (dispatch: Triton kernels on CUDA, torch's native op on the CPU),
  * torchrec ``EmbeddingBagCollection`` (the anchor),
  * on CUDA also our torch reference twin (gather + index_add), to show what the fused kernel saves,
  * on CUDA also the table-batched kernels (every feature pooled in one launch from the tables stored side
    by side; the backward fused with the row-wise AdaGrad step in one more launch) against torchrec's EBC
    forward + backward + Adagrad step, timed with ``triton.testing.do_bench`` and reported in GB/s.
Reports the speed-up anchor / ours per size (> 1 means we are faster).  Times are min / median / max of
interleaved repeats (``ext/core/bench.py``); absolute times mean something only on the GPU.

    python benchmarks/kraken.py [--suite all|stream|step|pooling] [--steps 1500] [--device auto|cpu|cuda]
                                [--repeats 15] [--out runs/bench]

Writes ``<out>/kraken/stream.json``/``stream.png``, ``<out>/kraken/step.json`` and
``<out>/kraken/pooling.json``/``pooling.png``.
"""

from __future__ import annotations

import time

import torch

from torchhpc.ext.core.bench import (
    bar_plot,
    benchmark_parser,
    print_rows,
    result_row,
    time_interleaved,
    write_results,
)

POOLING_CASES = [(4, 512, 100_000, 64, 8), (8, 2048, 200_000, 128, 16), (26, 1024, 50_000, 64, 4)]
"""(features K, batch B, rows per table N, dim D, mean bag length) of each pooling case."""


def make_input(K, B, N, mean_len, seed, device):
    """A KJT of ``K`` features x ``B`` samples, Poisson(``mean_len``) bags of Zipf-like IDs below ``N``."""
    from torchrec import KeyedJaggedTensor

    g = torch.Generator().manual_seed(seed)
    lengths = torch.poisson(torch.full((K * B,), float(mean_len)), generator=g).long()
    values = (N * torch.rand(int(lengths.sum()), generator=g).pow(3.0)).long().clamp_(max=N - 1)
    return KeyedJaggedTensor.from_lengths_sync(keys=[f"f{i}" for i in range(K)], values=values,
                                               lengths=lengths).to(device)


def bench_case(K, B, N, D, mean_len, repeats, device) -> dict:
    """One pooling case: ours and torchrec's EBC (and on CUDA our torch twin), forward + backward.

    Raises:
        SystemExit: the two disagree by more than 1e-4 (a wrong answer is not timed).
    """
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig

    from torchhpc.ext.kraken.ops import pooled_embeddings

    kjt = make_input(K, B, N, mean_len, seed=K * B + N, device=device)
    ebc = EmbeddingBagCollection(
        tables=[EmbeddingBagConfig(name=f"t{i}", embedding_dim=D, num_embeddings=N, feature_names=[f"f{i}"])
                for i in range(K)], device=device)
    tables = {f"t{i}": ebc.embedding_bags[f"t{i}"].weight for i in range(K)}
    f2t = {f"f{i}": f"t{i}" for i in range(K)}
    impls = {
        "torchhpc": lambda: pooled_embeddings(kjt, tables, f2t, validate=False),
        "torchrec_ebc": lambda: ebc(kjt).to_dict(),
    }
    if device.type == "cuda":
        impls["torch_reference"] = lambda: pooled_embeddings(kjt, tables, f2t, validate=False, backend="torch")

    # correctness first: the benchmark refuses to time a wrong answer
    a, b = impls["torchhpc"](), impls["torchrec_ebc"]()
    err = max(float((a[k] - b[k]).detach().abs().max()) for k in a)
    if err > 1e-4:
        raise SystemExit(f"torchhpc and torchrec disagree (max abs diff {err})")

    def fwd_bwd(fn):
        return lambda: sum(v.sum() for v in fn().values()).backward()

    timings = time_interleaved({name: fwd_bwd(fn) for name, fn in impls.items()}, repeats=repeats,
                               sync=torch.cuda.synchronize if device.type == "cuda" else None)
    return result_row(f"K={K} B={B} D={D}", timings, anchor="torchrec_ebc", K=K, B=B, N=N, D=D,
                      ids=int(kjt.values().numel()), max_abs_diff=err)


def tbe_case(K, B, N, D, mean_len) -> dict:
    """CUDA only: our two table-batched launches (pool every feature; backward fused with row-wise AdaGrad)
    against torchrec's EBC forward + backward + a row-wise AdaGrad step, timed with ``triton.testing.do_bench``,
    with GB/s against the bytes each must move (formula below)."""
    import triton
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig

    from torchhpc.triton_kernels import kraken as T

    dev = torch.device("cuda")
    kjt = make_input(K, B, N, mean_len, seed=K * B + N, device=dev)
    weight = torch.randn(K * N, D, device=dev) * 0.01  # K tables side by side (the store)
    v = torch.zeros(K * N, device=dev)
    lengths = kjt.lengths().view(K, B).sum(1)
    rows = kjt.values() + torch.repeat_interleave(torch.arange(K, device=dev) * N, lengths)
    offsets = kjt.offsets()
    grad_out = torch.randn(K * B, D, device=dev)
    nnz, U = rows.numel(), int(torch.unique(rows).numel())
    ebc = EmbeddingBagCollection(
        tables=[EmbeddingBagConfig(name=f"t{i}", embedding_dim=D, num_embeddings=N, feature_names=[f"f{i}"])
                for i in range(K)], device=dev)
    opt = torch.optim.Adagrad(ebc.parameters(), lr=0.01)

    def theirs():
        opt.zero_grad(set_to_none=True)
        ebc(kjt).values().backward(grad_out.view(K, B, D).transpose(0, 1).reshape(B, K * D))
        opt.step()

    def ours():
        T.tbe_pool(weight, rows, offsets)
        T.tbe_backward_rowwise_adagrad(grad_out, weight, v, rows, offsets, 0.01, 1e-8)

    # bytes that must move: forward reads each value's row and id and writes the bags; the fused backward
    # reads each value's bag gradient and position, reads and writes each touched row and its state scalar
    moved = 4 * (nnz * D + K * B * D) + 8 * nnz + 4 * (nnz * D + 2 * U * D + 2 * U) + 16 * nnz
    ms_ours = triton.testing.do_bench(ours)
    ms_theirs = triton.testing.do_bench(theirs)
    return {"name": f"TBE K={K} B={B} D={D}", "ms_torchhpc_tbe": ms_ours, "ms_torchrec_ebc": ms_theirs,
            "speedup_vs_anchor": ms_theirs / ms_ours, "gb_per_s": moved / ms_ours / 1e6, "bytes": moved}


def pooling(args) -> None:
    """Every pooling case; writes ``<out>/kraken/pooling.json`` and ``pooling.png``."""
    from torchhpc.ext.core.device import pick_device
    from torchhpc.ext.core.dispatch import resolve_backend

    device = pick_device(args.device)
    backend = resolve_backend("auto", device)  # what pooled_embeddings runs for "torchhpc"
    print(f"device {device.type}, torchhpc backend {backend}")
    rows = [bench_case(K, B, N, D, L, args.repeats, device) for K, B, N, D, L in POOLING_CASES]
    print_rows(rows)
    if device.type == "cuda":  # the table-batched kernels: one launch forward, one fused backward + update
        tbe = [tbe_case(K, B, N, D, L) for K, B, N, D, L in POOLING_CASES]
        for r in tbe:
            print(f"{r['name']}: ours {r['ms_torchhpc_tbe']:.3f} ms ({r['gb_per_s']:.0f} GB/s), torchrec EBC + "
                  f"Adagrad {r['ms_torchrec_ebc']:.3f} ms, speed-up {r['speedup_vs_anchor']:.2f}x")
    else:
        tbe = []
        print("table-batched Triton kernels (one launch per pass, GB/s with triton.testing.do_bench): CUDA only, "
              "not measured here")
    path = write_results("kraken", "pooling", rows + tbe, out=args.out,
                         params={"device": str(device), "backend": backend, "repeats": args.repeats, "cases": POOLING_CASES})
    names = [k for k in rows[0] if isinstance(rows[0][k], dict) and "median_s" in rows[0][k]]
    bar_plot(path.with_suffix(".png"), [f"K={r['K']} B={r['B']}\nD={r['D']}" for r in rows],
             {n: [1e3 * r[n]["median_s"] for r in rows] for n in names}, highlight="torchhpc",
             ylabel="ms per forward+backward (median)", title=f"jagged embedding-bag pooling on {device.type}")


def step_speed(args) -> None:
    """The stream suite's ``ebc_full`` and ``kraken`` DLRMs trained side by side, alternating batch by batch
    (who goes first alternates too), so a shared machine's load falls on both alike; the first two steps
    (loading compiled code) are not timed.  Writes ``<out>/kraken/step.json`` with per-step times and
    samples/s."""
    from torchrec import KeyedJaggedTensor

    from torchhpc.ext.core.bench import Timing
    from torchhpc.ext.kraken.baselines import HashedEBC
    from torchhpc.ext.kraken.config import BenchOptions, StreamOptions
    from torchhpc.ext.kraken.embedding import DynamicEmbeddingCollection, DynamicTableConfig
    from torchhpc.ext.kraken.model import DLRM
    from torchhpc.ext.kraken.optim import SparseOptimizer
    from torchhpc.ext.kraken.stream import SyntheticClickStream

    o = BenchOptions(steps=args.steps)
    stream = SyntheticClickStream(StreamOptions(vocab=o.vocab, batch_size=o.batch_size, seed=o.seed))
    total = o.vocab + stream.shift(o.steps) + 1
    names, K = stream.feature_names, stream.cfg.num_sparse
    budget = int(o.fraction * total * o.dim * 4 * 4) / 2**20  # as the stream suite: a third of (a)'s peak bytes
    dyn = DynamicEmbeddingCollection([DynamicTableConfig(f"t_{f}", o.dim, [f], memory_budget_mb=budget,
                                                         eviction="lru", init_scale=0.01) for f in names],
                                     SparseOptimizer("rowwise_adagrad", lr=0.1), seed=o.seed)
    models = {"kraken": DLRM(dyn, K, o.dim, seed=o.seed), "ebc_full": DLRM(HashedEBC(names, o.dim, total, seed=o.seed),
                                                                           K, o.dim, seed=o.seed)}
    opts = {"kraken": torch.optim.Adam(models["kraken"].dense_parameters(), lr=1e-3),
            "ebc_full": torch.optim.Adam(models["ebc_full"].parameters(), lr=1e-3)}
    timings = {name: Timing() for name in models}
    for t in range(o.steps):
        b = stream.batch(t)
        kjt = {"kraken": b.sparse, "ebc_full": KeyedJaggedTensor(keys=names, values=b.keys.t().reshape(-1),
                                                                 lengths=b.sparse.lengths())}
        for name in (("kraken", "ebc_full") if t % 2 else ("ebc_full", "kraken")):
            t0 = time.perf_counter()
            loss = torch.nn.functional.binary_cross_entropy_with_logits(models[name](b.dense, kjt[name]), b.labels)
            opts[name].zero_grad(set_to_none=True)
            loss.backward()
            opts[name].step()
            if name == "kraken":
                dyn.apply_gradients()
            if t >= 2:  # the first steps load compiled code (the batched pass) and warm the caches
                timings[name].times.append(time.perf_counter() - t0)
    sps = {n: len(tm.times) * o.batch_size / sum(tm.times) for n, tm in timings.items()}
    row = result_row("DLRM training step, batch by batch", timings, anchor="ebc_full", steps=o.steps,
                     samples_per_s=sps, samples_per_s_ratio=sps["kraken"] / sps["ebc_full"],
                     lookup_passes=dict(dyn.lookup_passes))
    print(f"kraken {sps['kraken']:,.0f} samples/s, ebc_full {sps['ebc_full']:,.0f} samples/s: "
          f"{row['samples_per_s_ratio']:.2f}x (median step {1e3 * timings['kraken'].median:.2f} vs "
          f"{1e3 * timings['ebc_full'].median:.2f} ms; table-batched passes {dyn.lookup_passes})")
    write_results("kraken", "step", [row], out=args.out, params={"steps": o.steps, "dim": o.dim, "fraction": o.fraction})


def main() -> None:
    ap = benchmark_parser(__doc__, repeats=15)
    ap.add_argument("--suite", default="all", choices=["all", "stream", "step", "pooling"],
                    help="which benchmark (default: all)")
    ap.add_argument("--steps", type=int, default=1500, help="stream: batches of 512 samples (default: 1500)")
    args = ap.parse_args()
    if args.suite in ("all", "stream"):
        from torchhpc.ext.kraken.commands import bench
        from torchhpc.ext.kraken.config import BenchOptions

        print("== continual training on one stream (CPU, torch threads:", torch.get_num_threads(), ")")
        bench(BenchOptions(steps=args.steps, out=args.out))
    if args.suite in ("all", "step"):
        print("== the DLRM training step, kraken and ebc_full alternating batch by batch")
        step_speed(args)
    if args.suite in ("all", "pooling"):
        print("== jagged embedding-bag pooling")
        pooling(args)


if __name__ == "__main__":
    main()
