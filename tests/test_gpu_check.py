"""`make gpu-check` on a machine without a GPU: it lists every step with its limit, skips each with the
reason, writes its table, fits in 8 minutes, and refuses bad input in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GPU = [sys.executable, str(REPO / "benchmarks" / "gpu.py")]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*GPU, *args], capture_output=True, text=True, cwd=REPO, timeout=300,
                          stdin=subprocess.DEVNULL)


def test_cpu_run_lists_and_skips_every_step_within_eight_minutes(tmp_path):
    """--device cpu: every step named with its limit, the limits add to at most 480 s, each step skipped
    with 'needs CUDA' in the JSON of the suite's schema."""
    res = _run("--device", "cpu", "--out", str(tmp_path))
    assert res.returncode == 0, res.stderr
    header = res.stdout.splitlines()[0]
    total = int(header.split(",")[1].split()[0])
    assert total <= 480
    names = ["kernels", "segalign", "ccsdt", "foresight", "kraken", "sched", "symnmf", "pliner"]
    assert all(any(line.startswith(n) for line in res.stdout.splitlines()) for n in names)
    doc = json.loads((tmp_path / "core" / "gpu-check.json").read_text())
    assert doc["system"] == "core" and doc["benchmark"] == "gpu-check"
    assert [r["step"] for r in doc["rows"]] == names
    assert all(r["status"] == "skipped" and r["why"] == "needs CUDA" for r in doc["rows"])


def test_long_steps_run_only_when_named():
    """A step longer than the 8 minutes allow (ccsdt at o=40 v=300) is not in a plain run, only in --only."""
    plain = _run("--dry-run")
    named = _run("--dry-run", "--only", "ccsdt-large")
    assert plain.returncode == named.returncode == 0
    assert "ccsdt-large" not in plain.stdout and named.stdout.splitlines()[1].startswith("ccsdt-large limit 240 s")


def test_bad_input_is_one_line():
    """An unknown step, or CUDA asked for where there is none, is one line and exit status 1."""
    import torch

    res = _run("--only", "segalign,bogus", "--dry-run")
    assert res.returncode == 1 and res.stderr.strip().splitlines() == [
        "gpu-check: error: unknown step(s) ['bogus']; steps: kernels, segalign, ccsdt, foresight, kraken, sched, "
        "symnmf, pliner, ccsdt-large"]
    if not torch.cuda.is_available():
        res = _run("--device", "cuda")
        assert res.returncode == 1 and len(res.stderr.strip().splitlines()) == 1 and "no CUDA" in res.stderr
