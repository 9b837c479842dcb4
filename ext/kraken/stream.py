"""Click-log streams for continual training: a synthetic generator with a known click model, and the
stream a :class:`~torchhpc.ext.kraken.config.KrakenConfig` trains on (that generator, or a Criteo-format
log read by :func:`~torchhpc.ext.kraken.criteo.read_criteo`).

Both yield :class:`~torchhpc.ext.kraken.batch.Batch` objects: dense features ``(B, num_dense)``, a
torchrec ``KeyedJaggedTensor`` of raw 63-bit categorical IDs, and labels ``(B,)``.

**Synthetic stream.** Every sparse feature draws IDs by popularity rank from a
Zipf law.  Rank ``r`` at batch ``t`` is the key ``r + floor(t * new_ids_per_batch)``:
new keys keep arriving at the top of the popularity list while older ones drift
down and fade — the regime Kraken targets (hot IDs change over time, the total
vocabulary grows without bound).  Raw IDs are a 63-bit hash of (feature, key).
Each (feature, key) has a hidden effect drawn from a hash, so the click model
``p = sigmoid(bias + sum_f effect_f + w . dense)`` is known exactly and costs no
memory.  ``batch(t)`` is a pure function of ``t`` and the seed: a resumed run
sees exactly the batches it would have seen.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import torch

from torchhpc.ext.core.errors import ConfigError

from .batch import Batch, slice_batch
from .config import KrakenConfig, StreamOptions
from .criteo_reference import CRITEO_DENSE, CRITEO_SPARSE
from .hashing import MASK63, hash_uniform, mix64


class SyntheticClickStream:
    """The synthetic click log (see the module doc).

    Args:
        cfg: the stream's options (the ``stream:`` section of a kraken config; ``source`` and
            ``path`` are not used here); default :class:`StreamOptions` built from ``kwargs``, so
            ``SyntheticClickStream()`` is the stream ``torchhpc kraken train`` trains on by default.

    Raises:
        ConfigError: an option out of range (from :class:`StreamOptions`).
    """

    def __init__(self, cfg: StreamOptions | None = None, **kwargs):
        if cfg is not None and kwargs:
            raise TypeError("SyntheticClickStream takes a StreamOptions or keyword options, not both")
        self.cfg = cfg if cfg is not None else StreamOptions(**kwargs)
        c = self.cfg
        p = torch.arange(1, c.vocab + 1, dtype=torch.float64).pow(-c.zipf)
        self._cdf = torch.cumsum(p / p.sum(), 0)
        g = torch.Generator().manual_seed(c.seed + 17)
        self.dense_w = torch.randn(c.num_dense, generator=g) * c.dense_scale / math.sqrt(c.num_dense)
        self.feature_names = [f"C{i + 1}" for i in range(c.num_sparse)]

    def shift(self, t: int) -> int:
        return int(math.floor(t * self.cfg.new_ids_per_batch))

    def raw_ids(self, keys: torch.Tensor) -> torch.Tensor:
        """Raw 63-bit IDs of dense keys ``(B, K)``: a hash of (feature, key)."""
        f = torch.arange(keys.shape[1], dtype=torch.int64)
        return mix64(keys * 64 + f, self.cfg.seed) & MASK63

    def effects(self, keys: torch.Tensor) -> torch.Tensor:
        """The hidden per-(feature, key) click effects ``(B, K)``: centred, std ``effect_scale / sqrt(K)``."""
        u = hash_uniform(self.raw_ids(keys).reshape(-1), 1, seed=self.cfg.seed + 5).view(keys.shape)
        scale = self.cfg.effect_scale * math.sqrt(3.0 / keys.shape[1])
        return (2 * u - 1) * scale

    def batch(self, t: int) -> Batch:
        from torchrec import KeyedJaggedTensor

        c = self.cfg
        g = torch.Generator().manual_seed(c.seed * 1_000_003 + t)
        u = torch.rand((c.batch_size, c.num_sparse), generator=g, dtype=torch.float64)
        ranks = torch.searchsorted(self._cdf, u).clamp_(max=c.vocab - 1)
        keys = ranks + self.shift(t)
        dense = torch.randn((c.batch_size, c.num_dense), generator=g)
        logit = c.bias + self.effects(keys).sum(1) + dense @ self.dense_w
        labels = (torch.rand(c.batch_size, generator=g) < torch.sigmoid(logit)).float()
        ids = self.raw_ids(keys)  # (B, K)
        kjt = KeyedJaggedTensor.from_lengths_sync(
            keys=self.feature_names, values=ids.t().reshape(-1),
            lengths=torch.ones(c.num_sparse * c.batch_size, dtype=torch.int64),
        )
        return Batch(dense, kjt, labels, keys)

    def click_probability(self, batch: Batch) -> torch.Tensor:
        """The true click probability of each sample (the Bayes-optimal predictor)."""
        return torch.sigmoid(self.cfg.bias + self.effects(batch.keys).sum(1) + batch.dense @ self.dense_w)

    def write_criteo(self, path: str | Path, batches: int) -> Path:
        """Write the first ``batches`` batches as a Criteo-format TSV file (``.gz``: gzip'd), a log of
        known structure to try the Criteo reader, ``kraken train`` and ``kraken bench --stream criteo`` on.

        Needs ``num_sparse == 26`` and ``num_dense == 13`` (the Criteo layout).  Dense feature ``x``
        is written as the integer ``floor(10 * exp(x))``; each categorical value as 8 hex digits of
        its raw ID (bits 16..47), so the reader's IDs are a bijection of the stream's keys (barring
        a 32-bit collision).  Needs pyarrow.

        Raises:
            ConfigError: a stream that is not 26 categorical + 13 dense features.
        """
        import numpy as np
        import pyarrow as pa
        import pyarrow.csv as pcsv

        c = self.cfg
        if c.num_sparse != CRITEO_SPARSE or c.num_dense != CRITEO_DENSE:
            raise ConfigError(f"stream: a Criteo file has 26 categorical and 13 dense features, this stream has "
                              f"num_sparse={c.num_sparse}, num_dense={c.num_dense}")
        path = Path(path)
        digits = np.frombuffer(b"0123456789abcdef", np.uint8)
        shifts = np.arange(28, -1, -4, dtype=np.uint64)
        sink = pa.CompressedOutputStream(str(path), "gzip") if path.suffix == ".gz" else pa.OSFile(str(path), "wb")
        options = pcsv.WriteOptions(include_header=False, delimiter="\t", quoting_style="none")
        with sink:
            for t in range(batches):
                b = self.batch(t)
                cols = {"label": pa.array(b.labels.numpy().astype(np.int8))}
                dense = np.floor(10 * np.exp(b.dense.double().numpy())).astype(np.int64)
                cols.update({f"I{j + 1}": pa.array(dense[:, j]) for j in range(CRITEO_DENSE)})
                ids = (self.raw_ids(b.keys).numpy().astype(np.uint64) >> np.uint64(16)) & np.uint64(0xFFFFFFFF)
                for j in range(CRITEO_SPARSE):
                    text = digits[(ids[:, j, None] >> shifts) & np.uint64(15)]
                    cols[f"C{j + 1}"] = pa.array(np.ascontiguousarray(text).view("S8").ravel())
                pcsv.write_csv(pa.table(cols), sink, options)
        return path

    def __iter__(self) -> Iterator[Batch]:
        t = 0
        while True:
            yield self.batch(t)
            t += 1



def build_stream(cfg: KrakenConfig):
    """The :class:`SyntheticClickStream` of ``cfg.stream`` (``None`` for Criteo)."""
    return SyntheticClickStream(cfg.stream) if cfg.stream.source == "synthetic" else None


def batches(cfg: KrakenConfig, start: int, stop: int) -> Iterator[tuple[int, Batch]]:
    """``(t, batch)`` for steps ``start .. stop-1`` of the configured stream (global batches).

    Raises:
        InputError: a missing or malformed Criteo file (see :func:`~torchhpc.ext.kraken.criteo.read_criteo`).
    """
    if cfg.stream.source == "synthetic":
        stream = build_stream(cfg)
        for t in range(start, stop):
            yield t, stream.batch(t)
    else:
        from .criteo import read_criteo

        t = start
        for b in read_criteo(cfg.stream.path, cfg.stream.batch_size, start=start * cfg.stream.batch_size,
                             reader=cfg.stream.reader):
            if t >= stop:
                return
            yield t, b
            t += 1


__all__ = ["Batch", "SyntheticClickStream", "batches", "build_stream", "slice_batch"]
