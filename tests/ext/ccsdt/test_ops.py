"""The blocked torch (T) path against the dense reference, and the input checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchhpc.ext.ccsdt import occupied_triples, triples_energy, triples_energy_reference, triples_flops
from torchhpc.ext.ccsdt.reference import random_inputs
from torchhpc.ext.core.errors import InputError


def close(a: float, b: float, rel: float = 1e-12) -> bool:
    return abs(a - b) <= rel * max(1.0, abs(b))


@pytest.mark.parametrize("nocc,nvir", [(1, 5), (2, 1), (2, 3), (3, 5), (4, 7), (5, 6)])
@pytest.mark.parametrize("symmetric", [True, False])
def test_torch_path_matches_dense_reference(nocc, nvir, symmetric):
    """The i >= j >= k blocked GEMM path equals the dense einsum formula, with or without the RHF symmetries."""
    args = random_inputs(nocc, nvir, seed=nocc * 31 + nvir, symmetric=symmetric)
    ref = triples_energy_reference(*args)
    ours = triples_energy(*args, backend="torch")
    assert close(ours, ref), (ours, ref)
    if nocc == 1:  # every occupied triple is i = j = k: r3 annihilates it
        assert abs(ref) < 1e-15 and ours == 0.0


@pytest.mark.parametrize("nocc,nvir", [(1, 5), (2, 1), (3, 5), (4, 7), (6, 4)])
@pytest.mark.parametrize("block_triples", [None, 1, 2])
def test_pair_blocked_path_matches_dense_reference(nocc, nvir, block_triples):
    """The GPU's blocking (one occupied pair and a run of k per block, large GEMMs) equals the dense formula
    on the CPU, with blocks of every length (a run of k split or whole)."""
    from torchhpc.ext.ccsdt.ops import triples_energy_torch
    from torchhpc.ext.ccsdt.pairs import pair_blocks

    args = [torch.as_tensor(a) for a in random_inputs(nocc, nvir, seed=nocc * 7 + nvir, symmetric=nocc % 2 == 0)]
    ref = triples_energy_reference(*args)
    ours = triples_energy_torch(*args, blocking="pair", block_triples=block_triples)
    assert close(ours, ref), (ours, ref)
    triples = [(i, j, k0 + t) for i, j, k0, _, n in pair_blocks(nocc, block_triples or nocc) for t in range(n)]
    assert triples == [tuple(r) for r in occupied_triples(nocc)[0].tolist()]  # each triple once, in order
    with pytest.raises(InputError, match="blocking must be"):
        triples_energy_torch(*args, blocking="quad")


@pytest.mark.parametrize("block_triples", [1, 2, 5, 100])
@pytest.mark.parametrize("num_threads", [1, 2])
def test_block_size_and_threads_do_not_change_the_energy(block_triples, num_threads):
    """Any block size and worker count gives the same E(T) (blocks are summed in a fixed order)."""
    args = random_inputs(5, 6, seed=7)
    base = triples_energy(*args, backend="torch", block_triples=1, num_threads=1)
    e = triples_energy(*args, backend="torch", block_triples=block_triples, num_threads=num_threads)
    assert close(e, base, 1e-13)
    assert close(base, triples_energy_reference(*args))


def test_two_worker_threads_leave_the_torch_thread_count_alone():
    """The worker pool sets torch to one thread while it runs and restores the previous count."""
    before = torch.get_num_threads()
    triples_energy(*random_inputs(4, 5, seed=3), backend="torch", num_threads=2)
    assert torch.get_num_threads() == before


def test_numpy_inputs_and_read_only_arrays():
    """numpy arrays (also read-only ones, as PySCF and np.load hand out) give the same energy as tensors."""
    args = random_inputs(3, 5, seed=11)
    arrays = [a.numpy().copy() for a in args]
    for a in arrays:
        a.setflags(write=False)
    assert triples_energy(*arrays) == triples_energy(*args)


def test_occupied_triples_cover_every_ordered_triple_once():
    """Weights x 3 count each ordered triple with two or three distinct indices exactly once."""
    for nocc in range(1, 7):
        idx, w = occupied_triples(nocc)
        assert bool((idx[:, 0] >= idx[:, 1]).all() and (idx[:, 1] >= idx[:, 2]).all())
        ordered = sum(len({(i, j, k), (i, k, j), (j, i, k), (j, k, i), (k, i, j), (k, j, i)}) for i, j, k in idx.tolist())
        assert float(3 * w.sum()) == ordered == nocc**3 - nocc


def test_flop_count_matches_the_contractions():
    """triples_flops counts two flops per multiply-add of the particle and hole einsums of eq. (1)."""
    nocc, nvir = 3, 5
    particle = nocc**3 * nvir**3 * nvir  # 'iafb,kjcf->ijkabc': one multiply-add per (ijkabc, f)
    hole = nocc**3 * nvir**3 * nocc  # 'iajm,mkbc->ijkabc': one per (ijkabc, m)
    assert triples_flops(nocc, nvir) == 2 * (particle + hole)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda a: {**a, "t2": a["t2"][:, :, :-1]}, r"t2: expected shape \(o, o, v, v\)"),
        (lambda a: {**a, "ovvv": a["ovvv"].transpose(0, 1)}, r"ovvv: expected shape"),
        (lambda a: {**a, "ovoo": a["ovoo"][:-1]}, r"ovoo: expected shape"),
        (lambda a: {**a, "ovov": a["ovov"][..., :2]}, r"ovov: expected shape"),
        (lambda a: {**a, "fock_ov": a["fock_ov"].T}, r"fock_ov: expected shape"),
        (lambda a: {**a, "mo_energy": a["mo_energy"][:-1]}, r"mo_energy: expected shape"),
        (lambda a: {**a, "t1": a["t1"][0]}, r"t1: expected a 2-D"),
        (lambda a: {**a, "ovvv": _with(a["ovvv"], (1, 2, 0, 3), float("nan"))}, r"ovvv contains NaN or Inf .*\(1, 2, 0, 3\)"),
        (lambda a: {**a, "t1": _with(a["t1"], (0, 1), float("inf"))}, r"t1 contains NaN or Inf"),
        (lambda a: {**a, "t2": a["t2"].to(torch.complex128)}, r"t2: complex"),
        (lambda a: {**a, "mo_energy": a["mo_energy"].flip(0)}, r"occupied orbital energy must lie below"),
    ],
)
def test_bad_input_is_one_clear_error_naming_the_argument(mutate, message):
    """Shapes that disagree, NaN/Inf, complex values and unordered energies raise InputError, not garbage."""
    names = ("t1", "t2", "ovvv", "ovoo", "ovov", "fock_ov", "mo_energy")
    args = dict(zip(names, random_inputs(3, 4, seed=1), strict=True))
    with pytest.raises(InputError, match=message):
        triples_energy(**mutate(args))


def _with(x: torch.Tensor, index: tuple, value: float) -> torch.Tensor:
    x = x.clone()
    x[index] = value
    return x


def test_bad_options_are_clear_errors():
    """An unknown backend, a max_memory below one triple's buffers and zero threads are refused."""
    args = random_inputs(3, 30, seed=2)
    with pytest.raises(InputError, match="backend must be"):
        triples_energy(*args, backend="fortran")
    with pytest.raises(InputError, match=r"max_memory=0.5 MB is too small .* at least [0-9.]+ MB"):
        triples_energy(*args, max_memory=0.5)
    with pytest.raises(InputError, match="num_threads must be >= 1"):
        triples_energy(*args, num_threads=0)


