"""Kinds of bad input across commands: each gets one line and a non-zero exit, before any work starts.

* checked before torchrun: every option, graph spec and output path of the commands that launch it
  (``collectives bench``, ``sched train --nproc N``) is refused in this process; torchrun is replaced by a
  stand-in that fails the test if it is ever started;
* checked before allocating: sizes that would not fit in memory or in the time limit are refused from
  the estimate, and the graph is never built;
* options that contradict each other, or one that another makes moot, are refused naming both;
* a command that produced nothing it was asked for (a serving replica that never loaded a checkpoint)
  fails;
* an output that is one of the inputs is refused before anything is read.

Everything runs in-process through the CLI's ``main()``; nothing here launches a process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from torchhpc.trainers.cli import main

REPO = Path(__file__).resolve().parents[2]
SCHED_DEBUG = str(REPO / "configs" / "sched" / "debug.yaml")
KRAKEN_DEBUG = REPO / "configs" / "kraken" / "debug.yaml"
GB = 10**9


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's usage errors
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def _one_line(rc: int, err: str, *words: str) -> str:
    """The single stderr line of a failed command, holding every one of ``words``."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc not in (0, None), f"exit {rc}; stderr: {err[-500:]}"
    assert len(lines) == 1 and lines[0].startswith("torchhpc: error: "), err[-2000:]
    assert "Traceback" not in err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


class TorchrunStarted(AssertionError):
    """The stand-in torchrun was called: the command got past its own checks."""


@pytest.fixture
def no_torchrun(monkeypatch):
    """torchrun replaced by a stand-in that records its calls and fails the command."""
    from torchhpc.ext.core import launch

    calls = []

    def fake_torchrun(module, nproc, argv=(), **_kw):
        calls.append((module, nproc))
        raise TorchrunStarted(f"torchrun started {module} on {nproc} ranks")

    monkeypatch.setattr(launch, "torchrun", fake_torchrun)
    return calls


@pytest.fixture
def memory_16gb(monkeypatch):
    """16 GB available, whatever this machine has (the size checks read it)."""
    from torchhpc.ext.collectives import sizing

    monkeypatch.setattr(sizing, "available_memory", lambda: 16 * GB)


# ----------------------------------------------------------------------------- 1. checked before torchrun starts


@pytest.mark.parametrize("argv, words", [
    (["--graph", "random:1.5"], ["--graph", "random:1.5", "0 < DENSITY <= 1"]),
    (["--graph", "random:0"], ["--graph", "0 < DENSITY <= 1"]),
    (["--graph", "random:nan"], ["--graph", "'nan'", "finite"]),
    (["--graph", "random:0.5:3"], ["--graph", "at most 1 number"]),
    (["--graph", "powerlaw:-4:1"], ["--graph", "MEAN_DEGREE > 0"]),
    (["--graph", "powerlaw:4:x"], ["--graph", "'x' is not a number"]),
    (["--graph", "moore:2.5:1"], ["--graph", "'2.5' is not an integer"]),
    (["--graph", "moore:3:0"], ["--graph", "R >= 1"]),
    (["--graph", "moore:100000:1"], ["--graph", "1 <= D <= 64"]),
    (["--sizes", "inf"], ["--sizes", "'inf'", "finite"]),
    (["--sizes", "4096G"], ["--sizes", "'4096G'", "largest"]),
    (["--output", "/proc/x/res.json"], ["--output", "/proc/x/res.json"]),
    (["--graph", "random:0.001"], ["--graph random:0.001", "--nproc 2", "no edge"]),
], ids=lambda v: " ".join(v) if isinstance(v, list) and v and v[0].startswith("--") else None)
def test_collectives_bench_refuses_before_torchrun(capsys, no_torchrun, memory_16gb, argv, words):
    """A bad graph spec, size or output path of `collectives bench`: one line before torchrun starts."""
    rc, _, err = _run(capsys, "collectives", "bench", "--nproc", "2", *argv)
    _one_line(rc, err, *words)
    assert no_torchrun == []


