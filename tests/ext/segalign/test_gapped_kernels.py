"""The compiled (numba) gapped extension against the NumPy reference, cell for cell, on random cases."""

from __future__ import annotations

import numpy as np
import pytest

from torchhpc.ext.segalign.align import AlignConfig, align_sequences
from torchhpc.ext.segalign.fasta import SEPARATOR, from_strings
from torchhpc.ext.segalign.gapped import Walls, ydrop_extend
from torchhpc.ext.segalign.scoring import hoxd70
from torchhpc.ext.segalign.simulate import simulate_pair

pytest.importorskip("numba")

from torchhpc.ext.segalign.gapped_kernels import ydrop_extend_numba  # noqa: E402


def _case(rng, case):
    """A related pair (substitutions, deletions; walls, ambiguous codes, found cells) and some anchors."""
    n = int(rng.integers(50, 1200))
    t = rng.integers(0, 4, n).astype(np.uint8)
    q = t.copy()
    mut = rng.random(n) < rng.uniform(0.02, 0.4)
    q[mut] = rng.integers(0, 4, int(mut.sum()))
    q = q[rng.random(n) > rng.uniform(0, 0.05)]
    if case % 3 == 0:
        t[rng.integers(0, n, 3)] = SEPARATOR
    if case % 4 == 0:
        q[rng.integers(0, q.size, 5)] = rng.choice([4, 5, 8, 9], 5)  # lowercase, N and IUPAC codes
    b = 6
    t0 = rng.integers(0, n, b)
    q0 = np.clip(t0 + rng.integers(-5, 5, b), 0, q.size - 1)
    cover = None
    if case % 4 == 1:
        cover = np.full(q.size, -1, np.int64)
        idx = rng.integers(0, q.size, 40)
        cover[idx] = np.clip(idx + rng.integers(-3, 3, 40), 0, n - 1)
    elif case % 4 == 3:  # alignments stacked on the same query bases (past the primary slots of Walls)
        cover = Walls(q.size)
        for _ in range(8):
            qs = int(rng.integers(0, 20)) + int(q.size) // 3
            qpos = np.arange(qs, min(qs + 30, q.size))
            cover.add(np.clip(qpos + int(rng.integers(-40, 40)), 0, n - 1), qpos)
        assert cover.stacked(np.arange(q.size)).max() > Walls.PRIMARY
    return t, q, t0, q0, rng.choice([-1, 1], b), cover


@pytest.mark.parametrize("seed", [0, 1])
def test_numba_extension_equals_numpy_reference(seed):
    """On 24 random cases (both directions, small and large ydrop, separators, ambiguous codes, cells of
    alignments found before, some stacked several deep on a query base) the compiled extension returns exactly
    the NumPy reference's scores, traceback paths and boxes."""
    rng = np.random.default_rng(seed)
    table = hoxd70().table(910).numpy()
    for case in range(12):
        t, q, t0, q0, dirs, cover = _case(rng, case)
        ydrop = int(rng.choice([500, 2000, 9430]))
        ref = ydrop_extend(t, q, t0, q0, dirs, table, 400, 30, ydrop, cover, boxes=True)
        got = ydrop_extend_numba(t, q, t0, q0, dirs, table, 400, 30, ydrop, cover, boxes=True, threads=1 + case % 2)
        np.testing.assert_array_equal(got[3], ref[3], err_msg=f"case {case}: boxes")
        np.testing.assert_array_equal(got[0], ref[0], err_msg=f"case {case}: scores")
        for b in range(t0.size):
            np.testing.assert_array_equal(got[1][b], ref[1][b], err_msg=f"case {case} extension {b}: target path")
            np.testing.assert_array_equal(got[2][b], ref[2][b], err_msg=f"case {case} extension {b}: query path")
        assert (ref[0] > 0).any()


