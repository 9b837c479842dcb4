"""The ungapped X-drop filter: the torch twin against LASTZ's scalar loop, HSPs against brute force."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchhpc.ext.core.dispatch import numba_available, resolve_backend
from torchhpc.ext.core.errors import InputError
from torchhpc.ext.segalign.config import BACKENDS as CHOICES
from torchhpc.ext.segalign.fasta import SEPARATOR
from torchhpc.ext.segalign.ops import (
    HSPs,
    match_entropy,
    remove_contained,
    ungapped_hsps,
    xdrop_extend,
    xdrop_extend_torch,
)
from torchhpc.ext.segalign.reference import xdrop_extend_reference
from torchhpc.ext.segalign.scoring import hoxd70


def _codes(n, seed, rate=0.1, lower=True):
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(0, 4, (n,), generator=g, dtype=torch.uint8)
    q = t.clone()
    mut = torch.rand(n, generator=g) < rate
    q[mut] = torch.randint(0, 4, (int(mut.sum()),), generator=g, dtype=torch.uint8)
    if lower:
        t[n // 3:n // 3 + 25] += 4  # soft-masked stretch: scored like uppercase
    t[0] = t[-1] = q[0] = q[-1] = SEPARATOR
    q[n // 2] = SEPARATOR  # a record boundary in the query
    return t, q


BACKENDS = ["torch", pytest.param("numba", marks=pytest.mark.skipif(not numba_available(), reason="needs numba"))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n,H,xdrop", [(301, 23, 910), (1000, 57, 910), (97, 9, 200), (500, 31, 5000)])
@pytest.mark.parametrize("direction", [1, -1])
def test_twin_equals_lastz_loop(n, H, xdrop, direction, backend):
    """Best score, its length and the scanned length equal LASTZ's scalar loop, walls included
    (the torch twin with small tiles, and the numba CPU kernel)."""
    t, q = _codes(n, seed=n + H)
    g = torch.Generator().manual_seed(H)
    tf = torch.randint(1, n - 1, (H,), generator=g)
    qf = tf.clone()
    qf[::4] = torch.randint(1, n - 1, (len(qf[::4]),), generator=g)  # off-diagonal (random) hits
    table = hoxd70().table(xdrop)
    if backend == "torch":
        best, length, scanned = xdrop_extend_torch(t, q, tf, qf, direction, table, xdrop, tile=8, max_tile=64)
    else:
        best, length, scanned = xdrop_extend(t, q, tf, qf, direction, table, xdrop, backend=backend)
    tn, qn, tab = t.numpy(), q.numpy(), table.numpy()
    for h in range(H):
        ref = xdrop_extend_reference(tn, qn, int(tf[h]), int(qf[h]), direction, tab, xdrop)
        assert (int(best[h]), int(length[h]), int(scanned[h])) == ref


def test_dispatch_rejects_bad_arguments():
    """An unknown backend or direction is an InputError."""
    t, q = _codes(50, 1)
    z = torch.zeros(1, dtype=torch.int64) + 3
    with pytest.raises(InputError):
        xdrop_extend(t, q, z, z, 2, hoxd70().table(910), 910)
    with pytest.raises(InputError):
        xdrop_extend(t, q, z, z, 1, hoxd70().table(910), 910, backend="cuda-magic")
    with pytest.raises(InputError, match="CPU"):
        resolve_backend("numba", torch.device("cuda"), choices=CHOICES)


def test_triton_on_the_cpu_needs_the_interpreter(monkeypatch):
    """backend 'triton' on CPU tensors is a clear error unless TRITON_INTERPRET=1 (as in these tests)."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(InputError, match="CUDA"):
        resolve_backend("triton", torch.device("cpu"), choices=CHOICES)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert resolve_backend("triton", torch.device("cpu"), choices=CHOICES) == "triton"


