"""The pipeline: index the target once, then per query interval and strand seed -> filter -> extend.

What runs is resolved once, before any work, into an :class:`AlignPlan` (the device, the filter
kernel, the gapped kernel and the ranks sharing the work), which every stage is handed; the config
itself is checked when it is made and never changed.

On the CPU with the compiled kernels (numba's fused seeding and filter, its gapped stage) the whole
pipeline can run on NumPy arrays (``plan_alignment(..., arrays=True)``, what ``torchhpc align`` asks
for): the same stages and results, and torch is never imported (a second of start-up, more than a
small pair's alignment).

    target.fa --read--> codes --build_index--> SeedIndex (once)
    query.fa  --read--> codes (+ reverse complement for --strand minus/both)
        for each strand, for each query interval (``interval`` windows):
            seed_hits (batches of <= max_hits) -> ungapped_hsps (X-drop filter)
        HSPs --gapped_by auto/native/numba/numpy/triton--> gapped_alignments (torchhpc.ext.segalign.gapped)
             --gapped_by lastz---> lastz --segments=... (torchhpc.ext.segalign.lastz)
             --nogapped----------> written as they are
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from torchhpc.ext.core.device import pick_device, resolve_auto
from torchhpc.ext.core.dispatch import resolve_backend
from torchhpc.ext.core.distributed import DistContext
from torchhpc.ext.core.errors import InputError, warn

from .config import AUTO_DEVICE, BACKENDS, AlignConfig, PipelineOptions
from .fasta import SequenceSet, read_fasta
from .gapped import gapped_alignments, gapped_kernel
from .ops import HSPs, remove_contained, ungapped_hsps, ungapped_hsps_fused
from .output import Alignment, hsps_to_alignments
from .seeds import DIRECT_TABLE_MAX_WEIGHT, build_index, expand_lookups, parse_seed, seed_lookups
from .torch_numba import cpu_threads

if TYPE_CHECKING:
    import torch


@dataclass
class AlignResult:
    """What :func:`align_files` / :func:`align_sequences` return."""

    alignments: list[Alignment]
    hsps: dict[str, HSPs]
    target: SequenceSet
    query: SequenceSet
    stats: dict


@dataclass(frozen=True)
class AlignPlan:
    """What an alignment runs, resolved once from its options (:func:`plan_alignment`) and handed to
    every stage, so that what ``--stats`` reports is what ran.

    Attributes:
        device: where seeding and the filter run.
        backend: the filter kernel, ``torch``, ``triton`` or ``numba``; seeding runs numba's compiled
            passes with ``numba`` only (else its tensor ops).
        gapped_by: the gapped stage: ``None`` (``--nogapped``), ``lastz``, ``numba``, ``numpy`` or ``triton``.
        ctx: the ranks that share the work (query intervals, then strands); one process by default.
        arrays: the CPU pipeline on NumPy arrays (``device`` is then ``None``): sequences, seed table and
            HSPs are arrays and torch is not imported.
    """

    device: torch.device | None
    backend: str
    gapped_by: str | None
    ctx: DistContext
    arrays: bool = False

    @property
    def seeding(self) -> str:
        """Seeding's backend (:func:`.seeds.compiled_seeding`): numba's passes under the numba filter only."""
        return "numba" if self.backend == "numba" else "torch"


def plan_alignment(cfg: PipelineOptions, device: str | torch.device | None = None,
                   ctx: DistContext | None = None, *, arrays: bool = False) -> AlignPlan:
    """Resolve once what ``cfg`` runs: the device (``device``; default ``cfg.device`` of an
    :class:`AlignConfig`, ``cfg.dist.device`` of an :class:`~.config.AlignCommand`), the filter kernel
    (``cfg.backend`` on that device), the gapped kernel (``cfg.gapped_by``) and the ranks (``ctx``, from
    :func:`torchhpc.ext.core.distributed.distributed`; default one process).

    ``arrays``: run on NumPy arrays without torch where that is the same pipeline (one process on the CPU,
    numba's fused filter, a gapped stage on the CPU; see :class:`AlignPlan`); else as without it.

    Raises:
        InputError: a device, filter backend or gapped kernel that cannot run here.
    """
    if device is None:
        device = cfg.device if hasattr(cfg, "device") else cfg.dist.device

    def kernels(dev) -> tuple[str, str | None]:  # the filter's and the gapped stage's, for data on dev
        backend = resolve_backend(cfg.backend, dev, choices=BACKENDS, what="--backend")
        return backend, None if not cfg.gapped else "lastz" if cfg.gapped_by == "lastz" else gapped_kernel(
            cfg.gapped_by, dev)

    if arrays and (ctx is None or ctx.world_size == 1) and str(resolve_auto(device, AUTO_DEVICE)) == "cpu":
        backend, gapped_by = kernels("cpu")
        if backend == "numba" and cfg.fused and parse_seed(cfg.seed).count("1") <= DIRECT_TABLE_MAX_WEIGHT \
                and gapped_by != "triton":
            return AlignPlan(None, backend, gapped_by, ctx or DistContext(0, 1, 0, "cpu", None), arrays=True)
    dev = pick_device(device, auto=AUTO_DEVICE)
    backend, gapped_by = kernels(dev)
    return AlignPlan(dev, backend, gapped_by, ctx if ctx is not None else DistContext(0, 1, 0, dev, None))


def find_hsps(target: SequenceSet, query: SequenceSet, cfg: PipelineOptions,
              query_rc: SequenceSet | None = None, on_strand=None, *,
              plan: AlignPlan | None = None) -> tuple[dict[str, HSPs], dict]:
    """Seeding and the ungapped filter on both strands -> ``{"+": HSPs, "-": HSPs}`` and counters.

    The counters include ``backend``, the filter kernel that ran (``plan.backend``: what
    :func:`~torchhpc.ext.core.dispatch.resolve_backend` chose for ``cfg.backend`` on the device),
    and ``fused``, whether the one-pass numba kernel ran.  ``on_strand(strand, hsps)``, where given,
    is called as soon as a strand's HSPs are all known (the plus strand's while the minus strand is
    still being filtered, with several threads in one process), with the HSPs returned for it.
    ``plan``: what runs (default: :func:`plan_alignment` of ``cfg``, an :class:`AlignConfig`).

    Raises:
        InputError: a device or backend that cannot run here.
    """
    plan = plan or plan_alignment(cfg)
    dev, backend, seeding = plan.device, plan.backend, plan.seeding
    pattern = parse_seed(cfg.seed)
    table = cfg.scoring_scheme().table(cfg.xdrop, dev)  # (a NumPy array with plan.arrays: dev is None)
    if plan.arrays:
        target, query = target.as_arrays(), query.as_arrays()
        query_rc = query_rc.as_arrays() if query_rc is not None else None
    t_codes = _on(target.codes, dev)
    t0 = time.perf_counter()
    index = build_index(t_codes, pattern, cfg.step, seeding)
    stats = {"index_seconds": time.perf_counter() - t0, "index_words": len(index.ends),
             "hits": 0, "extended": 0, "rounds": 0}
    strands = {"plus": ["+"], "minus": ["-"], "both": ["+", "-"]}[cfg.strand]
    stats["backend"] = backend
    qcodes = {}
    for strand in strands:
        qset = query if strand == "+" else (query_rc or query.reverse_complement())
        qcodes[strand] = _on(qset.codes, dev)
    # the unit of work: one query interval of one strand (its diagonal bookkeeping is its own)
    tasks = [(strand, s, min(s + cfg.interval, len(qcodes[strand])))
             for strand in strands for s in range(0, len(qcodes[strand]), cfg.interval)]
    # numba: seed look-ups and hits as tensor ops (vectorised gathers), the filter compiled; or, with
    # cfg.fused, seeding and filter in one compiled pass (no tensors of hits: least memory)
    # under torchrun each rank filters every world-th task; the results are gathered and merged in task order
    rank, world = plan.ctx.rank, plan.ctx.world_size
    all_tasks, tasks = tasks, tasks[rank::world]
    fused = backend == "numba" and cfg.fused and index.offsets is not None
    stats["fused"] = fused
    # with several CPU threads the compiled filter runs whole intervals side by side (exact: intervals
    # are independent); otherwise one interval at a time, its diagonals split over the threads
    workers = min(cpu_threads(), len(tasks)) if backend == "numba" else 1
    one = 1 if workers > 1 else None
    bar = None
    if cfg.progress:
        from torchhpc.ext.core.runs import progress_bar as tqdm

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
                   for lo, counts, q_end in seed_lookups(index, q_codes, s, e, cfg.transition, cfg.max_hits,
                                                         seeding)]
        if bar is not None:
            bar.update(1)
        return res

    done: dict[str, HSPs] = {}

    def strand_hsps(strand, results_of):
        # a strand's HSPs from its tasks' results, in task order (the same however the tasks ran)
        parts = [h.to(dev) for i, (st_, _, _) in enumerate(tasks) if st_ == strand for h, _ in results_of(i)]
        return remove_contained(HSPs.cat(parts, strand, dev)).to("cpu")

    early = on_strand is not None and world == 1
    if workers > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers) as pool:
            futures = [pool.submit(run, task) for task in tasks]
            if early:  # hand each strand on as soon as its last interval is filtered
                for strand in strands:
                    mine = [f for f, (st_, _, _) in zip(futures, tasks, strict=True) if st_ == strand]
                    for f in mine:
                        f.result()
                    done[strand] = strand_hsps(strand, lambda i: futures[i].result())
                    on_strand(strand, done[strand])
            results = [f.result() for f in futures]
    else:  # one task after the other (a GPU filter): a strand goes on as soon as its last task is done
        results = []
        for i, task in enumerate(tasks):
            results.append(run(task))
            strand = task[0]
            if early and (i + 1 == len(tasks) or tasks[i + 1][0] != strand):
                done[strand] = strand_hsps(strand, lambda j: results[j])
                on_strand(strand, done[strand])
    if bar is not None:
        bar.close()
    if world > 1:
        mine = [[(h.to("cpu"), st) for h, st in res] for res in results]
        gathered = plan.ctx.gather(mine)
        results = [gathered[i % world][i // world] for i in range(len(all_tasks))]
        tasks = all_tasks
    for res in results:
        for _, st in res:
            for k in ("hits", "extended", "rounds"):
                stats[k] += st[k]
    out = {strand: done[strand] if strand in done else strand_hsps(strand, lambda i: results[i])
           for strand in strands}
    if on_strand is not None and not early:
        for strand in strands:
            on_strand(strand, out[strand])
    stats["filter_seconds"] = time.perf_counter() - t0
    stats["hsps"] = {k: len(v) for k, v in out.items()}
    return out, stats


def align_sequences(target: SequenceSet, query: SequenceSet, cfg: PipelineOptions,
                    target_path: str | None = None, query_path: str | None = None, *,
                    plan: AlignPlan | None = None) -> AlignResult:
    """The whole pipeline on loaded sequences (the paths are needed only for ``gapped_by='lastz'``).

    ``plan``: what runs (default: :func:`plan_alignment` of ``cfg``, an :class:`AlignConfig`).

    Raises:
        InputError: a device or kernel that cannot run here, or lastz failed.
    """
    plan = plan or plan_alignment(cfg)
    if plan.gapped_by == "lastz":
        _refuse_u_for_lastz(target, query)
    if plan.arrays:
        target, query = target.as_arrays(), query.as_arrays()
    # the caller's thread count (numba's parallel kernels may leave torch's setting changed behind them)
    threads = cpu_threads()
    query_rc = query.reverse_complement() if cfg.strand in ("minus", "both") else None
    # (the NumPy reference holds the GIL: nothing to overlap); on CUDA the CPU threads extend one strand
    # while the GPU filters the next, as SegAlign does
    if threads > 1 and plan.gapped_by == "numba" and plan.ctx.world_size == 1:
        res = _align_overlapped(target, query, query_rc, cfg, plan, threads)
        _keep_threads(threads)
        return res
    hsps, stats = find_hsps(target, query, cfg, query_rc, plan=plan)
    _keep_threads(threads)
    sets = {"+": query, "-": query_rc}
    t0 = time.perf_counter()
    # what ran for the gapped stage: None (--nogapped), lastz, numba or numpy
    stats["gapped_by"] = plan.gapped_by
    if plan.gapped_by is None:
        alns = []
        for strand, h in hsps.items():
            alns += hsps_to_alignments(h, target, sets[strand])
    elif plan.gapped_by == "lastz":
        from .lastz import lastz_gapped

        if target_path is None or query_path is None:
            raise InputError("gapped_by='lastz' needs the FASTA paths (lastz reads the files itself)")
        alns = lastz_gapped(hsps, target, sets, target_path, query_path, cfg)
    else:
        # under torchrun the strands go to ranks in turn and the alignments are gathered in strand order
        rank, world = plan.ctx.rank, plan.ctx.world_size
        per_strand = [gapped_alignments(h, target, sets[strand], cfg, kernel=plan.gapped_by, threads=threads,
                                        device=plan.device)
                      if i % world == rank else None for i, (strand, h) in enumerate(hsps.items())]
        if world > 1:
            gathered = plan.ctx.gather(per_strand)
            per_strand = [gathered[i % world][i] for i in range(len(per_strand))]
        alns = [a for part in per_strand for a in part]
    stats["gapped_seconds"] = time.perf_counter() - t0
    stats["alignments"] = len(alns)
    return AlignResult(alns, hsps, target, query, stats)


def _align_overlapped(target: SequenceSet, query: SequenceSet, query_rc: SequenceSet | None, cfg: PipelineOptions,
                      plan: AlignPlan, threads: int) -> AlignResult:
    """Filter and gapped stage overlapped (several threads, one process, the compiled gapped stage): a
    strand's gapped extension starts on its own thread as soon as the strand's HSPs are known, while
    the filter goes on with the next strand (on the CPU's other threads, or on the GPU), as SegAlign
    extends on CPU threads while the GPU filters.
    The strands' alignments do not depend on each other (each has its own walls), so the output is
    the same as one stage after the other."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    sets = {"+": query, "-": query_rc}
    found: dict[str, list] = {}
    errors: list[BaseException] = []
    workers: list[threading.Thread] = []
    # one pool of extension workers for both strands: a strand whose anchors run out leaves the threads
    # to the other (each strand's thread only commits its results, in its anchor order)
    pool = ThreadPoolExecutor(threads, thread_name_prefix="gapped")

    def extend(strand, h):
        try:
            found[strand] = gapped_alignments(h, target, sets[strand], cfg, kernel=plan.gapped_by, threads=threads,
                                              pool=pool, device=plan.device)
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)

    def on_strand(strand, h):
        w = threading.Thread(target=extend, args=(strand, h), name=f"gapped{strand}", daemon=True)
        workers.append(w)
        w.start()

    t0 = time.perf_counter()
    try:
        hsps, stats = find_hsps(target, query, cfg, query_rc, on_strand=on_strand, plan=plan)
    finally:  # a filter that fails after handing a strand on still waits for that strand's thread
        t_filter_end = time.perf_counter()
        for w in workers:
            w.join()
        pool.shutdown(wait=True)
    if errors:
        raise errors[0]
    alns = [a for strand in hsps for a in found[strand]]
    stats["gapped_by"] = plan.gapped_by
    stats["overlapped"] = True
    # the gapped stage's share of the wall time after the filter ended (the rest overlapped it)
    stats["gapped_seconds"] = time.perf_counter() - t_filter_end
    stats["total_seconds"] = time.perf_counter() - t0
    stats["alignments"] = len(alns)
    return AlignResult(alns, hsps, target, query, stats)


