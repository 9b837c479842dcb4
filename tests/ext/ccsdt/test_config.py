"""CCSDTOptions / MoleculeOptions: one definition checked alike from the library, YAML and the flags."""

from __future__ import annotations

import pytest

from torchhpc.ext.ccsdt.config import CCSDTDist, CCSDTOptions, CCSDTTour, MoleculeOptions
from torchhpc.ext.core.cli import describe_flags
from torchhpc.ext.core.config import DistOptions, dump_config, load_config
from torchhpc.ext.core.errors import ConfigError

WATER = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"


def test_flags_keep_their_spellings():
    """The generated flags are the ones torchhpc ccsdt always had (--atom, --frozen-core, --max-memory, ...),
    --device, --threads and --nproc of the dist section, and its --timeout-s (the suite's one spelling)."""
    flags = {row[0] for row in describe_flags(CCSDTOptions)}
    assert flags == {"--atom", "--xyz", "--basis", "--charge", "--unit", "--frozen-core", "--inputs", "--device",
                     "--backend", "--max-memory", "--threads", "--compare-pyscf", "--json", "--save-inputs",
                     "--nproc", "--timeout-s"}


def test_dist_section_is_core_dist_options_with_a_600_s_timeout():
    """dist is core's DistOptions (device, threads, nproc, timeout_s) with ccsdt's defaults: 0 threads
    (torch's default), one process and 600 s for a peer (PySCF on rank 0 takes a while)."""
    dist = CCSDTOptions(inputs="x.npz").dist
    assert isinstance(dist, DistOptions)
    assert (dist.device, dist.threads, dist.nproc, dist.timeout_s) == ("auto", 0, 1, 600.0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"threads": -1}, "threads"),
        ({"nproc": 0}, "nproc"),
        ({"nproc": 5000}, "nproc"),
        ({"timeout_s": 0.0}, "timeout_s"),
        ({"device": "tpu"}, "device"),
    ],
)
def test_dist_options_built_in_python_are_range_checked(kwargs, message):
    """CCSDTDist built in Python gets the checks of the YAML loader: a ConfigError naming the option."""
    with pytest.raises(ConfigError, match=message):
        CCSDTDist(**kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_memory": 0.0}, "max_memory"),
        ({"backend": "fortran"}, "backend"),
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
    path.write_text(f"molecule:\n  atom: '{WATER}'\n  basis: sto-3g\ndist:\n  threads: 2\n")
    cfg = load_config(CCSDTOptions, path, ["molecule.frozen_core=true", "dist.nproc=2"])
    assert (cfg.molecule.basis, cfg.molecule.frozen_core, cfg.dist.threads, cfg.dist.nproc, cfg.max_memory) == \
        ("sto-3g", True, 2, 2, None)  # None: 4000 MB on the CPU, 80 % of the free memory on CUDA
    assert CCSDTTour().basis == "6-31g"


def test_old_keys_load_with_one_warning_each(tmp_path, capsys):
    """A YAML file with the keys before the dist section (device, threads, nproc, timeout) still loads into
    dist.*, with one deprecation line per key; so does --set timeout=."""
    path = tmp_path / "old.yaml"
    path.write_text("inputs: x.npz\ndevice: cpu\nthreads: 2\nnproc: 3\ntimeout: 42\n")
    cfg = load_config(CCSDTOptions, path)
    assert cfg.dist == CCSDTDist(device="cpu", threads=2, nproc=3, timeout_s=42.0)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("torchhpc: warning:") for line in err)
    assert any("'timeout' is now 'dist.timeout_s'" in line for line in err)
    cfg = load_config(CCSDTOptions, None, ["inputs=x.npz", "timeout=7"])
    assert cfg.dist.timeout_s == 7.0
    assert "'timeout' is now 'dist.timeout_s'" in capsys.readouterr().err


def test_resolved_config_round_trips(tmp_path):
    """The YAML that --nproc hands to the ranks (dump_config) loads back to the same options, no warning."""
    cfg = CCSDTOptions(inputs=tmp_path / "x.npz", max_memory=3.0, dist=CCSDTDist(threads=1, nproc=2, timeout_s=9.0))
    path = tmp_path / "resolved.yaml"
    path.write_text(dump_config(cfg))
    assert load_config(CCSDTOptions, path) == cfg
