"""The ungapped X-drop Triton kernel (interpreted on the CPU) against its torch twin."""

from __future__ import annotations

import pytest
import torch

from torchhpc.ext.segalign.fasta import SEPARATOR
from torchhpc.ext.segalign.ops import xdrop_extend, xdrop_extend_torch
from torchhpc.ext.segalign.scoring import hoxd70

triton = pytest.importorskip("triton")


def _case(n, H, seed, rate):
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(0, 4, (n,), generator=g, dtype=torch.uint8)
    q = t.clone()
    mut = torch.rand(n, generator=g) < rate
    q[mut] = torch.randint(0, 4, (int(mut.sum()),), generator=g, dtype=torch.uint8)
    t[n // 4:n // 4 + 9] += 4  # soft-masked run
    q[n // 3] = 8  # an ambiguous base
    t[0] = t[-1] = q[0] = q[-1] = SEPARATOR
    q[n // 2] = SEPARATOR  # a wall mid-way
    tf = torch.randint(0, n, (H,), generator=g)
    qf = tf.clone()
    qf[::3] = torch.randint(0, n, (len(qf[::3]),), generator=g)
    tf[0], qf[0] = 0, 0  # starts on the wall: empty extension
    tf[-1], qf[-1] = n - 2, n - 2  # runs into the array end
    return t, q, tf, qf


CASES = [
    # n, H, seed, mutation rate, xdrop, BLOCK_H, TILE (odd sizes: H not a multiple of BLOCK_H)
    (157, 13, 0, 0.15, 910, 8, 16),
    (230, 21, 1, 0.25, 500, 16, 32),
    (61, 5, 2, 0.0, 910, 4, 8),
]


@pytest.mark.parametrize("n,H,seed,rate,xdrop,block_h,tile", CASES)
@pytest.mark.parametrize("direction", [1, -1])
def test_kernel_equals_twin(kernel_device, n, H, seed, rate, xdrop, block_h, tile, direction):
    """Best score, its length and the scanned length are identical to the torch twin's."""
    from torchhpc.triton_kernels.segalign import xdrop_extend_triton

    t, q, tf, qf = _case(n, H, seed, rate)
    table = hoxd70().table(xdrop)
    ref = xdrop_extend_torch(t, q, tf, qf, direction, table, xdrop)
    dev = kernel_device
    got = xdrop_extend_triton(t.to(dev), q.to(dev), tf.to(dev), qf.to(dev), direction, table.to(dev), xdrop,
                              block_h=block_h, tile=tile)
    for a, b in zip(ref, got, strict=True):
        assert torch.equal(a, b.cpu())


def test_scores_past_two_to_the_31_stay_exact(kernel_device):
    """An identical stretch scored 2^28 a match passes 2^31 after 8 cells: the kernel and its torch twin keep
    int64 scores, as LASTZ and the compiled CPU filter do (int32 scores wrapped negative and cut the extension short)."""
    from torchhpc.triton_kernels.segalign import xdrop_extend_triton

    n = 40
    t = torch.randint(0, 4, (n,), generator=torch.Generator().manual_seed(5), dtype=torch.uint8)
    table = torch.full((11, 11), -(2**20), dtype=torch.int32)
    table[torch.arange(4), torch.arange(4)] = 2**28
    table[10, :] = table[:, 10] = -(2**30)  # the wall past either end ends every extension
    dev = kernel_device
    for direction, starts in ((1, [0, 3]), (-1, [n - 1, n - 4])):
        first = torch.tensor(starts).to(dev)
        cells = torch.tensor([n, n - 3])  # every cell to the end matches; the wall after it drops
        for run in (xdrop_extend_triton, xdrop_extend_torch):  # the kernel and its torch twin
            best, length, scanned = run(t.to(dev), t.to(dev), first, first, direction, table.to(dev), 2**29)
            assert torch.equal(best.cpu(), cells * 2**28) and int(best.max()) > 2**33
            assert torch.equal(length.cpu(), cells) and torch.equal(scanned.cpu(), cells + 1)


def test_dispatch_picks_triton_by_name(kernel_device):
    """backend='triton' runs the kernel through the dispatch function and agrees with backend='torch'."""
    t, q, tf, qf = _case(90, 7, 3, 0.1)
    table = hoxd70().table(910)
    a = xdrop_extend(t, q, tf, qf, 1, table, 910, backend="torch")
    dev = kernel_device
    b = xdrop_extend(t.to(dev), q.to(dev), tf.to(dev), qf.to(dev), 1, table.to(dev), 910, backend="triton")
    assert all(torch.equal(x, y.cpu()) for x, y in zip(a, b, strict=True))


def test_launcher_checks_inputs():
    """Wrong dtypes, shapes or directions are refused before launching."""
    from torchhpc.triton_kernels.segalign import xdrop_extend_triton

    t, q, tf, qf = _case(40, 3, 4, 0.1)
    table = hoxd70().table(910)
    with pytest.raises(ValueError):
        xdrop_extend_triton(t.long(), q, tf, qf, 1, table, 910)
    with pytest.raises(ValueError):
        xdrop_extend_triton(t, q, tf, qf[:2], 1, table, 910)
    with pytest.raises(ValueError):
        xdrop_extend_triton(t, q, tf, qf, 0, table, 910)


@pytest.mark.gpu
def test_cuda_filter_equals_cpu_on_a_real_pair(shared_data):
    """Human vs mouse mitochondria, both strands: the compiled kernel on CUDA finds exactly the CPU's HSPs."""
    from torchhpc.ext.segalign.align import AlignConfig, find_hsps
    from torchhpc.ext.segalign.fasta import read_fasta

    g = shared_data / "genomes"
    t, q = read_fasta(g / "humanMito.fa"), read_fasta(g / "mouseMito.fa")
    cpu, _ = find_hsps(t, q, AlignConfig(gapped=False, backend="torch"))
    gpu, stats = find_hsps(t, q, AlignConfig(gapped=False, device="cuda"))
    assert sum(len(v) for v in cpu.values()) > 10 and stats["hits"] > 0
    for s in cpu:
        for f in ("t_start", "q_start", "length", "score"):
            assert torch.equal(getattr(cpu[s], f), getattr(gpu[s], f).cpu()), (s, f)


@pytest.mark.gpu
def test_compiled_kernel_equals_twin_at_scale():
    """Default launch sizes, 20,000 extensions on a 100 kbp pair: identical to the torch twin."""
    from torchhpc.triton_kernels.segalign import xdrop_extend_triton

    t, q, tf, qf = _case(100_000, 20_000, 7, 0.08)
    table = hoxd70().table(910)
    for direction in (1, -1):
        ref = xdrop_extend_torch(t, q, tf, qf, direction, table, 910)
        got = xdrop_extend_triton(t.cuda(), q.cuda(), tf.cuda(), qf.cuda(), direction, table.cuda(), 910)
        for a, b in zip(ref, got, strict=True):
            assert torch.equal(a, b.cpu())


@pytest.mark.parametrize("seed,n,hits,diagonals,block_d,tile", [
    (0, 400, 60, 3, 4, 16),  # many hits per diagonal: most skipped by an earlier extension's reach
    (1, 300, 1, 1, 4, 8),  # one hit
    (2, 500, 90, 40, 32, 32),  # diagonals not a multiple of the lanes; hits on the array edges
])
def test_diagonal_scan_equals_the_rounds(kernel_device, seed, n, hits, diagonals, block_d, tile):
    """The one-launch filter (a lane per diagonal walking its hits) extends exactly the hits the torch path's
    rounds extend, to the same HSPs, with a mutated copy, soft-masked and ambiguous bases and walls."""
    from torchhpc.ext.segalign.ops import ungapped_hsps
    from torchhpc.triton_kernels.segalign import diagonal_scan_triton

    t, q, _, _ = _case(n, 1, seed, 0.1)
    g = torch.Generator().manual_seed(seed)
    diag = torch.randint(-n // 4, n // 4, (diagonals,), generator=g)[torch.randint(0, diagonals, (hits,), generator=g)]
    q_end = torch.randint(1, n, (hits,), generator=g)
    t_end = (q_end + diag).clamp(1, n - 1)
    table = hoxd70().table(910)
    ref, ref_stats = ungapped_hsps(t, q, t_end, q_end, table, 910, 0, False, "torch")
    got, got_stats = ungapped_hsps(t.to(kernel_device), q.to(kernel_device), t_end.to(kernel_device),
                                   q_end.to(kernel_device), table.to(kernel_device), 910, 0, False, "triton")
    assert got_stats["extended"] == ref_stats["extended"] and got_stats["rounds"] == 1
    for f in ("t_start", "q_start", "length", "score"):
        assert torch.equal(getattr(got, f).cpu(), getattr(ref, f))
    # the launcher alone, with the block and tile sizes of the case: the same extended hits
    d = t_end - q_end
    order = torch.argsort(d * 10**6 + q_end)
    ds = d[order]
    lead = torch.ones_like(ds, dtype=torch.bool)
    lead[1:] = ds[1:] != ds[:-1]
    start = torch.nonzero(lead).reshape(-1)
    stop = torch.cat([start[1:], torch.tensor([hits])])
    done, ts, ln, sc = diagonal_scan_triton(t.to(kernel_device), q.to(kernel_device), t_end[order].to(kernel_device),
                                            q_end[order].to(kernel_device), start.to(kernel_device),
                                            stop.to(kernel_device), table.to(kernel_device), 910, block_d, tile)
    assert int(done.sum()) == ref_stats["extended"]
