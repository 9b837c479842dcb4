"""numba kernels beside torch: tensors handed to them as arrays, and one CPU thread count for both.

numba's OpenMP threading layer shares libgomp with torch: starting it, or a parallel launch, resets the
thread count torch reads.  :func:`numba_threads` gives the next parallel kernel torch's count and
:class:`keep_torch_threads` puts torch's setting back after a launch, so that ``--threads`` (or
``torch.set_num_threads``) holds for the whole run.  Used by :mod:`.index_kernels` and
:mod:`.filter_kernels`.
"""

from __future__ import annotations

import numpy as np
import torch


def as_array(x: torch.Tensor, dtype) -> np.ndarray:
    """``x`` as a contiguous NumPy array of ``dtype`` on the CPU (no copy where it already is one)."""
    return x.detach().to("cpu", dtype).contiguous().numpy()


def numba_threads() -> int:
    """numba's thread count for the next parallel kernel: torch's, which stays as it was (starting
    numba's OpenMP layer resets the libgomp count torch reads, to every core)."""
    import numba

    want = torch.get_num_threads()
    n = max(1, min(want, numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(n)
    if torch.get_num_threads() != want:
        torch.set_num_threads(want)
    return n


class keep_torch_threads:
    """numba's OpenMP threading layer shares libgomp with torch and leaves its own thread count
    behind after a parallel launch; put torch's setting back."""

    def __enter__(self):
        self.n = torch.get_num_threads()

    def __exit__(self, *exc):
        if torch.get_num_threads() != self.n:
            torch.set_num_threads(self.n)


__all__ = ["as_array", "keep_torch_threads", "numba_threads"]
