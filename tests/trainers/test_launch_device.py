"""Every command that launches torchrun refuses a device this machine does not have in one line, before
any rank starts (on a machine with CUDA these cases are skipped: the device exists there)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
WATER = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"


@pytest.fixture
def no_launch(monkeypatch):
    from torchhpc.ext.core import launch

    monkeypatch.setattr(launch, "torchrun", lambda *a, **k: pytest.fail("torchrun must not start"))


def _commands(tmp: Path) -> dict[str, list[str]]:
    from torchhpc.ext.segalign.simulate import simulate_pair

    simulate_pair(2000, seed=1).write(tmp / "t.fa", tmp / "q.fa")
    runs = f"run.root={tmp}"
    return {
        "distcheck": ["distcheck", "--nproc", "2", "--device", "cuda"],
        "gems": ["gems", "train", "--config", str(REPO / "configs/gems/debug.yaml"), "--device", "cuda",
                 "--set", runs],
        "ccsdt": ["ccsdt", "--atom", WATER, "--basis", "sto-3g", "--nproc", "2", "--device", "cuda"],
        "symnmf": ["symnmf", "run", "--config", str(REPO / "configs/symnmf/sbm.yaml"), "--nproc", "2",
                   "--device", "cuda", "--set", runs],
        "kraken": ["kraken", "train", "--config", str(REPO / "configs/kraken/debug.yaml"), "--nproc", "2",
                   "--device", "cuda", "--set", runs],
        "sched": ["sched", "train", "--config", str(REPO / "configs/sched/debug.yaml"), "--nproc", "2",
                  "--device", "cuda", "--set", runs],
        "align": ["align", str(tmp / "t.fa"), str(tmp / "q.fa"), "--nproc", "2", "--device", "cuda",
                  "--output", str(tmp / "out.maf")],
        "foresight": ["foresight", "run", "--config", str(REPO / "configs/foresight/debug.yaml"), "--nproc", "2",
                      "--device", "cuda", "--set", runs],
        "collectives": ["collectives", "bench", "--config", str(REPO / "configs/collectives/debug.yaml"),
                        "--device", "cuda"],
    }


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
@pytest.mark.parametrize("name", ["distcheck", "gems", "ccsdt", "symnmf", "kraken", "sched", "align", "foresight",
                                  "collectives"])
def test_device_cuda_without_a_gpu_is_one_line_before_launching(name, tmp_path, torchhpc_main, no_launch):
    """`--device cuda` (with several processes) on a machine without CUDA: exit 1, one line naming the device."""
    if name == "ccsdt":
        pytest.importorskip("pyscf")
    code, out, err = torchhpc_main(*_commands(tmp_path)[name])
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 1 and len(lines) == 1, err
    assert "cuda" in lines[0].lower() and "no CUDA device" in lines[0], lines[0]
