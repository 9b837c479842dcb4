"""The one input type of kraken's training and serving: :class:`Batch`, and each rank's share of it."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from torchhpc.ext.core.errors import ConfigError


@dataclass
class Batch:
    """One batch of ``B`` click-log samples (global, or one rank's share after :func:`slice_batch`).

    ``sparse`` is a torchrec ``KeyedJaggedTensor`` of raw 63-bit categorical IDs, feature-major (every
    sample of ``C1``, then of ``C2``, ...); a missing value is a bag of length 0::

        B = 3, features C1, C2          keys    = ["C1", "C2"]
        C1: [a] [b c] []                values  = [a, b, c, d, e, f]
        C2: [d] [e]   [f]               lengths = [1, 2, 0, 1, 1, 1]
                                        offsets = [0, 1, 3, 3, 4, 5, 6]

    Attributes:
        dense: ``(B, num_dense)`` float32 dense features (a Criteo log: ``log(1 + max(x, 0))``, 13 of them).
        sparse: the ``KeyedJaggedTensor`` above (a Criteo log: 26 features ``C1 .. C26``).
        labels: ``(B,)`` float32 clicks in {0, 1}.
        keys: ``(B, K)`` int64, the synthetic stream's dense key of each feature's one ID (for the
            baselines that index a full table by it); ``None`` for a log.
    """

    dense: torch.Tensor
    sparse: object
    labels: torch.Tensor
    keys: torch.Tensor | None = None

    def to(self, device) -> Batch:
        return Batch(self.dense.to(device), self.sparse.to(device), self.labels.to(device),
                     None if self.keys is None else self.keys.to(device))


def slice_batch(batch: Batch, rank: int, world: int) -> Batch:
    """Rank ``rank``'s contiguous share of a global batch: samples ``[rank*B/W, (rank+1)*B/W)``.

    The KJT is cut feature by feature (its values are feature-major)::

        global, B=4, W=2          rank 0 (samples 0, 1)      rank 1 (samples 2, 3)
        C1: [a] [b c] [] [d]      C1: [a] [b c]              C1: [] [d]
        C2: [e] [f] [g] [h]       C2: [e] [f]                C2: [g] [h]

    Args:
        batch: the global batch (``B`` samples).
        rank, world: this rank and the number of ranks (``world == 1``: the batch itself).

    Returns:
        A :class:`Batch` of ``B / W`` samples: dense ``(B/W, num_dense)``, labels ``(B/W,)``.

    Raises:
        ConfigError: ``B`` is not divisible by ``world``.
    """
    from torchrec import KeyedJaggedTensor

    if world == 1:
        return batch
    B = batch.labels.numel()
    if B % world:
        raise ConfigError(f"stream.batch_size {B} is not divisible by the {world} ranks")
    lo, hi = rank * B // world, (rank + 1) * B // world
    vals, lens = [], []
    for jt in batch.sparse.to_dict().values():
        off = jt.offsets()
        vals.append(jt.values()[int(off[lo]):int(off[hi])])
        lens.append(jt.lengths()[lo:hi])
    kjt = KeyedJaggedTensor.from_lengths_sync(keys=batch.sparse.keys(), values=torch.cat(vals),
                                              lengths=torch.cat(lens))
    return Batch(batch.dense[lo:hi], kjt, batch.labels[lo:hi], None if batch.keys is None else batch.keys[lo:hi])


__all__ = ["Batch", "slice_batch"]
