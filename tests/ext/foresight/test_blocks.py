"""The block codec through the compressor interface and the CLI: every bound held, one file format for
both codecs, and a ratio within SZ3's reach on the NYX sample."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.foresight.compressors import Compressed, compress, decompress

from .test_compressors import awkward_field, tolerance


@pytest.mark.parametrize("mode,bound", [("abs", 0.05), ("abs", 1e-4), ("rel", 1e-3), ("pw_rel", 1e-2)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("predictor", ["auto", "lorenzo", "cubic"])
def test_blocks_codec_holds_every_bound_without_the_guard(mode, bound, dtype, predictor):
    """codec=blocks: within the bound on every element after a round trip through the file, with nothing
    left for the guard to patch; the header says which stages ran."""
    x = awkward_field(dtype)
    if mode != "pw_rel":  # (pw_rel's log transform leaves NaN to the guard, for every compressor)
        x[4, 4, 4] = float("nan")
    c = compress(x, "ours", mode=mode, bound=bound, codec="blocks", predictor=predictor)
    used = "interp" if predictor == "auto" else predictor
    assert c.stats["patched"] == 0 and c.meta["codec"] == "blocks" and c.meta["predictor"] == used
    assert c.meta["stages"] == ["quantize", used, "zigzag", "bitpack32", "zstd1"]
    y = decompress(Compressed.from_bytes(c.to_bytes()))
    assert y.shape == x.shape and y.dtype == x.dtype and bool(torch.isnan(y[4, 4, 4])) == (mode != "pw_rel")
    err = (y.to(torch.float64) - x.to(torch.float64)).abs().nan_to_num(0.0)
    assert bool((err <= tolerance(x.nan_to_num(0.0), mode, bound)).all()), float(err.max())


def test_both_codecs_decode_to_the_same_values():
    """The two codecs share the quantisation: a field decodes to the same values from either; a file written
    before the codec choice existed (no codec in its header) decodes as planes."""
    x = awkward_field(torch.float32)
    planes = compress(x, "ours", mode="abs", bound=1e-3, predictor="lorenzo")
    blocks = compress(x, "ours", mode="abs", bound=1e-3, codec="blocks")
    assert planes.meta["codec"] == "planes"  # auto on the CPU
    assert torch.equal(decompress(planes), decompress(blocks))
    old = Compressed(planes.compressor, {k: v for k, v in planes.params.items() if k != "codec"}, planes.shape,
                     planes.dtype, planes.payload, {k: v for k, v in planes.meta.items() if k != "codec"})
    assert torch.equal(decompress(Compressed.from_bytes(old.to_bytes())), decompress(planes))


def test_blocks_codec_ratio_is_within_sz3s_reach_on_nyx(shared_data):
    """On the six NYX fields at E = 1e-3 and 1e-4 of each field's range: bytes in / bytes out at least SZ3's / 1.3."""
    from torchhpc.ext.foresight.data import load_hdf5

    fields = load_hdf5(shared_data / "foresight" / "testing" / "z255_32.h5")
    for rel in (1e-3, 1e-4):
        size = {"ours": 0, "sz3": 0}
        for x in fields.values():
            eb = rel * float(x.max() - x.min())
            size["ours"] += compress(x, "ours", mode="abs", bound=eb, codec="blocks", verify=False).stats["nbytes_out"]
            size["sz3"] += compress(x, "sz3", mode="abs", bound=eb, verify=False).stats["nbytes_out"]
        assert size["ours"] <= 1.3 * size["sz3"], (rel, size)


def test_blocks_codec_bad_parameters_are_one_error():
    from torchhpc.ext.foresight.blocks import blocks_encode_many

    x = awkward_field()
    with pytest.raises(InputError, match="one dtype on one device"):
        blocks_encode_many([x, x.double()], [0.1, 0.1])
    with pytest.raises(InputError, match="one bound per field"):
        blocks_encode_many([x, x], [0.1])
    with pytest.raises(InputError, match="codec must be one of auto, planes, blocks"):
        compress(x, "ours", mode="abs", bound=0.1, codec="cuszp")
    with pytest.raises(InputError, match="predictor must be one of"):
        compress(x, "ours", mode="abs", bound=0.1, codec="blocks", predictor="spline")


def test_cli_compresses_with_the_block_codec(tmp_path, capsys):
    """``foresight compress --param codec=blocks`` writes a block file; ``decompress`` restores it within the bound."""
    from torchhpc.trainers import foresight

    x = np.cumsum(np.random.default_rng(0).normal(size=(10, 12, 14)), axis=0).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert foresight.main(["compress", str(tmp_path / "x.npy"), str(tmp_path / "x.fsz"), "--bound", "0.01",
                           "--param", "codec=blocks", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["max_abs_error"] <= 0.01 and rep["ratio"] > 1
    from torchhpc.ext.foresight.compressors import load_compressed

    assert load_compressed(tmp_path / "x.fsz").meta["codec"] == "blocks"
    assert foresight.main(["decompress", str(tmp_path / "x.fsz"), str(tmp_path / "y.npy"), "--json"]) == 0
    capsys.readouterr()
    assert np.abs(np.load(tmp_path / "y.npy") - x).max() <= 0.01


@pytest.mark.parametrize("codec", ["planes", "blocks"])
def test_ours_checks_its_bound_while_encoding_not_after(monkeypatch, codec):
    """abs and rel: ours keeps off-bound values while it encodes, so compress does not decode again (the
    guard would double the work); pw_rel goes through log2 and keeps the guard."""
    from torchhpc.ext.foresight.compressors import OursCompressor

    x = awkward_field(torch.float32)
    x[1, 1, 1] = float("inf")
    reference = compress(x, "ours", mode="rel", bound=1e-3, codec=codec)

    def no_decoding(self, c, device):
        raise AssertionError("compress decoded its own result")

    monkeypatch.setattr(OursCompressor, "_decode", no_decoding)
    c = compress(x, "ours", mode="rel", bound=1e-3, codec=codec)
    assert c.payload == reference.payload and c.stats["patched"] == 0
    with pytest.raises(AssertionError, match="decoded its own result"):
        compress(x, "ours", mode="pw_rel", bound=1e-3, codec=codec)
    monkeypatch.undo()
    y = decompress(c)
    assert bool(torch.isinf(y[1, 1, 1])) and float((y - x).abs().nan_to_num(0.0).max()) <= 1e-3 * float(
        x[torch.isfinite(x)].max() - x[torch.isfinite(x)].min())


@pytest.mark.parametrize("mode,bound,predictor,backend", [("rel", 1e-3, "auto", "triton"), ("abs", 0.05, "lorenzo", "triton"),
                                                          ("rel", 1e-3, "cubic", "torch"), ("pw_rel", 1e-2, "auto", "auto")])
def test_compress_many_gives_each_field_what_compress_gives(mode, bound, predictor, backend):
    """A batch of fields of both dtypes, with a NaN and a constant field: each Compressed is the one compress
    makes for that field alone (payload, meta, bound), and decodes within its bound."""
    xs = [awkward_field(torch.float32), awkward_field(torch.float64)[:, :5], torch.full((7, 3), 2.5),
          awkward_field(torch.float32)[3]]
    xs[0] = xs[0].clone()
    xs[0][1, 1, 1] = float("nan")
    params = {"mode": mode, "bound": bound, "codec": "blocks", "predictor": predictor, "backend": backend}
    from torchhpc.ext.foresight.compressors import OursCompressor

    many = OursCompressor().compress_many(xs, **params)
    for x, c in zip(xs, many, strict=True):
        alone = compress(x, "ours", **{**params, "backend": "torch"})
        assert c.payload == alone.payload and c.meta == alone.meta and c.shape == tuple(x.shape)
        y = decompress(Compressed.from_bytes(c.to_bytes()))
        err = (y.double() - x.double()).abs().nan_to_num(0.0)
        assert bool((err <= tolerance(x.nan_to_num(0.0), mode, bound)).all())


@pytest.mark.parametrize("mode,codec,backend", [("rel", "blocks", "triton"), ("abs", "blocks", "torch"),
                                                ("rel", "planes", "auto"), ("pw_rel", "blocks", "auto")])
def test_compress_many_with_a_bound_per_field_gives_each_what_compress_gives(mode, codec, backend):
    """A sweep's fields at three bounds in one call (``bounds``, one per field): each Compressed is the one
    compress makes for that field at its bound alone (payload, params, meta)."""
    from torchhpc.ext.foresight.compressors import OursCompressor

    fields = [awkward_field(torch.float32), awkward_field(torch.float32)[2], torch.full((4, 3), 2.5)]
    levels = [1e-3, 1e-2, 0.05]
    xs = fields * len(levels)
    bounds = [b for b in levels for _ in fields]
    params = {"mode": mode, "codec": codec, "predictor": "auto", "backend": backend}
    many = OursCompressor().compress_many(xs, bounds=bounds, **params)
    for x, b, c in zip(xs, bounds, many, strict=True):
        alone = compress(x, "ours", **{**params, "bound": b})
        assert c.payload == alone.payload and c.meta == alone.meta and c.params == alone.params
        assert c.params["bound"] == b
    with pytest.raises(InputError, match="one bound per field"):
        OursCompressor().compress_many(xs, bounds=bounds[:-1], **params)


def test_a_corrupt_block_file_is_one_error_never_a_crash_or_a_wrong_field():
    """No frames, a flipped bit (the frames' checksums), a frame claiming 2^40 bytes, an infinite size in the
    header: an InputError each.  A float32 field whose range overflows float32 compresses in rel mode."""
    import struct

    from torchhpc.ext.foresight.ops import pack_sections, unpack_sections

    c = compress(torch.randn(8, 8, 8, generator=torch.Generator().manual_seed(0)), "ours", mode="abs", bound=1e-2,
                 codec="blocks")
    base, idx, vals = unpack_sections(c.payload)
    frames = unpack_sections(base)
    flipped = bytearray(frames[0])
    flipped[len(flipped) // 2] ^= 0x10
    huge = b"\x28\xb5\x2f\xfd\xe0" + struct.pack("<Q", 1 << 40) + b"\x00" * 8
    for bad in ([], [bytes(flipped)], [huge]):
        broken = Compressed(c.compressor, c.params, c.shape, c.dtype, pack_sections([pack_sections(bad), idx, vals]),
                            c.meta)
        with pytest.raises(InputError, match="corrupt"):
            decompress(Compressed.from_bytes(broken.to_bytes()))
    with pytest.raises(InputError, match="corrupt"):
        decompress(Compressed(c.compressor, c.params, c.shape, c.dtype, c.payload, {**c.meta, "words": float("inf")}))
    wide = torch.tensor([3e38, -3e38, 1.0, 2.0])
    y = decompress(compress(wide, "ours", mode="rel", bound=1e-3, codec="blocks"))
    assert float((y.double() - wide.double()).abs().max()) <= 1e-3 * 6e38


def _reframed(c: Compressed, chunk: int, **zstd) -> Compressed:
    """``c`` with its block payload cut into zstd frames of ``chunk`` bytes written with ``zstd`` options."""
    import zstandard

    from torchhpc.ext.foresight.blocks import payload_layout
    from torchhpc.ext.foresight.entropy import entropy_decode
    from torchhpc.ext.foresight.ops import pack_sections, unpack_sections

    base, idx, vals = unpack_sections(c.payload)
    payload = entropy_decode(unpack_sections(base), payload_layout(c.meta, getattr(torch, c.dtype)).starts[-1])
    writer = zstandard.ZstdCompressor(level=1, **zstd)
    frames = [writer.compress(payload[i:i + chunk]) for i in range(0, len(payload), chunk)]
    from torchhpc.ext.foresight.entropy import payload_sum

    return Compressed(c.compressor, c.params, c.shape, c.dtype, pack_sections([pack_sections(frames), idx, vals]),
                      {**c.meta, "chunk": chunk, "stages": [*c.meta["stages"][:-1], "nvcomp-zstd"],
                       "sum32": payload_sum(payload)})


def test_frames_as_nvcomp_writes_them_decode_on_the_host():
    """A block file whose payload is in frames of 64 KiB that declare no content size and carry no checksum
    (what nvCOMP's Zstd writes, RAW) decodes on the host to the same values as the host stage's file; a file
    from before the frame size was recorded decodes too; a header whose frame size is not the frames' is
    one error."""
    from torchhpc.ext.foresight.entropy import DEVICE_CHUNK

    x = torch.randn(48, 40, 40, generator=torch.Generator().manual_seed(1))
    c = compress(x, "ours", mode="abs", bound=1e-4, codec="blocks", predictor="lorenzo")
    assert c.meta["chunk"] == 1 << 20 and c.meta["stages"][-1] == "zstd1"
    expected = decompress(c)
    device_like = _reframed(c, DEVICE_CHUNK, write_content_size=False, write_checksum=False)
    from torchhpc.ext.foresight.ops import unpack_sections

    assert len(unpack_sections(unpack_sections(device_like.payload)[0])) >= 3  # several frames
    assert torch.equal(decompress(Compressed.from_bytes(device_like.to_bytes())), expected)
    old = Compressed(c.compressor, c.params, c.shape, c.dtype, c.payload, {k: v for k, v in c.meta.items() if k != "chunk"})
    assert torch.equal(decompress(Compressed.from_bytes(old.to_bytes())), expected)
    for chunk in (DEVICE_CHUNK // 2, 0, "64k", 1 << 40):
        with pytest.raises(InputError, match="corrupt"):
            decompress(Compressed(c.compressor, c.params, c.shape, c.dtype, device_like.payload,
                                  {**device_like.meta, "chunk": chunk}))
    short = _reframed(c, DEVICE_CHUNK + 16, write_content_size=False)  # right count, wrong sizes: no content size to check first
    with pytest.raises(InputError, match="corrupt"):
        decompress(Compressed(c.compressor, c.params, c.shape, c.dtype, short.payload, {**short.meta, "chunk": DEVICE_CHUNK}))
    # frames without a checksum: the header's sum of the payload finds a changed byte
    with pytest.raises(InputError, match="its sum is not the one in the header"):
        decompress(Compressed(c.compressor, c.params, c.shape, c.dtype, device_like.payload,
                              {**device_like.meta, "sum32": device_like.meta["sum32"] ^ (1 << 7)}))
    from torchhpc.ext.foresight.entropy import entropy_decode

    for frames, size, chunk in (([b""], 0, DEVICE_CHUNK), ([b"x"] * 3, 10**12, 1), ([b"x"], -5, 16)):
        with pytest.raises(InputError, match="corrupt"):  # at once: no list of 10^12 frame sizes
            entropy_decode(frames, size, chunk)
    # sizes that are not those of the field: one error before anything of their size is allocated
    for bad in ({"words": -16}, {"wide": 10**12}, {"values": -1}, {"blocks": 0, "words": 0, "wide": 0, "values": 0},
                {"words": 10**15}):
        with pytest.raises(InputError, match="are not those of a 76800-value field"):
            decompress(Compressed(c.compressor, c.params, c.shape, c.dtype, device_like.payload,
                                  {**device_like.meta, **bad}))


def test_the_nvcomp_stage_says_what_it_needs(monkeypatch):
    """entropy=nvcomp: a field on the CPU, a zstd level, the planes codec, an unknown stage and nvCOMP not
    installed are one InputError each, naming the way out."""
    import sys

    from torchhpc.ext.foresight.entropy import check_device_stage

    x = awkward_field()
    with pytest.raises(InputError, match="CUDA device that holds the field"):
        compress(x, "ours", mode="abs", bound=0.1, entropy="nvcomp")
    with pytest.raises(InputError, match="has no level; leave level auto"):
        compress(x, "ours", mode="abs", bound=0.1, entropy="nvcomp", level=3)
    with pytest.raises(InputError, match="use codec blocks or auto"):
        compress(x, "ours", mode="abs", bound=0.1, entropy="nvcomp", codec="planes")
    with pytest.raises(InputError, match="entropy must be one of auto, zstd, nvcomp"):
        compress(x, "ours", mode="abs", bound=0.1, entropy="ans")
    monkeypatch.setitem(sys.modules, "nvidia", None)  # (also where nvCOMP is installed and imported)
    monkeypatch.setitem(sys.modules, "nvidia.nvcomp", None)
    with pytest.raises(InputError, match=r"pip install 'torchhpc\[nvcomp\]'"):
        check_device_stage(torch.device("cuda", 0))


def test_a_batch_of_payloads_is_cut_into_chunks_each_payload_from_its_own_start():
    """The nvCOMP batch's chunk table: each payload covered exactly, end to end, cut every chunk from its own
    start (the frames of one field never hold another's bytes); offsets multiples of 16."""
    from torchhpc.ext.foresight.entropy import batch_chunks

    lengths = [16, 48, 1 << 16, (1 << 16) + 32, 3 * (1 << 16) - 16]
    table = batch_chunks(lengths, 1 << 16)
    assert [f for f, _, _ in table] == [0, 1, 2, 3, 3, 4, 4, 4]
    assert [n for _, _, n in table] == [16, 48, 1 << 16, 1 << 16, 32, 1 << 16, 1 << 16, (1 << 16) - 16]
    for f, length in enumerate(lengths):
        mine = [(o, n) for g, o, n in table if g == f]
        assert mine[0][0] == 0 and sum(n for _, n in mine) == length
        assert all(a + n == b for (a, n), (b, _) in zip(mine, mine[1:], strict=False))  # end to end
    assert all(o % 16 == 0 for _, o, _ in table)
