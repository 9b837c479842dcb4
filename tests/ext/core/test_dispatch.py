"""Backend dispatch: auto resolves to what can run, explicit names are checked against the device."""

from __future__ import annotations

import pytest
import torch

from torchhpc.ext.core import dispatch
from torchhpc.ext.core.errors import InputError


def test_auto_on_cpu_is_numba_or_torch(monkeypatch):
    """On the CPU auto picks numba where installed and listed, else torch; never triton."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    cpu = torch.device("cpu")
    assert dispatch.resolve_backend("auto", cpu, choices=("torch", "triton")) == "torch"
    want = "numba" if dispatch.numba_available() else "torch"
    assert dispatch.resolve_backend("auto", cpu, choices=("torch", "triton", "numba")) == want
    # an op's own auto rule is honoured, but falls back to torch when it cannot run here
    assert dispatch.resolve_backend("auto", cpu, auto="triton") == "torch"


def test_explicit_backends_are_checked(monkeypatch):
    """triton without CUDA (and without the interpreter) and unknown names are one-line errors."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    cpu = torch.device("cpu")
    with pytest.raises(InputError, match="needs a CUDA device"):
        dispatch.resolve_backend("triton", cpu)
    with pytest.raises(InputError, match="must be one of auto, torch, triton; got 'cudnn'"):
        dispatch.resolve_backend("cudnn", cpu)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    if dispatch.triton_available():
        assert dispatch.resolve_backend("triton", cpu) == "triton"
