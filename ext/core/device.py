"""Device choice: what ``--device auto`` means for a system, and a clear line when CUDA is missing.

``auto`` is the device that was measured faster for the system's work, declared beside the system
(``AUTO_DEVICE`` in its config module, with the measurement): ``"cuda"`` (CUDA when present, else the
CPU) or ``"cpu"`` (the CPU even where a GPU is present, because the GPU path was measured slower).
``docs/core/guide.md`` has the table.
"""

from __future__ import annotations

from .errors import InputError
from .lazy import lazy_module

torch = lazy_module("torch")  # imported at first use (the modules that import this one may run without it)

AUTO_CHOICES = ("cuda", "cpu")


def resolve_auto(requested: str | torch.device | None, auto: str = "cuda") -> str | torch.device | None:
    """``requested`` with ``auto`` (or ``None``) replaced by ``"cpu"`` when the system's ``auto`` is the CPU.

    For code that passes the device on as a string (to :func:`~torchhpc.ext.core.distributed.distributed`,
    to torchrun's ranks): ``auto`` meaning "CUDA when present" is left for :func:`pick_device`.
    """
    if auto not in AUTO_CHOICES:
        raise ValueError(f"auto must be one of {AUTO_CHOICES}; got {auto!r}")
    if (requested is None or str(requested) == "auto") and auto == "cpu":
        return "cpu"
    return requested


def pick_device(requested: str | torch.device | None = None, *, auto: str = "cuda") -> torch.device:
    """Return the device a job should run on.

    Args:
        requested: ``None`` or ``"auto"`` picks by ``auto``; ``"cpu"``, ``"cuda"`` or ``"cuda:N"``
            are taken as given.
        auto: the system's measured choice: ``"cuda"`` (CUDA when available, else the CPU) or ``"cpu"``.

    Raises:
        InputError: ``cuda`` was requested on a machine without a usable CUDA device,
            or the string is not a device name.
    """
    requested = resolve_auto(requested, auto)
    if requested is None or str(requested) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(requested)
    except (RuntimeError, TypeError) as exc:
        raise InputError(f"unknown device {requested!r} (use auto, cpu or cuda[:N])") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError("device 'cuda' was requested but no CUDA device is available (use --device cpu)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise InputError(f"device {dev} does not exist: {torch.cuda.device_count()} CUDA device(s) visible")
    elif dev.type != "cpu":
        raise InputError(f"device type {dev.type!r} is not supported (use auto, cpu or cuda[:N])")
    return dev


def cuda_free_bytes(device: str | torch.device) -> int:
    """Bytes a new allocation on CUDA ``device`` can have: what the driver reports free plus what PyTorch's
    caching allocator holds unused (reserved, not allocated), which the driver counts as used.  Sizing
    buffers from the driver's figure alone shrinks every later call in a process (the first call's blocks stay
    cached): at o=40 v=300 the (T)'s MMA kernel, sized after the pair path had run, no longer fit an H100."""
    free, _ = torch.cuda.mem_get_info(device)
    return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
