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
Reports the ratio anchor / ours per size (> 1 means we are faster).  Times are medians of interleaved
repeats; absolute times mean something only on the GPU.

    python benchmarks/kraken.py [--suite all|stream|pooling] [--steps 1500] [--device auto|cpu|cuda]
                                [--repeats 15] [--out runs/bench]

Writes ``<out>/kraken/stream.json``/``stream.png`` and ``<out>/kraken/pooling.json``/``pooling.png``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch


def make_input(K, B, N, mean_len, seed, device):
    from torchrec import KeyedJaggedTensor

    g = torch.Generator().manual_seed(seed)
    lengths = torch.poisson(torch.full((K * B,), float(mean_len)), generator=g).long()
    values = (N * torch.rand(int(lengths.sum()), generator=g).pow(3.0)).long().clamp_(max=N - 1)
    return KeyedJaggedTensor.from_lengths_sync(keys=[f"f{i}" for i in range(K)], values=values,
                                               lengths=lengths).to(device)


def bench_case(K, B, N, D, mean_len, repeats, device):
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
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def step(fn):
        out = fn()
        sum(v.sum() for v in out.values()).backward()

    # correctness first: the benchmark refuses to time a wrong answer
    a, b = impls["torchhpc"](), impls["torchrec_ebc"]()
    err = max(float((a[k] - b[k]).detach().abs().max()) for k in a)
    if err > 1e-4:
        raise SystemExit(f"torchhpc and torchrec disagree (max abs diff {err})")
    times = {name: [] for name in impls}
    for fn in impls.values():
        step(fn)
    sync()
    for _ in range(repeats):
        for name, fn in impls.items():  # interleaved, so drift hits every implementation alike
            t0 = time.perf_counter()
            step(fn)
            sync()
            times[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(ts) * 1e3 for name, ts in times.items()}
    ids = int(kjt.values().numel())
    return {"K": K, "B": B, "N": N, "D": D, "ids": ids, "ms": med,
            "ratio_torchrec_over_ours": med["torchrec_ebc"] / med["torchhpc"],
            "max_abs_diff": err}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--out", default="runs/bench")
    ap.add_argument("--suite", default="all", choices=["all", "stream", "pooling"])
    ap.add_argument("--steps", type=int, default=1500, help="stream: batches of 512 samples (default 1500)")
    args = ap.parse_args()
    if args.suite in ("all", "stream"):
        from torchhpc.ext.kraken.bench import run_comparison

        print("== continual training on one stream (CPU, torch threads:", torch.get_num_threads(), ")")
        run_comparison(steps=args.steps, out=args.out)
    if args.suite in ("all", "pooling"):
        print("== jagged embedding-bag pooling")
        pooling(args)


def pooling(args) -> None:
    from torchhpc.ext.core.device import pick_device

    device = pick_device(args.device)
    cases = [(4, 512, 100_000, 64, 8), (8, 2048, 200_000, 128, 16), (26, 1024, 50_000, 64, 4)]
    results = []
    for K, B, N, D, L in cases:
        r = bench_case(K, B, N, D, L, args.repeats, device)
        results.append(r)
        ms = ", ".join(f"{k} {v:.2f} ms" for k, v in r["ms"].items())
        print(f"K={K:<3} B={B:<5} N={N:<7} D={D:<4} ids={r['ids']:<7} {ms}  "
              f"torchrec/ours = {r['ratio_torchrec_over_ours']:.2f}x")
    out = Path(args.out) / "kraken"
    out.mkdir(parents=True, exist_ok=True)
    meta = {"device": str(device), "torch": torch.__version__, "threads": torch.get_num_threads()}
    (out / "pooling.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=110)
    labels = [f"K={r['K']} B={r['B']}\nD={r['D']}" for r in results]
    names = list(results[0]["ms"])
    width = 0.8 / len(names)
    for j, name in enumerate(names):
        ax.bar([i + j * width for i in range(len(results))], [r["ms"][name] for r in results], width, label=name)
    ax.set_xticks([i + width * (len(names) - 1) / 2 for i in range(len(results))], labels)
    ax.set_ylabel("ms per forward+backward (median)")
    ax.set_title(f"jagged embedding-bag pooling on {device.type}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "pooling.png")
    print(f"wrote {out / 'pooling.json'} and pooling.png")


if __name__ == "__main__":
    main()
