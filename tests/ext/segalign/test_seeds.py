"""Spaced seeds and seed hits against a brute-force comparison of every window pair."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.segalign.fasta import from_strings
from torchhpc.ext.segalign.reference import seed_hits_reference
from torchhpc.ext.segalign.seeds import SEEDS, build_index, parse_seed, seed_hits


def _related_pair(n: int, seed: int):
    """A random target and a mutated copy (so there are true hits), with some soft-masking and an N."""
    rng = np.random.default_rng(seed)
    t = rng.integers(0, 4, n)
    q = t.copy()
    mut = rng.random(n) < 0.08
    q[mut] = rng.integers(0, 4, int(mut.sum()))
    ts = "".join("ACGT"[c] for c in t)
    qs = "".join("ACGT"[c] for c in q)
    ts = ts[:40] + ts[40:55].lower() + ts[55:90] + "N" + ts[91:]
    return from_strings({"t1": ts[: n // 2], "t2": ts[n // 2:]}), from_strings({"q": qs})


def _all_hits(index, q, transition, max_hits=1 << 20):
    out = set()
    for t_end, q_end in seed_hits(index, q.codes, 0, q.codes.numel(), transition, max_hits):
        out |= set(zip(t_end.tolist(), q_end.tolist(), strict=True))
    return out


@pytest.mark.parametrize("pattern", ["12of19", "14of22", "1101", "111"])
@pytest.mark.parametrize("transition", [True, False])
def test_hits_equal_brute_force(pattern, transition):
    """Every hit (one transition or none, masked and N windows excluded) and no other, as brute force finds."""
    t, q = _related_pair(157, seed=len(pattern))
    pat = parse_seed(pattern)
    index = build_index(t.codes, pat)
    ours = _all_hits(index, q, transition)
    ref = seed_hits_reference(t.codes.numpy(), q.codes.numpy(), pat, transition)
    assert ours == ref and len(ref) > 0


def test_direct_table_and_searchsorted_agree():
    """The counting-sort table and the searchsorted look-up give the same hits."""
    t, q = _related_pair(301, seed=3)
    from torchhpc.ext.segalign.seeds import _build_index_torch, seed_keys

    pat = parse_seed("1111")
    index = build_index(t.codes, pat)
    assert index.offsets is not None
    direct = _all_hits(index, q, True)
    sorted_index = _build_index_torch(seed_keys(t.codes, pat), pat, 1)
    sorted_index.offsets = None  # look-ups by searchsorted on the sorted keys
    assert _all_hits(sorted_index, q, True) == direct


def test_max_hits_batches_cover_the_same_hits():
    """Batching with a tiny max_hits yields the same hits, each batch within the budget (or one window)."""
    t, q = _related_pair(211, seed=5)
    index = build_index(t.codes, parse_seed("111"))
    full = _all_hits(index, q, True)
    sizes = [te.numel() for te, _ in seed_hits(index, q.codes, 0, q.codes.numel(), True, 7)]
    assert _all_hits(index, q, True, max_hits=7) == full
    assert max(sizes) <= 7 * 4 and len(sizes) > 5


def test_step_indexes_every_kth_window():
    """--step k keeps the target windows starting at multiples of k (as brute force with stride k)."""
    t, q = _related_pair(150, seed=7)
    pat = parse_seed("12of19")
    index = build_index(t.codes, pat, step=3)
    assert _all_hits(index, q, True) == seed_hits_reference(t.codes.numpy(), q.codes.numpy(), pat, True, 3)


def test_parse_seed():
    """Named seeds, matchN and patterns parse; malformed ones are one-line InputErrors."""
    assert parse_seed("12of19") == SEEDS["12of19"] and parse_seed("match4") == "1111"
    assert parse_seed("1101") == "1101"
    for bad in ["", "12of20", "0110", "11a1", "1" * 40, "match0", "match99", "match32"]:
        with pytest.raises(InputError):
            parse_seed(bad)
    with pytest.raises(InputError):
        build_index(torch.zeros(3, dtype=torch.uint8), "11", step=0)


@pytest.mark.parametrize("transition", [True, False])
def test_compiled_lookups_equal_tensor_lookups(transition):
    """On the CPU with numba, the look-ups of seed_lookups come from one compiled pass; they equal the tensor
    version's (the GPU's path) look-up for look-up, in the same order, windows with N included."""
    pytest.importorskip("numba")
    from torchhpc.ext.segalign.index_kernels import lookups_numba
    from torchhpc.ext.segalign.seeds import _lookups_torch, seed_keys

    rng = np.random.default_rng(3)
    t = "".join(rng.choice(list("ACGT"), 30000))
    q = "".join(rng.choice(list("ACGTN"), 20000, p=[0.24, 0.24, 0.24, 0.24, 0.04]))
    codes_t, codes_q = from_strings({"t": t}).codes, from_strings({"q": q}).codes
    index = build_index(codes_t, parse_seed("1101011"))  # weight 5: every key present, many hits
    assert index.offsets is not None
    keys = seed_keys(codes_q, index.pattern, 100, 15000)
    ref = _lookups_torch(index, keys, 100, transition)[:3]
    got = lookups_numba(keys, 1 + index.weight if transition else 1, index.present, index.offsets, 100,
                        index.length)
    assert ref[0].numel() > 1000
    for a, b in zip(got, ref, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("pattern", ["12of19", "1101011"])
def test_seeding_backends_give_the_same_hits_in_the_same_order(pattern):
    """backend='torch' runs the tensor ops (an index with its sorted keys), backend='numba' the compiled passes
    (no keys kept); both give the same hits in the same batches and order, and an unknown backend is one line."""
    pytest.importorskip("numba")
    t, q = _related_pair(3000, seed=4)
    pat = parse_seed(pattern)
    by = {}
    for backend in ("torch", "numba"):
        index = build_index(t.codes, pat, backend=backend)
        assert (index.keys is None) == (backend == "numba" and index.offsets is not None)
        by[backend] = [(a.tolist(), b.tolist())
                       for a, b in seed_hits(index, q.codes, 0, q.codes.numel(), True, 500, backend=backend)]
    assert by["torch"] == by["numba"] and len(by["torch"]) > 1
    with pytest.raises(InputError, match="seeding backend"):
        build_index(t.codes, pat, backend="triton")