def test_collectives_bench_output_folder_and_unwritable_place(capsys, no_torchrun, memory_16gb, tmp_path):
    """--output naming a folder, or a place under a file, is refused before torchrun; nothing is created."""
    rc, _, err = _run(capsys, "collectives", "bench", "--output", tmp_path)
    _one_line(rc, err, "--output", "folder")
    (tmp_path / "a-file").write_text("x")
    rc, _, err = _run(capsys, "collectives", "bench", "--output", tmp_path / "a-file" / "res.json")
    _one_line(rc, err, "--output", "a-file")
    assert no_torchrun == [] and sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_good_bench_options_do_reach_torchrun_and_a_failed_job_leaves_no_output(capsys, no_torchrun, memory_16gb,
                                                                              tmp_path):
    """The stand-in is reached by good options (so the refusals above are the checks', not the stand-in's), and
    the job failing there leaves no --output file behind."""
    out = tmp_path / "res.json"
    with pytest.raises(TorchrunStarted):
        main(["collectives", "bench", "--nproc", "2", "--graph", "moore:1:1", "--output", str(out)])
    assert no_torchrun == [("torchhpc.trainers.collectives", 2)]
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("extra, words", [
    (["--set", "trace.path=/nonexistent/trace.swf"], ["--trace.path /nonexistent/trace.swf", "no such file"]),
    (["--set", "eval.starts=[2990]"], ["eval.starts", "does not fit"]),
    (["--set", "ppo.advantage=group", "--set", "ppo.trajectories=4", "--set", "ppo.num_envs=4"],
     ["ppo.trajectories (4)", "on each of the 2 ranks"]),
    (["--set", "run.resume=true", "--set", "run.run_id=never-ran"], ["cannot resume", "never-ran"]),
], ids=["missing-trace", "window-past-the-trace", "groups-over-ranks", "resume-a-missing-run"])
def test_sched_train_nproc_refuses_before_torchrun(capsys, no_torchrun, tmp_path, extra, words):
    """`sched train --nproc 2` checks the trace, the windows, the split over ranks and the run folder first."""
    rc, _, err = _run(capsys, "sched", "train", "--config", SCHED_DEBUG, "--nproc", "2", "--set",
                      f"run.root={tmp_path}", "--set", "run.progress=false", *extra)
    _one_line(rc, err, *words)
    assert no_torchrun == [] and list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- 2. checked before allocating


@pytest.fixture
def no_graph_built(monkeypatch):
    """Building any process graph fails the test (the estimate must refuse first)."""
    from torchhpc.ext.collectives import graphs

    def refuse(*_a, **_kw):
        raise AssertionError("a graph was built")

    for name in ("random_graph", "powerlaw_graph", "moore_graph"):
        monkeypatch.setattr(graphs, name, refuse)


@pytest.mark.parametrize("argv, words", [
    (["--nodes", "100000", "--ranks-per-node", "1000"], ["100,000,000 ranks", "10 PB of memory", "16 GB available"]),
    (["--graph", "random:0.5"], ["28,672 ranks", "4.11e+08 edges", "206 GB of memory", "16 GB available"]),
    (["--graph", "moore:1:100000"], ["8.22e+08 edges", "memory", "16 GB available"]),
    (["--nodes", "20000", "--ranks-per-node", "100", "--graph", "powerlaw:1:0", "--max-minutes", "0.5"],
     ["2,000,000 ranks", "about 92 s", "--max-minutes 0.5"]),
], ids=["absurd-machine", "dense-graph", "wide-moore", "over-the-time-limit"])
def test_collectives_model_refuses_what_would_not_fit(capsys, memory_16gb, no_graph_built, argv, words):
    """`collectives model` estimates memory and time from the sizes and refuses, with the estimate and the
    limit, before any graph is built."""
    rc, _, err = _run(capsys, "collectives", "model", *argv)
    _one_line(rc, err, *words)


