"""The planes codec's compiled CPU encoder writes the torch path's bytes (the torch path is the reference),
and the compressor's default on the CPU is that encoder."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.foresight.ops import encode_backend, interp_residuals, lorenzo_encode

pytest.importorskip("numba")

SHAPES = [(1,), (7,), (1, 1, 1), (3, 1, 5), (1, 6, 37), (5, 6, 37), (16, 16, 16), (17, 9, 33), (2, 3, 4, 5)]


def _field(shape, dtype, seed=0) -> torch.Tensor:
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype).cumsum(-1)
    if x.numel() > 3:  # values only the outlier list can hold: NaN, inf, one too large for the codes
        x.view(-1)[1], x.view(-1)[2], x.view(-1)[-1] = float("nan"), float("-inf"), 1e30
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_compiled_encoder_writes_the_torch_paths_bytes(shape, dtype):
    """Every section (outlier index and values, the planes header, each zstd'd byte plane) is the torch path's,
    for each predictor, at a loose and a usual bound, one below float32's spacing (the decoded value, rounded to
    float32, is off the bound: outliers only the cast to the input's dtype finds) and one so tight that most
    codes pass 2^40."""
    x = _field(shape, dtype)
    for predictor in ("auto", "lorenzo", "interp", "cubic"):
        for eb in (0.5, 1e-3, 1e-7, 1e-13):
            want = lorenzo_encode(x, eb, backend="torch", level=3, predictor=predictor)
            got = lorenzo_encode(x, eb, backend="numba", level=3, predictor=predictor)
            assert got == want, (predictor, eb)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_decoder_gives_the_torch_paths_values(monkeypatch, dtype):
    """Decoding on the CPU (compiled: planes, the predictor's reconstruction, 2 e q, in three passes) gives the
    torch path's tensor element for element (NaN where it has NaN), for each predictor and shape; the torch
    path is what runs without numba."""
    from torchhpc.ext.foresight import ops

    lorenzo_encode(torch.zeros(3), 1e-3, backend="numba")  # the kernels loaded: small fields decode compiled too
    assert ops.compiled_pays(1)
    for shape in SHAPES:
        x = _field(shape, dtype, seed=2)
        for predictor in ("lorenzo", "interp", "cubic"):
            for eb in (0.5, 1e-3, 1e-7):
                used, sections = lorenzo_encode(x, eb, backend="numba", level=3, predictor=predictor)
                got = ops.lorenzo_decode(sections, tuple(shape), dtype, eb, used)
                with monkeypatch.context() as m:
                    m.setattr(ops, "numba_available", lambda: False)
                    want = ops.lorenzo_decode(sections, tuple(shape), dtype, eb, used)
                assert got.dtype == want.dtype and got.shape == want.shape
                assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.nan_to_num(), want.nan_to_num())


def test_interpolation_residuals_equal_the_torch_order_on_a_larger_odd_volume():
    """The multilevel residuals (linear and cubic) of a 33 x 20 x 65 volume of codes, value for value, and
    a field whose odd entries along every axis lack a right neighbour at some level."""
    from torchhpc.ext.foresight import planes_kernels as K
    from torchhpc.ext.foresight.ops import _interp_plan

    for shape in [(33, 20, 65), (2, 2, 2), (1, 1, 9)]:
        q = torch.randint(-1000, 1000, shape, generator=torch.Generator().manual_seed(1))
        coarse, steps = _interp_plan(shape)
        for cubic in (False, True):
            got = K.interp_residuals(q.numpy(), coarse, steps, cubic)
            assert np.array_equal(got, interp_residuals(q, cubic=cubic).numpy()), (shape, cubic)


def test_byte_planes_are_as_many_as_the_largest_code_needs():
    """Zigzag codes split into little-endian planes: 0 and -1 need one plane, -129 two (code 257), the most
    negative int64 eight."""
    from torchhpc.ext.foresight import planes_kernels as K

    assert K.byte_planes(np.array([0, -1, 1], np.int64)).tolist() == [[0, 1, 2]]
    assert K.byte_planes(np.array([-129, 3], np.int64)).tolist() == [[1, 6], [1, 0]]
    assert K.byte_planes(np.array([np.iinfo(np.int64).min], np.int64)).shape == (8, 1)
    assert K.byte_planes(np.zeros(0, np.int64)).shape == (1, 0)


def test_planes_give_back_every_residual_whatever_their_number():
    """The decoder's planes-to-residuals step (one pass for one to three planes, a pass per plane above) returns
    the residuals the planes were made from, for residuals that need each count of planes from one to seven,
    of both signs, with the extremes of each count, on a length that is not a multiple of a vector."""
    from torchhpc.ext.foresight import planes_kernels as K

    rng = np.random.default_rng(5)
    for k in range(1, 8):
        top = (1 << (8 * k - 1)) - 1  # the largest magnitude whose zigzag code fits k bytes
        d = rng.integers(-top - 1, top + 1, 1001, dtype=np.int64)
        d[:4] = [top, -top - 1, 0, -1]
        planes = K.byte_planes(d)
        assert planes.shape == (k, d.size)
        back = np.empty_like(d)
        K._unplanes(planes, back)
        assert np.array_equal(back, d), k


def test_the_cpu_default_is_the_compiled_encoder_and_its_limits_are_one_line(monkeypatch):
    """``auto`` encodes a float32/float64 CPU field with numba where that pays: a large field, or any once the
    kernels are loaded in the process (loading costs ~0.7 s once); a half-precision field falls back to torch
    under ``auto`` and is one line under ``numba``."""
    from torchhpc.ext.foresight import planes_kernels as K
    from torchhpc.ext.foresight.ops import COMPILED_MIN_VALUES

    monkeypatch.setattr(K, "_LOADED", [])
    assert encode_backend("auto", torch.zeros(COMPILED_MIN_VALUES)) == "numba"
    assert encode_backend("auto", torch.zeros(3)) == "torch"
    assert encode_backend("numba", torch.zeros(3)) == "numba"
    lorenzo_encode(torch.zeros(3), 1e-3, backend="numba")
    assert encode_backend("auto", torch.zeros(3)) == "numba"
    assert encode_backend("auto", torch.zeros(3, dtype=torch.float64)) == "numba"
    assert encode_backend("auto", torch.zeros(3, dtype=torch.float16)) == "torch"
    with pytest.raises(InputError, match="backend 'numba' encodes float32 and float64 fields; this one is "
                                         "torch.float16"):
        encode_backend("numba", torch.zeros(3, dtype=torch.float16))
    with pytest.raises(InputError, match="backend must be one of auto, torch, triton, numba"):
        encode_backend("fast", torch.zeros(3))


def test_a_compressed_field_decodes_within_its_bound_through_the_compressor():
    """The compressor ``ours`` (codec planes, its CPU default) on a smooth 24 x 30 x 17 field: every value
    within the bound, NaN and inf back exactly."""
    from torchhpc.ext.foresight.compressors import get_compressor

    x = _field((24, 30, 17), torch.float32, seed=3)
    c = get_compressor("ours").compress(x, mode="abs", bound=1e-2)
    y = get_compressor("ours").decompress(c)
    finite = torch.isfinite(x)
    assert (y[finite] - x[finite]).abs().max() <= 1e-2
    assert torch.equal(torch.isnan(y), torch.isnan(x)) and torch.equal(y[torch.isinf(x)], x[torch.isinf(x)])


def test_a_bound_that_is_not_positive_and_finite_is_one_line_on_both_backends():
    """0, negative, NaN, inf, a string or a bool: InputError from either backend (the compiled one wrote a
    payload of outliers for a negative bound, the torch one raised ValueError); a numpy or torch scalar is a
    bound like its float."""
    x = _field((4, 5, 6), torch.float32)
    for backend in ("torch", "numba"):
        for eb in (0, -1e-3, float("nan"), float("inf"), "1e-3", True):
            with pytest.raises(InputError, match="the absolute error bound must be a positive finite number"):
                lorenzo_encode(x, eb, backend=backend)
        assert lorenzo_encode(x, np.float64(1e-3), backend=backend) == lorenzo_encode(x, 1e-3, backend=backend)
        assert lorenzo_encode(x, torch.tensor(0.5, dtype=torch.float64), backend=backend) == \
            lorenzo_encode(x, 0.5, backend=backend)
