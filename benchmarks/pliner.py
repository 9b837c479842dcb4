"""pliner on Varity-style random programs: does the returned set fix the divergence, is it minimal,
how many runs did it take — beside a first-divergence report (PyTorch's repro ``analyze`` answer).

    python benchmarks/pliner.py                                   # 60 bf16 + 60 TF32 programs
    python benchmarks/pliner.py --problems autocast-bf16 --count 10 --exhaustive-max-n 0   # quick
    python benchmarks/pliner.py --problems compile --count 8 --max-tries 16    # inductor: ~10 s a compile

Per problem configuration: programs kept (divergent beyond the tolerance; enhancing everything
fixes them), the share where our set fixes the divergence and is 1-minimal (re-checked from
scratch), mean runs against the budget ``2 log2(n)`` (n = candidate ops), the share where the set
is a smallest fixing set (exhaustive search over all subsets of up to 3 ops, programs with
n <= --exhaustive-max-n; k programs checked; a set larger than any tried is left out of the share),
and the first-divergence answer: enhancing the first op whose value
differs fixes the divergence in what share of the programs.  PLiNER's paper: 87% of affected
lines found (Herbgrind: 6%) on 100 random programs.
"""

from __future__ import annotations

import math
import statistics
import time

from torchhpc.ext.core.bench import benchmark_parser, write_results
from torchhpc.ext.pliner import SearchOptions, find
from torchhpc.ext.pliner.config import parse_precision
from torchhpc.ext.pliner.generate import TOLERANCES, suite
from torchhpc.ext.pliner.oracle import Oracle, run_config
from torchhpc.ext.pliner.reference import exhaustive_minimum, first_divergence, is_one_minimal
from torchhpc.ext.pliner.search import build_program


def run_case(case, exhaustive_max_n: int, search: str, exhaustive_size: int = 3, tol_policy: str = "fixed") -> dict:
    prob = parse_precision(case.problem)
    t0 = time.perf_counter()  # the capture (torch.export) counts in the time
    program = build_program(case.model, case.inputs, prob)
    ref = run_config(case.model, case.inputs, parse_precision("fp32"))
    if tol_policy == "geomean":  # between the reference's own error and the divergence (see --tol-policy)
        err_all = Oracle(program.run, ref, case.tol).error(frozenset(program.ops))
        case.tol = math.sqrt(case.error_before * err_all)
    res = find(case.model, case.inputs, problem=case.problem, program=program,
               options=SearchOptions(tol=case.tol, search=search))
    seconds = time.perf_counter() - t0
    row = {"seed": case.seed, "problem": case.problem, "tol": case.tol, "n": res.n_candidates,
           "status": res.status, "runs": res.runs, "seconds": seconds, "size": len(res.atoms),
           "error_before": res.error_before, "error_after": res.error_after, "error_all": res.error_all,
           "culprits": sorted(res.atoms), "budget_2log2n": 2 * math.log2(max(res.n_candidates, 2))}
    # an independent oracle (fresh cache) re-checks what the search claims
    check = Oracle(program.run, ref, case.tol)
    row["fixes"] = res.status == "found" and check.fixes(res.atoms)
    row["one_minimal"] = res.status == "found" and is_one_minimal(check, res.atoms)
    if res.status == "found" and res.n_candidates <= exhaustive_max_n:
        k, sets = exhaustive_minimum(check, sorted(program.ops, key=program.sort_key), max_size=exhaustive_size)
        row["min_size"] = k
        # no fixing set of <= exhaustive_size ops and ours is larger: consistent, but not provably smallest
        row["smallest"] = (frozenset(res.atoms) in sets) if k is not None else (
            None if len(res.atoms) > exhaustive_size else False)
    first = first_divergence(program, parse_precision("fp32"), case.tol) if prob.backend == "eager" else None
    row["first_divergence"] = first
    row["first_fixes"] = first is not None and check.fixes(frozenset([first]))
    row["first_in_ours"] = first in res.atoms
    return row


