"""BoundOptions is the one definition of how a bound is computed: analyze, analyze_file, bound and both
commands take it, with its defaults, range checks and renamed keys."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from torchhpc.ext.core.config import load_config
from torchhpc.ext.core.errors import ConfigError
from torchhpc.ext.fperror import AnalyzeOptions, BoundOptions, TraceOptions, analyze, parse_satire

DOPPLER = """INPUTS { u fl64: (-100, 100); v fl64: (20, 20000); T fl64: (-30, 50); } OUTPUTS { doppler1; }
    EXPRS { t1 rnd64 = (1657/5 + (3/5 * T)); doppler1 rnd64 = ((-1*t1 * v) / ((t1 + u) * (t1 + u))); }"""
CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "fperror"


def test_analyze_defaults_are_bound_options_defaults():
    """analyze(dag) with no options is analyze(dag, BoundOptions()): one set of defaults (a 20 s budget)."""
    dag = parse_satire(DOPPLER)
    plain = analyze(dag, bb_iters=4, time_budget_s=1e6)
    given = analyze(dag, BoundOptions(bb_iters=4, time_budget_s=1e6))
    assert plain.outputs[0].abs_bound == given.outputs[0].abs_bound
    assert plain.options == given.options == {"inputs": "exact", "bb_iters": 4, "bb_batch": 512,
                                              "abstraction": "auto", "linear": "auto", "rounding": "standard"}
    assert BoundOptions().time_budget_s == 20.0


def test_overrides_apply_to_a_copy_of_the_options():
    """Keyword overrides replace fields of the given options (which stay as they were)."""
    dag = parse_satire(DOPPLER)
    opts = BoundOptions(bb_iters=3, time_budget_s=1e6)
    res = analyze(dag, opts, bb_iters=0, top=1)
    assert res.options["bb_iters"] == 0 and len(res.outputs[0].culprits) == 1
    assert res.outputs[0].boxes == 1  # bb_iters=0: one interval pass, no sub-boxes
    assert opts.bb_iters == 3
    assert opts.updated() is opts and opts.updated(top=2) == dataclasses.replace(opts, top=2)


@pytest.mark.parametrize("kwargs, message", [
    ({"bb_batch": 1}, "bb_batch"),
    ({"time_budget_s": 0.0}, "time_budget_s"),
    ({"bb_max_outputs": -1}, "bb_max_outputs"),
    ({"rounding": "up"}, "rounding"),
    ({"abstraction": "9:3"}, "abstraction"),
])
def test_out_of_range_options_raise_in_python(kwargs, message):
    """BoundOptions built in Python, or an analyze override, gets the loader's checks: a ConfigError naming it."""
    with pytest.raises(ConfigError, match=message):
        BoundOptions(**kwargs)
    with pytest.raises(ConfigError, match=message):
        analyze(parse_satire(DOPPLER), **kwargs)


def test_unknown_override_is_a_type_error():
    """A keyword that is not a BoundOptions field is refused, not ignored."""
    with pytest.raises(TypeError, match="bb_iter"):
        analyze(parse_satire(DOPPLER), bb_iter=3)


def test_old_time_budget_key_loads_with_a_warning(tmp_path, capsys):
    """bound.time_budget (before it was time_budget_s) still loads from YAML and --set, with one warning line."""
    path = tmp_path / "old.yaml"
    path.write_text("bound:\n  bb_iters: 10\n  time_budget: 2.5\n")
    cfg = load_config(AnalyzeOptions, path, ["file=x.txt"])
    assert cfg.bound.time_budget_s == 2.5 and cfg.bound.bb_iters == 10
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'bound.time_budget' is now 'bound.time_budget_s'" in err[0]
    cfg = load_config(TraceOptions, None, ["target=m:f", "bound.time_budget=4"])
    assert cfg.bound.time_budget_s == 4.0
    assert "is now 'bound.time_budget_s'" in capsys.readouterr().err


def test_shipped_config_loads_without_a_warning(capsys):
    """configs/fperror/debug.yaml uses the current keys."""
    cfg = load_config(AnalyzeOptions, CONFIGS / "debug.yaml", ["file=x.txt"])
    assert cfg.bound.time_budget_s == 2.0
    assert capsys.readouterr().err == ""


def test_package_exports_the_functions_not_their_modules():
    """fperror.trace / bound / analyze are the functions even after every submodule has been imported."""
    import importlib

    import torchhpc.ext.fperror as fperror

    for module in ("tracing", "ops", "analysis", "forward", "adjoint", "commands"):
        importlib.import_module(f"torchhpc.ext.fperror.{module}")
    from torchhpc.ext.fperror import analyze_file, bound, trace

    assert all(callable(f) and not isinstance(f, type(fperror)) for f in (trace, bound, analyze_file, analyze))
