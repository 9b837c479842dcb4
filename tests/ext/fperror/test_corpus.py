"""tools/fperror_corpus.py: the benchmark folders of a git repository or a plain folder, one row per file."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[3] / "tools" / "fperror_corpus.py"

FILES = {
    # FPTaylor: Constants, a rounded definition, a constraint (a note)
    "benchmarks/gas.txt": "Constants k = 0.5;\nVariables v in [1, 2];\nDefinitions r rnd64= k * v + 1;\n"
                          "Constraints c: v >= 1;\nExpressions gas = r;\n",
    # Satire: a lone ' ;' statement
    "large_benchmarks/sum/sum.txt": "INPUTS { a fl64 : (0, 1); b fl64 : (0, 1); }\nOUTPUTS { s; }\n"
                                    "EXPRS {\n ;\n s rnd64 = a + b;\n}\n",
    # not an input file: refused in one line
    "benchmarks/results.txt": "benchmark  bound  time\ndoppler1  1e-13  5.4\n",
    # outside the benchmark folders: not read
    "src/notes.txt": "Variables x in [0, 1]; Expressions x;\n",
}


def _tool():
    spec = importlib.util.spec_from_file_location("fperror_corpus", TOOL)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fperror_corpus"] = mod  # its dataclass looks its module up there
    spec.loader.exec_module(mod)
    return mod


def _write(root: Path) -> None:
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def _rows(tool, src: Path, out: Path) -> dict[str, dict]:
    assert tool.main([str(src), "--bb-iters", "0", "--json", str(out)]) == 0
    (rows,) = json.loads(out.read_text()).values()
    return {r["file"]: r for r in rows}


def _check(rows: dict[str, dict]) -> None:
    assert sorted(rows) == ["benchmarks/gas.txt", "benchmarks/results.txt", "large_benchmarks/sum/sum.txt"]
    gas, res, s = rows["benchmarks/gas.txt"], rows["benchmarks/results.txt"], rows["large_benchmarks/sum/sum.txt"]
    assert (gas["outcome"], gas["format"], gas["inputs"], gas["outputs"], gas["ops"]) == ("parsed", "fptaylor", 1, 1, 2)
    assert "Constraints are not used" in gas["detail"] and 0 < gas["bound"] < 1e-14
    assert (s["outcome"], s["format"], s["inputs"], s["ops"]) == ("parsed", "satire", 2, 1)
    assert res["outcome"] == "refused" and res["detail"].startswith("benchmarks/results.txt: cannot tell the input format")


def test_folder_rows(tmp_path, capsys):
    """A folder: the files under benchmarks/ and large_benchmarks/ parsed, bounded or refused in one line."""
    _write(tmp_path / "src")
    _check(_rows(_tool(), tmp_path / "src", tmp_path / "rows.json"))
    assert "3 files: 2 parsed, 1 refused, 0 absent" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_repository_rows_read_from_head(tmp_path):
    """A git repository is read from HEAD's tree (not the work tree): a later edit does not count."""
    repo = tmp_path / "repo"
    _write(repo)

    def git(*args):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "corpus")
    (repo / "benchmarks" / "gas.txt").write_text("not committed")
    _check(_rows(_tool(), repo, tmp_path / "rows.json"))
