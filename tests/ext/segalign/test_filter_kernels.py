"""The numba kernels of the ungapped filter against the torch path (the reference)."""

from __future__ import annotations

import pytest
import torch

from torchhpc.ext.segalign.align import AlignConfig, find_hsps
from torchhpc.ext.segalign.fasta import read_fasta
from torchhpc.ext.segalign.ops import ungapped_hsps
from torchhpc.ext.segalign.scoring import hoxd70

pytest.importorskip("numba")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_scan_equals_torch_rounds(code_pair, seed, threads):
    """One pass over the hits in query order (threads split the diagonals) gives exactly the HSPs and
    the extension count of the torch path's rounds, for hits in any order."""
    n = 3000
    t, q, g = code_pair(n, seed)
    te = torch.randint(20, n - 1, (4000,), generator=g)
    qe = (te + torch.randint(-3, 4, (4000,), generator=g)).clamp(20, n - 1)  # many hits per diagonal
    qe[::5] = torch.randint(20, n - 1, (len(qe[::5]),), generator=g)  # and random ones
    key = torch.unique(te * n + qe)  # hits are distinct (target end, query end) pairs
    perm = torch.randperm(key.numel(), generator=g)
    te, qe = (key // n)[perm], (key % n)[perm]
    table = hoxd70().table(400)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, sa = ungapped_hsps(t, q, te, qe, table, 400, 800, backend="torch")
        b, sb = ungapped_hsps(t, q, te, qe, table, 400, 800, backend="numba")
    finally:
        torch.set_num_threads(old)
    assert len(a) > 5
    for f in ("t_start", "q_start", "length", "score"):
        assert torch.equal(getattr(a, f), getattr(b, f)), f
    assert sa["extended"] == sb["extended"] < sa["hits"]


def test_find_hsps_backends_agree_on_a_real_pair(shared_data):
    """Human vs mouse mitochondria, both strands: the same HSPs whichever CPU kernel filters."""
    g = shared_data / "genomes"
    t, q = read_fasta(g / "humanMito.fa"), read_fasta(g / "mouseMito.fa")
    a, _ = find_hsps(t, q, AlignConfig(gapped=False, backend="torch"))
    b, _ = find_hsps(t, q, AlignConfig(gapped=False, backend="numba"))
    assert sum(len(v) for v in a.values()) > 10
    for s in a:
        for f in ("t_start", "q_start", "length", "score"):
            assert torch.equal(getattr(a[s], f), getattr(b[s], f)), (s, f)


@pytest.mark.parametrize("threads,interval,strand", [(1, 5000, "both"), (2, 5000, "both"), (2, 1 << 20, "plus")])
@pytest.mark.parametrize("dense_bytes", [None, 0])
@pytest.mark.parametrize("max_hits", [1 << 22, 50])
def test_fused_seed_scan_equals_torch_path(shared_data, monkeypatch, threads, interval, strand, dense_bytes,
                                           max_hits):
    """The one-pass numba seeding + filter gives the torch path's HSPs and counters on a real pair: with
    a flat or a hashed diagonal table, with many small max_hits batches, on one thread, with two threads
    running intervals side by side, and with two threads splitting the diagonals of a single interval."""
    from torchhpc.ext.segalign import filter_kernels

    if dense_bytes is not None:  # hashed diagonal tables in both compiled paths
        monkeypatch.setattr(filter_kernels, "DENSE_MAX_BYTES", dense_bytes)
        monkeypatch.setattr(filter_kernels, "DENSE_BYTES_PER_HIT", dense_bytes)
    g = shared_data / "genomes"
    t, q = read_fasta(g / "humanMito.fa"), read_fasta(g / "chickenMito.fa")
    cfg = dict(gapped=False, max_hits=max_hits, interval=interval, hspthresh=2000, strand=strand)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, sa = find_hsps(t, q, AlignConfig(backend="torch", **cfg))
        b, sb = find_hsps(t, q, AlignConfig(backend="numba", fused=True, **cfg))
        c, sc = find_hsps(t, q, AlignConfig(backend="numba", fused=False, **cfg))
    finally:
        torch.set_num_threads(old)
    # a 16 kbp target gets the direct table too, so the one-pass kernel runs (a small target once fell back)
    assert sb["backend"] == "numba" and sb["fused"] and not sc["fused"]
    assert sa["hits"] == sb["hits"] == sc["hits"] > 1000
    assert sa["extended"] == sb["extended"] == sc["extended"]
    assert sum(len(v) for v in a.values()) > 10
    for s in a:
        for f in ("t_start", "q_start", "length", "score"):
            assert torch.equal(getattr(a[s], f), getattr(b[s], f)), (s, f)
            assert torch.equal(getattr(a[s], f), getattr(c[s], f)), (s, f)


def test_fused_hash_table_grows_and_stays_exact(monkeypatch):
    """A 100 kbp simulated pair with the hashed diagonal table (thousands of diagonals per thread, so
    the table grows several times) and a 4-HSP output buffer (so the pass runs again with room for
    all): exactly the torch path's HSPs."""
    from torchhpc.ext.segalign import filter_kernels
    from torchhpc.ext.segalign.fasta import from_strings
    from torchhpc.ext.segalign.simulate import simulate_pair

    monkeypatch.setattr(filter_kernels, "DENSE_MAX_BYTES", 0)
    monkeypatch.setattr(filter_kernels, "FUSED_HSP_CAPACITY", 4)  # and the HSP buffer overflows: a second run
    sim = simulate_pair(100_000, seed=3)
    t, q = from_strings({"t": sim.target}), from_strings({"q": sim.query})
    a, sa = find_hsps(t, q, AlignConfig(gapped=False, backend="torch"))
    b, sb = find_hsps(t, q, AlignConfig(gapped=False, backend="numba", fused=True))
    assert sb["fused"] and sa["extended"] == sb["extended"] > 10_000
    for s in a:
        for f in ("t_start", "q_start", "length", "score"):
            assert torch.equal(getattr(a[s], f), getattr(b[s], f)), (s, f)


def test_torch_thread_count_survives_the_kernels(code_pair):
    """numba's OpenMP layer shares libgomp with torch; a filter call leaves torch's thread count as it was."""
    t, q, g = code_pair(2000, 5)
    te = torch.randint(20, 1990, (500,), generator=g)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        ungapped_hsps(t, q, te, te.clone(), hoxd70().table(910), 910, 800, backend="numba")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(old)


def test_one_thread_stays_one_thread_in_a_fresh_process():
    """In a fresh process set to one torch thread (numba imported, its own thread count every core), the
    filter's kernels leave torch at one thread, so later intervals do not run on every core (with one
    thread no parallel kernel runs)."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import torch, numba
        from torchhpc.ext.segalign.align import AlignConfig, find_hsps
        from torchhpc.ext.segalign.simulate import simulate_pair
        from torchhpc.ext.segalign.fasta import from_strings
        torch.set_num_threads(1)
        sim = simulate_pair(20_000, seed=2)
        t, q = from_strings({"t": sim.target}), from_strings({"q": sim.query})
        seen = []
        for fused in (True, False, True):
            find_hsps(t, q, AlignConfig(gapped=False, fused=fused, interval=5000))
            seen.append(torch.get_num_threads())
        print(seen)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[1, 1, 1]"