def test_collectives_bench_refuses_sizes_that_would_not_fit(capsys, no_torchrun, memory_16gb):
    """`collectives bench`: messages that would not fit in memory, one emulated call longer than --timeout-s,
    or emulated transfers longer than --max-minutes are refused before torchrun starts."""
    rc, _, err = _run(capsys, "collectives", "bench", "--nproc", "64", "--graph", "random:1", "--sizes", "64M")
    _one_line(rc, err, "--nproc 64", "4032 edges", "3.26 TB of memory", "16 GB available")
    rc, _, err = _run(capsys, "collectives", "bench", "--sizes", "100M", "--inter-node-mbps", "1", "--timeout-s", "30")
    _one_line(rc, err, "--inter-node-mbps 1", "--timeout-s 30")
    rc, _, err = _run(capsys, "collectives", "bench", "--sizes", "10M", "--inter-node-mbps", "1", "--repeats", "100")
    _one_line(rc, err, "--repeats 100", "--max-minutes 10")
    assert no_torchrun == []


# ----------------------------------------------------------------------------- 3. conflicting or ignored options


@pytest.mark.parametrize("argv, words", [
    (["sched", "heuristics", "--start", "0", "--starts", "100,200"], ["--start 0", "--starts 100,200"]),
    (["sched", "heuristics", "--starts", "5", "--sequences", "3"], ["--sequences 3", "--starts"]),
    (["sched", "heuristics", "--start", "5", "--seed", "3"], ["--seed 3", "--start"]),
    (["sched", "heuristics", "--trace", "x.swf", "--generate-jobs", "200"], ["--generate-jobs 200", "--trace x.swf"]),
    (["sched", "heuristics", "--lenient"], ["--lenient", "--trace"]),
    (["sched", "heuristics", "--starts", ","], ["--starts", "no window start"]),
    (["sched", "eval", "--checkpoint", "x", "--greedy", "--samples", "4"], ["--samples 4", "--greedy"]),
    (["collectives", "model", "--calibration", "r.json", "--alpha-us", "5"], ["--calibration", "--alpha-us 5"]),
    (["collectives", "model", "--calibration", "r.json", "--alpha-us", "2"], ["--calibration", "--alpha-us 2"]),
    (["collectives", "model", "--calibration", "r.json", "--intra-gbps", "10"], ["--calibration", "--intra-gbps 10"]),
    (["sched", "eval", "--checkpoint", "x", "--trace", "x.swf", "--generate-jobs", "10000"],
     ["--generate-jobs 10000", "--trace x.swf"]),
    (["kraken", "bench", "--stream", "criteo", "--path", "x.tsv", "--vocab", "20000"], ["vocab 20000", "Criteo"]),
    (["collectives", "model", "--graph", "moore:3:1", "--seed", "2"], ["--seed 2", "moore:3:1"]),
    (["collectives", "bench", "--graph", "moore:2:1", "--seed", "1"], ["--seed 1", "moore:2:1"]),
    (["collectives", "bench", "--intra-node", "shm", "--device", "cuda"], ["--intra-node shm", "--device cuda"]),
], ids=lambda v: " ".join(v) if isinstance(v, list) and v and not v[0].startswith("--") else None)
def test_conflicting_or_ignored_options_name_both(capsys, no_torchrun, argv, words):
    """Two options that contradict each other, or one the other makes moot: one line naming both."""
    rc, _, err = _run(capsys, *argv)
    _one_line(rc, err, *words)
    assert no_torchrun == []


