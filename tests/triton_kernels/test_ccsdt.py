"""The fused FP64 (T) Triton kernel (interpreted on the CPU) against the dense reference and the torch path."""

from __future__ import annotations

import pytest

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


@pytest.mark.gpu
def test_kernel_on_cuda_matches_the_cpu_torch_path():
    """On a GPU, the compiled kernel and the torch path on CUDA agree with the CPU torch path (larger sizes)."""
    args = random_inputs(6, 37, seed=9)
    cpu = triples_energy(*args, backend="torch")
    for backend in ("triton", "torch"):
        gpu = triples_energy(*[a.cuda() for a in args], backend=backend)
        assert abs(gpu - cpu) < 1e-11 * max(1.0, abs(cpu)), backend
