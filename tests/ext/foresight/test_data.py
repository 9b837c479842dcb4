"""Loaders against the files' documented contents, and the synthetic fields against their construction."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.foresight.data import genericio_header, load_fields, read_genericio


def test_nyx_hdf5_sample(shared_data):
    """The NYX snapshot: six float32 32^3 fields with the ranges its README lists."""
    f = load_fields(shared_data / "foresight" / "testing" / "z255_32.h5")
    assert set(f) == {"baryon_density", "dark_matter_density", "temperature", "velocity_x", "velocity_y",
                      "velocity_z"}
    assert all(v.shape == (32, 32, 32) and v.dtype == torch.float32 for v in f.values())
    assert float(f["baryon_density"].min()) == pytest.approx(0.073, abs=5e-4)
    assert float(f["baryon_density"].max()) == pytest.approx(385, rel=2e-3)
    assert float(f["temperature"].max()) == pytest.approx(1.83e5, rel=3e-3)
    with pytest.raises(InputError, match="no field 'pressure'"):
        load_fields(shared_data / "foresight" / "testing" / "z255_32.h5", fields=["pressure"])


def test_genericio_reader_is_self_consistent(shared_data):
    """The HACC file: N particles with ids a permutation of 0..N-1 and positions inside the header's box."""
    path = shared_data / "foresight" / "testing" / "m000.full.mpicosmo.50"
    head = genericio_header(path)
    d = read_genericio(path)
    assert set(d) >= {"x", "y", "z", "vx", "vy", "vz", "id"}
    n = head["n_elems"]
    assert d["x"].numel() == n == 32768 and head["n_ranks"] == 32
    assert torch.equal(torch.sort(d["id"]).values, torch.arange(n))
    for c in "xyz":
        assert 0 <= float(d[c].min()) and float(d[c].max()) < head["phys_scale"][0] == 256.0
    with pytest.raises(InputError, match="no variable 'mass'"):
        read_genericio(path, ["mass"])


def test_raw_npy_npz_and_bad_files(tmp_path):
    """Raw volumes need matching dims; .npy/.npz round-trip; a non-GenericIO file is named as such."""
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    a.tofile(tmp_path / "v.raw")
    assert np.array_equal(load_fields(tmp_path / "v.raw", dims=[3, 4, 5])["v"].numpy(), a)
    with pytest.raises(InputError, match="do not match dims"):
        load_fields(tmp_path / "v.raw", dims=[3, 4, 6])
    with pytest.raises(InputError, match="needs input.dims"):
        load_fields(tmp_path / "v.raw")
    np.save(tmp_path / "a.npy", a)
    np.savez(tmp_path / "b.npz", rho=a, u=a * 2)
    assert np.array_equal(load_fields(tmp_path / "a.npy")["a"].numpy(), a)
    with pytest.raises(InputError, match="dims \\[4, 4\\] are for raw volumes; a numpy file"):
        load_fields(tmp_path / "a.npy", dims=[4, 4])
    assert set(load_fields(tmp_path / "b.npz")) == {"rho", "u"}
    with pytest.raises(InputError, match="no field 'p'"):
        load_fields(tmp_path / "b.npz", fields=["p"])
    with pytest.raises(InputError, match="not a GenericIO file"):
        read_genericio(tmp_path / "v.raw")


def test_a_genericio_file_with_a_damaged_header_is_one_error(shared_data, tmp_path):
    """The real HACC file with its variables' table moved past the end, or a variable's element size
    changed to 3 bytes: one InputError naming the file (was a struct.error or a dtype error)."""
    import struct

    blob = bytearray((shared_data / "foresight" / "testing" / "m000.full.mpicosmo.50").read_bytes())
    g = list(struct.unpack_from("<12Q6d2Q", blob, 8))
    far = bytearray(blob)
    struct.pack_into("<Q", far, 8 + 7 * 8, len(blob) + 10**6)  # vars_start past the end
    size = bytearray(blob)
    struct.pack_into("<Q", size, g[7] + 256 + 8, 3)  # the first variable's element size
    for name, bad in (("far", far), ("size", size)):
        path = tmp_path / f"{name}.gio"
        path.write_bytes(bytes(bad))
        with pytest.raises(InputError, match=f"{name}.gio: damaged GenericIO header"):
            read_genericio(path)
