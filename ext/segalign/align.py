"""The pipeline: index the target once, then per query interval and strand seed -> filter -> extend.

    target.fa --read--> codes --build_index--> SeedIndex (once)
    query.fa  --read--> codes (+ reverse complement for --strand minus/both)
        for each strand, for each query interval (``interval`` windows):
            seed_hits (batches of <= max_hits) -> ungapped_hsps (X-drop filter)
        HSPs --gapped_by native--> ydrop_align (torchhpc.ext.segalign.gapped)
             --gapped_by lastz---> lastz --segments=... (torchhpc.ext.segalign.lastz)
             --nogapped----------> written as they are
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from torchhpc.ext.core.errors import InputError

from .fasta import SequenceSet, read_fasta
from .ops import (
    BACKENDS,
    HSPs,
    remove_contained,
    resolve_backend,
    ungapped_hsps,
    ungapped_hsps_fused,
)
from .output import Alignment, hsps_to_alignments
from .scoring import Scoring, hoxd70, read_scoring_file
from .seeds import build_index, expand_lookups, parse_seed, seed_lookups


@dataclass
class AlignConfig:
    """Options of ``torchhpc align`` (LASTZ's names and defaults; ydrop as SegAlign)."""

    seed: str = "12of19"
    """spaced seed: 12of19, 14of22, matchN or a 0/1 pattern"""
    transition: bool = True
    """allow one transition in the seed's care positions"""
    step: int = 1
    """index every step-th target position"""
    strand: str = "both"
    """plus, minus or both (minus: the query's reverse complement)"""
    xdrop: int = 910
    """ungapped X-drop"""
    hspthresh: int = 3000
    """HSP score threshold"""
    entropy: bool = True
    """LASTZ's entropy adjustment of low-complexity HSP scores"""
    gapped: bool = True
    """run gapped extension (False: --nogapped, write the HSPs)"""
    gapped_by: str = "native"
    """native (torchhpc's Y-drop DP) or lastz (hand the HSPs to an installed lastz)"""
    ydrop: int = 9430
    """gapped Y-drop"""
    gappedthresh: int | None = None
    """gapped alignment score threshold (default: hspthresh)"""
    scoring: str | None = None
    """LASTZ scoring file (default HOXD70, gap open 400, extend 30)"""
    ambiguous: str | None = None
    """None, n or iupac (LASTZ --ambiguous)"""
    max_hits: int = 1 << 22
    """seed hits extended per batch (bounds memory: about 200 bytes a hit)"""
    interval: int = 1 << 20
    """query positions per interval (the unit of work and of the progress bar)"""
    device: str = "cpu"
    """where seeding and the filter run (cpu, cuda)"""
    fused: bool = False
    """numba only: seeding and filter in one compiled pass (no tensors of look-ups or hits, least memory;
    faster or slower than the default depending on the CPU's memory latency)"""
    backend: str = "auto"
    """filter kernel: auto (Triton on CUDA, numba on the CPU where installed, else torch), torch, numba or triton"""
    progress: bool = False
    """progress bars over query intervals"""
    lastz: str = "lastz"
    """lastz executable for gapped_by=lastz"""

    def check(self) -> None:
        """Raises InputError naming the option when a value is impossible."""
        if self.strand not in ("plus", "minus", "both"):
            raise InputError(f"--strand must be plus, minus or both, got {self.strand!r}")
        for name in ("xdrop", "hspthresh", "ydrop", "max_hits", "interval", "step"):
            if getattr(self, name) <= 0:
                raise InputError(f"--{name} must be positive, got {getattr(self, name)}")
        if self.gappedthresh is not None and self.gappedthresh <= 0:
            raise InputError(f"--gappedthresh must be positive, got {self.gappedthresh}")
        if self.gapped_by not in ("native", "lastz"):
            raise InputError(f"--gapped-by must be native or lastz, got {self.gapped_by!r}")
        if self.backend not in BACKENDS:
            raise InputError(f"--backend must be one of {', '.join(BACKENDS)}; got {self.backend!r}")
        parse_seed(self.seed)

    def scoring_scheme(self) -> Scoring:
        sc = read_scoring_file(self.scoring) if self.scoring else hoxd70()
        if self.ambiguous is not None and self.scoring is None:
            sc.ambiguous_score = -100 if self.ambiguous == "iupac" else 0
        return sc


@dataclass
class AlignResult:
    """What :func:`align_files` / :func:`align_sequences` return."""

    alignments: list[Alignment]
    hsps: dict[str, HSPs]
    target: SequenceSet
    query: SequenceSet
    stats: dict


def find_hsps(target: SequenceSet, query: SequenceSet, cfg: AlignConfig,
              query_rc: SequenceSet | None = None) -> tuple[dict[str, HSPs], dict]:
    """Seeding and the ungapped filter on both strands -> ``{"+": HSPs, "-": HSPs}`` and counters."""
    cfg.check()
    dev = torch.device(cfg.device)
    pattern = parse_seed(cfg.seed)
    table = cfg.scoring_scheme().table(cfg.xdrop, dev)
    t_codes = target.codes.to(dev)
    t0 = time.perf_counter()
    index = build_index(t_codes, pattern, cfg.step)
    stats = {"index_seconds": time.perf_counter() - t0, "index_words": int(index.keys.numel()),
             "hits": 0, "extended": 0, "rounds": 0}
    strands = {"plus": ["+"], "minus": ["-"], "both": ["+", "-"]}[cfg.strand]
    backend = resolve_backend(cfg.backend, dev)
    stats["backend"] = backend
    qcodes = {}
    for strand in strands:
        qset = query if strand == "+" else (query_rc or query.reverse_complement())
        qcodes[strand] = qset.codes.to(dev)
    # the unit of work: one query interval of one strand (its diagonal bookkeeping is its own)
    tasks = [(strand, s, min(s + cfg.interval, qcodes[strand].numel()))
             for strand in strands for s in range(0, qcodes[strand].numel(), cfg.interval)]
    # numba: seed look-ups and hits as tensor ops (vectorised gathers), the filter compiled; or, with
    # cfg.fused, seeding and filter in one compiled pass (no tensors of hits: least memory)
    fused = backend == "numba" and cfg.fused and index.offsets is not None
    # with several CPU threads the compiled filter runs whole intervals side by side (exact: intervals
    # are independent); otherwise one interval at a time, its diagonals split over the threads
    workers = min(torch.get_num_threads(), len(tasks)) if backend == "numba" else 1
    one = 1 if workers > 1 else None
    bar = None
    if cfg.progress:
        from tqdm import tqdm

        bar = tqdm(total=len(tasks), desc="filter", unit="interval", leave=False)

    def run(task):
        strand, s, e = task
        q_codes = qcodes[strand]
        if fused:
            res = [ungapped_hsps_fused(t_codes, q_codes, index, s, e, cfg.transition, cfg.max_hits, table, cfg.xdrop,
                                       cfg.hspthresh, cfg.entropy, strand, threads=one)]
        else:
            res = [ungapped_hsps(t_codes, q_codes, *expand_lookups(index, lo, counts, q_end), table, cfg.xdrop,
                                 cfg.hspthresh, cfg.entropy, backend, strand, threads=one)
                   for lo, counts, q_end in seed_lookups(index, q_codes, s, e, cfg.transition, cfg.max_hits)]
        if bar is not None:
            bar.update(1)
        return res

    if workers > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers) as pool:
            results = list(pool.map(run, tasks))
    else:
        results = [run(task) for task in tasks]
    if bar is not None:
        bar.close()
    parts: dict[str, list[HSPs]] = {strand: [] for strand in strands}
    for (strand, _, _), res in zip(tasks, results, strict=True):
        for h, st in res:
            for k in ("hits", "extended", "rounds"):
                stats[k] += st[k]
            parts[strand].append(h)
    out = {strand: remove_contained(HSPs.cat(parts[strand], strand)).to("cpu") for strand in strands}
    stats["filter_seconds"] = time.perf_counter() - t0
    stats["hsps"] = {k: len(v) for k, v in out.items()}
    return out, stats


