"""numba kernels beside torch: tensors or NumPy arrays handed to them, and one CPU thread count for both.

The compiled CPU path runs on NumPy arrays and never needs torch: ``torchhpc align`` on the CPU keeps
its sequences, seed table and HSPs as arrays and does not import torch (a second of start-up, more than
aligning a small pair takes).  The library's functions take tensors too: :func:`as_array` reads either
(no copy for a contiguous CPU tensor), and :func:`like` hands a result back as the caller's kind.

numba's OpenMP threading layer shares libgomp with torch: starting it, or a parallel launch, resets the
thread count torch reads.  :func:`numba_threads` gives the next parallel kernel torch's count (where
torch is loaded; else the count :func:`set_cpu_threads` set) and :class:`keep_torch_threads` puts torch's
setting back after a launch, so that ``--threads`` (or ``torch.set_num_threads``) holds for the whole run.
Used by :mod:`.index_kernels`, :mod:`.filter_kernels` and the pipeline (:mod:`.align`).
"""

from __future__ import annotations

import os
import sys

import numpy as np

from torchhpc.ext.core.compiled import Library

KERNELS = Library("segalign", ("torchhpc.ext.segalign.index_kernels", "torchhpc.ext.segalign.filter_kernels",
                               "torchhpc.ext.segalign.gapped_kernels"))
"""segalign's numba kernels: compiled ahead of time for the CPU command (:mod:`torchhpc.ext.core.compiled`),
else by numba's JIT.  ``python -m torchhpc.ext.segalign.torch_numba`` builds the ahead-of-time module."""

_threads: list[int] = []  # the thread count of a run without torch (set_cpu_threads); default: every core


def is_tensor(x) -> bool:
    """Whether ``x`` is a torch tensor (asked without importing torch)."""
    return "torch" in sys.modules and isinstance(x, sys.modules["torch"].Tensor)


def as_array(x, dtype) -> np.ndarray:
    """``x`` (a tensor or an array) as a contiguous NumPy array of ``dtype`` (a NumPy dtype) on the CPU
    (no copy where it already is one)."""
    if is_tensor(x):
        x = x.detach().cpu().numpy()
    return np.ascontiguousarray(x, dtype=dtype)


def host(x) -> np.ndarray:
    """``x`` (a tensor or an array) as a NumPy array on the CPU, its dtype kept."""
    return x.detach().cpu().numpy() if is_tensor(x) else np.asarray(x)


def like(ref, arr: np.ndarray):
    """``arr`` as the kind of ``ref``: a CPU tensor sharing its memory where ``ref`` is a tensor, else itself."""
    return sys.modules["torch"].from_numpy(arr) if is_tensor(ref) else arr


def set_cpu_threads(n: int) -> None:
    """The run's thread count (``--threads``; 0: the default of :func:`cpu_threads`): kept here for a run
    without torch, and given to torch too where it is loaded (a command called in a Python program)."""
    _threads[:] = [int(n)] if n and n > 0 else []
    torch = sys.modules.get("torch")
    if torch is not None and _threads:
        torch.set_num_threads(_threads[0])


def cpu_threads() -> int:
    """The run's CPU thread count: torch's where torch is loaded, else :func:`set_cpu_threads`'s (default:
    ``OMP_NUM_THREADS`` where set, else the logical cores this process may use; torch's own default counts
    physical cores)."""
    if "torch" in sys.modules:
        return sys.modules["torch"].get_num_threads()
    if _threads:
        return _threads[0]
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(cores or 1, 1)


def numba_threads() -> int:
    """numba's thread count for the next parallel kernel: the run's (:func:`cpu_threads`), which stays as it
    was (starting numba's OpenMP layer resets the libgomp count torch reads, to every core)."""
    import numba

    want = cpu_threads()
    n = max(1, min(want, numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(n)
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != want:
        torch.set_num_threads(want)
    return n


class keep_torch_threads:
    """numba's OpenMP threading layer shares libgomp with torch and leaves its own thread count
    behind after a parallel launch; put torch's setting back (nothing to do where torch is not loaded)."""

    def __enter__(self):
        torch = sys.modules.get("torch")
        self.n = torch.get_num_threads() if torch is not None else None

    def __exit__(self, *exc):
        torch = sys.modules.get("torch")
        if self.n is not None and torch.get_num_threads() != self.n:
            torch.set_num_threads(self.n)


__all__ = ["KERNELS", "as_array", "cpu_threads", "host", "is_tensor", "keep_torch_threads", "like", "numba_threads",
           "set_cpu_threads"]


if __name__ == "__main__":  # python -m torchhpc.ext.segalign.torch_numba: build the ahead-of-time kernels
    path = KERNELS.ensure_built(notice=lambda line: print(line, file=sys.stderr), force=True)
    print(path if path is not None else "not built: numba's JIT runs the kernels")
