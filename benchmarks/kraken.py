"""Benchmarks of kraken against torchrec, in one run.

1. ``stream`` — continual training on one synthetic click stream with the embeddings held four
   ways (torchrec EBC with the full vocabulary + Adam, EBC hashed into a third of the rows,
   torchrec's managed-collision EBC with LRU eviction in the same memory, and ours: dynamic
   collision-free tables with row-wise AdaGrad and LRU eviction in the same memory).  Reports
   progressive AUC / log-loss, peak embedding memory and samples/s of each
   (see :mod:`torchhpc.ext.kraken.bench`; also ``torchhpc kraken bench``).
2. ``pooling`` — jagged embedding-bag pooling of a KeyedJaggedTensor, ours vs torchrec's
   EmbeddingBagCollection.

Pooling: same KJT, same weights, one run: forward + backward time of
  * torchhpc ``pooled_embeddings`` (dispatch: Triton kernels on CUDA, torch's native op on the CPU),
  * torchrec ``EmbeddingBagCollection`` (the anchor),
  * on CUDA also our torch reference twin (gather + index_add), to show what the fused kernel saves.
Reports the speed-up anchor / ours per size (> 1 means we are faster).  Times are min / median / max of
interleaved repeats (``ext/core/bench.py``); absolute times mean something only on the GPU.

    python benchmarks/kraken.py [--suite all|stream|pooling] [--steps 1500] [--device auto|cpu|cuda]
                                [--repeats 15] [--out runs/bench]

Writes ``<out>/kraken/stream.json``/``stream.png`` and ``<out>/kraken/pooling.json``/``pooling.png``.
"""

from __future__ import annotations

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


def pooling(args) -> None:
    """Every pooling case; writes ``<out>/kraken/pooling.json`` and ``pooling.png``."""
    from torchhpc.ext.core.device import pick_device
    from torchhpc.ext.core.dispatch import resolve_backend

    device = pick_device(args.device)
    backend = resolve_backend("auto", device)  # what pooled_embeddings runs for "torchhpc"
    print(f"device {device.type}, torchhpc backend {backend}")
    rows = [bench_case(K, B, N, D, L, args.repeats, device) for K, B, N, D, L in POOLING_CASES]
    print_rows(rows)
    path = write_results("kraken", "pooling", rows, out=args.out,
                         params={"device": str(device), "backend": backend, "repeats": args.repeats, "cases": POOLING_CASES})
    names = [k for k in rows[0] if isinstance(rows[0][k], dict) and "median_s" in rows[0][k]]
    bar_plot(path.with_suffix(".png"), [f"K={r['K']} B={r['B']}\nD={r['D']}" for r in rows],
             {n: [1e3 * r[n]["median_s"] for r in rows] for n in names}, highlight="torchhpc",
             ylabel="ms per forward+backward (median)", title=f"jagged embedding-bag pooling on {device.type}")


def main() -> None:
    ap = benchmark_parser(__doc__, repeats=15)
    ap.add_argument("--suite", default="all", choices=["all", "stream", "pooling"],
                    help="which benchmark (default: all)")
    ap.add_argument("--steps", type=int, default=1500, help="stream: batches of 512 samples (default: 1500)")
    args = ap.parse_args()
    if args.suite in ("all", "stream"):
        from torchhpc.ext.kraken.bench import run_comparison
        from torchhpc.ext.kraken.config import BenchOptions

        print("== continual training on one stream (CPU, torch threads:", torch.get_num_threads(), ")")
        run_comparison(BenchOptions(steps=args.steps, out=args.out))
    if args.suite in ("all", "pooling"):
        print("== jagged embedding-bag pooling")
        pooling(args)


if __name__ == "__main__":
    main()
