"""The ``torchhpc demo`` step of segalign: align a simulated genome pair whose true alignment is known."""

from __future__ import annotations

import time

from .config import AlignConfig, SegalignTour


def demo(tour: SegalignTour, run, device, seed: int) -> dict:
    """Align a simulated pair (substitutions, indels, inversions, duplications) and score it against the truth.

    Writes ``target.fa``, ``query.fa`` and ``alignment.maf`` into ``run.dir``; with lastz on PATH
    also reports the share of LASTZ's matching base pairs that ours contain.

    Args:
        tour: the step's options (the simulated length).
        run: the demo's :class:`~torchhpc.ext.core.runs.Run` (only ``run.dir`` is used).
        device: the demo's device; the alignment runs on the CPU (the CUDA kernel has not yet
            run on a GPU in the demo).
        seed: seed of the simulated pair.

    Returns:
        ``alignments``, ``truth_recall``, ``align_s``, ``maf`` and ``what`` (and ``recall_of_lastz``).
    """
    from .align import align_files
    from .output import write_maf
    from .recall import (
        lastz_available,
        lastz_command,
        pairs_from_alignments,
        pairs_from_maf,
        recall,
        run_lastz,
    )
    from .simulate import simulate_pair

    del device  # see the docstring
    sim = simulate_pair(length=tour.length, seed=seed)
    tpath, qpath = run.dir / "target.fa", run.dir / "query.fa"
    sim.write(tpath, qpath)
    t0 = time.perf_counter()
    res = align_files(tpath, qpath, AlignConfig(device="cpu"))
    seconds = time.perf_counter() - t0
    with open(run.dir / "alignment.maf", "w") as fh:
        write_maf(res.alignments, fh)
    truth = {("target", "query", s): sim.true_pairs(s) for s in "+-"}
    out = {"alignments": len(res.alignments),
           "truth_recall": round(recall(pairs_from_alignments(res.alignments), truth)[0], 4),
           "align_s": round(seconds, 2)}
    if lastz_available():
        maf = run_lastz(lastz_command(tpath, qpath, nogapped=False, fmt="maf-"))
        out["recall_of_lastz"] = round(recall(pairs_from_alignments(res.alignments, matching=True),
                                              pairs_from_maf(maf, matching=True))[0], 4)
    return {**out, "maf": str(run.dir / "alignment.maf"),
            "what": f"simulated {tour.length / 1000:g} kbp pair (substitutions, indels, inversions, duplications) "
                    "aligned natively"}
