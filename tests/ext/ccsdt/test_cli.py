"""``torchhpc ccsdt``: JSON output against PySCF, saved inputs without PySCF, and one-line errors."""

from __future__ import annotations

import json

import pytest

from torchhpc.ext.ccsdt.commands import TriplesResult

pytest.importorskip("pyscf")

from torchhpc.ext.ccsdt.molecule import hill_formula, parse_atom_string  # noqa: E402
from torchhpc.trainers.ccsdt import main  # noqa: E402

WATER = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"
WATER_XYZ = "3\nwater, Angstrom\nO 0 0 0.1173\nH 0 0.7572 -0.4692\nH 0 -0.7572 -0.4692\n"


@pytest.fixture
def no_pyscf(tmp_path):
    """A PYTHONPATH entry whose ``pyscf`` package fails to import, as on a machine without PySCF."""
    fake = tmp_path / "hide" / "pyscf"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError(\"No module named 'pyscf' (hidden by the test)\")\n")
    return {"PYTHONPATH": str(fake.parent)}


def one_line_error(res) -> str:
    assert res.returncode != 0
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


def test_json_matches_pyscf_and_saved_inputs_rerun_without_pyscf(cli, tmp_path, no_pyscf):
    """--json prints one object whose E(T) equals PySCF's; --inputs reproduces it where PySCF is missing."""
    npz = tmp_path / "water.npz"
    res = cli("ccsdt", "--atom", WATER, "--basis", "6-31g", "--frozen-core", "--compare-pyscf", "--json",
              "--save-inputs", str(npz))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1
    out = json.loads(lines[0])
    assert set(out) == set(TriplesResult.JSON_KEYS) | {"e_t_pyscf", "abs_diff"}
    assert out["abs_diff"] < 1e-10 and abs(out["e_t"] - out["e_t_pyscf"]) < 1e-10
    assert out["e_t"] < 0 and out["e_ccsd"] < out["e_hf"] < 0
    assert out["seconds"] > 0 and out["gflops"] > 0
    # what the text report prints is in the JSON too
    assert out["e_total"] == out["e_ccsd"] + out["e_t"] and (out["nocc"], out["nvir"]) == (4, 8)
    assert (out["source"], out["basis"], out["frozen"]) == ("H2O", "6-31g", 1)
    assert (out["triples_backend"], out["device"], out["saved"]) == ("torch", "cpu", str(npz))
    again = cli("ccsdt", "--inputs", str(npz), "--json", env=no_pyscf)
    assert again.returncode == 0, again.stderr
    back = json.loads(again.stdout)
    assert set(back) == set(TriplesResult.JSON_KEYS)
    assert abs(back["e_t"] - out["e_t"]) < 1e-14
    assert (back["e_hf"], back["e_ccsd"]) == (out["e_hf"], out["e_ccsd"])


def test_shipped_debug_config_runs_and_matches_pyscf(capsys):
    """configs/ccsdt/debug.yaml (its dist section included) loads without a warning and its E(T) equals PySCF's."""
    from pathlib import Path

    config = Path(__file__).resolve().parents[3] / "configs" / "ccsdt" / "debug.yaml"
    assert main(["--config", str(config), "--json"]) == 0
    captured = capsys.readouterr()
    assert "warning" not in captured.err and "ccsdt:" not in captured.err  # --json: no size line either
    out = json.loads(captured.out)
    assert out["abs_diff"] < 1e-10