def test_numba_alignments_equal_numpy_and_do_not_depend_on_threads():
    """Whole gapped stage on a simulated pair: numba with one thread (anchors one by one) or two (batches of
    two, re-extended where a wall of the batch meets them) gives the NumPy reference's alignments with its
    batches of up to 256 anchors: the output is that of the one-by-one order whatever the batches."""
    from torchhpc.ext.segalign.gapped import gapped_alignments

    sim = simulate_pair(8000, substitution_rate=0.08, indel_rate=0.006, inversions=1, inversion_length=2000,
                        duplications=2, duplication_length=600, seed=5)
    t, q = from_strings({"t": sim.target}), from_strings({"q": sim.query})
    cfg = AlignConfig()
    hsps = align_sequences(t, q, AlignConfig(gapped=False)).hsps["+"]
    assert len(hsps) > 3

    def key(alns):
        return [(a.t_start, a.t_end, a.q_start, a.q_end, a.score, a.t_text, a.q_text) for a in alns]

    ref = key(gapped_alignments(hsps, t, q, cfg, kernel="numpy"))
    assert ref
    for threads in (1, 2):
        assert key(gapped_alignments(hsps, t, q, cfg, kernel="numba", threads=threads)) == ref


class _AtOnce:
    """An executor that runs each task as it is submitted: an extension started ahead sees only the walls
    committed before its submission (the most stale a worker can be, and deterministic)."""

    def submit(self, fn, *args):
        from concurrent.futures import Future

        f = Future()
        f.set_result(fn(*args))
        return f


def test_extensions_ahead_of_the_commit_point_are_redone_or_dropped_exactly(monkeypatch):
    """Every anchor extended ahead at once, before any alignment is committed (none held back as near an
    earlier one): at their turns some are extended again and some dropped as lying on an alignment, and
    the alignments are the one-by-one ones (one thread; the kernel equals the NumPy reference above);
    without the re-extension they are not.  Then the same on three real worker threads."""
    from torchhpc.ext.segalign import gapped
    from torchhpc.ext.segalign.gapped import gapped_alignments

    sim = simulate_pair(12_000, substitution_rate=0.1, indel_rate=0.01, inversions=2, inversion_length=3000,
                        duplications=4, duplication_length=1500, repeats=((800, 6, 0.02), (300, 12, 0.05)), seed=0)
    t, q = from_strings({"t": sim.target}), from_strings({"q": sim.query})
    cfg = AlignConfig()
    hsps = align_sequences(t, q, AlignConfig(gapped=False)).hsps["+"]

    def key(alns):
        return [(a.t_start, a.t_end, a.q_start, a.q_end, a.score, a.t_text, a.q_text) for a in alns]

    def ahead(**kw):
        return key(gapped_alignments(hsps, t, q, cfg, kernel="numba", threads=2, lookahead=16, **kw))

    ref = key(gapped_alignments(hsps, t, q, cfg, kernel="numba", threads=1))
    monkeypatch.setattr(gapped, "NEAR_DIAGONALS", -1)
    counters: dict = {}
    assert ahead(pool=_AtOnce(), counters=counters) == ref and len(ref) > 5
    assert counters["speculated"] > len(ref) and counters["redone"] > 0 and counters["wasted"] > 0
    threaded: dict = {}
    got = key(gapped_alignments(hsps, t, q, cfg, kernel="numba", threads=3, lookahead=16, counters=threaded))
    assert got == ref and threaded["speculated"] > len(ref)
    monkeypatch.setattr(gapped, "_meets", lambda *a: False)  # never extended again: not the reference
    assert ahead(pool=_AtOnce()) != ref


def _long_indel_case(rng, gap, insertion):
    """A 5%-diverged pair of ~1.2 kbp whose query lacks (or, with ``insertion``, gains) ``gap`` bases in the middle."""
    n = int(rng.integers(1000, 1400))
    t = rng.integers(0, 4, n).astype(np.uint8)
    q = t.copy()
    mut = rng.random(n) < 0.05
    q[mut] = (q[mut] + rng.integers(1, 4, int(mut.sum()))) % 4
    at = n // 2
    if insertion:
        q = np.concatenate([q[:at], rng.integers(0, 4, gap).astype(np.uint8), q[at:]])
    else:
        q = np.concatenate([q[:at], q[at + gap:]])
    return t, q


