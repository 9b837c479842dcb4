"""The layout and packaging contract of ../shared/DESIGN.md."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CODE = {"ext": "torchhpc.ext", "triton_kernels": "torchhpc.triton_kernels", "trainers": "torchhpc.trainers",
        "envs": "torchhpc.envs"}


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_root_holds_the_suite_folders():
    """The repository root has the folders and files the design names."""
    for name in [*CODE, "configs", "tests", "benchmarks", "pyproject.toml", "Makefile", "README.md", ".ci/run"]:
        assert (REPO / name).exists(), name


def test_every_code_package_is_listed_in_pyproject():
    """Each folder with an __init__.py is a listed package (else a wheel would silently miss it)."""
    cfg = _pyproject()["tool"]["setuptools"]
    assert cfg["package-dir"] == {pkg: folder for folder, pkg in CODE.items()}
    listed = set(cfg["packages"])
    found = set()
    for folder, prefix in CODE.items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder)
            found.add(".".join([prefix, *rel.parts]))
    assert found == listed


def test_namespace_imports_and_console_script():
    """torchhpc.* imports from the install and the console script points at the CLI."""
    for mod in CODE.values():
        importlib.import_module(mod)
    assert _pyproject()["project"]["scripts"]["torchhpc"] == "torchhpc.trainers.cli:main"
    from torchhpc.trainers.cli import main

    assert callable(main)


def test_ext_never_imports_trainers():
    """The dependency direction is one way: nothing in ext/ imports torchhpc.trainers."""
    pattern = re.compile(r"^\s*(from|import)\s+torchhpc\.trainers", re.M)
    offenders = [p for p in (REPO / "ext").rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


def test_data_files_in_code_folders_are_package_data():
    """Every non-Python file tracked in a code folder (sched's pretrained policies, collectives' script)
    matches a package-data pattern of its package, else a wheel install would lack it."""
    import fnmatch
    import subprocess

    data = _pyproject()["tool"]["setuptools"].get("package-data", {})
    tracked = subprocess.run(["git", "ls-files", *CODE], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    missing = []
    for rel in tracked:
        path = Path(rel)
        if path.suffix in {".py", ".pyi"} or path.name.endswith(".md"):
            continue
        # the package is the deepest folder above the file that has an __init__.py
        pkg_dir = next(p for p in path.parents if (REPO / p / "__init__.py").exists())
        pkg = ".".join([CODE[pkg_dir.parts[0]], *pkg_dir.parts[1:]])
        inner = path.relative_to(pkg_dir).as_posix()
        if not any(fnmatch.fnmatch(inner, pat) for pat in data.get(pkg, [])):
            missing.append(rel)
    assert not missing, f"not in pyproject package-data: {missing}"
