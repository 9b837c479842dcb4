"""FPTaylor's published round-off bounds for the small FPBench benchmarks (reference data, with sources).

FPTaylor's own regression suite records, per benchmark, the absolute error bound FPTaylor prints
(``upper-bound``) under two configurations; both use ``real`` (rounded) inputs, binary64
(``rnd64``) and exact optimisation (``opt-exact = true``):

* ``STANDARD``: ``fp-power2-model = false`` -- each rounding is ``x(1+d)``, ``|d| <= u`` (the model
  fperror uses), file ``tests/core/_tests-b.yml`` with config ``tests/core/_tests-b.cfg``;
* ``POWER2``: ``fp-power2-model = true`` (FPTaylor's default, "improved rounding model": the error
  of rounding x is bounded by half an ulp of x's binade, up to 2x tighter), file
  ``tests/core/_tests.yml`` with ``tests/core/_tests.cfg``.

Source: github.com/soarlab/FPTaylor at commit 0b115049d382b542d68b1c010485ded56feafaa7 (both .yml
files and ``_tests.cfg``); ``_tests-b.cfg`` at fabc895ddc595dc41fbe7ce511049c745e1f9136.

Inputs: the ``fptaylor_format`` file of the same name in ``../shared/data/fperror`` where it is the
same computation as FPTaylor's input (``tests/core/*.txt`` or ``benchmarks/toplas/FPTaylor/*.txt``
in that repository; compared by hand), else the FPTaylor input below (``INLINE``), rewritten in the
syntax our parser reads (commas as semicolons, ``+/-`` uncertainties dropped: the regression
config has ``uncertainty = false``).
"""

from __future__ import annotations

FPTAYLOR_REPO = "github.com/soarlab/FPTaylor"
FPTAYLOR_COMMIT = "0b115049d382b542d68b1c010485ded56feafaa7"
SOURCE_STANDARD = f"{FPTAYLOR_REPO}@{FPTAYLOR_COMMIT[:12]} tests/core/_tests-b.yml (fp-power2-model=false)"
SOURCE_POWER2 = f"{FPTAYLOR_REPO}@{FPTAYLOR_COMMIT[:12]} tests/core/_tests.yml (fp-power2-model=true)"

# benchmark -> (STANDARD bound, POWER2 bound, input: a fptaylor_format file stem or an INLINE key)
FPTAYLOR_BOUNDS: dict[str, tuple[float, float, str]] = {
    "carbonGas": (8.004088e-9, 4.962322e-9, "inline:carbonGas"),
    "doppler1": (1.658633e-13, 1.217604e-13, "doppler1"),
    "doppler2": (3.161643e-13, 2.226041e-13, "doppler2"),
    "doppler3": (8.205382e-14, 6.627360e-14, "doppler3"),
    "himmilbeau": (1.421086e-12, 1.000089e-12, "himmilbeau"),
    "jet": (1.331212e-11, 1.028348e-11, "inline:jet"),
    "kepler0": (1.034961e-13, 7.469401e-14, "kepler0"),
    "kepler1": (3.959421e-13, 2.863120e-13, "kepler1"),
    "kepler2": (2.017571e-12, 1.578175e-12, "kepler2"),
    "predatorPrey": (1.955202e-16, 1.585754e-16, "predatorPrey"),
    "rigidBody1": (4.579670e-13, 2.948753e-13, "inline:rigidBody1"),
    "rigidBody2": (6.400214e-11, 3.606627e-11, "rigidBody2"),
    "sine": (5.561131e-16, 4.430439e-16, "sine"),
    "sineOrder3": (1.015585e-15, 5.937466e-16, "sineOrder3"),
    "sqroot": (7.172244e-16, 5.016453e-16, "sqroot"),
    "t_div_t1": (2.252199e-16, 2.216154e-16, "inline:t_div_t1"),
    "turbine1": (2.507171e-14, 1.669516e-14, "turbine1"),
    "turbine2": (2.995038e-14, 2.000935e-14, "turbine2"),
    "turbine3": (1.429719e-14, 9.574075e-15, "turbine3"),
    "verhulst": (3.379142e-16, 2.470696e-16, "verhulst"),
}

# FPTaylor inputs with no identical file in ../shared/data/fperror/fptaylor_format (source paths above).
# ``(text, inputs)``: ``inputs`` is the convention FPTaylor applies to that file's variables.
INLINE: dict[str, tuple[str, str]] = {
    # tests/core/rigidBody1.txt (commit ec42b744303c): not in our data
    "rigidBody1": ("""Variables
  real x1 in [-15, 15]; real x2 in [-15, 15]; real x3 in [-15, 15];
Definitions
  r1 rnd64= -x1*x2 - 2*x2*x3 - x1 - x3;
Expressions
  rigidBody1 = r1;""", "rounded"),
    # benchmarks/toplas/FPTaylor/t_div_t1.txt (commit 1bb8fcd35e89): not in our data
    "t_div_t1": ("""Variables
  real t in [0, 999];
Expressions
  t_div_t1 rnd64= t / (t + 1);""", "rounded"),
    # benchmarks/toplas/FPTaylor/jet.txt (commit 1bb8fcd35e89): its last term divides t (+2*x2), where
    # FPBench's jetEngine (our jetEngine file) divides t* (-2*x2): a different function
    "jet": ("""Variables
  real x1 in [-5, 5]; real x2 in [-20, 5];
Definitions
  t rnd64= (3*x1*x1 + 2*x2 - x1);
  r rnd64= x1 + ((2*x1*(t/(x1*x1 + 1))*(t/(x1*x1 + 1) - 3) + x1*x1*(4*(t/(x1*x1 + 1))-6))*(x1*x1 + 1)
     + 3*x1*x1*(t/(x1*x1 + 1)) + x1*x1*x1 + x1 + 3*((3*x1*x1 + 2*x2 - x1)/(x1*x1 + 1)));
Expressions
  jet = r;""", "rounded"),
    # benchmarks/toplas/FPTaylor/carbonGas.txt (commit 82bb3bb45dd8; expression name carbon_gas as in
    # the regression file): its variables carry no type, and the regression config sets
    # default-var-type = float64, so they are binary64 values (not rounded); k is a constant,
    # rounded.  Our fptaylor_format carbonGas instead rounds v and the literals a, b, k.
    "carbonGas": ("""Constants
  k = 1.3806503e-23;
Variables
  float64 T in [300.0, 300.0]; float64 a in [0.401, 0.401]; float64 b in [42.7e-6, 42.7e-6];
  float64 N in [1000, 1000]; float64 p in [3.5e7, 3.5e7]; float64 V in [0.1, 0.5];
Definitions
  res rnd64= (p + a * (N / V) * (N / V)) * (V - N * b) - k * N * T;
Expressions
  carbon_gas = res;""", "exact"),
}


def load_input(name: str, data_dir):
    """The DAG FPTaylor's bound for ``name`` refers to, under FPTaylor's input convention.

    ``data_dir`` is ``../shared/data/fperror`` (its ``fptaylor_format`` files, inputs rounded).
    """
    from pathlib import Path

    from .parsers import load, parse

    src = FPTAYLOR_BOUNDS[name][2]
    if src.startswith("inline:"):
        text, inputs = INLINE[src[len("inline:"):]]
        return parse(text, f"{name}.txt", "fptaylor", inputs)
    return load(Path(data_dir) / "fptaylor_format" / f"{src}.txt", inputs="rounded")


__all__ = ["FPTAYLOR_BOUNDS", "INLINE", "SOURCE_POWER2", "SOURCE_STANDARD", "load_input"]