@pytest.mark.parametrize("overrides, words", [
    (["ppo.group_size=8"], ["ppo.group_size=8", "ppo.advantage=group"]),
    (["ppo.advantage=group"], ["ppo.v_iters=5", "ppo.advantage=gae"]),  # debug.yaml's v_iters, made moot
    (["ppo.imitate_epochs=3"], ["ppo.imitate_epochs=3", "ppo.imitate"]),
    (["eval.validate_length=64"], ["eval.validate_length=64", "eval.validate"]),
    (["env.filter_low=5"], ["env.filter_low=5", "env.filter_heuristic"]),
    (["env.reward_reference=sjf"], ["env.reward_reference=sjf", "env.reward=log_ratio"]),
    (["eval.greedy=true", "eval.samples=3"], ["eval.samples=3", "eval.greedy"]),
    (["trace.path=x.swf"], ["trace.generate_jobs=3000", "trace.path=x.swf"]),
    (["trace.strict=false"], ["trace.strict=False", "trace.path"]),
], ids=lambda v: " ".join(v) if isinstance(v, list) and "=" in v[0] else None)
def test_sched_config_names_each_option_another_makes_moot(overrides, words):
    """A sched training option that another setting makes moot is named, with that setting, in one line."""
    from torchhpc.ext.core.config import load_config
    from torchhpc.ext.sched.config import SchedConfig

    assert load_config(SchedConfig, SCHED_DEBUG).ignored_options() == []
    lines = load_config(SchedConfig, SCHED_DEBUG, overrides).ignored_options()
    assert len(lines) == 1 and all(w in lines[0] for w in words), lines