@pytest.mark.parametrize("seed", [0, 1])
def test_numba_equals_numpy_across_long_indels(seed):
    """Across a single indel of 210-260 bases (which the former band of 128 cells lost) both directions of the
    compiled extension equal the NumPy reference (scores, paths, boxes), and the path crosses the whole gap."""
    rng = np.random.default_rng(100 + seed)
    table = hoxd70().table(910).numpy()
    for insertion in (False, True):
        gap = int(rng.integers(210, 260))
        t, q = _long_indel_case(rng, gap, insertion)
        # forward from the start, backward from the ends (the indel lies in the middle either way)
        t0, q0, dirs = np.array([0, t.size - 1]), np.array([0, q.size - 1]), np.array([1, -1])
        ref = ydrop_extend(t, q, t0, q0, dirs, table, 400, 30, 9430, None, boxes=True)
        got = ydrop_extend_numba(t, q, t0, q0, dirs, table, 400, 30, 9430, None, boxes=True)
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_array_equal(got[3], ref[3])
        for b in range(2):
            np.testing.assert_array_equal(got[1][b], ref[1][b])
            np.testing.assert_array_equal(got[2][b], ref[2][b])
            side = ref[1][b] if insertion else ref[2][b]  # the gapped side of the long indel
            runs = np.diff(np.flatnonzero(np.diff(np.r_[False, side < 0, False].astype(np.int8))))[::2]
            assert runs.size and runs.max() >= gap - 5, (insertion, b, gap, runs)
            assert ref[1][b].max() >= t.size - 60  # and on to the far end


def test_walls_stacked_past_the_primary_slots_block_both_kernels():
    """A third alignment through the same query bases (kept in the overflow rows of Walls) blocks the extension
    on both kernels alike: the path never passes one of its cells."""
    rng = np.random.default_rng(9)
    t = rng.integers(0, 4, 300).astype(np.uint8)
    walls = Walls(t.size)
    qpos = np.arange(100, 130)
    for shift in (-60, 60, 0):  # the third one lies on the main diagonal of the extension
        walls.add(qpos + shift, qpos)
    assert walls.stacked(np.array([100]))[0] == 3 and walls.rows == 30
    table = hoxd70().table(910).numpy()
    args = (t, t.copy(), np.array([0]), np.array([0]), np.array([1]), table, 400, 30, 9430, walls)
    ref, got = ydrop_extend(*args), ydrop_extend_numba(*args)
    assert int(got[0][0]) == int(ref[0][0]) < 300 * 91
    np.testing.assert_array_equal(got[1][0], ref[1][0])
    np.testing.assert_array_equal(got[2][0], ref[2][0])
    cells = set(zip(np.maximum.accumulate(ref[1][0]).tolist(), np.maximum.accumulate(ref[2][0]).tolist(), strict=True))
    assert not cells & {(k, k) for k in range(100, 130)}


def test_walls_answer_as_the_set_of_cells_they_hold():
    """Alignments added in any query order, stacked several deep: a cell is on a wall exactly when an
    added path passes it, and each base counts the paths through it (overflow rows and columns grow
    as bases stack up)."""
    rng = np.random.default_rng(3)
    walls, cells, through = Walls(200), set(), np.zeros(200, int)
    for _ in range(40):
        q0 = int(rng.integers(0, 170))
        qpos = np.arange(q0, min(q0 + int(rng.integers(5, 30)), 200))
        tpos = qpos + int(rng.integers(-50, 50))
        tpos[rng.random(qpos.size) < 0.1] = -1  # a query base against a gap
        ct, cq = walls.add(tpos, qpos)
        cells |= set(zip(ct.tolist(), cq.tolist(), strict=True))
        through[np.unique(cq)] += 1
    assert walls.rows > 10 and through.max() >= 4
    np.testing.assert_array_equal(walls.stacked(np.arange(200)), through)
    for t in range(-60, 260):
        for q in range(0, 200, 3):
            assert walls.on(t, q) == ((t, q) in cells), (t, q)


