"""Image segmentation with SymNMF: pixels are nodes of a kNN graph in (colour, position) space.

The image comes from a library that ships it: scikit-learn's ``china.jpg`` / ``flower.jpg``
(``sklearn.datasets.load_sample_image``, read with Pillow, both already dependencies here), a
scikit-image sample (``skimage.data.<name>``) when scikit-image is installed, or any image file.
It is resized so that its longer side has ``size`` pixels; each pixel becomes the feature vector
``(r, g, b, w * row / size, w * col / size)`` (colours in [0, 1]); the symmetrised kNN graph of
those vectors is factorised and each pixel takes the argmax of its row of ``H``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from torchhpc.ext.core.errors import InputError

from .clustering import cluster
from .config import SegmentOptions, SolverOptions
from .graphs import knn_similarity


def load_image(name: str) -> tuple[np.ndarray, str]:
    """``(H, W, 3)`` float image in [0, 1] and where it came from.

    Raises:
        InputError: an unknown name or an unreadable file.
    """
    if name in ("china", "flower"):
        from sklearn.datasets import load_sample_image

        return load_sample_image(f"{name}.jpg").astype(np.float64) / 255.0, f"sklearn.datasets {name}.jpg"
    path = Path(name)
    if path.is_file():
        from PIL import Image, UnidentifiedImageError

        try:
            img = np.asarray(Image.open(path).convert("RGB"), dtype=np.float64) / 255.0
        except (UnidentifiedImageError, OSError) as exc:
            raise InputError(f"{path}: not a readable image ({exc})") from None
        return img, str(path)
    try:
        import skimage.data
    except ImportError:
        raise InputError(f"image {name!r}: not china/flower, not a file, and scikit-image is not installed "
                         "for skimage.data samples") from None
    if not hasattr(skimage.data, name):
        raise InputError(f"image {name!r}: no such skimage.data sample")
    img = np.asarray(getattr(skimage.data, name)(), dtype=np.float64)
    img = img / (255.0 if img.max() > 1 else 1.0)
    if img.ndim == 2:
        img = np.repeat(img[:, :, None], 3, axis=2)
    return img[:, :, :3], f"skimage.data.{name}"


def resize(img: np.ndarray, size: int) -> np.ndarray:
    """Area-average resize so the longer side is ``size`` pixels (torch's antialiased bilinear)."""
    h, w = img.shape[:2]
    s = size / max(h, w)
    t = torch.as_tensor(img).permute(2, 0, 1)[None]
    out = torch.nn.functional.interpolate(t, size=(max(1, round(h * s)), max(1, round(w * s))),
                                          mode="bilinear", antialias=True, align_corners=False)
    return out[0].permute(1, 2, 0).clamp(0, 1).numpy()


@dataclass
class Segmentation:
    """An image cut into segments by SymNMF."""

    image: np.ndarray
    """``(h, w, 3)`` the resized image the graph was built on, colours in [0, 1]."""
    labels: np.ndarray
    """``(h, w)`` the segment of each pixel (``-1`` for an isolated pixel)."""
    summary: dict
    """``image`` (where it came from), ``pixels``, ``shape``, ``k``, ``algo``, ``residual``,
    ``iterations``, ``segment_sizes``."""


def segment_image(opts: SegmentOptions) -> Segmentation:
    """Segment ``opts.image`` into ``opts.k`` parts (on the CPU).

    Raises:
        InputError: an unknown image name or an unreadable file.
    """
    img, source = load_image(opts.image)
    small = resize(img, opts.size)
    h, w = small.shape[:2]
    rows, cols = np.mgrid[0:h, 0:w]
    feats = np.concatenate([small.reshape(-1, 3),
                            opts.position_weight * np.stack([rows.ravel(), cols.ravel()], 1) / opts.size], axis=1)
    A = knn_similarity(feats, opts.n_neighbors)
    out = cluster(A, SolverOptions(k=opts.k, algo=opts.algo, seed=opts.seed, max_iter=opts.max_iter, tol=1e-6),
                  device="cpu")
    summary = {"image": source, "pixels": h * w, "shape": [h, w], "k": opts.k, "algo": opts.algo,
               "residual": out.result.residual, "iterations": out.result.iterations,
               "segment_sizes": np.bincount(out.labels[out.labels >= 0], minlength=opts.k).tolist()}
    return Segmentation(small, out.labels.reshape(h, w), summary)


def draw_segmentation(seg: Segmentation, path: str | Path, title: str) -> None:
    """Save the picture: the image, its segments, and each segment in its mean colour."""
    from torchhpc.ext.core.runs import _pyplot

    img, labels, k = seg.image, seg.labels, seg.summary["k"]
    plt = _pyplot()
    mean = np.zeros((k, 3))
    for c in range(k):
        if (labels == c).any():
            mean[c] = img[labels == c].mean(axis=0)
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.4), dpi=110)
    axes[0].imshow(img)
    axes[0].set_title("image")
    axes[1].imshow(labels, cmap="tab10", vmin=0, vmax=max(k - 1, 9), interpolation="nearest")
    axes[1].set_title("segments")
    axes[2].imshow(mean[np.clip(labels, 0, k - 1)])
    axes[2].set_title("segment mean colour")
    for ax in axes:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
