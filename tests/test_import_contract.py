"""The import contract (pyproject's [tool.importlinter]) holds, and it catches what it is there to catch."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("ext", "trainers", "envs", "triton_kernels")


def _lint_imports(root: Path, config: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("import-linter is not installed (make setup installs it)")
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run([exe, "--config", str(config), "--no-cache"], capture_output=True, text=True, env=env,
                          cwd=root, timeout=300, stdin=subprocess.DEVNULL)


@pytest.fixture
def tree(tmp_path) -> Path:
    """A copy of the package's folders as the ``torchhpc`` namespace, with the project's contract."""
    for folder in PACKAGES:
        shutil.copytree(REPO / folder, tmp_path / "torchhpc" / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_project_keeps_its_import_contract(tree):
    """Imports point one way (trainers > envs > ext.<system> > ext.core > triton_kernels) and no package has
    an import cycle, function-level imports included."""
    res = _lint_imports(tree, tree / "pyproject.toml")
    assert res.returncode == 0, res.stdout[-3000:]
    assert "2 kept, 0 broken" in res.stdout


@pytest.mark.parametrize("where,line,broken", [
    ("ext/core/errors.py", "def _planted():\n    from torchhpc.trainers import cli  # noqa\n",
     "torchhpc.ext.core is not allowed to import torchhpc.trainers"),
    ("ext/core/config.py", "def _planted():\n    from torchhpc.ext.sched import config  # noqa\n",
     "torchhpc.ext.core is not allowed to import torchhpc.ext.sched"),
    ("ext/symnmf/config.py", "def _planted():\n    from torchhpc.ext.symnmf import solvers  # noqa\n",
     "No cycles are allowed in torchhpc.ext.symnmf"),
])
def test_a_planted_wrong_way_import_or_cycle_breaks_it(tree, where, line, broken):
    """A function-level import that points the wrong way, or closes a cycle, makes the check fail naming it."""
    with open(tree / "torchhpc" / where, "a") as fh:
        fh.write("\n\n" + line)
    res = _lint_imports(tree, tree / "pyproject.toml")
    assert res.returncode != 0 and broken in res.stdout, res.stdout[-3000:]
