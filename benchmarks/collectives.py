"""Benchmark: direct vs LAG-H vs LAW-H vs Open MPI's ``MPI_Neighbor_alltoallv`` on one graph, plus the scale model.

    python benchmarks/collectives.py [--nproc 16] [--ranks-per-node 8] [--graph random:0.1,random:0.5,powerlaw:3:1] \\
        [--sizes 4K,64K,256K,1M] [--inter-node-mbps 20] [--repeats 5] [--quick]

For each graph of ``--graph``:

1. Emulated 2-node run: ``--nproc`` gloo ranks under torchrun, blocks of ``--ranks-per-node`` ranks
   form a node, and every rank injects inter-node bytes at ``--inter-node-mbps`` (the per-process
   injection limit LAW-H balances; see ``EmulatedNetwork``).  Time per call and inter-node bytes per rank.
   Messages between ranks of one node take ``--intra-node`` (default: shared memory, for every algorithm).
2. The same graph, ranks and sizes without emulation (loopback only) for ours, and Open MPI's
   ``Neighbor_alltoallv`` (mpi4py under ``mpirun``, loopback) on the same graph and sizes: the anchor.
   Open MPI cannot be slowed by our emulation, so it is compared in the loopback setting only.
   With ``--netns-mbit R`` (root): the same bench with the two nodes in two network namespaces joined
   by a veth pair limited to R Mbit/s each way (a shared per-node link rather than a per-rank limit).
3. Cost model: latencies (gloo and, with node-mates on shared memory, intra-node) and intra-node bandwidth
   fitted to run 2's direct calls of all graphs together; with the emulated
   injection bandwidth it predicts run 1 (model vs measured); then the routing plans of 512 nodes x 56
   ranks = 28,672 processes at the paper's large message sizes, with cluster parameters (HDR-100-class
   NIC, 12.5 GB/s per node), beside the paper's reported "up to 9x" speed-up.

Results: OUT/collectives/neighbor_alltoallv.json (``write_results``) and neighbor_alltoallv.png.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from torchhpc.ext.collectives.config import INTRA_NODE_CHOICES, INTRA_NODE_DEFAULT, INTRA_NODE_HELP
from torchhpc.ext.core.bench import bar_plot, benchmark_parser, print_rows, write_results

ALGOS = ["direct", "lag-h", "law-h"]
# Ghazimirsaeed et al., SC20, abstract: "experimental results on up to 28,672 processes show up to 9x speedup
# for various process topologies" and "34x speedup for ... SpMM".
PAPER_SPEEDUP_28672 = 9.0
PAPER_SPMM_SPEEDUP = 34.0


def _torchrun_bench(args, mbps: float, out: Path) -> dict:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.nproc}",
           "-m", "torchhpc.trainers.collectives", "--graph", args.graph, "--seed", str(args.seed),
           "--ranks-per-node", str(args.ranks_per_node), "--sizes", args.sizes, "--algo", ",".join(ALGOS),
           "--repeats", str(args.repeats), "--inter-node-mbps", str(mbps), "--intra-node", args.intra_node,
           "--output", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if res.returncode:
        sys.exit(f"torchrun bench failed:\n{res.stderr[-3000:]}")
    print(res.stdout.strip())
    return json.loads(out.read_text())


def _openmpi_bench(args, out: Path) -> dict | None:
    from torchhpc.ext.collectives.mpi_reference import mpirun_command

    try:
        res = subprocess.run(mpirun_command(args.nproc, ["bench", str(out), "--graph", args.graph, "--seed",
                                                         str(args.seed), "--sizes", args.sizes, "--repeats",
                                                         str(args.repeats)]),
                             capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    except FileNotFoundError:
        print("Open MPI (mpirun) is not installed: the anchor column is left out")
        return None
    if res.returncode:
        print(f"Open MPI run failed: {res.stderr[-1500:]}")
        return None
    return json.loads(out.read_text())


NETNS_SCRIPT = Path(__file__).resolve().parents[1] / "ext" / "collectives" / "scripts" / "two_node_netns.sh"


def _netns_bench(args, out: Path) -> dict | None:
    """The same bench with the two nodes in two network namespaces joined by a rate-limited veth pair."""
    env = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS="1")
    up = subprocess.run([str(NETNS_SCRIPT), "up", str(args.netns_mbit)], capture_output=True, text=True, env=env)
    if up.returncode:
        print(f"network namespaces unavailable (needs root): {up.stderr.strip()[-300:]}")
        subprocess.run([str(NETNS_SCRIPT), "down"], env=env)
        return None
    try:
        res = subprocess.run([str(NETNS_SCRIPT), "run", str(args.ranks_per_node), "--graph", args.graph, "--seed",
                              str(args.seed), "--sizes", args.sizes, "--algo", ",".join(ALGOS), "--repeats",
                              str(args.repeats), "--intra-node", args.intra_node, "--output", str(out)], capture_output=True, text=True, env=env,
                             timeout=1800)
    finally:
        subprocess.run([str(NETNS_SCRIPT), "down"], env=env)
    if res.returncode:
        print(f"netns bench failed: {res.stderr[-1500:]}")
        return None
    print(res.stdout.strip())
    return json.loads(out.read_text())


def _rows(run: dict, setting: str, anchor_rows: dict | None = None) -> list[dict]:
    rows = []
    for size in sorted({r["size"] for r in run["rows"]}):
        row = {"name": f"{setting} {size // 1024}K", "setting": setting, "size": size, "anchor": "direct"}
        for r in run["rows"]:
            if r["size"] == size:
                row[r["algo"]] = {"median_s": r["median_s"], "min_s": r["min_s"]}
                row[f"{r['algo']}_inter_node_bytes_per_rank"] = r["inter_node_bytes_per_rank"]
                row[f"{r['algo']}_identical"] = r["identical"]
        if anchor_rows and size in anchor_rows:
            row["openmpi"] = {"median_s": anchor_rows[size]["median_s"], "min_s": anchor_rows[size]["min_s"]}
        if "law-h" in row:  # what balancing can win at most: direct's busiest injector over LAW-H's
            row["law_h_ceiling"] = (max(row["direct_inter_node_bytes_per_rank"])
                                    / max(1, max(row["law-h_inter_node_bytes_per_rank"])))
        row["speedup_vs_anchor"] = {c: row["direct"]["median_s"] / row[c]["median_s"]
                                    for c in (*ALGOS[1:], "openmpi") if c in row}
        if "openmpi" in row:
            row["direct_vs_openmpi"] = row["openmpi"]["median_s"] / row["direct"]["median_s"]
        rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = benchmark_parser(__doc__, repeats=5)
    ap.add_argument("--nproc", type=int, default=16)
    ap.add_argument("--ranks-per-node", type=int, default=8)
    ap.add_argument("--graph", default="random:0.1,random:0.5,powerlaw:3:1", help="process graphs, comma-separated")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sizes", default="4K,64K,256K,1M")
    ap.add_argument("--inter-node-mbps", type=float, default=20.0)
    ap.add_argument("--intra-node", default=INTRA_NODE_DEFAULT, choices=INTRA_NODE_CHOICES, help=INTRA_NODE_HELP)
    ap.add_argument("--scale-graphs", default="random:0.002,powerlaw:57:1,moore:3:1",
                    help="graphs of the 28,672-process prediction")
    ap.add_argument("--netns-mbit", type=float, default=0.0,
                    help="also run with the 2 nodes in 2 network namespaces joined by a veth pair limited to this "
                         "many Mbit/s per direction (root; ext/collectives/scripts/two_node_netns.sh); 0: off")
    ap.add_argument("--quick", action="store_true", help="3 repeats, 2 sizes, a 64-node prediction")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats, args.sizes = 3, "4K,256K"

    from torchhpc.ext.collectives.config import ModelOptions
    from torchhpc.ext.collectives.model import calibrate, compare_measured, predict
    from torchhpc.ext.collectives.plan import CostModel

    rows, runs, model_vs_measured = [], {}, {}
    for graph in args.graph.split(","):
        args_g = type(args)(**{**vars(args), "graph": graph})
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            emulated = _torchrun_bench(args_g, args.inter_node_mbps, tmp / "emulated.json")
            loopback = _torchrun_bench(args_g, 0.0, tmp / "loopback.json")
            anchor = _openmpi_bench(args_g, tmp / "openmpi.json")
            netns = (_netns_bench(args_g, tmp / "netns.json")
                     if args.netns_mbit > 0 and args.nproc == 2 * args.ranks_per_node else None)
        anchor_rows = {r["size"]: r for r in anchor["rows"]} if anchor else None
        rows += _rows(emulated, f"{graph} emulated") + _rows(loopback, f"{graph} loopback", anchor_rows)
        if netns:
            rows += _rows(netns, f"{graph} netns")
        runs[graph] = {"emulated": emulated, "loopback": loopback, "openmpi": anchor, "netns": netns}
    # the cost model: calibrated on the loopback direct calls of every graph (one machine, one model: with
    # node-mates on shared memory the two latencies need graphs of different mixes), checked against the
    # emulated runs
    cal = calibrate([r["loopback"] for r in runs.values()])
    calibrations = {"all graphs": cal.as_dict()}
    emu_model = CostModel(alpha=cal.alpha, alpha_intra=cal.alpha_intra, beta_intra=cal.beta_intra,
                          beta_rank=args.inter_node_mbps * 1e6, beta_node=1e15)
    print(f"cost model calibrated on the loopback direct calls: {cal.as_dict()}")
    for graph, r in runs.items():
        model_vs_measured[graph] = compare_measured(r["emulated"], emu_model)
        for m in model_vs_measured[graph]:
            print(f"model vs measured ({graph}, emulated) {m['size']:>8} {m['algo']:>6}: predicted "
                  f"{1e3 * m['predicted_s']:8.2f} ms, measured {1e3 * m['measured_s']:8.2f} ms")
    print_rows(rows)
    for r in rows:
        if "law_h_ceiling" in r and "emulated" in r["setting"]:
            print(f"{r['name']}: LAW-H ceiling (direct's busiest injector / LAW-H's) {r['law_h_ceiling']:.2f}x")
    nodes = 64 if args.quick else 512
    scale = []
    for g in args.scale_graphs.split(","):
        pred = predict(ModelOptions(nodes=nodes, ranks_per_node=56, graph=g, sizes="64K,256K,1M"))
        best = max(r["speedup_vs_direct"] for r in pred["rows"] if r["algo"] != "direct")
        print(f"predicted at {pred['nranks']} processes, {g}: best hierarchical speed-up {best:.2f}x "
              f"(paper: up to {PAPER_SPEEDUP_28672:g}x)")
        scale.append({"graph": g, "nranks": pred["nranks"], "edges": pred["edges"], "model": pred["model"],
                      "rows": pred["rows"], "best_speedup_vs_direct": best})

    params = {"runs": runs, "calibration": next(iter(calibrations.values())), "calibrations": calibrations,
              "model_vs_measured_emulated": model_vs_measured,
              "scale_prediction": scale, "paper_speedup_28672": PAPER_SPEEDUP_28672,
              "paper_spmm_speedup": PAPER_SPMM_SPEEDUP, "nproc": args.nproc, "ranks_per_node": args.ranks_per_node,
              "graph": args.graph, "seed": args.seed, "inter_node_mbps": args.inter_node_mbps}
    path = write_results("collectives", "neighbor_alltoallv", rows, out=args.out, params=params)
    series = {c: [1e3 * r[c]["median_s"] if c in r else 0.0 for r in rows] for c in (*ALGOS, "openmpi")}
    bar_plot(path.with_suffix(".png"), [r["name"] for r in rows], series, ylabel="ms per call (max over ranks)",
             logy=True, highlight="law-h", title=f"Neighbor_alltoallv, {args.nproc} ranks, {args.ranks_per_node} per node")
    return 0


if __name__ == "__main__":
    sys.exit(main())
