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


def _gpu_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check_script", REPO / "benchmarks" / "gpu.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_segalign_rows_carry_the_in_process_seconds_of_stats():
    """The segalign step reads ``--stats``' last JSON line from standard error: the in-process seconds beside
    the command's wall time (start-up apart); no JSON, no figures."""
    gpu = _gpu_module()
    err = 'a warning\n{"index_seconds": 0.5, "filter_seconds": 1.234, "hits": 9, "gapped_seconds": 2.0}\n'
    res = subprocess.CompletedProcess([], 0, stdout="", stderr=err)
    assert gpu._align_stats(res) == {"index_seconds": 0.5, "filter_seconds": 1.23, "gapped_seconds": 2.0}
    assert gpu._align_stats(subprocess.CompletedProcess([], 0, stdout="", stderr="no stats\n")) == {}


def test_side_by_side_anchors_fail_with_their_error_and_leave_nothing_running():
    """LASTZ's two runs go side by side: one that fails raises its standard error's tail, and the other is
    killed, not left behind; each run's own seconds come back in order."""
    import pytest

    gpu = _gpu_module()
    marker = f"gpu-check-{id(gpu)}"
    with pytest.raises(RuntimeError, match="lastz exited 3: no such file"):
        gpu._timed_together([["sh", "-c", "echo no such file >&2; exit 3"],
                             [sys.executable, "-c", "import time; time.sleep(30)", marker]], 60, "lastz")
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert left.stdout.strip() == ""
    with pytest.raises(FileNotFoundError):  # one that cannot start: the one started before it is stopped
        gpu._timed_together([[sys.executable, "-c", "import time; time.sleep(30)", marker],
                             [str(REPO / "no-such-lastz")]], 60, "lastz")
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.strip() == ""
    took = gpu._timed_together([["true"], ["true"]], 60, "true")
    assert len(took) == 2 and all(t >= 0 for t in took)


def test_gpu_machine_script_says_what_is_missing_in_one_line(tmp_path):
    """benchmarks/gpu_machine.sh: run without a prepared folder is one line naming prepare (exit 1); an
    unknown command prints the usage (exit 2), an unknown option of prepare is one line and touches nothing."""
    import os

    script = str(REPO / "benchmarks" / "gpu_machine.sh")
    env = {**os.environ, "GPUCHECK_DIR": str(tmp_path / "absent")}
    res = subprocess.run([script, "run"], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 1 and res.stderr.strip().splitlines() == [
        f"gpu_machine.sh: no {tmp_path / 'absent'}/ here: run 'prepare' where there is internet"]
    res = subprocess.run([script, "bogus"], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 2 and res.stderr.startswith("usage:")
    res = subprocess.run([script, "prepare", "--nvcmop"], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "gpu_machine.sh: prepare takes only --nvcomp, got '--nvcmop'"]
    assert not (tmp_path / "absent").exists() and not (tmp_path / "absent.new").exists()


def test_peaks_follow_the_card_cuda_names():
    """The % columns use the lent card's datasheet peaks (an H100 is not an H200: 3,350 against 4,800 GB/s;
    a PCIe H100 has 51 FP64 TFLOP/s); a card not listed gets none rather than another card's."""
    gpu = _gpu_module()
    assert gpu.device_peaks("NVIDIA H200") == (67.0, 4800.0)
    assert gpu.device_peaks("NVIDIA H100 80GB HBM3") == (67.0, 3350.0)
    assert gpu.device_peaks("NVIDIA H100 PCIe") == (51.0, 2000.0)
    assert gpu.device_peaks("NVIDIA H100 NVL") == (60.0, 3900.0)
    assert gpu.device_peaks("NVIDIA A100-SXM4-80GB") == (19.5, 2039.0)
    assert gpu.device_peaks("NVIDIA H200 NVL") == (60.0, 4800.0)
    assert gpu.device_peaks("NVIDIA L4") is None and gpu.device_peaks(None) is None
    assert gpu.device_peaks("NVIDIA H100 80GB HBM3 MIG 1g.10gb") is None  # a slice of the card
    assert gpu.device_peaks("NVIDIA GH200 480GB") is None


def test_the_dgemm_row_is_flops_over_time_and_the_cards_peak(monkeypatch):
    """The DGEMM anchor row: 2 n^3 flops over do_bench's milliseconds, as % of the card's FP64 peak (here a
    stand-in timer: the CPU has no CUDA events)."""
    import torch
    import triton.testing

    gpu = _gpu_module()
    calls = []
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, **kw: (calls.append(fn()), 1.0)[1])
    monkeypatch.setattr(gpu, "_peaks", lambda: (67.0, 3350.0))
    row = gpu._dgemm_row("cpu", n=1000)
    assert calls and calls[0].shape == (1000, 1000) and calls[0].dtype == torch.float64
    assert row == {"name": "cuBLAS DGEMM 1000^3", "seconds": 0.001, "tflops": 2.0, "pct_fp64_peak": 3.0}
    monkeypatch.setattr(gpu, "_peaks", lambda: None)
    assert "pct_fp64_peak" not in gpu._dgemm_row("cpu", n=1000)


def test_a_failed_dgemm_is_a_row_and_its_time_comes_off_the_ccsdt_budget(monkeypatch):
    """The DGEMM anchor runs before the (T) rows: when it fails the step still returns the (T) rows, the
    failure as a row; the time it took (CUDA's start-up included) is taken from the rows' 44 s budget."""
    gpu = _gpu_module()
    seen = {}

    def dgemm(device):
        raise RuntimeError("CUDA out of memory")

    def rows(device, sizes, variants, budget_s, warm):
        seen["budget"] = budget_s
        return [{"name": "(T) o=20 v=120 pair blocks, fused epilogue"}]

    monkeypatch.setattr(gpu, "_dgemm_row", dgemm)
    monkeypatch.setattr(gpu, "_ccsdt_rows", rows)
    monkeypatch.setattr(gpu, "_ccsdt_variants", lambda: dict.fromkeys("abcdef"))
    out = gpu.step_ccsdt("cuda", None)
    assert out[0] == {"name": "cuBLAS DGEMM", "failed": "RuntimeError: CUDA out of memory"}
    assert out[1]["name"].startswith("(T)") and 0 < seen["budget"] <= 44.0


def test_a_failed_ccsdt_variant_is_its_row_and_the_others_stay(monkeypatch):
    """A (T) variant that fails (out of memory at o=40 v=300, say) is its own row: the rows measured before
    and after it are kept (one failure lost the whole step before)."""
    import torch

    gpu = _gpu_module()
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(gpu, "_peaks", lambda: None)

    def fail(args):
        raise RuntimeError("CUDA out of memory")

    variants = {"pair": lambda a: -1.0, "mma": fail, "cuda-core": lambda a: -1.0}
    rows = gpu._ccsdt_rows("cpu", ((2, 3, [(n, 0) for n in variants]),), variants, budget_s=60.0, warm=True)
    assert [r["name"] for r in rows] == ["(T) o=2 v=3 pair", "(T) o=2 v=3 mma", "(T) o=2 v=3 cuda-core"]
    assert rows[1] == {"name": "(T) o=2 v=3 mma", "failed": "RuntimeError: CUDA out of memory"}
    assert "tflops" in rows[0] and rows[2]["differs_from_first_by"] == 0.0