def _on(codes, device):
    """``codes`` on ``device``; NumPy arrays as they are where ``device`` is ``None`` (``plan.arrays``)."""
    return codes if device is None else codes.to(device)


def _keep_threads(threads: int) -> None:
    """Put torch's thread count back to ``threads`` (numba's parallel kernels reset it), where torch is loaded."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def _refuse_u_for_lastz(*sets: SequenceSet) -> None:
    """LASTZ reads the files itself and refuses U, which we read as T: say so before the filter runs."""
    for seqs in sets:
        if np.isin(seqs.letters, np.frombuffer(b"Uu", dtype=np.uint8)).any():
            raise InputError(f"{seqs.path}: the sequence has U (RNA), which LASTZ refuses: with --gapped-by lastz "
                             "replace U with T, or leave the gapped stage to ours (--gapped-by auto)")


def align_files(target_path: str | Path, query_path: str | Path, cfg: PipelineOptions | None = None, *,
                plan: AlignPlan | None = None) -> AlignResult:
    """Align two FASTA files (``lastz TARGET QUERY`` with the same options).

    ``plan``: what runs (default: :func:`plan_alignment` of ``cfg``, an :class:`AlignConfig`, default
    ``AlignConfig()``); it is resolved before the files are read, so an unusable device or backend
    fails first.

    Raises:
        InputError: a missing or malformed file, a device or kernel that cannot run here.
    """
    cfg = cfg or AlignConfig()
    plan = plan or plan_alignment(cfg)
    target = read_fasta(target_path, cfg.ambiguous, arrays=plan.arrays)
    query = read_fasta(query_path, cfg.ambiguous, arrays=plan.arrays)
    for seqs in (target, query):
        if seqs.meta.get("all_soft_masked"):
            warn(f"{seqs.path}: every base is lowercase, i.e. soft-masked, and (as in LASTZ) no seed starts in "
                 f"soft-masked bases, so nothing will align; uppercase the sequence to align it "
                 f"(e.g. awk '/^>/ {{print; next}} {{print toupper($0)}}')")
    return align_sequences(target, query, cfg, str(target_path), str(query_path), plan=plan)


__all__ = ["AlignPlan", "AlignResult", "align_files", "align_sequences", "find_hsps", "plan_alignment"]
