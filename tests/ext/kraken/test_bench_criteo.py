"""`kraken bench` on a Criteo-format log: the vocabulary pass and ebc_full's rows."""

from __future__ import annotations

import random

import pytest
import torch

pytest.importorskip("torchrec")
pytest.importorskip("pyarrow")

from torchhpc.ext.kraken.comparison import CriteoSource  # noqa: E402


def test_criteo_source_gives_each_distinct_id_its_own_row(tmp_path):
    """The first pass counts each feature's distinct values (checked against the text's distinct hex
    strings), and ebc_full's row lookup is a bijection from those IDs onto 0..vocab-1."""
    rng = random.Random(1)
    lines = []
    for _ in range(90):
        cats = [f"{rng.randrange(2 + 7 * c):08x}" if rng.random() > 0.2 else "" for c in range(26)]
        lines.append("\t".join(["1", *["3"] * 13, *cats]))
    path = tmp_path / "log.tsv"
    path.write_text("\n".join(lines) + "\n")
    src = CriteoSource(str(path), batch_size=20, steps=4)  # 80 of the 90 lines
    assert src.steps == 4
    fields = [x.split("\t") for x in lines[:80]]
    assert src.vocab_sizes == [max(1, len({f[14 + c] for f in fields if f[14 + c]})) for c in range(26)]
    seen: dict[tuple[int, int], int] = {}
    for b in src.batches():
        rows = src.full_values(b)
        assert rows.numel() == b.sparse.values().numel()
        off = 0
        for c, jt in enumerate(b.sparse.to_dict().values()):
            n = jt.values().numel()
            r = rows[off:off + n]
            assert bool(((r >= 0) & (r < src.vocab_sizes[c])).all())
            for i, row in zip(jt.values().tolist(), r.tolist(), strict=True):
                assert seen.setdefault((c, i), row) == row  # one ID, one row
            off += n
    for c in range(26):
        ids_rows = {row for (f, _), row in seen.items() if f == c}
        assert len(ids_rows) == len([k for k in seen if k[0] == c]) == (src.vocab_sizes[c] if ids_rows else 0)
    assert torch.equal(torch.cat([b.labels for b in src.batches()]), torch.ones(80))
