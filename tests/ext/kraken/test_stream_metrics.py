"""Click streams (synthetic and Criteo TSV) and the progressive-validation metrics."""

from __future__ import annotations

import gzip
import math

import pytest
import torch

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.kraken.criteo import read_criteo
from torchhpc.ext.kraken.metrics import ProgressiveValidation, auc, log_loss
from torchhpc.ext.kraken.stream import SyntheticClickStream

pytest.importorskip("torchrec")


def test_auc_and_logloss_match_torchmetrics_and_torch():
    from torchmetrics.functional.classification import binary_auroc

    g = torch.Generator().manual_seed(0)
    y = (torch.rand(5000, generator=g) < 0.3).float()
    s = (torch.randn(5000, generator=g) + y).sigmoid()
    s = (s * 50).round() / 50  # many ties
    assert auc(s, y) == pytest.approx(float(binary_auroc(s, y.long())), abs=1e-6)
    ref = torch.nn.functional.binary_cross_entropy(s.double().clamp(1e-7, 1 - 1e-7), y.double())
    assert log_loss(s, y) == pytest.approx(float(ref), rel=1e-9)
    assert auc(torch.tensor([0.1, 0.9]), torch.tensor([0.0, 1.0])) == 1.0
    assert auc(torch.tensor([0.5, 0.5]), torch.tensor([0.0, 1.0])) == 0.5  # a tie counts one half
    assert math.isnan(auc(torch.tensor([0.2, 0.7]), torch.tensor([1.0, 1.0])))  # one class only


def test_progressive_validation_window():
    pv = ProgressiveValidation(window=100)
    for i in range(10):
        pv.update(torch.full((40,), 0.5), torch.tensor([float(i % 2)] * 40))
    assert 100 <= sum(p.numel() for p in pv._p) < 140
    assert pv.result()["logloss"] == pytest.approx(0.6931, abs=1e-3)


def test_synthetic_stream_is_deterministic_drifts_and_has_a_learnable_click_model():
    s = SyntheticClickStream(num_sparse=3, vocab=500, batch_size=4000, new_ids_per_batch=50, seed=1)
    a, b = s.batch(7), s.batch(7)
    assert torch.equal(a.sparse.values(), b.sparse.values()) and torch.equal(a.labels, b.labels)
    assert a.sparse.keys() == ["C1", "C2", "C3"] and a.dense.shape == (4000, 13)
    assert int(a.sparse.values().min()) >= 0
    early, late = set(s.batch(0).sparse.values().tolist()), set(s.batch(40).sparse.values().tolist())
    assert len(late - early) > 0.5 * len(late)  # the hot IDs moved on
    p = s.click_probability(a)
    assert auc(p, a.labels) > 0.75  # the known model explains the clicks
    assert abs(float(p.mean()) - float(a.labels.mean())) < 0.03


def _criteo_line(label, dense, cats):
    return "\t".join([str(label), *[str(x) if x is not None else "" for x in dense],
                      *[c or "" for c in cats]]) + "\n"


def test_criteo_reader(tmp_path):
    lines = [_criteo_line(i % 2, [i, None, 3] + [0] * 10, [f"{i:08x}", None] + ["68fd1e64"] * 24) for i in range(5)]
    path = tmp_path / "day.tsv.gz"
    with gzip.open(path, "wt") as fh:
        fh.writelines(lines)
    batches = list(read_criteo(path, batch_size=2))
    assert [b.labels.numel() for b in batches] == [2, 2, 1]
    b0 = batches[0]
    assert b0.dense.shape == (2, 13) and float(b0.dense[1, 0]) == pytest.approx(torch.log1p(torch.tensor(1.0)))
    jt = b0.sparse.to_dict()
    assert jt["C2"].lengths().tolist() == [0, 0]  # missing categorical -> empty bag
    assert jt["C1"].values()[0] != jt["C1"].values()[1]
    assert jt["C3"].values()[0] != jt["C4"].values()[0]  # same hex string, different columns
    assert list(read_criteo(path, batch_size=10, start=3))[0].labels.numel() == 2


def test_criteo_reader_keeps_64_bit_ids_apart(tmp_path):
    """Users' own logs may carry 16-hex-digit IDs: values differing only in the top bits stay distinct."""
    wide = ["000000000000000a", "080000000000000a", "800000000000000a", "f00000000000000a"]
    path = tmp_path / "wide.tsv"
    path.write_text("".join(_criteo_line(0, [0] * 13, [w] + ["1"] * 25) for w in wide))
    ids = next(read_criteo(path, batch_size=4)).sparse.to_dict()["C1"].values()
    assert torch.unique(ids).numel() == 4 and int(ids.min()) >= 0
    path.write_text(_criteo_line(0, [0] * 13, ["1" + "0" * 16] + ["1"] * 25))
    with pytest.raises(InputError, match="wider than 64 bits"):
        list(read_criteo(path))


def test_criteo_reader_bad_lines(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text(_criteo_line(1, [0] * 13, ["a"] * 26) + "1\t2\t3\n")
    with pytest.raises(InputError, match=r"bad.tsv:2: expected 40 tab-separated fields"):
        list(read_criteo(bad))
    bad.write_text(_criteo_line(1, [0] * 13, ["zz"] + ["a"] * 25))
    with pytest.raises(InputError, match=r"bad.tsv:1:"):
        list(read_criteo(bad))
    with pytest.raises(InputError, match="no such Criteo"):
        list(read_criteo(tmp_path / "missing.tsv"))


def test_a_kraken_run_prints_no_notice_about_torchrecs_own_calls():
    """torch warns on standard error when torchrec's ``KeyedJaggedTensor`` calls its deprecated
    ``is_fx_tracing``; kraken drops that one record (a user cannot act on it) and nothing else of torch's."""
    import subprocess
    import sys

    code = ("import logging\nfrom torchhpc.ext.kraken import SyntheticClickStream\n"
            "b = SyntheticClickStream(batch_size=8).batch(0)\nprint(b.sparse['C1'].values().numel() > 0)\n"
            "logging.getLogger('torch.fx._symbolic_trace').warning('another warning')")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split() == ["True"]
    assert "is_fx_tracing" not in res.stderr and "another warning" in res.stderr
