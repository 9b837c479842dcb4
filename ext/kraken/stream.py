"""Click-log streams for continual training: a synthetic generator with a known click
model, and a reader for Criteo-format TSV files.

Both yield :class:`Batch` objects: dense features ``(B, 13)``, a torchrec
``KeyedJaggedTensor`` of raw 64-bit categorical IDs, and labels ``(B,)``.

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

import gzip
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from torchhpc.ext.core.errors import ConfigError, InputError

from .config import StreamOptions
from .hashing import hash_uniform, mix64

MASK63 = (1 << 63) - 1


@dataclass
class Batch:
    dense: torch.Tensor  # (B, num_dense) float32
    sparse: object  # torchrec KeyedJaggedTensor of raw IDs
    labels: torch.Tensor  # (B,) float32 in {0, 1}
    keys: torch.Tensor | None = None  # (B, K) the synthetic stream's dense key per feature (for baselines)

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


# ----------------------------------------------------------------------------- Criteo TSV

CRITEO_DENSE, CRITEO_SPARSE = 13, 26
CRITEO_FIELDS = 1 + CRITEO_DENSE + CRITEO_SPARSE
CRITEO_COLUMNS = ["label", *(f"I{i + 1}" for i in range(CRITEO_DENSE)), *(f"C{i + 1}" for i in range(CRITEO_SPARSE))]
CRITEO_FEATURES = CRITEO_COLUMNS[1 + CRITEO_DENSE:]


def _signed64(v: int) -> int:
    """A hexadecimal ID of up to 64 bits as the int64 with the same bits."""
    if v >= 1 << 64:
        raise ValueError(f"categorical value {v:x} is wider than 64 bits")
    return v - (1 << 64) if v >= 1 << 63 else v


def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def decode_criteo_line(path, lineno: int, raw: bytes) -> str:
    """One line's bytes as text; a byte that is not UTF-8 is an :class:`InputError` naming file, line, column."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}:{lineno}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column "
                         f"{exc.start + 1})") from None


def _criteo_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of a Criteo file; a non-UTF-8 byte, a truncated or corrupt ``.gz`` is an
    :class:`InputError` naming the file and the line."""
    import zlib

    lineno = 0
    with _open_binary(path) as fh:
        it = iter(fh)
        while True:
            try:
                raw = next(it)
            except StopIteration:
                return
            except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
                what = "truncated gzip file" if isinstance(exc, EOFError) else "not valid gzip data"
                raise InputError(f"{path}:{lineno + 1}: {what} ({exc})") from None
            lineno += 1
            yield lineno, decode_criteo_line(path, lineno, raw)


def _parse_criteo(parts: list[str]) -> tuple[int, list[int], list[int]]:
    """label, dense and categorical values of one line's fields (``ValueError`` naming the column)."""
    col = 0
    try:
        lab = int(parts[0])
        dv = []
        for col in range(1, 1 + CRITEO_DENSE):
            dv.append(int(parts[col]) if parts[col] else 0)
        cv = []
        for col in range(1 + CRITEO_DENSE, len(parts)):
            cv.append(_signed64(int(parts[col], 16)) if parts[col] else 0)
    except ValueError as exc:
        kind = "an integer" if col <= CRITEO_DENSE else "a hexadecimal ID of up to 64 bits"
        value = parts[col]
        if "wider than 64 bits" in str(exc):
            raise ValueError(f"column {CRITEO_COLUMNS[col]}: {exc}") from None
        raise ValueError(f"column {CRITEO_COLUMNS[col]}: {value!r} is not {kind}") from None
    return lab, dv, cv


def parse_criteo_line(path, lineno: int, line: str) -> tuple[int, list[int], list[int], list[bool]]:
    """One Criteo line: ``(label, 13 dense ints (empty = 0), 26 categorical int64 (empty = 0), 26 present)``.

    Raises:
        InputError: a wrong field count, a bad number, a label other than 0/1 (naming file, line, column).
    """
    parts = line.rstrip("\r\n").split("\t")
    if len(parts) != CRITEO_FIELDS:
        raise InputError(
            f"{path}:{lineno}: expected {CRITEO_FIELDS} tab-separated fields "
            f"(label, 13 integer, 26 categorical), found {len(parts)}"
        )
    try:
        lab, dv, cv = _parse_criteo(parts)
    except ValueError as exc:
        raise InputError(f"{path}:{lineno}: {exc}") from None
    if lab not in (0, 1):
        raise InputError(f"{path}:{lineno}: label must be 0 or 1, found {lab}")
    return lab, dv, cv, [bool(x) for x in parts[1 + CRITEO_DENSE:]]


def criteo_ids(raw: torch.Tensor) -> torch.Tensor:
    """Raw IDs of categorical values ``(26, n)`` int64 (the hex value's 64 bits): a bijective 64-bit mix
    per column (the column salts the seed), top bit dropped for 63-bit IDs."""
    return torch.stack([mix64(raw[c], 99 + c) for c in range(raw.shape[0])]) & MASK63


