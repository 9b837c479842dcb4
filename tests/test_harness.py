"""The suite's own helpers: the tolerance classes compare what they say, the margin recorder is the op's."""

from __future__ import annotations

import pytest
import torch
from harness.margins import ChoiceMargins
from harness.tolerance import EXACT, FLOAT32_TRAJECTORY, assert_close_tree


def test_close_tree_compares_floats_within_their_class_and_the_rest_exactly():
    """Floats pass within (rel, abs) and fail outside; ints, strings, keys and lengths are exact."""
    want = {"loss": 1.0, "rows": 3, "name": "a", "curve": [0.5, 0.25]}
    assert_close_tree({"loss": 1.0 + 5e-6, "rows": 3, "name": "a", "curve": [0.5, 0.25]}, want, FLOAT32_TRAJECTORY)
    for bad in ({"loss": 1.0 + 5e-5, "rows": 3, "name": "a", "curve": [0.5, 0.25]},
                {"loss": 1.0, "rows": 4, "name": "a", "curve": [0.5, 0.25]},
                {"loss": 1.0, "rows": 3.0, "name": "a", "curve": [0.5, 0.25]},
                {"loss": 1.0, "rows": 3, "name": "b", "curve": [0.5, 0.25]},
                {"loss": 1.0, "rows": 3, "name": "a", "curve": [0.5]},
                {"loss": 1.0, "rows": 3, "name": "a"}):
        with pytest.raises(AssertionError):
            assert_close_tree(bad, want, FLOAT32_TRAJECTORY)
    with pytest.raises(AssertionError, match=r"\.kl"):
        assert_close_tree({"kl": 2e-7}, {"kl": 0.0}, EXACT, rules={"kl": (0.0, 1e-7)})
    assert_close_tree({"kl": 9e-8}, {"kl": 0.0}, EXACT, rules={"kl": (0.0, 1e-7)})


def test_margins_record_the_draws_multinomial_makes_without_changing_them():
    """Under the recorder a seeded run draws the same actions, one margin per draw, each the gap between
    the winner of the exponential race and its runner-up; a float argmax records its own gap."""
    probs = torch.softmax(torch.randn(50, 7, generator=torch.Generator().manual_seed(0)), -1)
    torch.manual_seed(4)
    plain = torch.distributions.Categorical(probs=probs).sample()
    torch.manual_seed(4)
    with ChoiceMargins() as m:
        recorded = torch.distributions.Categorical(probs=probs).sample()
        torch.tensor([[1.0, 3.0, 2.0]]).argmax(-1)
    assert torch.equal(plain, recorded)
    assert len(m.sampled) == 50 and all(0 <= x <= 1 for x in m.sampled)
    assert m.greedy == [pytest.approx(1 / 3)]


def test_cli_here_returns_what_the_console_script_would_and_stops_a_hang(cli_here, monkeypatch):
    """The in-process CLI: sys.exit's None / int / message become the status a process exits with (0, the code
    mod 256, 1 with the message on stderr); torch's thread count is put back after a command sets it; a
    command that outlives ``timeout`` is stopped (TimeoutExpired) instead of holding the worker."""
    import subprocess
    import sys
    import time

    import torchhpc.trainers.cli as entry

    for code, status in ((None, 0), (3, 3), (258, 2), ("boom", 1)):
        monkeypatch.setattr(entry, "main", lambda argv, code=code: sys.exit(code))
        res = cli_here("x")
        assert res.returncode == status, code
    assert res.stderr == "boom\n"
    threads = torch.get_num_threads()
    monkeypatch.setattr(entry, "main", lambda argv: torch.set_num_threads(threads + 1))
    assert cli_here("x").returncode == 0 and torch.get_num_threads() == threads
    monkeypatch.setattr(entry, "main", lambda argv: time.sleep(60))
    with pytest.raises(subprocess.TimeoutExpired):
        cli_here("x", timeout=0.2)
