"""The pieces of the training job: per-rank KJT slices, the checkpoint schedule, gathered progressive validation."""

from __future__ import annotations

import pytest
import torch

from torchhpc.ext.core.errors import ConfigError
from torchhpc.ext.kraken.config import CheckpointOptions
from torchhpc.ext.kraken.continual import checkpoint_kind
from torchhpc.ext.kraken.metrics import ProgressiveValidation, gathered_result

pytest.importorskip("torchrec")


def _jagged_batch():
    from torchrec import KeyedJaggedTensor

    from torchhpc.ext.kraken.batch import Batch

    # C1: [1] [2 3] [] [4]   C2: [5] [6] [7] [8 9]
    kjt = KeyedJaggedTensor.from_lengths_sync(keys=["C1", "C2"], values=torch.arange(1, 10),
                                              lengths=torch.tensor([1, 2, 0, 1, 1, 1, 1, 2]))
    return Batch(torch.arange(8.0).view(4, 2), kjt, torch.tensor([0.0, 1.0, 0.0, 1.0]))


def test_slice_batch_cuts_every_feature_at_the_same_samples():
    """Rank r gets samples [r*B/W, (r+1)*B/W) of every feature; the slices put back give the batch."""
    from torchhpc.ext.kraken.batch import slice_batch

    b = _jagged_batch()
    r0, r1 = slice_batch(b, 0, 2), slice_batch(b, 1, 2)
    assert r0.sparse.to_dict()["C1"].lengths().tolist() == [1, 2]
    assert r1.sparse.to_dict()["C1"].values().tolist() == [4]
    assert r1.sparse.to_dict()["C2"].values().tolist() == [7, 8, 9]
    assert torch.equal(torch.cat([r0.dense, r1.dense]), b.dense)
    assert torch.equal(torch.cat([r0.labels, r1.labels]), b.labels)
    assert slice_batch(b, 0, 1) is b
    with pytest.raises(ConfigError, match="not divisible by the 3 ranks"):
        slice_batch(b, 0, 3)


def test_checkpoint_schedule():
    """Deltas every delta_every, fulls every full_every and at the end; the first checkpoint is a full one."""
    c = CheckpointOptions(delta_every=10, full_every=30)
    kinds = {s: checkpoint_kind(s, c, 60, has_full=s > 10) for s in range(1, 61)}
    assert {s: k for s, k in kinds.items() if k} == {10: "full", 20: "delta", 30: "full", 40: "delta",
                                                     50: "delta", 60: "full"}
    assert checkpoint_kind(45, c, 45, has_full=True) == "full"  # the last step
    assert checkpoint_kind(20, CheckpointOptions(delta_every=0, full_every=30), 60, has_full=False) is None


def test_gathered_result_of_one_rank_is_its_own():
    """With one rank the gathered figures are the window's own."""
    pv = ProgressiveValidation(100)
    pv.update(torch.tensor([0.1, 0.9, 0.4, 0.7]), torch.tensor([0.0, 1.0, 0.0, 1.0]))
    assert gathered_result(pv) == pv.result()