def _brute_hsps(t, q, t_end, q_end, table, xdrop, thresh):
    """Extend every hit with the scalar loop, keep >= thresh, drop contained ones (entropy off)."""
    tn, qn, tab = t.numpy(), q.numpy(), table.numpy()
    segs = set()
    for te, qe in zip(t_end.tolist(), q_end.tolist(), strict=True):
        lb, ll, _ = xdrop_extend_reference(tn, qn, te - 1, qe - 1, -1, tab, xdrop)
        rb, rl, _ = xdrop_extend_reference(tn, qn, te, qe, 1, tab, xdrop)
        if lb + rb >= thresh:
            segs.add((te - ll, qe - ll, ll + rl, lb + rb))
    keep = set()
    for s in segs:
        d = s[0] - s[1]
        inside = any(o != s and o[0] - o[1] == d and o[1] <= s[1] and o[1] + o[2] >= s[1] + s[2] for o in segs)
        if not inside:
            keep.add(s)
    return keep


@pytest.mark.parametrize("backend", BACKENDS)
def test_ungapped_hsps_cover_every_brute_force_hsp(backend):
    """Every maximal HSP of the all-hits brute force is found (the diagonal bookkeeping loses none)."""
    t, q = _codes(1200, seed=11, lower=False)
    g = torch.Generator().manual_seed(2)
    t_end = torch.randint(30, 1190, (150,), generator=g)
    q_end = t_end.clone()
    q_end[::3] = torch.randint(30, 1190, (50,), generator=g)
    table = hoxd70().table(910)
    h, stats = ungapped_hsps(t, q, t_end, q_end, table, 910, 1500, entropy=False, backend=backend)
    ours = set(zip(h.t_start.tolist(), h.q_start.tolist(), h.length.tolist(), h.score.tolist(), strict=True))
    ref = _brute_hsps(t, q, t_end, q_end, table, 910, 1500)
    assert ref and ref <= ours
    assert stats["extended"] <= stats["hits"]


def test_entropy_factor():
    """Matched bases of one letter have entropy 0, of four equally used letters 1; short segments keep 1."""
    t = torch.tensor([SEPARATOR] + [0] * 40 + [0, 1, 2, 3] * 10 + [SEPARATOR], dtype=torch.uint8)
    e = match_entropy(t, t, torch.tensor([1, 41, 1]), torch.tensor([1, 41, 1]), torch.tensor([40, 40, 10]))
    assert np.allclose(e.numpy(), [0.0, 1.0, 1.0])


def test_remove_contained():
    """An HSP inside another on its diagonal goes; overlapping or other-diagonal ones stay, sorted by query."""
    h = HSPs(torch.tensor([10, 12, 30, 14, 12]), torch.tensor([0, 2, 20, 2, 2]), torch.tensor([20, 5, 10, 30, 18]),
             torch.tensor([9, 8, 7, 6, 5]))
    out = remove_contained(h)
    assert sorted(zip(out.t_start.tolist(), out.q_start.tolist(), strict=True)) == [(10, 0), (14, 2), (30, 20)]


def _contained_by_brute_force(h: HSPs) -> list[tuple[int, int, int]]:
    rows = list(zip(h.t_start.tolist(), h.q_start.tolist(), h.length.tolist(), strict=True))
    keep = []
    for n, (t, q, L) in enumerate(rows):
        inside = [m for m, (t2, q2, L2) in enumerate(rows) if m != n and t2 - q2 == t - q and q2 <= q
                  and q + L <= q2 + L2]
        # of equal HSPs the first kept in (diagonal, start, longer first) order survives
        if not any(rows[m] != (t, q, L) or m < n for m in inside):
            keep.append((q, t, L))
    return sorted(keep)