def summarize(rows: list[dict], problem: str) -> dict:
    sel = [r for r in rows if r["problem"] == problem]
    found = [r for r in sel if r["status"] == "found"]
    ex = [r for r in sel if r.get("smallest") is not None]
    return {
        "name": problem, "programs": len(sel), "found": len(found),
        "fixes_and_minimal": sum(r["fixes"] and r["one_minimal"] for r in sel) / max(len(sel), 1),
        "mean_runs": statistics.mean(r["runs"] for r in sel) if sel else 0.0,
        "mean_2log2n": statistics.mean(r["budget_2log2n"] for r in sel) if sel else 0.0,
        "mean_n": statistics.mean(r["n"] for r in sel) if sel else 0.0,
        "mean_size": statistics.mean(r["size"] for r in found) if found else 0.0,
        "exhaustive_checked": len(ex), "smallest": sum(r["smallest"] for r in ex) / max(len(ex), 1),
        "exhaustive_larger": sum("smallest" in r and r["smallest"] is None for r in sel),
        "first_divergence_fixes": sum(r["first_fixes"] for r in sel) / max(len(sel), 1),
        "first_divergence_in_ours": sum(r["first_in_ours"] for r in sel) / max(len(sel), 1),
        "mean_seconds": statistics.mean(r["seconds"] for r in sel) if sel else 0.0,
        "statuses": {s: sum(r["status"] == s for r in sel) for s in sorted({r["status"] for r in sel})},
    }


def main() -> None:
    ap = benchmark_parser(__doc__, repeats=1)
    ap.add_argument("--problems", default="autocast-bf16,tf32", help="comma-separated problem configurations")
    ap.add_argument("--count", type=int, default=60, help="divergent programs per configuration")
    ap.add_argument("--exhaustive-max-n", type=int, default=14,
                    help="exhaustive ground truth for programs with at most this many candidate ops")
    ap.add_argument("--exhaustive-size", type=int, default=3, help="largest subset size the exhaustive search tries")
    ap.add_argument("--max-tries", type=int, default=2000, help="random programs drawn at most per configuration")
    ap.add_argument("--search", default="bisect", choices=["bisect", "ddmin"])
    ap.add_argument("--tol-policy", default="auto", choices=["auto", "fixed", "geomean"],
                    help="fixed: the configuration's tolerance; geomean: per program, the geometric mean of the "
                         "divergence and the all-float64 error (the float32 reference's own error); auto: geomean "
                         "for compile, whose divergences span decades, fixed otherwise")
    args = ap.parse_args()
    rows: list[dict] = []
    summaries = []
    for problem in args.problems.split(","):
        t0 = time.perf_counter()
        for case in suite(problem, args.count, tol=TOLERANCES.get(problem), max_tries=args.max_tries):
            policy = args.tol_policy if args.tol_policy != "auto" else (
                "geomean" if parse_precision(problem).backend == "compile" else "fixed")
            rows.append(run_case(case, args.exhaustive_max_n, args.search, args.exhaustive_size, policy))
        s = summarize(rows, problem)
        s["total_seconds"] = time.perf_counter() - t0
        summaries.append(s)
    hdr = (f"{'problem':<14}{'progs':>6}{'fixes+minimal':>14}{'smallest(k)':>13}{'runs':>7}{'2log2n':>8}{'n':>6}"
           f"{'|set|':>7}{'first-div fixes':>16}{'first-div in ours':>18}{'s/prog':>8}")
    print(hdr)
    for s in summaries:
        print(f"{s['name']:<14}{s['programs']:>6}{100 * s['fixes_and_minimal']:>13.1f}%"
              f"{100 * s['smallest']:>6.1f}% ({s['exhaustive_checked']:>2}){s['mean_runs']:>7.1f}{s['mean_2log2n']:>8.1f}{s['mean_n']:>6.1f}"
              f"{s['mean_size']:>7.2f}{100 * s['first_divergence_fixes']:>15.1f}%"
              f"{100 * s['first_divergence_in_ours']:>17.1f}%{s['mean_seconds']:>8.2f}")
    allr = rows
    total = {"name": "all", "programs": len(allr),
             "fixes_and_minimal": sum(r["fixes"] and r["one_minimal"] for r in allr) / max(len(allr), 1),
             "mean_runs": statistics.mean(r["runs"] for r in allr) if allr else 0.0,
             "mean_2log2n": statistics.mean(r["budget_2log2n"] for r in allr) if allr else 0.0}
    print(f"{'all':<14}{total['programs']:>6}{100 * total['fixes_and_minimal']:>13.1f}%{'':>13}"
          f"{total['mean_runs']:>7.1f}{total['mean_2log2n']:>8.1f}")
    name = "generated_" + "_".join(p.replace("-", "") for p in args.problems.split(","))
    write_results("pliner", name, summaries + [total], out=args.out,
                  params={"problems": args.problems, "count": args.count, "search": args.search,
                          "exhaustive_max_n": args.exhaustive_max_n, "tolerances": TOLERANCES,
                          "programs": rows})


if __name__ == "__main__":
    main()