def test_sched_train_warns_of_moot_options_before_torchrun(capsys, no_torchrun):
    """`sched train` says, in one warning line each, which options of its layered config are moot (a file's
    value an override made moot is not refused), once, before torchrun starts."""
    capsys.readouterr()
    with pytest.raises(TorchrunStarted):
        main(["sched", "train", "--config", SCHED_DEBUG, "--nproc", "2", "--set", "ppo.advantage=group",
              "--set", "ppo.trajectories=8", "--set", "ppo.num_envs=4", "--set", "run.progress=false"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["torchhpc: warning: ppo.v_iters=5 would be ignored: it applies only to the critic of "
                     "ppo.advantage=gae (the group advantage has no critic)"]
    assert len(no_torchrun) == 1


# ----------------------------------------------------------------------------- 5. nothing produced is a failure


@pytest.fixture
def kraken_run(tmp_path):
    """A kraken run folder with its config.yaml and an empty checkpoints/ (training not started)."""
    pytest.importorskip("torchrec")
    from torchhpc.ext.core.config import dump_config, load_config
    from torchhpc.ext.kraken.config import KrakenConfig

    run = tmp_path / "kraken" / "r"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(dump_config(load_config(KrakenConfig, KRAKEN_DEBUG)))
    return run


def test_kraken_serve_that_loads_nothing_fails(capsys, kraken_run):
    """A replica that never held a checkpoint (empty folder; then only damaged ones) exits 1 with one line,
    not 0 with "step -1"."""
    serve = ["kraken", "serve", "--checkpoint-dir", kraken_run / "checkpoints", "--duration", "0",
             "--requests", "1"]
    rc, out, err = _run(capsys, *serve)
    _one_line(rc, err, "loaded no checkpoint", "no full checkpoint")
    assert '"step": -1' not in out
    (kraken_run / "checkpoints" / "full-00000010.pt").write_bytes(b"not a checkpoint")
    rc, out, err = _run(capsys, *serve)
    lines = err.strip().splitlines()  # the damaged file's warning, then the error
    assert rc == 1 and len(lines) == 2 and lines[0].startswith("torchhpc: warning:"), err
    assert "full-00000010.pt" in lines[0] and "all 1 full checkpoint(s)" in lines[1] and "Traceback" not in err


# ----------------------------------------------------------------------------- 6. an output that is an input


def test_sched_export_refuses_to_write_over_an_input(capsys, tmp_path):
    """`sched export` whose NAME.json would overwrite an --unseen trace is refused before anything is read."""
    trace = tmp_path / "other.json"
    trace.write_text("; not read\n")
    before = trace.read_bytes()
    rc, _, err = _run(capsys, "sched", "export", "--checkpoint", tmp_path / "run", "--name", "other",
                      "--folder", tmp_path, "--unseen", trace)
    _one_line(rc, err, str(trace), "also an input")
    assert trace.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["other.json"]


def test_every_file_output_equal_to_an_input_is_refused_and_the_input_kept(capsys, tmp_path):
    """align's --output, ccsdt's --save-inputs and foresight's output, each named as one of the command's own
    inputs (under another spelling too): one line, non-zero, the input byte for byte as it was."""
    import numpy as np

    fa = tmp_path / "t.fa"
    fa.write_text(">a\nACGTACGTTTGACCAGGCT\n")
    (tmp_path / "q.fa").write_text(">b\nACGTACGTTTGACCAGGCT\n")
    npy = tmp_path / "x.npy"
    np.save(npy, np.arange(12, dtype=np.float32))
    npz = tmp_path / "in.npz"
    npz.write_bytes(b"not read: the output is refused first")
    cases = [
        (["align", fa, tmp_path / "q.fa", "--output", tmp_path / "." / "t.fa"], fa, "--output"),
        (["align", fa, tmp_path / "q.fa", "--output", tmp_path / "q.fa"], tmp_path / "q.fa", "--output"),
        (["ccsdt", "--inputs", npz, "--save-inputs", npz], npz, "--save-inputs"),
        (["foresight", "compress", npy, npy, "--bound", "0.1"], npy, "output"),
    ]
    for argv, victim, flag in cases:
        before = victim.read_bytes()
        rc, _, err = _run(capsys, *argv)
        _one_line(rc, err, flag, "is also an input")
        assert victim.read_bytes() == before, argv


_NUMPY_COMMANDS = ["foresight compress", "foresight original", "symnmf features", "ccsdt inputs"]


@pytest.mark.parametrize("command, content", [(c, k) for k in ("empty", "truncated_npz", "objects") for c in _NUMPY_COMMANDS]
                         + [("foresight original", "archive"), ("symnmf features", "archive")])
def test_a_numpy_file_that_is_empty_damaged_or_holds_objects_is_one_line(capsys, tmp_path, command, content):
    """Every command that reads a .npy/.npz file says in one line, naming the file, that it is empty, damaged
    or holds Python objects (NumPy's own EOFError, BadZipFile or pickle advice never reaches the user)."""
    import numpy as np

    npz = command == "ccsdt inputs" or (content == "truncated_npz" and command != "symnmf features")
    bad = tmp_path / ("bad.npz" if npz else "bad.npy")  # (symnmf reads .npy features: an archive under that name)
    objects = np.array([{"a": 1}, None], dtype=object)
    if content == "empty":
        bad.write_bytes(b"")
    elif content == "truncated_npz":
        np.savez(tmp_path / "whole.npz", a=np.arange(1000.0), b=np.ones((30, 30)))
        bad.write_bytes((tmp_path / "whole.npz").read_bytes()[:300])
    elif content == "archive":  # a whole .npz where one array is read (it was a TypeError traceback)
        with open(bad, "wb") as fh:
            np.savez(fh, a=np.ones((4, 4)), b=np.zeros(3))
    elif npz:
        with open(bad, "wb") as fh:
            np.savez(fh, format=objects)
    else:
        np.save(bad, objects, allow_pickle=True)
    words = {"empty": ["empty or truncated"], "truncated_npz": ["damaged"], "objects": ["Python objects"],
             "archive": ["an .npz archive; give one array"]}[content]
    if command == "ccsdt inputs":
        rc, _, err = _run(capsys, "ccsdt", "--inputs", bad)
        words = {"empty": ["empty or truncated"]}.get(content, ["cannot read"])
    elif command == "symnmf features":
        rc, _, err = _run(capsys, "symnmf", "run", "--features", bad, "--k", "2", "--run.root", tmp_path / "runs")
    elif command == "foresight compress":
        rc, _, err = _run(capsys, "foresight", "compress", bad, tmp_path / "o.fsz", "--bound", "1e-3")
    else:
        field = tmp_path / "f.npy"
        np.save(field, np.linspace(0, 1, 4096, dtype=np.float32).reshape(16, 16, 16))
        rc, _, err = _run(capsys, "foresight", "compress", field, tmp_path / "o.fsz", "--bound", "1e-3")
        assert rc == 0, err
        rc, _, err = _run(capsys, "foresight", "decompress", tmp_path / "o.fsz", tmp_path / "r.npy", "--original", bad)
    _one_line(rc, err, str(bad), *words)
