"""Ours vs SZ3 vs ZFP vs fpzip: compression ratio at the same absolute error bound, and throughput.

    python benchmarks/foresight.py                    # NYX 32^3 sample (6 fields) + a 256^3 synthetic GRF
    python benchmarks/foresight.py --size 64 --repeats 2    # quick
    python benchmarks/foresight.py --codec blocks           # our device codec (the default on CUDA) on the CPU
    python benchmarks/foresight.py --device cuda --entropy nvcomp   # its frames by nvCOMP on the GPU
    python benchmarks/foresight.py --device cuda --stages           # where our block codec's time goes

For each input and each bound e = E * (max - min), E in --bounds, every compressor runs in its
absolute-error mode with bound e (fpzip: the fewest bits that meet e); the max error of each result
is checked against e, the ratio is bytes in / bytes out, and compress/decompress are timed
(``time_interleaved``, median) without the library's extra verification pass, so each compressor
is timed bare.  The headline is ours / SZ3 ratio (goal: >= 1/1.3) and our speed over SZ3's.
"""

from __future__ import annotations

import sys

import torch

from torchhpc.ext.core.bench import bar_plot, benchmark_parser, result_row, time_interleaved, write_results
from torchhpc.ext.core.data import shared_data_dir
from torchhpc.ext.foresight.compressors import get_compressor
from torchhpc.ext.foresight.data import gaussian_random_field, load_hdf5

NYX = shared_data_dir() / "foresight" / "testing" / "z255_32.h5"
COMPRESSORS = ("ours", "sz3", "zfp", "fpzip")


def inputs(size: int) -> dict[str, dict[str, torch.Tensor]]:
    out = {}
    if NYX.is_file():
        out["nyx32"] = load_hdf5(NYX)
    else:
        print(f"(NYX sample {NYX} absent: skipped)", file=sys.stderr)
    # P(k) ~ k^-3: smooth at small scales, as simulation fields are
    out[f"grf{size}"] = {"density": gaussian_random_field(size, lambda k: (k / 10.0) ** -3.0, seed=0)}
    return out


def stage_times(fields: dict[str, torch.Tensor], rel: float, dev: torch.device, repeats: int) -> dict[str, float]:
    """Seconds (medians, summed over the fields) of each stage of our block codec, interpolation predictor,
    the library's calls one by one: ``pack`` (quantise, predict, scan and pack on ``dev``, the payload to the
    host), ``frames`` (the host's zstd frames), ``unframe`` (the frames decoded on the host) and ``unpack``
    (the payload to ``dev``, unpacked, reconstructed, dequantised)."""
    from torchhpc.ext.foresight.blocks import blocks_decode, blocks_encode
    from torchhpc.ext.foresight.entropy import entropy_decode, entropy_encode

    def calls(x: torch.Tensor) -> dict:
        xd, eb = x.to(dev), rel * float(x.max() - x.min())
        payload, meta = blocks_encode(xd, eb, predictor="interp")
        frames = entropy_encode(payload, 1)
        return {"pack": lambda: blocks_encode(xd, eb, predictor="interp"),
                "frames": lambda: entropy_encode(payload, 1),
                "unframe": lambda: entropy_decode(frames, len(payload)),
                "unpack": lambda: blocks_decode(payload, meta, tuple(x.shape), x.dtype, eb, dev)}

    sync = torch.cuda.synchronize if dev.type == "cuda" else None
    out = dict.fromkeys(("pack", "frames", "unframe", "unpack"), 0.0)
    for x in fields.values():
        for name, t in time_interleaved(calls(x), repeats=repeats, sync=sync).items():
            out[name] += t.median
    return out