def test_max_memory_bounds_the_block():
    """A tight max_memory still computes the right energy (blocks of one triple), a loose one too."""
    args = random_inputs(4, 30, seed=5)
    ref = triples_energy(*args, max_memory=10_000)
    per_triple_mb = 4 * 30**3 * 8 / 2**20
    tight = triples_energy(*args, max_memory=4 + 2 * per_triple_mb, num_threads=2)  # room for one triple per worker
    assert close(tight, ref, 1e-13)


def test_reference_refuses_huge_dense_tensors():
    """The dense reference names the blocked path instead of allocating o^3 v^3 beyond its limit."""
    o, v = 12, 40
    fake = [np.zeros(s) for s in [(o, v), (o, o, v, v), (o, v, v, v), (o, v, o, o), (o, v, o, v), (o, v)]]
    with pytest.raises(InputError, match="use triples_energy"):
        triples_energy_reference(*fake, np.arange(o + v, dtype=float))


def test_backend_resolution_is_what_runs():
    """auto: the fused kernel on CUDA up to TRITON_AUTO_MAX_NVIR (when triton imports), torch above it and on the CPU."""
    from torchhpc.ext.ccsdt.ops import TRITON_AUTO_MAX_NVIR, triples_backend
    from torchhpc.ext.core.dispatch import triton_available

    limit = TRITON_AUTO_MAX_NVIR
    assert triples_backend("auto", 8, "cpu") == "torch"
    assert triples_backend("auto", limit, "cuda") == ("triton" if triton_available() else "torch")
    assert triples_backend("auto", limit + 1, "cuda") == "torch"
    assert triples_backend("reference", 8, "cpu") == "reference"
    with pytest.raises(InputError, match="backend must be"):
        triples_backend("fortran", 8, "cpu")


def test_memory_budget_comes_from_the_device(monkeypatch):
    """Without --max-memory the CPU gets the suite's default and a GPU 80 % of its free memory; the pair
    blocks then take as many k as that memory holds (up to o)."""
    from torchhpc.ext.ccsdt.config import DEFAULT_MAX_MEMORY_MB
    from torchhpc.ext.ccsdt.ops import memory_budget_mb
    from torchhpc.ext.ccsdt.pairs import pair_block_triples

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (100 * 2**30, 141 * 2**30))
    assert memory_budget_mb(None, "cpu") == DEFAULT_MAX_MEMORY_MB
    assert memory_budget_mb(None, "cuda") == pytest.approx(0.8 * 100 * 1024)
    assert memory_budget_mb(123.0, "cuda") == 123.0
    per_triple = 4 * 120**3 * 8
    assert pair_block_triples(20, 120, 80 * 2**30) == 20 and pair_block_triples(40, 300, 20 * 2**30) == 24
    assert pair_block_triples(20, 120, 5 * per_triple + 1) == 5 and pair_block_triples(20, 120, 0) == 1
