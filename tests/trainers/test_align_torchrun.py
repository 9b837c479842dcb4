"""``torchrun -m torchhpc.trainers.segalign``: ranks share the query intervals and strands, output as one process."""

from __future__ import annotations

import pytest
from harness.multiproc import torchrun

from torchhpc.ext.segalign.simulate import simulate_pair


@pytest.mark.distributed
def test_two_ranks_write_exactly_the_one_process_output(tmp_path, capsys):
    """2 torchrun ranks (6 query intervals of 1 kbp per strand, strands split between ranks) write the same
    bytes as one process, and rank 0's --stats counts the whole job's hits."""
    import json

    from torchhpc.trainers.cli import main

    sim = simulate_pair(6000, inversions=1, inversion_length=1500, duplications=1, duplication_length=800, seed=3)
    sim.write(tmp_path / "t.fa", tmp_path / "q.fa")
    args = [str(tmp_path / "t.fa"), str(tmp_path / "q.fa"), "--interval", "1000", "--stats"]
    assert main(["align", *args, "--output", str(tmp_path / "one.maf")]) == 0
    one_stats = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    res = torchrun(2, ["-m", "torchhpc.trainers.segalign", *args, "--output", str(tmp_path / "two.maf")],
                   timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    two = (tmp_path / "two.maf").read_bytes()
    assert two == (tmp_path / "one.maf").read_bytes() and two.count(b"\na score=") >= 4
    stats = json.loads([ln for ln in res.stderr.splitlines() if ln.startswith("{")][-1])
    assert stats["ranks"] == 2 and stats["hits"] == one_stats["hits"] and stats["hsps"] == one_stats["hsps"]


@pytest.mark.distributed
def test_nproc_relaunches_under_torchrun_with_the_same_output(tmp_path, capsys):
    """`torchhpc align ... --nproc 2` runs the command on 2 torchrun ranks (the resolved options handed on):
    the same bytes as one process, and --stats counts 2 ranks."""
    import json

    from torchhpc.trainers.cli import main

    sim = simulate_pair(6000, inversions=1, inversion_length=1500, duplications=1, duplication_length=800, seed=3)
    sim.write(tmp_path / "t.fa", tmp_path / "q.fa")
    args = [str(tmp_path / "t.fa"), str(tmp_path / "q.fa"), "--interval", "1000", "--stats"]
    assert main(["align", *args, "--output", str(tmp_path / "one.maf")]) == 0
    capsys.readouterr()
    assert main(["align", *args, "--nproc", "2", "--timeout-s", "120", "--output", str(tmp_path / "two.maf")]) == 0
    assert (tmp_path / "two.maf").read_bytes() == (tmp_path / "one.maf").read_bytes()
    stats = json.loads([ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("{")][-1])
    assert stats["ranks"] == 2
