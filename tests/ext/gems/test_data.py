"""Data sources: synthetic slices are deterministic and label-consistent; an image folder loads and cycles."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.gems.data import ImageFolder, SyntheticImages


def test_synthetic_slices_are_reproducible_and_labels_match_without_images():
    """The same (step, index) gives the same slice; asking for labels only gives the same labels."""
    src = SyntheticImages((3, 9, 7), 4, seed=3)
    x1, y1 = src.slice(5, 2, 6)
    x2, y2 = src.slice(5, 2, 6)
    none, y3 = src.slice(5, 2, 6, images=False)
    assert x1.shape == (6, 3, 9, 7) and y1.shape == (6,) and none is None
    assert torch.equal(x1, x2) and torch.equal(y1, y2) and torch.equal(y1, y3)
    assert not torch.equal(src.slice(5, 3, 6)[0], x1)


def test_image_folder(tmp_path):
    """root/<class>/<image> loads resized, normalised, labelled by folder, cycling over the files."""
    rng = np.random.default_rng(0)
    for c in ("cat", "dog"):
        (tmp_path / c).mkdir()
        for i in range(3):
            Image.fromarray(rng.integers(0, 255, (20, 30, 3), dtype=np.uint8)).save(tmp_path / c / f"{i}.png")
    src = ImageFolder(tmp_path, (3, 8, 12), seed=0, slices_per_step=2)
    assert src.classes == ["cat", "dog"] and src.num_classes == 2
    x, y = src.slice(0, 1, 4)
    assert x.shape == (4, 3, 8, 12) and set(y.tolist()) <= {0, 1}
    _, y_only = src.slice(0, 1, 4, images=False)
    assert torch.equal(y, y_only)
    grey = ImageFolder(tmp_path, (1, 8, 8))
    assert grey.slice(3, 0, 7)[0].shape == (7, 1, 8, 8)
    with pytest.raises(InputError, match="no such folder"):
        ImageFolder(tmp_path / "missing", (3, 8, 8))
    with pytest.raises(InputError, match="class sub-folders"):
        ImageFolder(tmp_path / "cat", (3, 8, 8))
