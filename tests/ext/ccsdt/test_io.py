"""Saving and loading the (T) inputs as an .npz, and the loader's errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from torchhpc.ext.ccsdt import TriplesInputs, load_inputs, save_inputs, triples_energy
from torchhpc.ext.ccsdt.ops import INPUT_NAMES
from torchhpc.ext.ccsdt.reference import random_inputs
from torchhpc.ext.core.errors import InputError


def make_inputs(seed: int = 0, **kw) -> TriplesInputs:
    arrays = {n: a.numpy() for n, a in zip(INPUT_NAMES, random_inputs(3, 5, seed=seed), strict=True)}
    return TriplesInputs(**arrays, **kw)


def test_round_trip_keeps_every_array_energy_and_field(tmp_path):
    """save_inputs then load_inputs gives back identical arrays, energies, metadata and E(T)."""
    inp = make_inputs(e_hf=-76.02, e_ccsd=-76.24, meta={"basis": "cc-pvdz", "frozen": 1, "atom": "O 0 0 0"})
    path = save_inputs(tmp_path / "sub" / "w.npz", inp)
    back = load_inputs(path)
    for name in INPUT_NAMES:
        np.testing.assert_array_equal(getattr(back, name), getattr(inp, name))
    assert (back.e_hf, back.e_ccsd, back.meta) == (inp.e_hf, inp.e_ccsd, inp.meta)
    assert back.triples_energy() == inp.triples_energy() == triples_energy(*inp.arrays())
    assert not list((tmp_path / "sub").glob("*.tmp"))  # the temporary file was renamed away


def test_unknown_energies_stay_nan(tmp_path):
    """Inputs without HF/CCSD energies round-trip as NaN, not as a made-up number."""
    back = load_inputs(save_inputs(tmp_path / "x.npz", make_inputs()))
    assert math.isnan(back.e_hf) and math.isnan(back.e_ccsd)


def test_loader_errors_name_the_file(tmp_path):
    """A missing file, a non-npz, a plain .npy, another npz format, a missing array and bad shapes are one-line
    InputErrors."""
    with pytest.raises(InputError, match="inputs file not found"):
        load_inputs(tmp_path / "nope.npz")
    text = tmp_path / "text.npz"
    text.write_text("not a zip file\n")
    with pytest.raises(InputError, match=r"text\.npz: cannot read"):
        load_inputs(text)
    plain = tmp_path / "rho.npy"
    np.save(plain, np.zeros(3))
    with pytest.raises(InputError, match=r"rho\.npy: one NumPy array, not a ccsdt \.npz inputs file"):
        load_inputs(plain)
    other = tmp_path / "other.npz"
    np.savez(other, a=np.zeros(3))
    with pytest.raises(InputError, match=r"other\.npz: not a ccsdt inputs file"):
        load_inputs(other)
    good = save_inputs(tmp_path / "good.npz", make_inputs())
    with np.load(good) as data:
        payload = {k: data[k] for k in data.files}
    missing = tmp_path / "missing.npz"
    np.savez(missing, **{k: v for k, v in payload.items() if k != "ovoo"})
    with pytest.raises(InputError, match=r"missing\.npz: missing array 'ovoo'"):
        load_inputs(missing)
    bad = tmp_path / "bad.npz"
    np.savez(bad, **{**payload, "ovov": payload["ovov"][:, :, :, :2]})
    with pytest.raises(InputError, match=r"bad\.npz: ovov: expected shape"):
        load_inputs(bad)