def test_compiled_anchors_equal_numpy_reference():
    """Each HSP's anchor (the middle of its first best 31-base window; ties in score included) is the
    same from the compiled rolling sum as from the NumPy reference, on the HSPs of a simulated pair."""
    import torch

    from torchhpc.ext.segalign.align import find_hsps
    from torchhpc.ext.segalign.gapped import hsp_anchors

    sim = simulate_pair(60_000, seed=4)
    t, q = from_strings({"t": sim.target}), from_strings({"q": sim.query})
    hsps, _ = find_hsps(t, q, AlignConfig(gapped=False, strand="plus", hspthresh=1500))
    h = hsps["+"]
    tc, qc = t.codes.numpy().copy(), q.codes.numpy()
    table = AlignConfig().scoring_scheme().table(910).numpy()
    assert len(h) > 20 and int((h.length > 31).sum()) > 10
    a = hsp_anchors(h, tc, qc, table, compiled=True)
    b = hsp_anchors(h, tc, qc, table, compiled=False)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    mid = (h.t_start + h.length // 2).numpy()
    assert not np.array_equal(a[0], mid)  # the best window is not just the middle
    # ties: an HSP over a periodic stretch has many equal windows; the first one wins in both
    from torchhpc.ext.segalign.ops import HSPs

    unit = np.array([0, 1, 2, 3, 3, 2, 1, 0], np.uint8)
    tc[1000:1200] = np.tile(unit, 25)
    qc2 = qc.copy()
    qc2[2000:2200] = tc[1000:1200]
    tie = HSPs(torch.tensor([1000]), torch.tensor([2000]), torch.tensor([200]), torch.tensor([9000]), "+")
    a = hsp_anchors(tie, tc, qc2, table, compiled=True)
    b = hsp_anchors(tie, tc, qc2, table, compiled=False)
    assert a[0][0] == b[0][0] == 1000 + 15


def _on_one_and_two_threads(t, q, cfg):
    """``align_sequences`` with one torch thread, then two; the caller's thread count restored."""
    import torch

    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = align_sequences(t, q, cfg)
        torch.set_num_threads(2)
        return one, align_sequences(t, q, cfg)
    finally:
        torch.set_num_threads(old)


def test_the_gpu_filter_overlaps_the_gapped_stage_with_the_same_output(monkeypatch):
    """The GPU's path (the Triton filter, interpreted here, one task after the other) with two threads hands
    the plus strand to a gapped thread as soon as its last interval is filtered, before the minus strand's
    first: the alignments are the one-thread run's, which does not overlap."""
    import inspect

    import torch

    from torchhpc.ext.segalign import align

    sim = simulate_pair(4000, substitution_rate=0.05, inversions=1, inversion_length=1200, seed=2)
    t, q = from_strings({"t": sim.target}), from_strings({"q": sim.query})
    cfg = AlignConfig(interval=2000, backend="triton")
    events = []  # the two-thread run's filter calls and hand-offs, in the order the filter made them
    real_filter, real_find = align.ungapped_hsps, align.find_hsps

    def filtering(*args, **kw):
        events.append(("filter", inspect.signature(real_filter).bind(*args, **kw).arguments["strand"]))
        return real_filter(*args, **kw)

    def finding(*args, on_strand=None, **kw):
        def handing(strand, h):
            events.append(("handed", strand))
            on_strand(strand, h)
        return real_find(*args, on_strand=None if on_strand is None else handing, **kw)

    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = align_sequences(t, q, cfg)
        monkeypatch.setattr(align, "ungapped_hsps", filtering)
        monkeypatch.setattr(align, "find_hsps", finding)
        torch.set_num_threads(2)
        two = align_sequences(t, q, cfg)
    finally:
        torch.set_num_threads(old)
    assert two.stats["backend"] == "triton" and two.stats.get("overlapped") and not one.stats.get("overlapped")
    assert {a.strand for a in one.alignments} == {"+", "-"}
    assert [(a.strand, a.t_start, a.q_start, a.score, a.t_text) for a in two.alignments] == [
        (a.strand, a.t_start, a.q_start, a.score, a.t_text) for a in one.alignments]
    first_minus = events.index(("filter", "-"))
    assert ("handed", "+") in events[:first_minus] and events[-1] == ("handed", "-"), events


def test_overlapped_filter_and_gapped_stages_give_the_one_thread_output(monkeypatch):
    """With two threads the plus strand's gapped stage runs while the minus strand is filtered, on small
    query intervals: the alignments (both strands, inversions included) are exactly one thread's; a
    failure in a strand's gapped thread reaches the caller instead of being lost."""
    import torch

    from torchhpc.ext.segalign import align

    sim = simulate_pair(30_000, substitution_rate=0.06, indel_rate=0.004, inversions=2, inversion_length=3000,
                        duplications=2, duplication_length=800, seed=6)
    t, q = from_strings({"t": sim.target}), from_strings({"q": sim.query})
    cfg = AlignConfig(interval=4000)

    def key(res):
        return [(a.strand, a.t_start, a.t_end, a.q_start, a.q_end, a.score, a.t_text, a.q_text)
                for a in res.alignments]

    one, two = _on_one_and_two_threads(t, q, cfg)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert two.stats.get("overlapped") and not one.stats.get("overlapped")
        assert {a.strand for a in one.alignments} == {"+", "-"} and key(two) == key(one)

        real = align.gapped_alignments  # the gapped stage as the pipeline calls it

        def broken(h, target, query, *a, **k):
            if h.strand == "-":
                raise RuntimeError("gapped stage failed on the minus strand")
            return real(h, target, query, *a, **k)

        monkeypatch.setattr(align, "gapped_alignments", broken)
        with pytest.raises(RuntimeError, match="minus strand"):
            align_sequences(t, q, cfg)
        monkeypatch.setattr(align, "gapped_alignments", real)

        # the filter failing after the plus strand went to its gapped thread: that thread is waited for
        import inspect
        import threading

        def failing(real_scan):
            def scan(*a, **k):
                if inspect.signature(real_scan).bind(*a, **k).arguments["strand"] == "-":
                    raise RuntimeError("filter failed on the minus strand")
                return real_scan(*a, **k)
            return scan

        for name in ("ungapped_hsps", "ungapped_hsps_fused"):  # whichever the filter runs
            monkeypatch.setattr(align, name, failing(getattr(align, name)))
        with pytest.raises(RuntimeError, match="filter failed"):
            align_sequences(t, q, cfg)
        assert not [th for th in threading.enumerate() if th.name.startswith("gapped")]
    finally:
        torch.set_num_threads(old)


def test_gapped_stage_on_the_gpu_kernel_equals_the_compiled_cpu_stage(kernel_device):
    """--gapped-by triton (the Y-drop sweep interpreted on the CPU here, a window of anchors per launch under the
    same commit rule) gives the compiled CPU stage's alignments on a small evolved pair, both strands."""
    pytest.importorskip("triton")
    sim = simulate_pair(220, substitution_rate=0.05, indel_rate=0.01, inversions=1, inversion_length=60,
                        duplications=1, duplication_length=40, seed=4)
    t, q = from_strings({"t": sim.target}), from_strings({"q": sim.query})

    def key(res):
        return [(a.t_start, a.t_end, a.q_start, a.q_end, a.strand, a.score, a.t_text, a.q_text) for a in res.alignments]

    cpu = align_sequences(t, q, AlignConfig(hspthresh=800))
    gpu = align_sequences(t, q, AlignConfig(hspthresh=800, gapped_by="triton", device=str(kernel_device)))
    assert gpu.stats["gapped_by"] == "triton" and cpu.stats["gapped_by"] == "numba"
    assert key(gpu) == key(cpu) and len(cpu.alignments) >= 2 and {a.strand for a in cpu.alignments} == {"+", "-"}


def test_gapped_by_triton_where_it_cannot_run_is_one_line(tmp_path, monkeypatch, capsys):
    """--gapped-by triton on a CPU without the Triton interpreter: one error line naming the option."""
    from harness.cli import one_line_from

    from torchhpc.trainers.cli import main

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    sim = simulate_pair(300, seed=1)
    sim.write(tmp_path / "t.fa", tmp_path / "q.fa")
    line = one_line_from(main, capsys, ["align", str(tmp_path / "t.fa"), str(tmp_path / "q.fa"), "--gapped-by",
                                        "triton", "--output", str(tmp_path / "o.maf")])
    assert "--gapped-by" in line and "triton" in line, line


def test_the_cell_loop_computes_in_32_bit_vector_lanes():
    """The Y-drop cell loop is what the gapped stage spends its time in: compiled (afresh, not from the cache)
    LLVM vectorises it with the scores in 32-bit lanes.  numba widens int32 arithmetic to int64, which
    halves the lanes (the loop ran ~1.8x slower that way), so the kernel narrows each result back."""
    import re

    from numba import njit

    from torchhpc.ext.segalign import gapped_kernels as gk

    cells = njit(nogil=True)(gk._cells.py_func)
    n = 256
    rows = np.full((7, n + 2 * gk._PAD), gk._NEG, np.int32)
    codes = [np.zeros(n + 2 * gk._PAD, np.int32) for _ in range(2)]
    walls = [np.full(n + 2 * gk._PAD, gk._NO_WALL, np.int32), np.full(n + 2 * gk._PAD, -1, np.int32)]
    top = cells(rows, 0, 3, 4, 1, 2, 5, 6, np.zeros(n + 2 * gk._PAD, np.uint8), *codes, *walls, 1, 0, 0, 0, n,
                np.arange(16, dtype=np.int64), -100, 430, 30, -9430)
    assert top == gk._NEG  # every neighbour dead: so is every cell
    ir = cells.inspect_llvm(cells.signatures[0])
    vector_ops = re.findall(r"= (sub|add|icmp \w+|select) (?:<\d+ x i1> %[\w.]+, )?<(\d+) x (i\d+)>", ir)
    assert any(op == "sub" and width == "i32" for op, _, width in vector_ops), "the cell loop is not vectorised"
    # (the lane index may stay 64-bit: the scores' gap penalties are the subtractions)
    assert not [v for v in vector_ops if v[0] == "sub" and v[2] == "i64"], "64-bit score lanes in the cell loop"


def test_gapped_stage_on_the_gpu_launches_a_window_at_a_time(monkeypatch):
    """--gapped-by triton launches when the next anchor to commit has not started, so a launch sweeps every
    startable anchor of the window: on a pair with 20 copies of a 400 bp repeat (213 alignments) at least two
    anchors a launch (1.18 before, when each commit's one new anchor was a launch of its own), and the same
    alignments as the compiled CPU stage.  The sweep is numba's here (the GPU kernel's equality is the test
    above): this checks which anchors go in which launch."""
    from torchhpc.ext.segalign import gapped_kernels
    from torchhpc.ext.segalign.align import find_hsps
    from torchhpc.ext.segalign.gapped import gapped_alignments

    launches = []

    def sweep(t, q, t0, q0, dirs, *args, device=None, codes_on_device=None, **kw):
        assert codes_on_device is not None and codes_on_device[0].numel() == t.size  # uploaded once, passed on
        launches.append(t0.size // 2)
        return gapped_kernels.ydrop_extend_numba(t, q, t0, q0, dirs, *args, **kw)

    monkeypatch.setattr(gapped_kernels, "ydrop_extend_triton", sweep)
    sim = simulate_pair(30_000, substitution_rate=0.08, indel_rate=0.005, seed=5, repeats=((400, 20, 0.05),))
    t, q = from_strings({"t": sim.target}), from_strings({"q": sim.query})
    cfg = AlignConfig()
    h = find_hsps(t, q, cfg)[0]["+"]
    counters = {}
    gpu = gapped_alignments(h, t, q, cfg, kernel="triton", device="cpu", counters=counters)
    cpu = gapped_alignments(h, t, q, cfg, kernel="numba")
    assert [(a.t_start, a.q_start, a.score, a.t_text) for a in gpu] == [(a.t_start, a.q_start, a.score, a.t_text)
                                                                        for a in cpu]
    assert len(cpu) > 100 and counters["launches"] == len(launches)
    assert sum(launches) >= 2 * len(launches), (sum(launches), len(launches))


def test_walls_of_a_target_past_two_gigabases_keep_their_positions():
    """A target of 2^31 bases or more keeps its walls' positions in int64 (in int32 a wall at 3e9 wrapped to "no
    wall"); a wall that far from an extension leaves it as no wall does, on both kernels (the compiled sweep
    clamps its relative offsets: unclamped, -3e9 wrapped to an interval over every cell and stopped a backward
    extension at its first base)."""
    far = 3_000_000_000
    wide, narrow = Walls(50, n_t=far + 100), Walls(50, n_t=1000)
    assert wide.dtype == np.int64 and narrow.dtype == np.int32
    wide.add(np.arange(far, far + 20), np.arange(10, 30))
    assert wide.on(far + 5, 15) and not wide.on(far + 5, 14) and not wide.on(5, 15)
    assert wide.intervals(np.array([15]))[0].tolist() == [[far + 5]]
    rng = np.random.default_rng(4)
    t = rng.integers(0, 4, 300).astype(np.uint8)
    walls = Walls(t.size, n_t=far + 100)
    walls.add(np.arange(far, far + 300), np.arange(300))  # every query base carries a wall, far away
    table = hoxd70().table(910).numpy()
    for d, start in ((1, 0), (-1, 299)):
        args = (t, t.copy(), np.array([start]), np.array([start]), np.array([d]), table, 400, 30, 9430)
        free = ydrop_extend(*args)
        for kernel in (ydrop_extend, ydrop_extend_numba):
            got = kernel(*args, walls)
            assert int(got[0][0]) == int(free[0][0]) > 250 * 91, (kernel.__name__, d)
            np.testing.assert_array_equal(got[1][0], free[1][0])