@pytest.mark.parametrize("kind", ["tensors", "arrays"])
@pytest.mark.parametrize("offset", [0, 3_000_000_000])
def test_remove_contained_on_genome_scale_coordinates(offset, kind):
    """Positions past 2^31 and diagonals ~1e9 apart (a human-size target): the same HSPs survive as by brute
    force, in query order (a combined diag * big^2 sort key overflowed int64 here); HSPs held as tensors or
    as NumPy arrays (the CPU path without torch) alike."""
    g = torch.Generator().manual_seed(3)
    n = 300
    q = torch.randint(0, 6_000_000_000, (n,), generator=g) + offset
    diag = torch.randint(-1_000_000_000, 1_000_000_000, (n // 3,), generator=g).repeat(3)
    q[n // 3:] = q[:n // 3].repeat(2) + torch.randint(0, 50, (2 * n // 3,), generator=g)  # nested on a diagonal
    length = torch.randint(1, 120, (n,), generator=g)
    h = HSPs(q + diag + 2_000_000_000, q, length, torch.randint(0, 9, (n,), generator=g))
    out = remove_contained(h if kind == "tensors" else HSPs(*(x.numpy() for x in h.fields)))
    assert isinstance(out.t_start, torch.Tensor if kind == "tensors" else np.ndarray)
    assert sorted(zip(out.q_start.tolist(), out.t_start.tolist(), out.length.tolist(), strict=True)) == \
        _contained_by_brute_force(h)
    assert out.q_start.tolist() == sorted(out.q_start.tolist())
    assert len(out) < n  # some were contained


@pytest.mark.parametrize("n", [0, 1, 2, 400])
def test_the_filters_finish_on_arrays_is_the_tensor_ops(code_pair, n):
    """The entropy adjustment, the threshold and the de-duplication on NumPy arrays (the CPU's, tensors'
    and arrays' alike) keep the very HSPs, scores and order of the tensor ops (a GPU's): raw HSPs of a
    related pair with repeats, low-complexity runs and nested duplicates on a diagonal."""
    from torchhpc.ext.segalign.ops import _entropy_arrays, _finish, _finish_arrays, _finish_tensors

    t, q, g = code_pair(3000, 5)
    t[100:700] = 0  # a low-complexity run (entropy 0 where it matches)
    q[100:700] = 0
    ts = torch.randint(1, 2400, (n,), generator=g)
    qs = (ts + torch.randint(-3, 4, (n,), generator=g)).clamp(1, 2400)
    qs[: n // 2] = ts[: n // 2]  # on the main diagonal: containments
    ln = torch.randint(1, 500, (n,), generator=g)
    sc = torch.randint(2000, 12000, (n,), generator=g)
    if n > 4:
        ts[1], qs[1], ln[1], sc[1] = ts[0] + 5, qs[0] + 5, max(int(ln[0]) - 10, 1), sc[0]  # nested in HSP 0
    args = (3000, True, "+")
    # the entropy factors agree to rounding (two libm's log), and no adjusted score sits within rounding of an
    # integer, so the floored scores below are comparable exactly on any CPU
    q_t = match_entropy(t, q, ts, qs, ln).numpy()
    q_a = _entropy_arrays(t.numpy(), q.numpy(), ts.numpy(), qs.numpy(), ln.numpy())
    np.testing.assert_allclose(q_a, q_t, rtol=1e-12, atol=0)
    prod = sc.numpy() * q_a
    assert not np.any((q_a > 0) & (q_a < 1) & (np.abs(prod - np.round(prod)) < 1e-6))  # (0 and 1 are exact)
    want = _finish_tensors(t, q, ts, qs, ln, sc, *args)
    got = _finish_arrays(t.numpy(), q.numpy(), ts.numpy(), qs.numpy(), ln.numpy(), sc.numpy(), *args)
    on_cpu = _finish(t, q, ts, qs, ln, sc, *args)  # CPU tensors: the arrays' implementation, as tensors
    assert isinstance(got.score, np.ndarray) and isinstance(on_cpu.score, torch.Tensor)
    for w, a, c in zip(want.fields, got.fields, on_cpu.fields, strict=True):
        assert w.tolist() == a.tolist() == c.tolist()
    if n == 400:  # the cases happened: some scores lowered, some HSPs dropped
        assert 0 < len(want) < n and not set(want.score.tolist()) <= set(sc.tolist())


def test_hsps_held_as_arrays_stay_arrays():
    """HSPs of NumPy arrays concatenate, select and go "to the CPU" as arrays (no torch on that path)."""
    a = HSPs(*(np.arange(3, dtype=np.int64) + k for k in range(4)), "-")
    both = HSPs.cat([a, a.select(np.array([2]))], "-", None)
    assert isinstance(both.t_start, np.ndarray) and both.t_start.tolist() == [0, 1, 2, 2] and both.strand == "-"
    assert both.to("cpu") is both and both.to(None) is both
    assert isinstance(HSPs.cat([], "+", None).score, np.ndarray) and len(HSPs.cat([], "+", None)) == 0
    assert isinstance(both.to("meta").t_start, torch.Tensor)
