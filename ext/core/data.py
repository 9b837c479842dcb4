"""Where the real public inputs live that tests and benchmarks compare against.

``$TORCHHPC_SHARED_DATA`` when it is set, else ``shared/data`` beside the source checkout (the folder
``../shared/data`` seen from the repository root).  The folder holds workload traces, genomes, graphs,
expression files and published numbers; nothing in it is copied into the project, and nothing a user
runs needs it.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "TORCHHPC_SHARED_DATA"

# ext/core/data.py -> the repository root is two folders up from ext/
_CHECKOUT = Path(__file__).resolve().parents[2]


def shared_data_dir() -> Path:
    """The shared data folder: ``$TORCHHPC_SHARED_DATA``, else ``<checkout>/../shared/data``.

    The path is returned whether or not it exists; callers check ``is_dir()`` and say what is missing.
    """
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser().resolve()
    return _CHECKOUT.parent / "shared" / "data"


__all__ = ["ENV_VAR", "shared_data_dir"]