def main(argv=None) -> int:
    ap = benchmark_parser(__doc__, repeats=3)
    ap.add_argument("--size", type=int, default=256, help="side of the synthetic field (default 256)")
    ap.add_argument("--bounds", type=float, nargs="+", default=[1e-2, 1e-3, 1e-4],
                    help="bounds relative to each field's value range (default 1e-2 1e-3 1e-4)")
    ap.add_argument("--codec", default="auto", choices=["auto", "planes", "blocks"],
                    help="our codec (auto: blocks on CUDA, planes on the CPU)")
    ap.add_argument("--entropy", default="auto", choices=["auto", "zstd", "nvcomp"],
                    help="the block codec's zstd frames: on the host (auto, zstd) or by nvCOMP on the GPU")
    ap.add_argument("--stages", action="store_true",
                    help="also time our block codec stage by stage on each field (a row per input and bound)")
    args = ap.parse_args(argv)
    dev = torch.device("cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
                       else "cpu")
    sync = torch.cuda.synchronize if dev.type == "cuda" else None
    comps = {n: get_compressor(n) for n in COMPRESSORS}
    extra = {n: ({"codec": args.codec, "entropy": args.entropy} if n == "ours" else {}) for n in COMPRESSORS}
    rows = []
    for iname, fields in inputs(args.size).items():
        for rel in args.bounds:
            tot_in = 0
            tot_out = dict.fromkeys(COMPRESSORS, 0)
            t_c = dict.fromkeys(COMPRESSORS, 0.0)
            t_d = dict.fromkeys(COMPRESSORS, 0.0)
            ok = dict.fromkeys(COMPRESSORS, True)
            for x in fields.values():
                eb = rel * float(x.max() - x.min())
                xs = {n: (x.to(dev) if n == "ours" else x) for n in COMPRESSORS}
                tot_in += x.numel() * x.element_size()
                packed = {}
                for n, c in comps.items():
                    packed[n] = c.compress(xs[n], verify=False, mode="abs", bound=eb, **extra[n])
                    y = c.decompress(packed[n], xs[n].device).cpu()
                    err = float((y.double() - x.double()).abs().max())
                    ok[n] &= err <= eb
                    tot_out[n] += packed[n].stats["nbytes_out"]
                tc = time_interleaved({n: (lambda n=n, xs=xs, eb=eb: comps[n].compress(xs[n], verify=False, mode="abs",
                                                                                     bound=eb, **extra[n]))
                                       for n in COMPRESSORS}, repeats=args.repeats, sync=sync)
                td = time_interleaved({n: (lambda n=n, xs=xs, packed=packed: comps[n].decompress(packed[n],
                                                                                                 xs[n].device))
                                       for n in COMPRESSORS}, repeats=args.repeats, sync=sync)
                for n in COMPRESSORS:
                    t_c[n] += tc[n].median
                    t_d[n] += td[n].median
            ratio = {n: tot_in / tot_out[n] for n in COMPRESSORS}
            mb = tot_in / 1e6
            row = result_row(f"{iname} rel{rel:g}", tc, anchor="sz3", input=iname, rel_bound=rel,
                             ratio=ratio, ratio_ours_over_sz3=ratio["ours"] / ratio["sz3"],
                             bound_held=ok, compress_MBps={n: mb / t_c[n] for n in COMPRESSORS},
                             decompress_MBps={n: mb / t_d[n] for n in COMPRESSORS},
                             compress_speedup_vs_sz3=t_c["sz3"] / t_c["ours"],
                             decompress_speedup_vs_sz3=t_d["sz3"] / t_d["ours"], device=str(dev),
                             codec=packed["ours"].meta["codec"],
                             entropy=packed["ours"].meta.get("stages", ["zstd (planes)"])[-1])
            if args.stages:
                row["stages_s"] = stage_times(fields, rel, dev, args.repeats)
            rows.append(row)
            print(f"{iname:8s} E={rel:<7g} ratio " + "  ".join(f"{n} {ratio[n]:7.2f}" for n in COMPRESSORS)
                  + f"  | ours/sz3 {ratio['ours'] / ratio['sz3']:.2f}  | comp MB/s "
                  + "  ".join(f"{n} {mb / t_c[n]:6.1f}" for n in COMPRESSORS)
                  + "  | decomp MB/s " + "  ".join(f"{n} {mb / t_d[n]:6.1f}" for n in COMPRESSORS)
                  + f"  | bound held {all(ok.values())}"
                  + ("  | stages s " + "  ".join(f"{k} {v:.4f}" for k, v in row["stages_s"].items())
                     if args.stages else ""), flush=True)
    path = write_results("foresight", "compressors", rows, out=args.out,
                         params={"size": args.size, "bounds": args.bounds, "repeats": args.repeats,
                                 "device": str(dev), "codec": args.codec, "entropy": args.entropy,
                                 "stages": args.stages})
    groups = [r["name"] for r in rows]
    bar_plot(path.with_suffix(".png"), groups, {n: [r["ratio"][n] for r in rows] for n in COMPRESSORS},
             ylabel="compression ratio at equal max error", logy=True, highlight="ours",
             title="foresight: ratio at the same absolute bound")
    bar_plot(path.with_name("throughput.png"), groups,
             {n: [r["compress_MBps"][n] for r in rows] for n in COMPRESSORS}, ylabel="compress MB/s", logy=True,
             highlight="ours", title=f"foresight: compression throughput ({dev.type})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