def criteo_kjt(ids: np.ndarray, present: np.ndarray):
    """The ``KeyedJaggedTensor`` of one batch's categorical IDs ``(26, B)`` int64 and present ``(26, B)``
    bool (a missing value is a zero-length bag), built in numpy (no torch op, so no intra-op threads)."""
    from torchrec import KeyedJaggedTensor

    # feature-major layout: all samples of C1, then C2, ...
    per_key = present.sum(1)
    return KeyedJaggedTensor(keys=CRITEO_FEATURES, values=torch.from_numpy(ids[present]),
                             lengths=torch.from_numpy(present.reshape(-1).astype(np.int64)), stride=present.shape[1],
                             length_per_key=per_key.tolist(), offset_per_key=[0, *np.cumsum(per_key).tolist()])


def read_criteo_reference(path: str | Path, batch_size: int = 512, start: int = 0) -> Iterator[Batch]:
    """The readable reference of :func:`read_criteo` (TSV, ``.gz`` too): one line at a time in Python
    (about 50 k lines/s).  The fast reader is tested to give the same batches and the same errors."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such Criteo TSV file")

    def flush(labels, dense, cats, has):
        B = len(labels)
        raw = torch.tensor(cats, dtype=torch.int64).view(B, CRITEO_SPARSE).t()
        present = torch.tensor(has, dtype=torch.bool).view(B, CRITEO_SPARSE).t()
        d = torch.tensor(dense, dtype=torch.float32).view(B, CRITEO_DENSE)
        kjt = criteo_kjt(criteo_ids(raw).numpy(), present.numpy())
        return Batch(torch.log1p(d.clamp(min=0)), kjt, torch.tensor(labels, dtype=torch.float32))

    labels, dense, cats, has = [], [], [], []
    lineno = 0
    for lineno, line in _criteo_lines(path):
        if lineno <= start:
            continue
        lab, dv, cv, hv = parse_criteo_line(path, lineno, line)
        labels.append(lab)
        dense.extend(dv)
        cats.extend(cv)
        has.extend(hv)
        if len(labels) == batch_size:
            yield flush(labels, dense, cats, has)
            labels, dense, cats, has = [], [], [], []
    if labels:
        yield flush(labels, dense, cats, has)
    elif lineno <= start:
        raise InputError(f"{path}: no samples" + (f" after line {start}" if start else " (an empty file)"))


def criteo_reader(path: str | Path, reader: str = "auto") -> str:
    """Which reader :func:`read_criteo` uses for ``path``: ``parquet``, ``arrow`` or ``python``."""
    from . import criteo

    path = Path(path)
    if path.is_file() and criteo.is_parquet(path):
        return "parquet"
    return "python" if reader == "python" or (reader == "auto" and not criteo.have_pyarrow()) else "arrow"


def read_criteo(path: str | Path, batch_size: int = 512, start: int = 0, reader: str = "auto") -> Iterator[Batch]:
    """Batches from a Criteo-format log, from line (row) ``start`` on: TSV, gzip'd TSV (``.gz``) or Parquet.

    Each TSV line: ``label \\t I1..I13 \\t C1..C26`` — integer dense features (empty = 0,
    transformed ``log(1 + max(x, 0))``) and hexadecimal categorical IDs of up to 64 bits
    (empty = no ID for that sample, a zero-length bag).  Raw IDs are a bijective 64-bit
    mix of the value seeded by the column, with the top bit dropped (63-bit IDs), so
    equal hex strings in different columns stay different features.  A Parquet file
    (``.parquet``/``.pq`` or the ``PAR1`` magic) has the columns ``label, I1..I13, C1..C26``
    (dense: integers, null = 0; categorical: hex strings, or integers taken as the ID's bits).

    Args:
        path: the file.
        batch_size: samples per batch (the last batch may be shorter).
        start: lines (rows) to skip first.
        reader: ``arrow`` (a compiled numba parser, pyarrow's CSV parser for blocks off the strict
            layout or without numba, in background threads, bounded memory: about 20x the reference,
            9x without numba), ``python`` (:func:`read_criteo_reference`) or ``auto`` (arrow when
            pyarrow is installed).  Parquet always needs pyarrow.

    Raises:
        InputError: a missing file, no samples from line ``start`` on (an empty file), a line with a
            wrong field count, a bad number or a byte that is not UTF-8, a truncated or corrupt ``.gz``
            (reported with the line number), a Parquet file without the Criteo columns.
    """
    from . import criteo

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such Criteo TSV file")
    if reader not in ("auto", "arrow", "python"):
        raise InputError(f"reader {reader!r}: choose auto, arrow or python")
    used = criteo_reader(path, reader)
    if used == "parquet":
        yield from criteo.read_criteo_parquet(path, batch_size, start)
    elif used == "python":
        yield from read_criteo_reference(path, batch_size, start)
    else:
        yield from criteo.read_criteo_arrow(path, batch_size, start)
