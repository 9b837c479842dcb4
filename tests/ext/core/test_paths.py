"""Inputs and outputs checked before work starts; text inputs read plain or gzipped, any line ending."""

from __future__ import annotations

import gzip
import os

import pytest

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.core.paths import check_input, check_output, load_numpy, open_text


def test_an_output_that_is_an_input_is_refused(tmp_path):
    src = tmp_path / "x.npy"
    src.write_bytes(b"data")
    os.symlink(src, tmp_path / "link.npy")
    for out in (src, tmp_path / "." / "x.npy", tmp_path / "link.npy"):
        with pytest.raises(InputError, match="is also an input"):
            check_output(out, inputs=[None, src], what="--output")
    assert src.read_bytes() == b"data"
    assert check_output(tmp_path / "y.npy", inputs=[src]) == tmp_path / "y.npy"


def test_unwritable_places_are_refused_and_nothing_is_left(tmp_path):
    with pytest.raises(InputError, match="is a folder"):
        check_output(tmp_path)
    (tmp_path / "f").write_text("")
    with pytest.raises(InputError, match="is not a folder"):
        check_output(tmp_path / "f" / "out.json")
    with pytest.raises(InputError, match="cannot write in /proc"):
        check_output("/proc/x/res.json", what="--output")
    with pytest.raises(InputError, match="already exists"):
        check_output(tmp_path / "f", overwrite=False)
    assert check_output(tmp_path / "new" / "deeper" / "out.json") == tmp_path / "new" / "deeper" / "out.json"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]  # the probe left nothing, created no folder


def test_inputs_must_be_readable_files(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        check_input(tmp_path / "missing.swf", what="the trace")
    with pytest.raises(InputError, match="is a folder"):
        check_input(tmp_path)


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
@pytest.mark.parametrize("gz", [False, True])
def test_open_text_reads_gzip_by_its_bytes_and_any_line_ending(tmp_path, eol, gz):
    text = eol.join(["; header", "1 0 10", "2 5 20", ""])
    path = tmp_path / "trace.swf"  # no .gz suffix: told by the magic bytes
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    with open_text(path) as fh:
        assert fh.read().split("\n") == ["; header", "1 0 10", "2 5 20", ""]


def test_load_numpy_says_what_a_file_is_not(tmp_path, monkeypatch):
    """A text file or a bare pickle under a .npy name is not NumPy's format (np.load would call it pickled
    data); an array of Python objects is named as such; a relative missing path says where it was read."""
    import numpy as np

    text, pickled, objects = tmp_path / "t.npy", tmp_path / "p.npy", tmp_path / "o.npy"
    text.write_text("1 2\n3 4\n")
    pickled.write_bytes(b"\x80\x04\x95" + bytes(20))
    np.save(objects, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    for path in (text, pickled):
        with pytest.raises(InputError, match="does not start with NumPy's header"):
            load_numpy(path, what="--features")
    with pytest.raises(InputError, match="holds Python objects"):
        load_numpy(objects)
    np.save(tmp_path / "ok.npy", np.arange(3))
    np.savez(tmp_path / "ok.npz", a=np.arange(2))
    np.savez(tmp_path / "none.npz")  # an archive of no arrays is NumPy's too
    with load_numpy(tmp_path / "none.npz") as z:
        assert z.files == []
    assert load_numpy(tmp_path / "ok.npy").tolist() == [0, 1, 2]
    with load_numpy(tmp_path / "ok.npz") as z:
        assert z["a"].tolist() == [0, 1]
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match=r"--x nope.npy: no such file \(a relative path is read from the current "):
        load_numpy("nope.npy", what="--x")
