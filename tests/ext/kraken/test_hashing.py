"""The tensor hash index against a Python dict, and the count-min sketch against exact counts."""

from __future__ import annotations

import pytest
import torch

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.kraken.hashing import CountMinSketch, IdIndex, check_ids, hash_uniform, mix64


def test_mix64_is_a_bijection_on_a_sample_and_spreads_bits():
    x = torch.arange(200_000, dtype=torch.int64)
    h = mix64(x)
    assert torch.unique(h).numel() == x.numel()
    # consecutive inputs land all over the table: low bits are balanced
    counts = torch.bincount(h & 255, minlength=256).float()
    assert counts.std() / counts.mean() < 0.1


def test_index_matches_a_dict_through_inserts_and_removes():
    g = torch.Generator().manual_seed(0)
    ix = IdIndex(16)
    ref: dict[int, int] = {}
    next_row = 0
    for step in range(30):
        # IDs from a small range so inserts, re-inserts and removes collide in the table
        cand = torch.unique(torch.randint(0, 3000, (200,), generator=g) * 1_000_003 + (1 << 40))
        new = torch.tensor([i for i in cand.tolist() if i not in ref], dtype=torch.int64)
        rows = torch.arange(next_row, next_row + new.numel())
        next_row += new.numel()
        ix.insert(new, rows)
        ref.update(zip(new.tolist(), rows.tolist(), strict=True))
        if step % 3 == 2:
            gone = torch.tensor(list(ref)[:: 4], dtype=torch.int64)
            got = ix.remove(gone)
            assert sorted(got.tolist()) == sorted(ref.pop(i) for i in gone.tolist())
        probe = torch.cat([cand, torch.randint(0, 1 << 62, (100,), generator=g)])
        want = torch.tensor([ref.get(i, -1) for i in probe.tolist()])
        assert torch.equal(ix.lookup(probe), want)
        assert ix.size == len(ref)
    ids, rows = ix.items()
    assert dict(zip(ids.tolist(), rows.tolist(), strict=True)) == ref
    assert 2 * ix.size <= ix.capacity  # load factor kept at or below 1/2


def test_index_is_collision_free_where_modulo_hashing_is_not():
    ids = torch.arange(1000, dtype=torch.int64) * 512  # all equal modulo 512
    ix = IdIndex(8)
    ix.insert(ids, torch.arange(1000))
    assert torch.equal(ix.lookup(ids), torch.arange(1000))
    assert torch.unique(ids % 512).numel() == 1


def test_index_state_round_trip():
    ix = IdIndex(64, seed=3)
    ids = torch.randint(0, 1 << 60, (500,)).unique()
    ix.insert(ids, torch.arange(ids.numel()))
    other = IdIndex(16)
    other.load_state_dict(ix.state_dict())
    assert torch.equal(other.lookup(ids), ix.lookup(ids))


def test_count_min_sketch_never_undercounts_and_is_tight():
    g = torch.Generator().manual_seed(1)
    ids = (torch.rand(50_000, generator=g).pow(4) * 5000).long() * 7919
    cms = CountMinSketch(width=4096, depth=4)
    for chunk in ids.split(5000):
        u, c = torch.unique(chunk, return_counts=True)
        cms.add(u, c)
    u, exact = torch.unique(ids, return_counts=True)
    est = cms.query(u)
    assert bool((est >= exact).all())
    # the bound e * N / width with probability 1 - exp(-depth): nearly all within it
    bound = 2.72 * ids.numel() / 4096
    assert float(((est - exact) <= bound).float().mean()) > 0.98
    cms.decay(0.5)
    assert bool((cms.query(u) <= est).all())


def test_hash_uniform_is_deterministic_and_uniform():
    ids = torch.arange(20_000)
    a, b = hash_uniform(ids, 8, seed=5), hash_uniform(ids.flip(0), 8, seed=5).flip(0)
    assert torch.equal(a, b)
    assert 0 < float(a.min()) and float(a.max()) < 1
    assert abs(float(a.mean()) - 0.5) < 0.01 and abs(float(a.var()) - 1 / 12) < 0.005


def test_check_ids_errors():
    with pytest.raises(InputError, match="non-negative"):
        check_ids(torch.tensor([3, -1]))
    with pytest.raises(InputError, match="integer"):
        check_ids(torch.tensor([1.0]))
    with pytest.raises(InputError, match="width"):
        CountMinSketch(width=0)