def test_report_from_an_xyz_file(tmp_path, capsys):
    """The human report names the molecule and prints E(HF), E(CCSD), E(T) and E(CCSD(T)); before PySCF
    starts, one stderr line says how large the problem is, in the orbital counts the report later gets from
    PySCF's own SCF and CCSD (2 (o^3 v^4 + o^4 v^3) = 14,000 flops for o=5, v=2)."""
    import re

    xyz = tmp_path / "water.xyz"
    xyz.write_text(WATER_XYZ)
    assert main(["--xyz", str(xyz), "--basis", "sto-3g"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    for word in ("H2O", "sto-3g", "E(HF)", "E(CCSD)", "E(T)", "E(CCSD(T))", "GFLOP/s"):
        assert word in out, word
    assert captured.err.splitlines()[0] == (
        "ccsdt: H2O, sto-3g: 7 basis functions, 5 occupied orbitals (5 correlated), 2 virtual; PySCF's RHF and "
        "CCSD run first, then the (T): 14 kFLOP")
    assert re.search(r"nocc=5 nvir=2\b", out), out


def test_without_pyscf_a_molecule_is_one_clear_line(cli, no_pyscf):
    """Asking for a molecule where PySCF is missing says so (and how to install it), no traceback."""
    line = one_line_error(cli("ccsdt", "--atom", WATER, "--basis", "sto-3g", env=no_pyscf))
    assert "PySCF is not installed" in line and "--inputs" in line


def test_unknown_basis_is_one_clear_line(cli):
    """A basis PySCF does not know is named in a one-line error from the real command."""
    line = one_line_error(cli("ccsdt", "--atom", WATER, "--basis", "no-such-basis"))
    assert "no-such-basis" in line


BAD_XYZ = {
    "count.xyz": ("3\ncomment\nO 0 0 0\nH 0 0 1\n", "says 3 atoms but 2"),
    "number.xyz": ("2\ncomment\nO 0 0 0\nH 0 zero 1\n", "number.xyz:4: coordinates must be numbers"),
    "header.xyz": ("water\nO 0 0 0\n", "atom count on the first line"),
    "frames.xyz": ("1\nc\nHe 0 0 0\n1\nc\nHe 0 0 1\n", "multi-frame"),
}


@pytest.mark.parametrize(
    "args, words",
    [
        (["--xyz", "count.xyz", "--basis", "sto-3g"], [BAD_XYZ["count.xyz"][1]]),
        (["--xyz", "number.xyz", "--basis", "sto-3g"], [BAD_XYZ["number.xyz"][1]]),
        (["--xyz", "header.xyz", "--basis", "sto-3g"], [BAD_XYZ["header.xyz"][1]]),
        (["--xyz", "frames.xyz", "--basis", "sto-3g"], [BAD_XYZ["frames.xyz"][1]]),
        (["--xyz", "absent.xyz", "--basis", "sto-3g"], ["--xyz absent.xyz: no such file"]),
        (["--atom", "O 0 0 0; H 0 0 0.97", "--basis", "sto-3g"], ["open-shell", "9 electrons"]),
        (["--atom", "Xq 0 0 0; H 0 0 1", "--basis", "sto-3g"], ["unknown element 'Xq'"]),
        (["--atom", "O 0 0; H 0 0 1", "--basis", "sto-3g"], ["--atom entry 1", "symbol x y z"]),
        (["--atom", WATER, "--basis", "cc-pvdz", "--charge", "1"], ["open-shell"]),
        (["--atom", "Li 0 0 0; Li 0 0 2.67", "--basis", "cc-pvdz-f12-nonexistent"], ["cc-pvdz-f12-nonexistent"]),
        (["--atom", WATER], ["--basis is required"]),
        (["--inputs", "absent.npz"], ["--inputs absent.npz: no such file"]),
        (["--inputs", "absent.npz", "--compare-pyscf"], ["--compare-pyscf needs a molecule"]),
        (["--atom", WATER, "--basis", "sto-3g", "--threads", "-1"], ["--threads", "must be >= 0"]),
        (["--inputs", "x.npz", "--timeout-s", "0"], ["--timeout-s", "must be > 0"]),
        (["--atom", WATER, "--basis", "sto-3g", "--max-memory", "0"], ["--max-memory", "must be > 0"]),
        (["--atom", "H 0 0 0; H 0 0 0", "--basis", "sto-3g"], ["atoms 1 (H) and 2 (H)", "0 Angstrom apart"]),
        (["--atom", WATER, "--inputs", "x.npz"], ["exactly one of --atom, --xyz or --inputs"]),
        ([], ["exactly one of --atom, --xyz or --inputs"]),
        (["--atom", WATER, "--xyz", "count.xyz", "--basis", "sto-3g"], ["--atom or --xyz, not both"]),
        (["--inputs", "x.npz", "--basis", "sto-3g"], ["--basis applies to --atom/--xyz"]),
        (["--inputs", "x.npz", "--charge", "2", "--frozen-core"],
         ["--frozen-core and --charge apply to --atom/--xyz", "saved inputs already fix the molecule"]),
        (["--inputs", "x.npz", "--unit", "bohr"], ["--unit applies to --atom/--xyz"]),
    ],
)
def test_bad_input_gives_one_line_and_nonzero_exit(tmp_path, capsys, monkeypatch, args, words):
    """Malformed geometry, open shells, unknown elements or bases and bad options: exit 1, one line."""
    for name, (text, _) in BAD_XYZ.items():
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    for w in words:
        assert w in err[0], (w, err[0])


def test_old_timeout_flag_still_parses():
    """--timeout, the flag before the dist section, still sets dist.timeout_s (argparse takes it as the
    unambiguous prefix of --timeout-s)."""
    from torchhpc.ext.ccsdt.config import CCSDTOptions
    from torchhpc.ext.core.cli import job_parser, options_from_args

    args = job_parser("torchhpc ccsdt", CCSDTOptions).parse_args(["--inputs", "x.npz", "--timeout", "5"])
    assert options_from_args(CCSDTOptions, args).dist.timeout_s == 5.0


def test_usage_errors_exit_2(capsys):
    """A flag without its value, or an unknown flag, is an argparse usage error (exit 2, one line)."""
    for args in (["--atom"], ["--atom", WATER, "--no-such-flag"]):
        with pytest.raises(SystemExit) as exc:
            main(args)
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "error:" in err[0]


def test_cuda_request_without_a_gpu_is_refused(capsys):
    """--device cuda on a machine without CUDA is one clear line (skipped where a GPU exists)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert main(["--atom", WATER, "--basis", "sto-3g", "--device", "cuda"]) == 1
    assert "no CUDA device" in capsys.readouterr().err


def test_geometry_helpers():
    """--atom strings split on ';' or newlines; formulas are in Hill order."""
    atoms = parse_atom_string("O 0 0 0\nH 0, 0, 1 ; H 0 1 0")
    assert [a[0] for a in atoms] == ["O", "H", "H"] and atoms[1][1] == (0.0, 0.0, 1.0)
    assert hill_formula(["O", "H", "H"]) == "H2O"
    assert hill_formula(["H", "C", "Cl", "H", "H", "H"]) == "CH4Cl"
    assert hill_formula(["N", "H", "H", "H"]) == "H3N"


def test_a_memory_budget_too_small_is_refused_before_the_scf(monkeypatch):
    """--max-memory below the (T)'s least need is refused before RHF and CCSD run (they took seconds to hours
    first), with the (T)'s own message; the orbitals it counts are PySCF's after set_frozen."""
    from pyscf import cc, scf

    from torchhpc.ext.ccsdt import commands, io
    from torchhpc.ext.ccsdt.config import CCSDTOptions, MoleculeOptions
    from torchhpc.ext.ccsdt.molecule import build_molecule
    from torchhpc.ext.core.errors import InputError

    def scf_ran(*args, **kwargs):
        raise AssertionError("RHF and CCSD ran before the memory check")

    monkeypatch.setattr(io, "prepare_triples", scf_ran)
    n2 = "N 0 0 0; N 0 0 1.0977"
    for frozen in (False, True):
        options = CCSDTOptions(molecule=MoleculeOptions(atom=n2, basis="cc-pvdz", frozen_core=frozen), max_memory=0.01)
        with pytest.raises(InputError, match=f"nocc={5 if frozen else 7}, nvir=21 even out of core"):
            commands.compute(options)
    for atom, basis in ((n2, "cc-pvdz"), (WATER, "6-31g"), ("Ne 0 0 0", "cc-pvtz")):
        mol = build_molecule(parse_atom_string(atom), basis, 0, "angstrom")
        mycc = cc.CCSD(scf.RHF(mol))
        mycc.set_frozen()
        seen: dict = {}
        monkeypatch.setattr("torchhpc.ext.ccsdt.slices.sliced_layout",
                            lambda o, v, *a, seen=seen, **k: seen.update(nocc=o, nvir=v))
        options = CCSDTOptions(molecule=MoleculeOptions(atom=atom, basis=basis, frozen_core=True), max_memory=1.0)
        commands.check_memory_before_scf(options)
        assert seen == {"nocc": mycc.nocc, "nvir": mycc.nmo - mycc.nocc}, atom


def test_the_size_line_is_said_once_per_job_and_a_core_that_takes_everything_is_one_line(capsys, monkeypatch):
    """With ``--nproc N`` the launcher says the size line as the job starts (it passes the ranks' other lines on
    at the end), so a rank under it says none; a frozen core that leaves no correlated orbital (O at charge
    +8 keeps one occupied orbital, its 1s) is one line, not PySCF's assertion deep in CCSD, with or without
    --json."""
    from torchhpc.ext.core.launch import LAUNCHER_ENV

    monkeypatch.setenv(LAUNCHER_ENV, "1")
    assert main(["--atom", WATER, "--basis", "sto-3g"]) == 0
    assert "ccsdt:" not in capsys.readouterr().err
    monkeypatch.delenv(LAUNCHER_ENV)
    for extra in ([], ["--json"]):
        assert main(["--atom", WATER, "--basis", "sto-3g", "--charge", "8", "--frozen-core", *extra]) == 1
        assert capsys.readouterr().err.splitlines() == [
            "torchhpc.trainers.ccsdt: error: the frozen core takes all 1 occupied orbital(s) of this molecule "
            "(charge 8): nothing is left to correlate; drop --frozen-core"]