def align_sequences(target: SequenceSet, query: SequenceSet, cfg: AlignConfig,
                    target_path: str | None = None, query_path: str | None = None) -> AlignResult:
    """The whole pipeline on loaded sequences (the paths are needed only for ``gapped_by='lastz'``)."""
    cfg.check()
    query_rc = query.reverse_complement() if cfg.strand in ("minus", "both") else None
    hsps, stats = find_hsps(target, query, cfg, query_rc)
    sets = {"+": query, "-": query_rc}
    t0 = time.perf_counter()
    if not cfg.gapped:
        alns = []
        for strand, h in hsps.items():
            alns += hsps_to_alignments(h, target, sets[strand])
    elif cfg.gapped_by == "lastz":
        from .lastz import lastz_gapped

        if target_path is None or query_path is None:
            raise InputError("gapped_by='lastz' needs the FASTA paths (lastz reads the files itself)")
        alns = lastz_gapped(hsps, target, sets, target_path, query_path, cfg)
    else:
        from .gapped import gapped_alignments

        alns = []
        for strand, h in hsps.items():
            alns += gapped_alignments(h, target, sets[strand], cfg)
    stats["gapped_seconds"] = time.perf_counter() - t0
    stats["alignments"] = len(alns)
    return AlignResult(alns, hsps, target, query, stats)


def align_files(target_path: str | Path, query_path: str | Path, cfg: AlignConfig | None = None) -> AlignResult:
    """Align two FASTA files (``lastz TARGET QUERY`` with the same options)."""
    cfg = cfg or AlignConfig()
    cfg.check()
    target = read_fasta(target_path, cfg.ambiguous)
    query = read_fasta(query_path, cfg.ambiguous)
    return align_sequences(target, query, cfg, str(target_path), str(query_path))
