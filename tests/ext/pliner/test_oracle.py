"""The oracle: TF32 rounding, divergence metrics, configuration presets."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchhpc.ext.core.errors import ConfigError, InputError
from torchhpc.ext.pliner import TF32Emulation, divergence, parse_precision, round_to_tf32


def _tf32_by_frexp(x: np.ndarray) -> np.ndarray:
    """Independent TF32 rounding: 11 significant bits via frexp and round-half-even in float64
    (subnormals keep float32's fixed quantum, so their step is 2^-136)."""
    m, e = np.frexp(x.astype(np.float64))
    e = np.maximum(e, -125)  # float32's smallest normal exponent (frexp convention: m in [0.5, 1))
    return np.ldexp(np.round(np.ldexp(x.astype(np.float64), 11 - e)), e - 11)


def test_round_to_tf32_matches_frexp_rounding():
    """Bit-twiddled TF32 rounding equals rounding the significand to 11 bits (ties to even) in float64."""
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(5000, generator=g) * 10.0 ** torch.randint(-20, 20, (5000,), generator=g),
                   torch.tensor([1.0 + 2**-11, 1.0 + 3 * 2**-11, -2.5, 0.0, 1e-40])])  # ties and a subnormal
    got = round_to_tf32(x).double().numpy()
    np.testing.assert_array_equal(got, _tf32_by_frexp(x.numpy()))


def test_tf32_emulation_rounds_matmul_operands_only():
    """Under TF32Emulation a float32 mm equals the float64 product of TF32-rounded operands; float64 is untouched."""
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(7, 33, generator=g), torch.randn(33, 5, generator=g)
    with TF32Emulation():
        got = a @ b
        got64 = a.double() @ b.double()
    want = round_to_tf32(a).double() @ round_to_tf32(b).double()
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got64, a.double() @ b.double(), rtol=0, atol=0)
    assert (got.double() - a.double() @ b.double()).abs().max() > 1e-4  # the rounding is really there


def test_divergence_metrics_against_numpy():
    """rel_l2, max_abs and max_rel agree with numpy on two outputs together; a shape mismatch is an InputError."""
    g = torch.Generator().manual_seed(2)
    r = (torch.randn(4, 3, generator=g), torch.randn(5, generator=g))
    o = tuple(t + 1e-3 * torch.randn(t.shape, generator=g) for t in r)
    a = np.concatenate([t.numpy().ravel() for t in r]).astype(np.float64)
    b = np.concatenate([t.numpy().ravel() for t in o]).astype(np.float64)
    assert divergence(r, o) == pytest.approx(np.linalg.norm(b - a) / np.linalg.norm(a), rel=1e-12)
    assert divergence(r, o, "max_abs") == pytest.approx(np.abs(b - a).max(), rel=1e-12)
    assert divergence(r, o, "max_rel") == pytest.approx((np.abs(b - a) / np.abs(a)).max(), rel=1e-12)
    assert divergence(r, (o[0], torch.full((5,), float("nan")))) == float("inf")
    with pytest.raises(InputError, match="shape"):
        divergence(r, (o[0], o[1][:4]))


def test_presets_combine_and_reject_unknown():
    """Presets join with +; an unknown one is a ConfigError listing the valid names."""
    p = parse_precision("autocast-bf16+compile")
    assert (p.autocast, p.backend, p.name) == ("bfloat16", "compile", "autocast-bf16+compile")
    assert parse_precision("compile:aot_eager").compile_backend == "aot_eager"
    with pytest.raises(ConfigError, match="valid: fp32"):
        parse_precision("fp8")
    with pytest.raises(ConfigError, match="tf32"):
        parse_precision("tf32+compile")


@pytest.mark.parametrize("user", [None, "medium"])
def test_a_cuda_configuration_leaves_the_users_matmul_precision_as_it_was(user):
    """A CUDA configuration sets TF32 (or full float32) for its run and puts back what the user had: their
    ``set_float32_matmul_precision("medium")`` reads back as "medium" (with torch's older allow_tf32 flag written
    over it, reading it back raised a RuntimeError), and cuDNN's TF32 flag too.  No GPU is needed: these are
    process-wide settings."""
    from torchhpc.ext.pliner.config import Precision
    from torchhpc.ext.pliner.oracle import precision_context

    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    try:
        if user:
            torch.set_float32_matmul_precision(user)
        mine = torch.get_float32_matmul_precision()
        for matmul, inside in (("tf32", "high"), ("ieee", "highest")):
            with precision_context(Precision(device="cuda", matmul=matmul)):
                assert torch.get_float32_matmul_precision() == inside
                assert torch.backends.cudnn.allow_tf32 == (matmul == "tf32")
            assert torch.get_float32_matmul_precision() == mine
            assert torch.backends.cudnn.allow_tf32 == before[1]
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cudnn.allow_tf32 = before[1]
