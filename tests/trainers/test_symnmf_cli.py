"""The symnmf job and CLI: the pinned debug run, --json, the run folder, bad input as one line, torchrun."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
from harness.multiproc import torchrun

from torchhpc.trainers import symnmf as trainer

REPO = Path(__file__).resolve().parents[2]
DEBUG = str(REPO / "configs/symnmf/debug.yaml")


def _run(argv, capsys):
    code = trainer.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_register_adds_run_and_segment_with_generated_help(capsys):
    """`torchhpc symnmf run --help` lists the short flags generated from the dataclass."""
    parser = argparse.ArgumentParser(prog="torchhpc")
    trainer.register(parser.add_subparsers())
    with pytest.raises(SystemExit):
        parser.parse_args(["symnmf", "run", "--help"])
    text = capsys.readouterr().out
    for flag in ("--graph", "--k", "--algo", "--seed", "--labels", "--output", "--json", "--config"):
        assert flag in text
    args = parser.parse_args(["symnmf", "run", "--graph", "g.txt", "--k", "3"])
    assert callable(args.func)


def test_debug_config_is_pinned(tmp_path, capsys, shared_data):
    """configs/symnmf/debug.yaml (football, ANLS, seed 0) reproduces its pinned residual and ARI."""
    football = str(shared_data / "graphs" / "football.gml")
    code, out, err = _run(["--config", DEBUG, "--graph", football, "--output", str(tmp_path / "r"), "--json"],
                          capsys)
    assert code == 0, err
    s = json.loads(out)
    assert s["n"] == 115 and s["k"] == 12 and s["iterations"] == PINNED["iterations"]
    assert abs(s["residual"] - PINNED["residual"]) < 1e-9
    assert abs(s["ari"] - PINNED["ari"]) < 1e-9
    run = tmp_path / "r"
    for name in ("config.yaml", "metrics.jsonl", "summary.json", "H.pt", "labels.txt", "convergence.png"):
        assert (run / name).is_file(), name
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == s["iterations"] + 1 and "nnls_s" in rows[1] and "matmul_s" in rows[1]


PINNED = {"iterations": 24, "residual": 0.6487223979425418, "ari": 0.8966500097910517}


def test_direct_form_with_labels_file_prints_ari_and_nmi(tmp_path, capsys):
    """Two planted cliques from an edge list + a one-per-line labels file: ARI = NMI = 1 in the JSON."""
    edges = [(i, j) for c in (0, 5) for i in range(c, c + 5) for j in range(i + 1, c + 5)] + [(4, 5)]
    (tmp_path / "g.txt").write_text("".join(f"{u} {v}\n" for u, v in edges))
    (tmp_path / "y.txt").write_text("0\n" * 5 + "1\n" * 5)
    code, out, err = _run(["--graph", str(tmp_path / "g.txt"), "--k", "2", "--algo", "gn", "--seed", "3",
                           "--labels", str(tmp_path / "y.txt"), "--output", str(tmp_path / "o"), "--json"], capsys)
    assert code == 0, err
    s = json.loads(out)
    assert s["ari"] == 1.0 and s["nmi"] == 1.0 and s["algo"] == "gn"
    labels = np.loadtxt(tmp_path / "o" / "labels.txt", dtype=int)
    assert labels.shape == (10, 2)
    # the same --output again: refused in one line that says what would help (not --run.resume)
    code, _, err = _run(["--graph", str(tmp_path / "g.txt"), "--k", "2", "--output", str(tmp_path / "o")], capsys)
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "already holds a run; choose another folder or remove it" in err and "--run.resume" not in err


@pytest.mark.parametrize("files,extra,message", [
    ({"g.mtx": "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 2 1.0\n"},
     ["--set", "graph.symmetrize=false"], "not symmetric"),
    ({"g.txt": "0 1 -2\n"}, [], "negative weight"),
    ({"g.txt": "0 1\n1 2\n"}, ["--k", "5"], "k = 5 is larger than the number of nodes n = 3"),
    ({"g.txt": "# no edges\n"}, [], "empty graph"),
    ({"g.txt": "0 1 nan\n"}, [], "not finite"),
    ({"g.txt": "0 0\n1 1\n2 2\n"}, ["--k", "1"], "each of the 3 node(s) is similar only to itself"),
])
def test_bad_input_is_one_line_and_exit_1(tmp_path, capsys, files, extra, message):
    """Non-symmetric, negative, k > n, empty, NaN and self-loops-only inputs: exit 1 with one line naming the
    problem, and no output written."""
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    graph = str(tmp_path / next(iter(files)))
    code, out, err = _run(["--graph", graph, "--k", "2", *extra, "--output", str(tmp_path / "o")], capsys)
    assert code == 1
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


def test_no_input_and_nan_features_are_clear_errors(tmp_path, capsys):
    """No graph at all is a ConfigError; a NaN in a feature file names the entry."""
    code, _, err = _run(["--k", "2"], capsys)
    assert code == 1 and "no input" in err
    (tmp_path / "x.csv").write_text("1,2\n3,nan\n5,6\n")
    code, _, err = _run(["--features", str(tmp_path / "x.csv"), "--k", "2", "--output", str(tmp_path / "o")],
                        capsys)
    assert code == 1 and "(1, 1) is not finite" in err


def test_features_with_fewer_distinct_points_than_clusters_are_a_warning(tmp_path, capsys):
    """50 copies of one point and 3 clusters: the run finishes, and its warnings say the clusters are arbitrary."""
    np.save(tmp_path / "same.npy", np.ones((50, 4)))
    code, out, err = _run(["--features", str(tmp_path / "same.npy"), "--k", "3", "--output", str(tmp_path / "o"),
                           "--json"], capsys)
    assert code == 0, err
    assert any("only 1 distinct point(s) among 50 for k = 3" in w for w in json.loads(out)["warnings"])


def test_isolated_nodes_are_reported_and_labelled_minus_one(tmp_path, capsys):
    """An isolated node (self-loop-free, listed with weight 0) is a warning, and its label is -1."""
    (tmp_path / "g.txt").write_text("0 1\n1 2\n2 0\n3 4\n4 5\n5 3\n6 0 0\n")
    code, out, err = _run(["--graph", str(tmp_path / "g.txt"), "--k", "2", "--output", str(tmp_path / "o"),
                           "--json"], capsys)
    assert code == 0, err
    s = json.loads(out)
    assert any("1 isolated node" in w for w in s["warnings"])
    labels = dict(np.loadtxt(tmp_path / "o" / "labels.txt", dtype=int))
    assert labels[6] == -1 and labels[0] == labels[1] == labels[2] != labels[3]


@pytest.mark.distributed
@pytest.mark.slow
def test_torchrun_job_on_2d_grid_matches_one_process(tmp_path, shared_data):
    """`torchrun -m torchhpc.trainers.symnmf` on a 1 x 2 grid gives the single-process labels and residual."""
    football = str(shared_data / "graphs" / "football.gml")
    res = torchrun(2, ["-m", "torchhpc.trainers.symnmf", "--config", DEBUG, "--graph", football,
                       "--dist.grid", "2d", "--output", str(tmp_path / "d"), "--json"], timeout=240, cwd=REPO)
    assert res.returncode == 0, res.stderr[-3000:]
    s = json.loads(res.stdout.strip().splitlines()[-1])
    assert s["processes"] == 2 and s["grid"] == [1, 2]
    assert abs(s["residual"] - PINNED["residual"]) < 1e-9 and abs(s["ari"] - PINNED["ari"]) < 1e-9


@pytest.mark.distributed
@pytest.mark.slow
def test_nproc_relaunches_under_torchrun_with_the_old_keys_warned_once(tmp_path, shared_data):
    """`torchhpc symnmf run --nproc 2` launches the job on 2 torchrun ranks (the pinned results on a 1 x 2
    grid); an old key (`--set dist.timeout=60`) warns once, in the launching process only."""
    import subprocess
    import sys

    from harness.multiproc import kill_session

    football = str(shared_data / "graphs" / "football.gml")
    cmd = [sys.executable, "-m", "torchhpc.trainers.cli", "symnmf", "run", "--config", DEBUG, "--graph", football,
           "--nproc", "2", "--dist.grid", "2d", "--set", "dist.timeout=60", "--output", str(tmp_path / "d"),
           "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=240)
    except BaseException:
        kill_session(proc)
        raise
    assert proc.returncode == 0, err[-3000:]
    s = json.loads(out.strip().splitlines()[-1])
    assert s["processes"] == 2 and s["grid"] == [1, 2]
    assert abs(s["residual"] - PINNED["residual"]) < 1e-9 and abs(s["ari"] - PINNED["ari"]) < 1e-9
    assert err.count("key 'dist.timeout' is now 'dist.timeout_s'") == 1, err


def test_threads_sets_torchs_intra_op_threads(tmp_path, capsys):
    """`--threads 2` (dist.threads) is torch's thread count for the run; 0 leaves torch's default alone."""
    import torch

    (tmp_path / "g.txt").write_text("0 1\n1 2\n2 0\n3 4\n4 5\n5 3\n2 3\n")
    before = torch.get_num_threads()
    code, _, err = _run(["--graph", str(tmp_path / "g.txt"), "--k", "2", "--threads", "0", "--output",
                         str(tmp_path / "a")], capsys)
    assert code == 0 and torch.get_num_threads() == before, err
    code, _, err = _run(["--graph", str(tmp_path / "g.txt"), "--k", "2", "--threads", "2", "--output",
                         str(tmp_path / "b")], capsys)
    assert code == 0 and torch.get_num_threads() == 2, err
