"""Does a change keep every result to the last bit?  Run the debug configs at two commits on this host
and compare their outputs bit for bit (torchtitan's loss-compare idea).

    python tools/compare_commits.py BASE [HEAD]        # HEAD defaults to the working tree
    python tools/compare_commits.py main~3 main --only sched,kraken

Each commit is checked out with ``git worktree`` into a scratch folder and run with this checkout's
virtual environment, its packages taken from that worktree (``PYTHONPATH`` holds a ``torchhpc`` namespace
whose folders point into it).  Floats are compared with ``==`` after JSON parsing, so this check is
for one host only: across CPU models the suite's tolerance policy applies instead (tests/README.md).
Wall-clock fields (``time``, ``*_s``, ``seconds``, ``gflops``, ...) are left out.  Exit status 1 when
any case differs, 2 when a case failed to run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("ext", "triton_kernels", "trainers", "envs")
WATER = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"
RUNS = "runs-compare"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
CLI = [sys.executable, "-m", "torchhpc.trainers.cli"]

#: name -> (command run in the worktree, files under it whose contents are compared)
CASES: dict[str, tuple[list[str], list[str]]] = {
    "sched": ([*CLI, "sched", "train", "--config", "configs/sched/debug.yaml", "--set", f"run.root={RUNS}",
               "--set", "run.run_id=c", "--set", "run.progress=false"],
              [f"{RUNS}/sched/c/metrics.jsonl", f"{RUNS}/sched/c/summary.json"]),
    "kraken": ([*CLI, "kraken", "train", "--config", "configs/kraken/debug.yaml", "--set", f"run.root={RUNS}",
                "--set", "run.run_id=c", "--set", "run.progress=false"],
               [f"{RUNS}/kraken/c/metrics.jsonl", f"{RUNS}/kraken/c/summary.json"]),
    "gems": ([*TORCHRUN, "-m", "torchhpc.trainers.gems", "--config", "configs/gems/debug.yaml",
              "--set", "pipeline.balance_by=memory", "--set", f"run.root={RUNS}", "--set", "run.run_id=c"],
             [f"{RUNS}/gems/c/metrics.jsonl"]),
    "symnmf": ([*CLI, "symnmf", "run", "--dataset", "sbm", "--k", "4", "--algo", "gn", "--json",
                "--set", f"run.root={RUNS}", "--set", "run.run_id=c"], ["<stdout>"]),
    "ccsdt": ([*CLI, "ccsdt", "--atom", WATER, "--basis", "6-31g", "--threads", "1", "--json"], ["<stdout>"]),
    "segalign": ([sys.executable, "-c",
                  "import sys; from torchhpc.ext.segalign.simulate import simulate_pair; from torchhpc.trainers.cli "
                  "import main; simulate_pair(20000, inversions=1, duplications=1, seed=5).write('t.fa', 'q.fa'); "
                  "sys.exit(main(['align', 't.fa', 'q.fa', '--output', 'out.maf', '--threads', '1']))"],
                 ["out.maf"]),
}


def volatile(key: str) -> bool:
    """A wall-clock or machine-dependent field: left out of the comparison."""
    key = key.lower()
    return (key in {"time", "seconds", "gflops", "elapsed", "date", "machine", "commit", "host"}
            or key.endswith(("_s", "_ms", "_seconds", "per_s", "_time", "gflops", "_dir", "path")))


def strip(value):
    if isinstance(value, dict):
        return {k: strip(v) for k, v in value.items() if not volatile(k)}
    if isinstance(value, list):
        return [strip(v) for v in value]
    return value


def fingerprint(text: str) -> object:
    """JSON (one document or one per line) without volatile fields; other text as its SHA-256."""
    try:
        return strip(json.loads(text))
    except json.JSONDecodeError:
        pass
    try:
        return [strip(json.loads(line)) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError:
        return hashlib.sha256(text.encode()).hexdigest()


def checkout(rev: str | None, scratch: Path, side: str) -> tuple[Path, Path]:
    """``(tree, pythonpath)``: a worktree of ``rev`` (``None``: this working tree as it is) and a folder
    holding a ``torchhpc`` namespace whose subpackages point into it."""
    if rev is None:
        tree = REPO
    else:
        tree = scratch / f"tree-{side}"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(tree), rev], check=True)
    path = scratch / f"path-{side}"
    (path / "torchhpc").mkdir(parents=True)
    for folder in FOLDERS:
        (path / "torchhpc" / folder).symlink_to(tree / folder, target_is_directory=True)
    return tree, path


def run_case(name: str, tree: Path, pythonpath: Path, work: Path) -> dict[str, object]:
    """Run case ``name`` of ``tree`` in the empty folder ``work``; its outputs' fingerprints."""
    cmd, outputs = CASES[name]
    work.mkdir(parents=True)
    (work / "configs").symlink_to(tree / "configs", target_is_directory=True)
    env = dict(os.environ, PYTHONPATH=str(pythonpath), OMP_NUM_THREADS="1", TMPDIR=str(work))  # torchrun's logs too
    res = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                         timeout=900)
    if res.returncode != 0:
        raise RuntimeError(f"exited {res.returncode}: {res.stderr.strip()[-800:]}")
    return {out: fingerprint(res.stdout if out == "<stdout>" else (work / out).read_text()) for out in outputs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("base", help="the commit to compare against (e.g. main)")
    ap.add_argument("head", nargs="?", default=None, help="the commit to check (default: the working tree)")
    ap.add_argument("--only", default=",".join(CASES), help=f"comma-separated cases (default: {','.join(CASES)})")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; valid: {', '.join(CASES)}")
    scratch = Path(tempfile.mkdtemp(prefix="compare-commits-"))
    status = 0
    try:
        trees = {"base": checkout(args.base, scratch, "base"), "head": checkout(args.head, scratch, "head")}
        for name in names:
            try:
                got = {side: run_case(name, tree, path, scratch / side / name) for side, (tree, path) in trees.items()}
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"{name:9s} ERROR  {exc}")
                status = max(status, 2)
                continue
            same = got["base"] == got["head"]
            diff = [out for out in got["base"] if got["base"][out] != got["head"][out]]
            print(f"{name:9s} {'same' if same else 'DIFFERS'}" + ("" if same else f"  in {', '.join(diff)}"))
            status = max(status, 0 if same else 1)
    finally:
        for side in ("base", "head"):
            if (scratch / f"tree-{side}").is_dir():
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(scratch / f"tree-{side}")],
                               check=False)
        shutil.rmtree(scratch, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
