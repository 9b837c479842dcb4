"""``torchhpc ccsdt`` on water prints the same energies and report lines as before the refactor.

The pinned values were produced by the code before the refactor (commit 67fa2f8), in-process
``main`` with ``--threads 1``; a refactor that changes any of them fails here.

Classified by the suite's tolerance policy (tests/README.md): the report's words, orbital counts and
basis are exact; energies come from PySCF's SCF and CCSD iterations and our (T) contractions, all
BLAS-bound float64, and are compared to 1e-12 relative (a different thread count or CPU moves them by
~1e-14 relative).  A printed energy is compared as a number, to one unit of its last printed digit on top
of that: the rounding to 10 decimals is a discrete step that a last-bit change can cross.  Timings are
left out.  Bit-for-bit equality of a refactor is checked outside the suite (``tools/compare_commits.py``).
"""

from __future__ import annotations

import json
import re

import pytest

from torchhpc.ext.ccsdt.commands import TriplesResult

pytest.importorskip("pyscf")

from torchhpc.trainers.ccsdt import main  # noqa: E402

WATER = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"

#: report of ``--atom WATER --basis sto-3g --threads 1`` at 67fa2f8, timings cut at " ("
REPORT_STO3G = [
    "molecule      H2O, basis sto-3g, no frozen core",
    "orbitals      nocc=5 nvir=2 (active)",
    "E(HF)         -74.9630231385 Eh",
    "E(CCSD)       -75.0124617014 Eh   (correlation -0.0494385630)",
    "E(T)          -0.000067409680 Eh   (torch on cpu,",
    "E(CCSD(T))    -75.0125291111 Eh",
    "timings       RHF",
]

#: ``--json`` of ``--atom WATER --basis 6-31g --frozen-core --threads 1`` at 67fa2f8
JSON_631G_FC = {"e_t": -0.0009849203522585028, "e_ccsd": -76.11844575097261, "e_hf": -75.983974472722}

#: report of ``--inputs`` (the .npz saved by the run above) at 67fa2f8
REPORT_INPUTS = [
    "molecule      H2O, basis 6-31g, 1 frozen core orbital(s)",
    "orbitals      nocc=4 nvir=8 (active)",
    "E(HF)         -75.9839744727 Eh",
    "E(CCSD)       -76.1184457510 Eh   (correlation -0.1344712783)",
    "E(T)          -0.000984920352 Eh   (torch on cpu,",
    "E(CCSD(T))    -76.1194306713 Eh",
]


_NUMBER = re.compile(r"-?\d+\.\d+")


def assert_report(lines: list[str], pinned: list[str]) -> None:
    """Report lines equal the pinned ones: text exactly, decimals to 1e-12 relative plus one printed unit."""
    assert len(lines) == len(pinned), lines
    for got, want in zip(lines, pinned, strict=True):
        assert _NUMBER.sub("#", got) == _NUMBER.sub("#", want), (got, want)
        for g, w in zip(_NUMBER.findall(got), _NUMBER.findall(want), strict=True):
            unit = 10.0 ** -len(w.split(".")[1])
            assert abs(float(g) - float(w)) <= unit + 1e-12 * abs(float(w)), (got, want)


def _cut(line: str) -> str:
    """A report line without its timings (E(T)'s seconds and GFLOP/s, the timings line's figures)."""
    if line.startswith("E(T) "):
        return line[: line.index(",") + 1]
    if line.startswith("timings"):
        return line[: line.index("RHF") + 3]
    return line


def test_report_and_json_are_pinned(tmp_path, capsys):
    """Report lines, JSON energies and the --inputs rerun equal the pre-refactor output."""
    assert main(["--atom", WATER, "--basis", "sto-3g", "--threads", "1"]) == 0
    assert_report([_cut(x) for x in capsys.readouterr().out.strip().splitlines()], REPORT_STO3G)

    npz = tmp_path / "water.npz"
    assert main(["--atom", WATER, "--basis", "6-31g", "--frozen-core", "--threads", "1", "--json",
                 "--save-inputs", str(npz)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == set(TriplesResult.JSON_KEYS)
    for key, value in JSON_631G_FC.items():
        assert out[key] == pytest.approx(value, rel=1e-12, abs=0), key

    assert main(["--inputs", str(npz), "--threads", "1"]) == 0
    assert_report([_cut(x) for x in capsys.readouterr().out.strip().splitlines()], REPORT_INPUTS)
