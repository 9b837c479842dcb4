"""The fused FP64 (T) Triton kernel (interpreted on the CPU) against the dense reference and the torch path."""

from __future__ import annotations

import pytest
import torch

from torchhpc.ext.ccsdt import triples_energy, triples_energy_reference
from torchhpc.ext.ccsdt.ops import occupied_triples
from torchhpc.ext.ccsdt.reference import random_inputs

# (nocc, nvir, tile): several virtual tiles with a ragged last one (all three tile weights 1, 1/2, 1/6),
# and three occupied orbitals in one tile (a triple with i > j > k, weight 2)
CASES = [(2, 7, 4), (3, 4, 4)]


@pytest.mark.parametrize("nocc,nvir,tile", CASES)
def test_kernel_matches_reference_and_torch_path(kernel_device, nocc, nvir, tile):
    """Kernel, blocked torch path and einsum reference agree to 1e-12 on inputs with the RHF symmetries."""
    args = random_inputs(nocc, nvir, seed=100 * nocc + nvir, symmetric=True)
    ref = triples_energy_reference(*args)
    ours_torch = triples_energy(*args, backend="torch")
    ours_triton = triples_energy(*[a.to(kernel_device) for a in args], backend="triton", tile=tile)
    assert abs(ours_triton - ref) < 1e-12 * max(1.0, abs(ref)), (ours_triton, ref)
    assert abs(ours_triton - ours_torch) < 1e-12 * max(1.0, abs(ref))
    assert abs(ref) > 1e-5  # a non-trivial energy, so agreement means something


