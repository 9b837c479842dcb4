"""Inputs for gems: synthetic images of any resolution, or a folder of images.

Every source hands out *slices*: ``source.slice(step, index, n)`` is the
``index``-th block of ``n`` samples of update ``step``.  A pipeline replica asks
for its own slice; the single-process reference concatenates all of them, so both
see the same global batch without either materialising the other's data.
"""

from __future__ import annotations

from pathlib import Path

import torch

from torchhpc.ext.core.errors import InputError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".ppm")


class SyntheticImages:
    """Gaussian images whose per-channel mean encodes the class, so a model can learn them.

    ``x = noise + mean[y]`` with ``noise ~ N(0, 1)`` of shape ``(C, H, W)`` and one
    mean per (class, channel); the same ``(seed, step, index)`` always gives the same slice.
    """

    def __init__(self, shape: tuple[int, int, int], num_classes: int, seed: int = 0) -> None:
        self.shape = tuple(shape)
        self.num_classes = num_classes
        self.seed = seed
        g = torch.Generator().manual_seed(seed)
        self.means = torch.randn(num_classes, shape[0], generator=g)

    def slice(self, step: int, index: int, n: int, images: bool = True) -> tuple[torch.Tensor | None, torch.Tensor]:
        """``(x, y)``: ``x`` of shape ``(n, C, H, W)`` float32 (``None`` when ``images`` is false: a
        last stage needs only the labels), ``y`` of shape ``(n,)`` int64."""
        g = torch.Generator().manual_seed((self.seed * 1_000_003 + step * 10_007 + index) % (2**63))
        y = torch.randint(0, self.num_classes, (n,), generator=g)
        if not images:
            return None, y
        x = torch.randn((n, *self.shape), generator=g)
        x += self.means[y][:, :, None, None]
        return x, y


class ImageFolder:
    """``root/<class>/<image>`` files, resized to ``(H, W)`` with ``C`` = 1 (grey) or 3 (RGB) channels.

    Samples are taken in a fixed shuffled order (seeded) and cycled; slice ``index``
    of ``step`` is positions ``[(step * slices_per_step + index) * n, ... + n)`` of that order.

    Raises:
        InputError: the folder does not exist, or holds no class folders with images.
    """

    def __init__(self, root: str | Path, shape: tuple[int, int, int], seed: int = 0,
                 slices_per_step: int = 1) -> None:
        root = Path(root)
        if not root.is_dir():
            raise InputError(f"data.folder {root}: no such folder")
        classes = sorted(p.name for p in root.iterdir() if p.is_dir())
        files, labels = [], []
        for k, c in enumerate(classes):
            for f in sorted((root / c).iterdir()):
                if f.suffix.lower() in IMAGE_SUFFIXES:
                    files.append(f)
                    labels.append(k)
        if not files:
            raise InputError(f"data.folder {root}: expected class sub-folders with images ({', '.join(IMAGE_SUFFIXES)})")
        if shape[0] not in (1, 3):
            raise InputError(f"data.channels = {shape[0]}: an image folder gives 1 (grey) or 3 (RGB) channels")
        self.root, self.shape, self.classes = root, tuple(shape), classes
        self.num_classes = len(classes)
        self.files, self.labels = files, torch.tensor(labels)
        self.order = torch.randperm(len(files), generator=torch.Generator().manual_seed(seed))
        self.slices_per_step = slices_per_step

    def _load(self, path: Path) -> torch.Tensor:
        import numpy as np
        from PIL import Image

        try:
            img = Image.open(path).convert("L" if self.shape[0] == 1 else "RGB")
        except OSError as exc:
            raise InputError(f"{path}: cannot read image ({exc})") from None
        img = img.resize((self.shape[2], self.shape[1]))
        arr = torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0)
        arr = arr[None] if arr.ndim == 2 else arr.permute(2, 0, 1)
        return (arr - 0.5) / 0.25

    def slice(self, step: int, index: int, n: int, images: bool = True) -> tuple[torch.Tensor | None, torch.Tensor]:
        """``(x, y)`` as for :meth:`SyntheticImages.slice`."""
        start = (step * self.slices_per_step + index) * n
        pos = self.order[(torch.arange(start, start + n)) % len(self.files)]
        if not images:
            return None, self.labels[pos]
        x = torch.stack([self._load(self.files[int(i)]) for i in pos])
        return x, self.labels[pos]
