"""The ``torchhpc pliner`` commands, one function each: ``find`` (:func:`find_command`).

The search itself is :func:`torchhpc.ext.pliner.search.find`; this module builds its input from the command
line and prints its answer.  The CLI imports this module to register the commands, so torch is imported by
the command when it runs, not here (``torchhpc --help`` stays quick).
"""

from __future__ import annotations

import json
import sys

from .config import FindOptions


def find_command(opts: FindOptions) -> int:
    """``torchhpc pliner find``: build the model, search, print the report (or ``--json``, one object); exit 0
    whatever the status (it is the answer).  One progress line per search level goes to stderr.

    Raises:
        InputError: the model cannot be imported or built (the shared guard
            :func:`torchhpc.ext.core.usercode.load_function`: one line naming ``--model`` and the cause),
            does not run, or gives a reference that is not finite.
    """
    from torchhpc.ext.core.usercode import split_spec

    split_spec(opts.model, "--model")  # a mistyped FILE.py fails before torch loads
    from .search import find
    from .target import build_target

    model, inputs = build_target(opts.model)
    res = find(model, inputs, reference=opts.reference, problem=opts.problem, options=opts.search,
               progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps(res.as_json()) if opts.json else res.report())
    return 0


__all__ = ["find_command"]