def test_kernel_partials_sum_to_the_energy_and_tiles_cover_every_point(kernel_device):
    """Each program stores one weighted partial; the tile weights count every ordered tile triple once."""
    from torchhpc.triton_kernels.ccsdt import triples_energy_partials, virtual_tile_triples

    nocc, nvir, tile = 2, 7, 4
    args = [a.to(kernel_device) for a in random_inputs(nocc, nvir, seed=5, symmetric=False)]
    idx, w = occupied_triples(nocc, device=kernel_device)
    partial = triples_energy_partials(*args, idx, w, tile=tile)
    vt, vw = virtual_tile_triples(nvir, tile)
    assert partial.shape == (idx.shape[0] * vt.shape[0],)
    ntiles = -(-nvir // tile)
    assert float(6 * vw.sum()) == pytest.approx(ntiles**3)  # six orderings x weight = every (A, B, C) once
    ref = triples_energy_reference(*[a.cpu() for a in args])
    assert abs(float(partial.sum()) - ref) < 1e-12 * max(1.0, abs(ref))


@pytest.mark.parametrize("nocc,nvir,tile,block", [(2, 1, 1, None), (3, 5, 4, 1), (4, 7, 8, 2)])
def test_fused_epilogue_of_the_pair_blocks_matches_torch_and_reference(kernel_device, nocc, nvir, tile, block):
    """The GPU's torch path (pair-blocked GEMMs) with its fused Triton epilogue equals the same GEMMs with the
    torch epilogue and the dense formula: one virtual of one tile, ragged tiles, blocks split or whole."""
    from torchhpc.ext.ccsdt.pairs import triples_energy_pairs

    args = [a.to(kernel_device) for a in random_inputs(nocc, nvir, seed=9 * nocc + nvir, symmetric=nocc != 3)]
    ref = triples_energy_reference(*[a.cpu() for a in args])
    fused = float(triples_energy_pairs(*args, epilogue="triton", tile=tile, block_triples=block))
    unfused = float(triples_energy_pairs(*[a.cpu() for a in args], epilogue="torch", block_triples=block))
    assert abs(fused - ref) < 1e-12 * max(1.0, abs(ref)), (fused, ref)
    assert abs(fused - unfused) < 1e-12 * max(1.0, abs(ref))


# (nocc, nvir, tile): three tiles (tile triples with three distinct tiles, A = B > C, A > B = C, A = B = C, a
# ragged last tile), one ragged tile pair, one tile wider than the virtual space, one virtual of one tile
MMA_CASES = [(3, 5, 2), (2, 7, 4), (4, 3, 16), (2, 1, 1)]


@pytest.mark.parametrize("nocc,nvir,tile", MMA_CASES)
def test_mma_kernel_matches_the_cuda_core_kernel_program_by_program(kernel_device, nocc, nvir, tile):
    """The fused kernel on FP64 MMA stores, for every (tile triple, occupied triple), the partial energy the
    CUDA-core kernel stores for it (to 1e-12 of the energy: the two sum in different orders), so a wrong
    block, permutation or reused ordering cannot cancel out in the total; the total equals the reference."""
    from torchhpc.ext.ccsdt.blocks import InCoreOperands
    from torchhpc.triton_kernels.ccsdt import triples_energy_mma_partials, triples_energy_partials

    args = [a.to(kernel_device) for a in random_inputs(nocc, nvir, seed=7 * nocc + nvir, symmetric=nocc != 3)]
    t1, t2, ovvv, ovoo, ovov, fock_ov, mo_energy = args
    idx, w = occupied_triples(nocc, device=kernel_device)
    X = InCoreOperands(t1, t2, ovvv, ovoo, ovov, fock_ov)
    mma = triples_energy_mma_partials(X.TT, X.AT, X.BT, t1, t2, ovov, fock_ov, mo_energy, idx, w, tile=tile)
    fma = triples_energy_partials(*args, idx, w, tile=tile)
    ref = triples_energy_reference(*[a.cpu() for a in args])
    tol = 1e-12 * max(abs(ref), 1e-2)  # the energies here are 1e-3 to 1e-1 Eh (exactly 0 for one virtual)
    assert mma.shape == fma.shape
    assert (mma.view(-1, idx.shape[0]).T.reshape(-1) - fma).abs().max() <= tol  # tile-major order
    assert abs(float(mma.sum()) - ref) <= tol, (float(mma.sum()), ref)
    if nvir > 1:
        assert abs(ref) > 1e-6 and (fma.abs() > 1e-9 * abs(ref)).sum() > 1  # partials that mean something


@pytest.mark.parametrize("kernel", ["mma", "cuda-core"])
def test_fused_kernels_compute_each_block_once(monkeypatch, kernel):
    """In both fused kernels tile triples with equal tiles get their odd orderings by permuting the even ones,
    so a program computes 6, 3 or 3 blocks of W (three distinct, two equal, all equal tiles): ntile^3 + 2 ntile
    over all tile triples of an occupied triple, where all six orderings would take 6 x (the tile triples)."""
    import torch

    from torchhpc.ext.ccsdt.blocks import InCoreOperands
    from torchhpc.triton_kernels import ccsdt as K

    if torch.cuda.is_available():
        pytest.skip("counts the interpreted kernel's block computations")
    calls = []
    name = "_w_block" if kernel == "mma" else "_connected_at"  # W on one block / at one ordering's points
    block = getattr(K, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return block(*args, **kwargs)

    monkeypatch.setattr(K, name, counted)
    nocc, nvir, tile = 2, 5, 2  # three tiles: tile triples of all kinds
    args = random_inputs(nocc, nvir, seed=3)
    idx, w = occupied_triples(nocc)
    X = InCoreOperands(*args[:6])
    if kernel == "mma":
        K.triples_energy_mma_partials(X.TT, X.AT, X.BT, args[0], args[1], args[4], args[5], args[6], idx, w, tile=tile)
    else:
        K.triples_energy_partials(*args, idx, w, tile=tile)
    nt = 3
    assert len(calls) == idx.shape[0] * (nt**3 + 2 * nt)  # 33 blocks per occupied triple, not 6 x 10


def test_launchers_split_grids_past_the_launch_limit(kernel_device, monkeypatch):
    """Past CUDA's 2^31 - 1 programs (o = 170, v = 200 at tile 8 on an H200) both fused launchers split the
    occupied triples into launches that fit; the partials are the same values in the same places."""
    from torchhpc.ext.ccsdt.blocks import InCoreOperands
    from torchhpc.ext.core.hostsync import count_host_work
    from torchhpc.triton_kernels import ccsdt as K

    nocc, nvir, tile = 2, 3, 2  # 2 occupied triples x 4 tile triples
    args = [a.to(kernel_device) for a in random_inputs(nocc, nvir, seed=11)]
    t1, t2, ovvv, ovoo, ovov, fock_ov, mo_energy = args
    idx, w = occupied_triples(nocc, device=kernel_device)
    X = InCoreOperands(t1, t2, ovvv, ovoo, ovov, fock_ov)

    def both():
        return (K.triples_energy_mma_partials(X.TT, X.AT, X.BT, t1, t2, ovov, fock_ov, mo_energy, idx, w, tile=tile),
                K.triples_energy_partials(*args, idx, w, tile=tile))

    whole = both()
    monkeypatch.setattr(K, "MAX_PROGRAMS", 5)  # one triple (4 programs) a launch: 2 launches each
    with count_host_work() as work:
        split = both()
    assert work.launch_ops["triton:_triples_mma_kernel"] == 2 and work.launch_ops["triton:_triples_energy_kernel"] == 2
    for a, b in zip(whole, split, strict=True):
        assert torch.equal(a, b)


def test_mma_backend_through_the_dispatch(kernel_device):
    """``backend="triton-mma"`` builds its operands and equals the reference; a max_memory below its operands is
    one clear error that names the backend that runs out of core."""
    from torchhpc.ext.core.errors import InputError

    args = [a.to(kernel_device) for a in random_inputs(3, 6, seed=4, symmetric=True)]
    ref = triples_energy_reference(*[a.cpu() for a in args])
    assert abs(triples_energy(*args, backend="triton-mma") - ref) < 1e-12 * abs(ref)
    with pytest.raises(InputError, match="torch backend runs out of core"):
        triples_energy(*args, backend="triton-mma", max_memory=0.01)
    assert triples_energy(*[a.to(kernel_device) for a in random_inputs(1, 4, seed=1)], backend="triton-mma") == 0.0
    # it holds only the GEMM operands it reads: room for those, not for the torch path's, is enough
    from torchhpc.ext.ccsdt.blocks import InCoreOperands
    from torchhpc.ext.ccsdt.ops import incore_bytes

    gemm, full = incore_bytes(3, 6, gemm_only=True), incore_bytes(3, 6)
    assert gemm < full and InCoreOperands(*args[:6], gemm_only=True).nbytes() == gemm
    assert InCoreOperands(*args[:6]).nbytes() == full
    assert abs(triples_energy(*args, backend="triton-mma", max_memory=(gemm + 1) / 2**20) - ref) < 1e-12 * abs(ref)


@pytest.mark.parametrize("block", [1, 3])
def test_fused_epilogue_of_the_sliced_path_matches_torch_and_reference(kernel_device, block):
    """Out of core (the integral slices streamed through a cache of 3, what every rank of a distributed run
    does too), the fused Triton epilogue reads each block's layouts as strided views of its (nb, 3, v, v, v)
    buffer: the same E(T) as the torch epilogue and the dense formula, one launch a block (blocks of one
    triple, and of up to three where the cache's three slices allow: two here)."""
    from torchhpc.ext.ccsdt.blocks import check_inputs
    from torchhpc.ext.ccsdt.slices import triples_energy_out_of_core
    from torchhpc.ext.core.hostsync import count_host_work

    args = check_inputs(*random_inputs(6, 7, seed=2), device=kernel_device)
    ref = triples_energy_reference(*[a.cpu() for a in args])
    with count_host_work() as work:
        fused = triples_energy_out_of_core(*args, max_memory=0.06, block_triples=block, epilogue="triton")
    plain = triples_energy_out_of_core(*args, max_memory=0.06, block_triples=block, epilogue="torch")
    assert fused.stats.capacity == 3 and fused.stats.blocks > 50 // block // 2
    assert work.launch_ops["triton:_epilogue_kernel"] == fused.stats.blocks
    assert abs(fused.energy - ref) < 1e-12 * abs(ref) and abs(fused.energy - plain.energy) < 1e-12 * abs(ref)


def test_epilogue_refuses_layouts_it_cannot_address(kernel_device):
    """Layouts whose (v, v, v) blocks are not contiguous, or whose triples are not one stride apart, are refused
    before launch (the kernel addresses a triple's layout as base + t * stride)."""
    from torchhpc.triton_kernels.ccsdt import epilogue_partials, virtual_tile_triples

    o, v = 3, 4
    t1, t2, _, _, ovov, fock_ov, e = [a.to(kernel_device) for a in random_inputs(o, v, seed=1)]
    idx, w = occupied_triples(o, device=kernel_device)
    vt = virtual_tile_triples(v, 4, kernel_device)
    L = torch.randn(idx.shape[0], 3, v, v, v, dtype=torch.float64, device=kernel_device)
    rest = (t1, t2, ovov, fock_ov, e[:o], e[o:], idx, w, *vt)
    ok = epilogue_partials(L[:, 0], L[:, 1], L[:, 2], *rest, tile=4)
    same = epilogue_partials(*(L[:, t].contiguous() for t in range(3)), *rest, tile=4)
    assert torch.allclose(ok, same, rtol=0, atol=0)
    with pytest.raises(ValueError, match="contiguous"):
        epilogue_partials(L[:, 0].transpose(2, 3), L[:, 1], L[:, 2], *rest, tile=4)
    with pytest.raises(ValueError, match="one stride apart"):
        epilogue_partials(L[:, 0], L[:, 1].contiguous(), L[:, 2], *rest, tile=4)


def test_single_occupied_orbital_needs_no_launch(kernel_device):
    """With one occupied orbital every triple is i = j = k and E(T) is exactly zero."""
    args = [a.to(kernel_device) for a in random_inputs(1, 5, seed=1)]
    assert triples_energy(*args, backend="triton") == 0.0


def test_launcher_rejects_what_the_kernel_cannot_do(kernel_device):
    """float32 tensors and a tile that is not a power of two are refused before launch."""
    from torchhpc.triton_kernels.ccsdt import triples_energy_partials

    args = [a.to(kernel_device) for a in random_inputs(2, 3, seed=2)]
    idx, w = occupied_triples(2, device=kernel_device)
    with pytest.raises(ValueError, match="power of two"):
        triples_energy_partials(*args, idx, w, tile=3)
    with pytest.raises(ValueError, match="float64"):
        triples_energy_partials(*args[:2], args[2].float(), *args[3:], idx, w)
    from torchhpc.ext.ccsdt.blocks import InCoreOperands
    from torchhpc.triton_kernels.ccsdt import triples_energy_mma_partials

    t1, t2, _, _, ovov, fock_ov, e = args
    X = InCoreOperands(*args[:6])
    with pytest.raises(ValueError, match="kb must be"):
        triples_energy_mma_partials(X.TT, X.AT, X.BT, t1, t2, ovov, fock_ov, e, idx, w, kb=8)
    with pytest.raises(ValueError, match="at must be a contiguous float64"):
        triples_energy_mma_partials(X.TT, X.AT.transpose(1, 2), X.BT, t1, t2, ovov, fock_ov, e, idx, w)


@pytest.mark.gpu
def test_kernel_on_cuda_matches_the_cpu_torch_path():
    """On a GPU, the compiled kernels and the torch path on CUDA agree with the CPU torch path (larger sizes,
    a ragged last tile); the MMA kernel at both tile sizes."""
    args = random_inputs(6, 37, seed=9)
    cpu = triples_energy(*args, backend="torch")
    for backend, tile in (("triton", 8), ("torch", 8), ("triton-mma", 8), ("triton-mma", 16)):
        gpu = triples_energy(*[a.cuda() for a in args], backend=backend, tile=tile)
        assert abs(gpu - cpu) < 1e-11 * max(1.0, abs(cpu)), (backend, tile)
