"""fperror: rigorous upper bounds on the round-off error of straight-line floating-point code (Satire, SC20).

    import torch
    from torchhpc.ext.fperror import bound, analyze_file
    report = bound(lambda x: torch.softmax(x, 0), {"x": (-1, 1)}, shapes={"x": (4,)})
    print(report.table())

* :func:`bound` / :func:`analyze_file` (:mod:`.api`) — a torch function or a file, bounded.
* :func:`load` / :func:`parse` / ``parse_satire`` / ``parse_fptaylor`` / ``parse_fpcore`` (:mod:`.parsers`).
* :func:`trace` (:mod:`.trace`) — a torch function as an :class:`~.dag.ExprDAG` (tensors).
* :func:`analyze` (:mod:`.ops`) — the bound of a DAG; the error model and why it holds are there.
* :mod:`.config` (every option, importable without torch), :mod:`.reference` (the mpmath sampler and
  slow references), :mod:`.linear` (closed forms for linear kernels), :mod:`.demo`.
"""

from __future__ import annotations

from torchhpc.ext.core.lazy import lazy_exports

#: public name -> submodule; imported on first use, so that the options (config.py) load without torch
_EXPORTS = {
    "analyze_file": "api", "bound": "api",
    "AnalyzeOptions": "config", "BoundOptions": "config", "FperrorTour": "config", "TraceOptions": "config",
    "ExprDAG": "dag", "Analysis": "ops", "analyze": "ops",
    "load": "parsers", "parse": "parsers", "parse_fpcore": "parsers", "parse_fptaylor": "parsers",
    "parse_satire": "parsers", "trace": "trace",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
