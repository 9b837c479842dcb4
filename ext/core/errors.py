"""The errors (and warnings) users see.

Every mistake a user can make (a malformed file, an impossible parameter, a
wrong shape) raises a subclass of :class:`TorchHPCError` with one line that
says what was wrong and where.  The CLI prints that line and exits non-zero;
library callers can catch the class they care about.
"""

from __future__ import annotations

import sys


class TorchHPCError(Exception):
    """Base class of user-facing errors: the message is one self-contained line."""


class ConfigError(TorchHPCError, ValueError):
    """A config file or ``--set`` override is invalid (unknown key, wrong type, out of range)."""


class InputError(TorchHPCError, ValueError):
    """An input file or tensor is malformed (names the file/argument and the position)."""


class DistributedError(TorchHPCError, RuntimeError):
    """The torch.distributed set-up does not fit the job (world size, backend, timeout)."""


def warn(message: str) -> None:
    """One warning line on stderr: ``torchhpc: warning: <message>``."""
    sys.stderr.write(f"torchhpc: warning: {message}\n")  # one write: ranks share the pipe (see cli.say)
    sys.stderr.flush()
