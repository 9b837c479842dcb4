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


def _gapped_case(rng, n, cover_kind):
    """A related pair of about ``n`` bases (substitutions, deletions, soft-masked and ambiguous codes, a
    separator) with walls as asked, and extensions from 4 anchors both ways (one at the sequence end)."""
    import numpy as np

    from torchhpc.ext.segalign.walls import Walls

    t = rng.integers(0, 4, n).astype(np.uint8)
    q = t.copy()
    mut = rng.random(n) < 0.12
    q[mut] = rng.integers(0, 4, int(mut.sum()))
    q = q[rng.random(n) > 0.03]
    t[n // 5: n // 5 + 6] += 4
    q[q.size // 3] = 8
    t[n - n // 6] = SEPARATOR
    t0 = np.array([n // 2, n // 3, 2 * n // 3, n - 1] * 2, np.int64)
    q0 = np.minimum(t0 + np.array([0, 1, -2, 0] * 2), q.size - 1)
    dirs = np.array([1] * 4 + [-1] * 4, np.int64)
    cover = None
    if cover_kind == "cells":
        cover = np.full(q.size, -1, np.int64)
        idx = rng.integers(0, q.size, 12)
        cover[idx] = np.clip(idx + rng.integers(-3, 3, 12), 0, n - 1)
    elif cover_kind in ("stacked", "wide"):  # alignments stacked on the same query bases: Walls' overflow rows
        # wide: the int64 walls of a target past 2^31 bases, with an alignment 2^32 bases away stacked in as well
        cover = Walls(q.size, n_t=2 ** 32 if cover_kind == "wide" else n)
        for k in range(5):
            qs = int(rng.integers(0, 10)) + q.size // 3
            qpos = np.arange(qs, min(qs + 15, q.size))
            shift = int(rng.integers(-20, 20))
            if k == 1 and cover_kind == "wide":  # 2^32 bases away: wrapped to 32 bits, a wall on the main diagonal
                cover.add(2 ** 32 + np.clip(qpos, 0, n - 1), qpos)
                continue
            cover.add(np.clip(qpos + shift, 0, n - 1), qpos)
        assert cover.rows > 0 and (cover.dtype == np.int64) == (cover_kind == "wide")
    return t, q, t0, q0, dirs, cover


@pytest.mark.parametrize("cover_kind,ydrop", [(None, 9430), ("cells", 2000), ("stacked", 9430), ("wide", 9430)])
def test_ydrop_sweep_equals_the_compiled_cpu_kernel(kernel_device, cover_kind, ydrop):
    """The GPU gapped stage's Y-drop sweep (interpreted) and its traceback give the compiled CPU kernel's
    scores, paths and boxes exactly, without walls, with single wall cells, with walls stacked into
    overflow rows, and with the int64 walls of a target past 2^31 bases; both directions, an anchor at the sequence end, lowercase, ambiguous and separator codes."""
    import numpy as np

    pytest.importorskip("numba")
    from torchhpc.ext.segalign.gapped_kernels import ydrop_extend_numba, ydrop_extend_triton

    rng = np.random.default_rng(7)
    t, q, t0, q0, dirs, cover = _gapped_case(rng, 90, cover_kind)
    if cover_kind == "wide":  # two extensions each way (the int64 loads are what this case adds)
        t0, q0, dirs = t0[[0, 1, 4, 5]], q0[[0, 1, 4, 5]], dirs[[0, 1, 4, 5]]
    table = hoxd70().table(910).numpy()
    ref = ydrop_extend_numba(t, q, t0, q0, dirs, table, 400, 30, ydrop, cover, boxes=True)
    got = ydrop_extend_triton(t, q, t0, q0, dirs, table, 400, 30, ydrop, cover, boxes=True, device=kernel_device,
                              cap=128, block=32)
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[3], ref[3])
    for b in range(t0.size):
        np.testing.assert_array_equal(got[1][b], ref[1][b], err_msg=f"extension {b}: target path")
        np.testing.assert_array_equal(got[2][b], ref[2][b], err_msg=f"extension {b}: query path")
    assert (ref[0] > 0).sum() >= min(4, t0.size - 1) and max(len(p) for p in ref[1]) > 30


def test_ydrop_sweep_writes_the_cpu_kernels_traceback_bytes(kernel_device):
    """Cell for cell: every traceback byte the sweep writes (H's source, whether E and F extended) and the
    number of cells it computed equal the compiled CPU kernel's, not only the paths read from them."""
    import numpy as np

    pytest.importorskip("numba")
    from torchhpc.ext.segalign import gapped_kernels as gk
    from torchhpc.triton_kernels.segalign import YDROP_FIELDS, ydrop_sweep_triton

    rng = np.random.default_rng(9)
    t, q, t0, q0, dirs, _ = _gapped_case(rng, 80, None)
    table = hoxd70().table(910).numpy()
    sc16, amb = gk.compact_table(table)
    dev = kernel_device
    out, tb, _, _ = ydrop_sweep_triton(*(torch.as_tensor(x).to(dev) for x in (t, q, t0, q0, dirs, sc16)), amb, 400, 30,
                                       9430, cap=128, block=32)
    out, tb = out.cpu(), tb.cpu()
    none = np.full((1, 1), -1, np.int32)
    for b in range(t0.size):
        r = gk._extend_one(t, q, int(t0[b]), int(q0[b]), int(dirs[b]), sc16, amb, gk._EFF, 430, 30, 9430, none, none,
                           np.full(1, -1, np.int32), False, none, none, False, np.empty(1 << 12, np.uint8))
        used = int(out[b, YDROP_FIELDS.index("used")])
        assert used == r[3] and int(out[b, 0]) == r[0]
        np.testing.assert_array_equal(tb[b, 1:used].numpy(), r[8][1:used], err_msg=f"extension {b}")


def test_ydrop_sweep_out_of_room_is_redone_on_the_cpu(kernel_device):
    """Extensions whose anti-diagonals outgrow the kernel's buffers (a band wider than ``cap``, more traceback
    bytes than ``tb_cap``) end with status 1 and nothing else; the caller redoes them on the CPU, so the results
    are still the compiled kernel's."""
    import numpy as np

    pytest.importorskip("numba")
    from torchhpc.ext.segalign.gapped_kernels import compact_table, ydrop_extend_numba, ydrop_extend_triton
    from torchhpc.triton_kernels.segalign import YDROP_FIELDS, ydrop_sweep_triton

    rng = np.random.default_rng(8)
    t, q, t0, q0, dirs, _ = _gapped_case(rng, 70, None)
    table = hoxd70().table(910).numpy()
    sc16, amb = compact_table(table)
    dev = kernel_device
    args = (*(torch.as_tensor(x).to(dev) for x in (t, q, t0, q0, dirs, sc16)), amb, 400, 30, 9430)
    out, *_ = ydrop_sweep_triton(*args, cap=16, block=16)
    status = out[:, YDROP_FIELDS.index("status")].cpu()
    assert status.tolist().count(1) >= 2 and status.tolist().count(0) >= 1
    narrow, *_ = ydrop_sweep_triton(*args, cap=256, block=32, tb_cap=300)
    assert int(narrow[:, YDROP_FIELDS.index("status")].sum()) >= 1
    ref = ydrop_extend_numba(t, q, t0, q0, dirs, table, 400, 30, 9430, None, boxes=True)
    got = ydrop_extend_triton(t, q, t0, q0, dirs, table, 400, 30, 9430, None, boxes=True, device=dev, cap=16,
                              block=16)
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[3], ref[3])
    assert all(np.array_equal(a, b) for a, b in zip(got[1], ref[1], strict=True))
