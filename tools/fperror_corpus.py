"""Parse every benchmark input of the public round-off corpora (Satire, FPTaylor) and tabulate the outcome.

    python tools/fperror_corpus.py SATIRE_DIR FPTAYLOR_DIR                 # a table per source, on stdout
    python tools/fperror_corpus.py SATIRE_DIR --under tests/satire-test --out table.md --json table.json

A SOURCE is a git directory (a clone, or a bare mirror: its HEAD tree is read with ``git ls-tree``
and ``git cat-file``, nothing is checked out) or a plain folder of files.  The files are those
under its benchmark folders (any folder named ``benchmarks`` or ``large_benchmarks``; ``--under``
names others) whose names end in ``.txt`` (``--ext``).  Each file is parsed (format detected from
its keywords) and, when it parses, bounded, so that the table shows the parsed program is
analysable: ``parsed`` with its inputs, outputs, operations and the bound of its first output (20
rounds of branch and bound where the DAG is small, else one interval pass; ``--bb-iters``);
``refused`` with the one-line error (``file:line:column: what``); ``absent`` for a file the mirror
lists but does not hold (partial mirrors leave out large blobs).
Inputs: FPTaylor files under FPTaylor's semantics (``inputs="rounded"``: a ``real`` variable is
rounded where a rounding applies to it), Satire files exact, as Satire reads them (``--inputs``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath

from torchhpc.ext.core.errors import TorchHPCError
from torchhpc.ext.fperror.analysis import analyze
from torchhpc.ext.fperror.parsers import detect_format, parse

BENCH_FOLDERS = ("benchmarks", "large_benchmarks")


@dataclass
class Row:
    """One file's outcome."""

    file: str
    outcome: str  # parsed | refused | absent
    format: str = ""
    inputs: int = 0
    outputs: int = 0
    ops: int = 0
    bound: float | None = None
    detail: str = ""  # the refusal, or the notes of a parsed file (what the bound does not use)
    seconds: float = 0.0


def _git(src: Path, *args: str, data: bytes | None = None) -> bytes:
    return subprocess.run(["git", "-C", str(src), *args], input=data, capture_output=True, check=True).stdout


def is_git(src: Path) -> bool:
    """Whether ``src`` is a git work tree or a bare repository."""
    try:
        return _git(src, "rev-parse", "--git-dir").strip() != b""
    except (subprocess.CalledProcessError, FileNotFoundError):
        return False


def select(paths: list[str], under: list[str], exts: tuple[str, ...]) -> list[str]:
    """The benchmark inputs among ``paths``: under a prefix of ``under`` (default: any folder named
    benchmarks or large_benchmarks), with a name ending in one of ``exts``."""
    out = []
    for p in paths:
        parts = PurePosixPath(p).parts
        inside = (any(p.startswith(u.rstrip("/") + "/") for u in under) if under
                  else any(d in BENCH_FOLDERS for d in parts[:-1]))
        if inside and p.endswith(exts):
            out.append(p)
    return sorted(out)


def read_files(src: Path, under: list[str], exts: tuple[str, ...]) -> tuple[str, list[tuple[str, str | None]]]:
    """``(revision, [(path, text or None if absent)])`` of the selected files of ``src``."""
    if not is_git(src):
        paths = [str(p.relative_to(src).as_posix()) for p in src.rglob("*") if p.is_file()]
        chosen = select(paths, under, exts) if under or any(d in BENCH_FOLDERS for p in paths for d in p.split("/")) \
            else sorted(p for p in paths if p.endswith(exts))
        return "folder", [(p, (src / p).read_text(errors="replace")) for p in chosen]
    rev = _git(src, "rev-parse", "--short=12", "HEAD").decode().strip()
    listing = _git(src, "ls-tree", "-r", "HEAD").decode().splitlines()
    blobs = {}
    for line in listing:
        meta, path = line.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind == "blob":
            blobs[path] = sha
    chosen = select(list(blobs), under, exts)
    # one git cat-file --batch for all of them: "<sha> blob <size>\n<bytes>\n", or "<sha> missing\n"
    out = _git(src, "cat-file", "--batch", data="".join(blobs[p] + "\n" for p in chosen).encode())
    files, pos = [], 0
    for p in chosen:
        end = out.index(b"\n", pos)
        head = out[pos:end].decode().split()
        pos = end + 1
        if head[1] == "missing":
            files.append((p, None))
            continue
        size = int(head[2])
        files.append((p, out[pos:pos + size].decode(errors="replace")))
        pos += size + 1
    return rev, files


