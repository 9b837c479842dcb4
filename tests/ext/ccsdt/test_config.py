"""CCSDTOptions / MoleculeOptions: one definition checked alike from the library, YAML and the flags."""

from __future__ import annotations

import pytest

from torchhpc.ext.ccsdt.config import CCSDTOptions, CCSDTTour, MoleculeOptions
from torchhpc.ext.core.cli import describe_flags
from torchhpc.ext.core.config import load_config
from torchhpc.ext.core.errors import ConfigError

WATER = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"


def test_flags_keep_their_spellings():
    """The generated flags are the ones torchhpc ccsdt always had (--atom, --frozen-core, --max-memory, ...),
    plus --nproc and --timeout of the distributed (T)."""
    flags = {row[0] for row in describe_flags(CCSDTOptions)}
    assert flags == {"--atom", "--xyz", "--basis", "--charge", "--unit", "--frozen-core", "--inputs", "--device",
                     "--backend", "--max-memory", "--threads", "--compare-pyscf", "--json", "--save-inputs",
                     "--nproc", "--timeout"}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"threads": 0}, "threads"),
        ({"nproc": 0}, "nproc"),
        ({"timeout": 0.0}, "timeout"),
        ({"max_memory": 0.0}, "max_memory"),
        ({"backend": "fortran"}, "backend"),
        ({"device": "tpu"}, "device"),
        ({"molecule": MoleculeOptions(atom=WATER, basis=None)}, "--basis is required"),
        ({"molecule": MoleculeOptions()}, "exactly one of --atom, --xyz or --inputs"),
        ({"molecule": MoleculeOptions(atom=WATER, basis="sto-3g"), "inputs": "x.npz"}, "exactly one"),
        ({"molecule": MoleculeOptions(), "inputs": "x.npz", "compare_pyscf": True}, "--compare-pyscf needs"),
    ],
)
def test_library_constructor_checks_ranges_and_sources(kwargs, message):
    """Building the options in Python gets the same checks as the command line: ConfigError naming the option."""
    kwargs.setdefault("molecule", MoleculeOptions(atom=WATER, basis="sto-3g"))
    with pytest.raises(ConfigError, match=message):
        CCSDTOptions(**kwargs)


def test_molecule_options_refuse_two_geometries_and_bad_units():
    """--atom and --xyz together, or a unit other than angstrom/bohr, are refused by MoleculeOptions itself."""
    with pytest.raises(ConfigError, match="not both"):
        MoleculeOptions(atom=WATER, xyz="w.xyz")
    with pytest.raises(ConfigError, match="unit"):
        MoleculeOptions(atom=WATER, unit="nm")


def test_yaml_and_set_use_the_same_keys(tmp_path):
    """A YAML file with a molecule section loads; --set overrides it; defaults fill the rest."""
    path = tmp_path / "water.yaml"
    path.write_text(f"molecule:\n  atom: '{WATER}'\n  basis: sto-3g\nthreads: 2\n")
    cfg = load_config(CCSDTOptions, path, ["molecule.frozen_core=true"])
    assert (cfg.molecule.basis, cfg.molecule.frozen_core, cfg.threads, cfg.max_memory) == ("sto-3g", True, 2, 4000.0)
    assert CCSDTTour().basis == "6-31g"
