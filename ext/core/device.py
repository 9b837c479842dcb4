"""Device choice: CUDA when present, else CPU."""

from __future__ import annotations

import torch

from .errors import InputError


def pick_device(requested: str | torch.device | None = None) -> torch.device:
    """Return the device a job should run on.

    Args:
        requested: ``None`` or ``"auto"`` picks ``cuda`` when available, else ``cpu``;
            ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` are taken as given.

    Raises:
        InputError: ``cuda`` was requested on a machine without a usable CUDA device,
            or the string is not a device name.
    """
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
