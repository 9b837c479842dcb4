"""``torchhpc align``: the LASTZ-like command end to end, its formats and its one-line errors."""

from __future__ import annotations

import gzip
import json
import os

import pytest

from torchhpc.ext.core.dispatch import numba_available, resolve_backend
from torchhpc.ext.segalign.config import BACKENDS
from torchhpc.ext.segalign.gapped import gapped_kernel
from torchhpc.ext.segalign.lastz import read_maf
from torchhpc.ext.segalign.recall import lastz_available
from torchhpc.ext.segalign.simulate import simulate_pair


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A small simulated pair with an inversion, written as FASTA (the target gzipped)."""
    d = tmp_path_factory.mktemp("pair")
    sim = simulate_pair(8000, inversions=1, inversion_length=2000, duplications=0, seed=7)
    sim.write(d / "t.fa", d / "q.fa")
    (d / "t.fa.gz").write_bytes(gzip.compress((d / "t.fa").read_bytes()))
    return d


def test_help_names_lastz_options(cli):
    """torchhpc align --help documents the LASTZ option names of the issue."""
    res = cli("align", "--help")
    assert res.returncode == 0
    for opt in ["--output", "--format", "--seed", "--notransition", "--strand", "--xdrop", "--hspthresh",
                "--ydrop", "--gappedthresh", "--nogapped", "--gapped-by", "--device", "--step", "--ambiguous"]:
        assert opt in res.stdout, opt


def test_align_writes_maf_both_strands(cli, pair, tmp_path):
    """The default run writes MAF blocks on both strands and --stats prints JSON counters, naming the filter
    kernel and the gapped-extension kernel that ran (numba where installed)."""
    out = tmp_path / "out.maf"
    res = cli("align", str(pair / "t.fa.gz"), str(pair / "q.fa"), "--output", str(out), "--stats")
    assert res.returncode == 0, res.stderr[-2000:]
    alns = read_maf(out.read_text())
    assert {a.strand for a in alns} == {"+", "-"}
    stats = json.loads(res.stderr.strip().splitlines()[-1])
    assert stats["alignments"] == len(alns) and stats["hits"] > 0
    assert stats["backend"] == resolve_backend("auto", "cpu", choices=BACKENDS)  # what ran, not a guess
    assert stats["gapped_by"] == gapped_kernel("auto") == ("numba" if numba_available() else "numpy")


def test_stats_name_the_backend_asked_for(cli_here, pair):
    """--backend torch runs the torch twin, and --stats says so."""
    res = cli_here("align", str(pair / "t.fa"), str(pair / "q.fa"), "--nogapped", "--backend", "torch", "--stats",
                   "--strand", "plus")
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stderr.strip().splitlines()[-1])["backend"] == "torch"


def test_backend_torch_runs_torch_seeding(pair, tmp_path, monkeypatch):
    """--backend torch runs the tensor-op twins of seeding and of the filter: with every compiled seeding
    and filter kernel made to fail, the command still runs and writes the output of the default run."""
    pytest.importorskip("numba")
    from torchhpc.ext.segalign import filter_kernels, index_kernels
    from torchhpc.trainers.cli import main

    args = [str(pair / "t.fa"), str(pair / "q.fa"), "--nogapped", "--format", "segments"]
    assert main(["align", *args, "--output", str(tmp_path / "auto.seg")]) == 0

    def compiled(*_a, **_k):
        raise AssertionError("a numba kernel ran under --backend torch")

    for module, names in ((index_kernels, ("seed_keys_numba", "count_index_numba", "lookups_numba")),
                          (filter_kernels, ("seed_scan_numba", "ungapped_scan_hits", "xdrop_extend_numba"))):
        for name in names:
            monkeypatch.setattr(module, name, compiled)
    assert main(["align", *args, "--backend", "torch", "--output", str(tmp_path / "torch.seg")]) == 0
    assert (tmp_path / "torch.seg").read_text() == (tmp_path / "auto.seg").read_text()
    with pytest.raises(AssertionError, match="numba kernel ran"):  # the patched kernels do stand in the way
        main(["align", *args, "--backend", "numba", "--output", str(tmp_path / "numba.seg")])


def test_unwritable_output_fails_before_aligning(pair, tmp_path, monkeypatch):
    """An --output in a missing folder is refused before the FASTA files are even read."""
    from torchhpc.ext.segalign import align
    from torchhpc.trainers.cli import main

    def boom(*_a, **_k):
        raise AssertionError("aligned before checking --output")

    monkeypatch.setattr(align, "align_files", boom)
    assert main(["align", str(pair / "t.fa"), str(pair / "q.fa"), "--output", str(tmp_path / "no" / "x.maf")]) == 1


def test_yaml_config_and_flags(pair, tmp_path):
    """Options can come from a YAML file (the same dataclass); a flag beats the file."""
    from torchhpc.trainers.cli import main

    cfg = tmp_path / "align.yaml"
    cfg.write_text("gapped: false\nformat: segments\nstrand: minus\n")
    out = tmp_path / "x.segments"
    assert main(["align", str(pair / "t.fa"), str(pair / "q.fa"), "--config", str(cfg), "--strand", "plus",
                 "--output", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert lines[0].startswith("#name1") and {ln.split("\t")[6] for ln in lines[1:]} == {"+"}


def test_nogapped_segments_and_general(cli_here, pair):
    """--nogapped writes HSPs as a LASTZ segments file or general table on stdout."""
    seg = cli_here("align", str(pair / "t.fa"), str(pair / "q.fa"), "--nogapped", "--format", "segments",
                   "--strand", "plus", "--notransition", "--seed", "14of22")
    assert seg.returncode == 0, seg.stderr[-2000:]
    lines = seg.stdout.splitlines()
    assert lines[0].startswith("#name1") and len(lines) > 1
    assert all(ln.split("\t")[6] == "+" for ln in lines[1:])
    gen = cli_here("align", str(pair / "t.fa"), str(pair / "q.fa"), "--nogapped", "--format", "general")
    assert gen.returncode == 0 and gen.stdout.startswith("#score\tname1")


@pytest.mark.skipif(not lastz_available(), reason="lastz is not on PATH")
def test_gapped_by_lastz(cli, pair):
    """--gapped-by lastz hands the HSPs to lastz --segments and returns its MAF."""
    res = cli("align", str(pair / "t.fa"), str(pair / "q.fa"), "--gapped-by", "lastz")
    assert res.returncode == 0, res.stderr[-2000:]
    assert read_maf(res.stdout)
    # a scoring file reaches lastz (as its --scores): HOXD70 doubled, gap penalties too, doubles the scores
    from torchhpc.ext.segalign.scoring import HOXD70

    scores = pair / "double.txt"
    scores.write_text("gap_open_penalty = 800\ngap_extend_penalty = 60\nA C G T\n"
                      + "".join(f"{b} " + " ".join(str(2 * v) for v in row) + "\n" for b, row in zip("ACGT", HOXD70, strict=True)))
    dbl = cli("align", str(pair / "t.fa"), str(pair / "q.fa"), "--gapped-by", "lastz", "--scoring", str(scores))
    assert dbl.returncode == 0, dbl.stderr[-2000:]
    best = max(a.score for a in read_maf(res.stdout))
    assert max(a.score for a in read_maf(dbl.stdout)) >= 2 * best - 100


@pytest.mark.parametrize(
    "make, extra, words",
    [
        ("missing", [], ["target ", "missing.fa: no such file"]),
        ("empty", [], ["empty file"]),
        ("protein", [], ["protein"]),
        ("badchar", [], ["record 1", "position 4", "'!'"]),
        ("rna", ["--gapped-by", "lastz"], ["rna.fa", "U (RNA), which LASTZ refuses", "--gapped-by auto"]),
        (None, ["--seed", "01101"], ["--seed", "must start and end with 1"]),
        (None, ["--xdrop", "0"], ["--xdrop", "out of range", "> 0"]),
        (None, ["--max-hits", "0"], ["--max-hits", "out of range", "> 0"]),
        (None, ["--threads", "-1"], ["--threads", "out of range", ">= 0"]),
        (None, ["--timeout-s", "0"], ["--timeout-s", "out of range", "> 0"]),
        (None, ["--seed", "match99"], ["--seed 'match99'", "matchN needs N between 8 and 31"]),
        (None, ["--seed", "match0"], ["--seed 'match0'", "matchN needs N between 8 and 31"]),
        (None, ["--seed", "111"], ["--seed '111'", "too few"]),
        (None, ["--seed", "1" * 40], ["--seed", "between 1 and 31 care positions"]),
        (None, ["--output", "/no/such/folder/out.maf"], ["--output", "does not exist"]),
        (None, ["--output", "/dev/full"], ["/dev/full", "No space left on device"]),
        (None, ["--backend", "cuda-magic"], ["--backend", "must be one of"]),
        (None, ["--gapped-by", "lastz", "--lastz", "no-such-lastz"], ["lastz executable", "not on PATH"]),
        (None, ["--device", "tpu"], ["device"]),
        (None, ["--format", "sam"], ["--format", "must be one of", "'sam'"]),
        (None, ["--gapped-by", "numpy", "--nogapped"], ["--gapped-by numpy with --nogapped", "drop one"]),
    ],
)
def test_bad_input_one_line_nonzero(cli, pair, tmp_path, make, extra, words):
    """Bad files and options exit non-zero with one line on stderr, no traceback."""
    target = pair / "t.fa"
    if make:
        target = tmp_path / f"{make}.fa"
        body = {"missing": None, "empty": "", "protein": ">p\nMEEPQSDPSVEPPLSQETFSDLWKLL\n",
                "badchar": ">x\nACG!T\n", "rna": ">r\nACGUACGUAAGCUUGA\n"}[make]
        if body is not None:
            target.write_text(body)
    nogapped = [] if "--gapped-by" in extra else ["--nogapped"]
    res = cli("align", str(target), str(pair / "q.fa"), *nogapped, *extra)
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    for w in words:
        assert w in res.stderr, res.stderr



_NO_TORCH = ("import sys\nfrom torchhpc.trainers.cli import main\nrc = main(sys.argv[1:])\n"
             "print('numba imported:', 'numba' in sys.modules, file=sys.stderr)\n"
             "print('torch imported:', 'torch' in sys.modules, file=sys.stderr)\nsys.exit(rc)")


@pytest.mark.parametrize("threads", [1, 2])
def test_the_cpu_command_runs_without_torch_and_writes_the_tensor_pipelines_bytes(pair, tmp_path, threads):
    """``torchhpc align`` in one process on the CPU runs the compiled stages on NumPy arrays and never imports
    torch (a second of start-up, more than a small pair's alignment); its output is that of the tensor
    pipeline (the library's default plan, in this process), byte for byte, on one thread and on two.  On one
    thread the kernels are the ahead-of-time build's (:data:`.torch_numba.KERNELS`): numba is not imported."""
    import subprocess
    import sys

    import torch

    from torchhpc.ext.segalign.align import align_files, plan_alignment
    from torchhpc.ext.segalign.config import AlignConfig
    from torchhpc.ext.segalign.output import write_alignments

    pytest.importorskip("numba")
    from torchhpc.ext.segalign.torch_numba import KERNELS

    assert KERNELS.ensure_built() is not None  # (make test builds it first; a failed build fails here)
    t, q = str(pair / "t.fa.gz"), str(pair / "q.fa")
    out = tmp_path / "cmd.maf"
    res = subprocess.run([sys.executable, "-c", _NO_TORCH, "align", t, q, "--threads", str(threads), "--output",
                          str(out)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stderr.strip().splitlines()[-1] == "torch imported: False"
    if threads == 1:  # the kernels built ahead of time: numba not even imported
        assert res.stderr.strip().splitlines()[-2] == "numba imported: False"
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        plan = plan_alignment(AlignConfig())
        assert not plan.arrays and plan.device == torch.device("cpu")
        lib = align_files(t, q, AlignConfig(), plan=plan)
    finally:
        torch.set_num_threads(saved)
    assert isinstance(lib.target.codes, torch.Tensor) and isinstance(lib.hsps["+"].score, torch.Tensor)
    write_alignments(lib.alignments, "maf", str(tmp_path / "lib.maf"))
    assert len(lib.alignments) > 2 and out.read_bytes() == (tmp_path / "lib.maf").read_bytes()


def test_the_kernels_built_ahead_of_time_write_the_jits_bytes(tmp_path):
    """The ahead-of-time kernels (the default on one thread) and numba's JIT of the same source
    (``TORCHHPC_AOT=0``) write the same MAF bytes on a pair whose repeats (20 copies of a 400 bp element)
    stack walls of several alignments on query bases (the gapped stage's overflow rows), both strands."""
    import subprocess
    import sys

    pytest.importorskip("numba")
    from torchhpc.ext.segalign.torch_numba import KERNELS

    assert KERNELS.ensure_built() is not None
    sim = simulate_pair(30_000, substitution_rate=0.08, indel_rate=0.005, seed=5, repeats=((400, 20, 0.05),))
    sim.write(tmp_path / "t.fa", tmp_path / "q.fa")
    runs = {}
    for aot in ("1", "0"):
        out = tmp_path / f"aot{aot}.maf"
        res = subprocess.run([sys.executable, "-c", _NO_TORCH, "align", str(tmp_path / "t.fa"), str(tmp_path / "q.fa"),
                              "--threads", "1", "--output", str(out)], capture_output=True, text=True, timeout=300,
                             env={**os.environ, "TORCHHPC_AOT": aot})
        assert res.returncode == 0, res.stderr[-2000:]
        runs[aot] = (out.read_bytes(), res.stderr.strip().splitlines()[-2])
    assert runs["1"][1] == "numba imported: False" and runs["0"][1] == "numba imported: True"
    assert runs["1"][0] == runs["0"][0] and runs["1"][0].count(b"\na score=") > 20


@pytest.mark.parametrize("options,arrays", [({}, True), ({"gapped": False}, True), ({"backend": "torch"}, False),
                                            ({"seed": "14of22"}, False), ({"fused": False}, False)])
def test_the_arrays_plan_is_the_tensor_plan_where_it_runs(pair, options, arrays):
    """``plan_alignment(..., arrays=True)`` runs on NumPy arrays only where that is the same pipeline (numba's
    fused filter: not the torch twin, a seed too heavy for the counting-sort table, or the unfused filter);
    where it does, the alignments and HSPs are those of the tensor plan."""
    import numpy as np
    import torch

    from torchhpc.ext.segalign.align import align_files, plan_alignment
    from torchhpc.ext.segalign.config import AlignConfig

    pytest.importorskip("numba")
    cfg = AlignConfig(**options)
    plan = plan_alignment(cfg, arrays=True)
    assert plan.arrays == arrays and (plan.device is None) == arrays
    if not arrays:
        return
    t, q = pair / "t.fa", pair / "q.fa"
    got, want = align_files(t, q, cfg, plan=plan), align_files(t, q, cfg)
    assert isinstance(got.target.codes, np.ndarray) and isinstance(got.hsps["-"].t_start, np.ndarray)
    assert isinstance(want.target.codes, torch.Tensor)
    assert got.alignments == want.alignments and len(got.alignments) > 0
    for strand in ("+", "-"):
        assert all(np.array_equal(a, b.numpy()) for a, b in zip(got.hsps[strand].fields, want.hsps[strand].fields,
                                                                  strict=True))