def outcome(path: str, text: str | None, inputs: str, bb_iters: int = 20) -> Row:
    """Parse ``text`` and, when it parses, bound it (``bb_iters`` rounds of branch and bound where the
    DAG is small enough for them, else one interval pass)."""
    if text is None:
        return Row(path, "absent", detail="not in the mirror (a large file a partial mirror leaves out)")
    t0 = time.perf_counter()
    try:
        fmt = detect_format(text)
    except TorchHPCError as exc:
        return Row(path, "refused", detail=f"{path}: {exc}")
    mode = inputs if inputs != "auto" else ("rounded" if fmt == "fptaylor" else "exact")
    try:
        dag = parse(text, path, fmt, mode)
    except TorchHPCError as exc:
        return Row(path, "refused", fmt, detail=str(exc), seconds=time.perf_counter() - t0)
    row = Row(path, "parsed", fmt, len(dag.input_names), len(dag.outputs), dag.num_ops, detail=" ".join(dag.notes))
    try:
        res = analyze(dag, bb_iters=bb_iters, time_budget_s=10.0)
        row.bound = res.outputs[0].abs_bound
    except TorchHPCError as exc:
        row.detail = (row.detail + " " if row.detail else "") + f"not analysable: {exc}"
    row.seconds = time.perf_counter() - t0
    return row


def table(name: str, rev: str, rows: list[Row]) -> str:
    """The markdown table of one source, with its counts."""
    n = {k: sum(r.outcome == k for r in rows) for k in ("parsed", "refused", "absent")}
    head = (f"### {name} @ {rev}: {len(rows)} files: {n['parsed']} parsed, {n['refused']} refused, "
            f"{n['absent']} absent\n\n"
            "| file | outcome | format | inputs | outputs | ops | bound (1st output) | detail |\n"
            "|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        bound = f"{r.bound:.3e}" if r.bound is not None else ""
        detail = r.detail.replace("|", "\\|")
        cells = [f"`{r.file}`", r.outcome, r.format, str(r.inputs) if r.outcome == "parsed" else "",
                 str(r.outputs) if r.outcome == "parsed" else "", f"{r.ops:,}" if r.outcome == "parsed" else "",
                 bound, detail]
        lines.append("| " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sources", nargs="+", type=Path, help="git directories (clones or mirrors) or folders")
    ap.add_argument("--under", action="append", default=[],
                    help="read the files under this folder of each source (repeatable; default: every folder "
                         "named benchmarks or large_benchmarks)")
    ap.add_argument("--ext", default=".txt", help="comma-separated file name endings (default .txt)")
    ap.add_argument("--inputs", choices=["auto", "exact", "rounded"], default="auto",
                    help="auto: FPTaylor files rounded (FPTaylor's semantics), Satire files exact")
    ap.add_argument("--bb-iters", type=int, default=20, help="branch-and-bound rounds per file (0: one interval pass)")
    ap.add_argument("--out", type=Path, help="also write the markdown tables here")
    ap.add_argument("--json", type=Path, help="also write every row as JSON here")
    args = ap.parse_args(argv)
    exts = tuple(e.strip() for e in args.ext.split(",") if e.strip())
    md, rows_all = [], {}
    for src in args.sources:
        if not src.exists():
            print(f"fperror_corpus: error: no such directory {src}", file=sys.stderr)
            return 1
        rev, files = read_files(src, args.under, exts)
        rows = []
        for path, text in files:
            rows.append(outcome(path, text, args.inputs, args.bb_iters))
            r = rows[-1]
            print(f"  {r.outcome:8s} {r.seconds:6.2f} s  {path}", file=sys.stderr, flush=True)
        name = (src.name if src.name not in ("repo", ".git") else src.parent.name).replace("+", "/")
        md.append(table(name, rev, rows))
        rows_all[f"{name}@{rev}"] = [asdict(r) for r in rows]
    text = "\n".join(md)
    print(text)
    if args.out:
        args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(rows_all, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
