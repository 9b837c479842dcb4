"""Recall against LASTZ: which aligned (target, query) base pairs of a reference output we recover.

Both outputs are reduced to sets of aligned pairs ``(name1, name2, strand, t_pos, q_pos)``
(record coordinates, minus-strand query positions along the reverse complement, as
LASTZ writes them); recall is the fraction of the reference's pairs present in ours.
``matching=True`` keeps only the columns whose two letters agree (the "matching base
pairs" of a MAF).
"""

from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import numpy as np

from .fasta import dna_upper
from .output import Alignment

PairSets = dict[tuple[str, str, str], np.ndarray]


def _pack(t: np.ndarray, q: np.ndarray) -> np.ndarray:
    return (t.astype(np.int64) << 32) | q.astype(np.int64)


def pairs_from_general(text: str) -> PairSets:
    """Aligned pairs of ungapped segments in LASTZ ``general`` format (its default columns)."""
    acc: dict[tuple, list] = defaultdict(list)
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        f = line.split("\t")
        name1, name2, strand = f[1], f[6], f[7]
        z1, e1, z2 = int(f[4]), int(f[5]), int(f[9])
        n = e1 - z1
        acc[(name1, name2, strand)].append(_pack(np.arange(z1, e1), np.arange(z2, z2 + n)))
    return {k: np.unique(np.concatenate(v)) for k, v in acc.items()}


def _pairs_from_rows(t_start: int, t_text: str, q_start: int, q_text: str, matching: bool) -> np.ndarray:
    a, b = dna_upper(t_text), dna_upper(q_text)
    ta, qa = a != ord("-"), b != ord("-")
    tpos = t_start + np.cumsum(ta) - 1
    qpos = q_start + np.cumsum(qa) - 1
    keep = ta & qa
    if matching:
        keep &= a == b
    return _pack(tpos[keep], qpos[keep])


def pairs_from_maf(text: str, matching: bool = True) -> PairSets:
    """Aligned (or, with ``matching``, identical) pairs of a MAF file's two-row blocks."""
    acc: dict[tuple, list] = defaultdict(list)
    rows: list[list[str]] = []
    for line in text.splitlines() + [""]:
        if line.startswith("s "):
            rows.append(line.split())
        elif not line.strip() and rows:
            if len(rows) == 2:
                (_, n1, s1, _, _, _, x1), (_, n2, s2, _, st2, _, x2) = rows
                acc[(n1, n2, st2)].append(_pairs_from_rows(int(s1), x1, int(s2), x2, matching))
            rows = []
    return {k: np.unique(np.concatenate(v)) for k, v in acc.items()}


def pairs_from_alignments(alns: list[Alignment], matching: bool = False) -> PairSets:
    """Aligned pairs of our :class:`Alignment` s."""
    acc: dict[tuple, list] = defaultdict(list)
    for a in alns:
        acc[(a.t_name, a.q_name, a.strand)].append(_pairs_from_rows(a.t_start, a.t_text, a.q_start, a.q_text,
                                                                    matching))
    return {k: np.unique(np.concatenate(v)) for k, v in acc.items()}


def recall(ours: PairSets, reference: PairSets) -> tuple[float, int, int]:
    """``(fraction, found, total)`` of the reference's pairs found in ours (1.0 when the reference is empty)."""
    total = sum(v.size for v in reference.values())
    found = 0
    for k, ref in reference.items():
        if k in ours:
            found += int(np.isin(ref, ours[k], assume_unique=True).sum())
    return (found / total if total else 1.0), found, total


# The four mitochondrial pairs of ../shared/data/genomes that tests and the benchmark compare with LASTZ.
MITO_PAIRS = [("MT-human.fa", "MT-orang.fa"), ("humanMito.fa", "mouseMito.fa"), ("humanMito.fa", "chickenMito.fa"),
              ("humanMito.fa", "fuguMito.fa")]


def lastz_available(exe: str = "lastz") -> bool:
    return shutil.which(exe) is not None


def lastz_command(target: str | Path, query: str | Path, *, nogapped: bool, fmt: str, xdrop: int = 910,
                  hspthresh: int = 3000, ydrop: int = 9430, gappedthresh: int | None = None,
                  strand: str = "both", seed: str = "12of19", transition: bool = True, step: int = 1,
                  multiple: bool = False, exe: str = "lastz") -> list[str]:
    """The ``lastz`` command line with the same parameters as ours (SEGALIGN.md's reference command)."""
    tspec = f"{target}[multiple]" if multiple else str(target)
    cmd = [exe, tspec, str(query), f"--seed={seed}", "--transition" if transition else "--notransition",
           f"--xdrop={xdrop}", f"--hspthresh={hspthresh}", f"--strand={strand}", f"--step={step}",
           f"--format={fmt}", "--nochain"]
    if nogapped:
        cmd.append("--nogapped")
    else:
        cmd += [f"--ydrop={ydrop}", f"--gappedthresh={gappedthresh or hspthresh}"]
    return cmd


def run_lastz(cmd: list[str], timeout: float = 3600) -> str:
    """Run a lastz command line, return its stdout (raises RuntimeError with lastz's message on failure)."""
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise RuntimeError(f"lastz failed ({res.returncode}): {res.stderr.strip()[:500]}")
    return res.stdout
