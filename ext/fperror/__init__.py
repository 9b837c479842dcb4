"""fperror: rigorous upper bounds on the round-off error of straight-line floating-point code (Satire, SC20).

    import torch
    from torchhpc.ext.fperror import bound, analyze_file
    report = bound(lambda x: torch.softmax(x, 0), {"x": (-1, 1)}, shapes={"x": (4,)})
    print(report.table())

* :func:`bound` / :func:`analyze_file` / :func:`analyze` (:mod:`.ops`) — a torch function, a file or a
  DAG, bounded; each takes one :class:`BoundOptions` (or its fields as keywords). The error model and
  why it holds are in :mod:`.ops`; the pieces in :mod:`.forward` (interval forward pass),
  :mod:`.adjoint` (adjoint pass, error terms) and :mod:`.analysis` (branch and bound, abstraction).
* :func:`load` / :func:`parse` / ``parse_satire`` / ``parse_fptaylor`` / ``parse_fpcore`` (:mod:`.parsers`).
* :func:`trace` (:mod:`.tracing`) — a torch function as an :class:`~.dag.ExprDAG` (tensors).
* :mod:`.config` (every option, importable without torch), :mod:`.commands` (``torchhpc fperror
  analyze|trace``), :mod:`.reference` (the mpmath sampler and slow references), :mod:`.linear` (closed
  forms for linear kernels), :mod:`.demo`.
"""

from __future__ import annotations

from torchhpc.ext.core.lazy import lazy_exports

#: public name -> submodule; imported on first use, so that the options (config.py) load without torch
_EXPORTS = {
    "analyze_file": "ops", "bound": "ops",
    "AnalyzeOptions": "config", "BoundOptions": "config", "FperrorTour": "config", "TraceOptions": "config",
    "ExprDAG": "dag", "Analysis": "ops", "analyze": "ops",
    "load": "parsers", "parse": "parsers", "parse_fpcore": "parsers", "parse_fptaylor": "parsers",
    "parse_satire": "parsers", "trace": "tracing",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
