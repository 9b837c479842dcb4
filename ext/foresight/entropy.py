"""The block codec's entropy stage: the packed payload as independent zstd frames, one format whoever wrote them.

Bit planes of low bits are near random, but the widths, the high planes of a wide block and the all-zero
blocks of smooth regions are not: zstd at level 1 adds 10-90 % to the block codec's ratio.  Two writers
make the same kind of frames:

``zstd`` (the default)
    on the host, after the payload has crossed: frames of :data:`CHUNK` bytes compressed by zstandard on
    every core this process may run on, each with its content size and a checksum.
``nvcomp`` (optional: ``pip install 'torchhpc[nvcomp]'``, a CUDA device)
    nvCOMP's Zstd on the device that holds the payload, frames of :data:`DEVICE_CHUNK` bytes, the RAW
    bitstream (standard zstd frames, no nvCOMP header); the compressed frames cross to the host instead of
    the payload.  Work on the device: the payload's bytes read twice (the frames, and a sum of its int32
    words), the frames written once, the chunks spread over the SMs (a 10 MB payload is ~160 of them).
    nvCOMP's frames carry no checksum: the header keeps that sum (``sum32``), checked after decoding.

The header records the frame size (``chunk``) and the stage that ran (the last of ``stages``).  Frames
decode on the host with zstandard whoever wrote them: a frame that declares its content size is checked
against the size the header implies before anything is allocated, and every frame's decoded size must be
that size (nvCOMP's frames need not declare theirs).
"""

from __future__ import annotations

import numpy as np
import torch

from torchhpc.ext.core.errors import InputError

CHUNK = 1 << 20
"""Bytes per frame of the host stage: frames are (de)compressed in parallel on the host's cores."""
DEVICE_CHUNK = 1 << 16
"""Bytes per frame of the nvCOMP stage (its default chunk): one chunk per thread block on the device."""
MAX_CHUNK = 1 << 26
"""Largest frame size a header may declare (a corrupt one is an error, not a huge allocation)."""
ENTROPY_STAGES = ("auto", "zstd", "nvcomp")


def _cores() -> int:
    """The cores this process may run on (its affinity, not the machine's count)."""
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _chunks(size: int, chunk: int) -> list[int]:
    """Sizes of the frames of a ``size``-byte payload cut every ``chunk`` bytes (one empty frame for nothing)."""
    count = max(1, -(-size // chunk))
    return [chunk] * (count - 1) + [size - chunk * (count - 1)]


def entropy_encode(payload: bytes, level: int) -> list[bytes]:
    """The host stage: the packed payload as independent zstd frames of :data:`CHUNK` bytes at ``level``,
    compressed on every core, each with its content size and a checksum (a flipped bit is an error, not a
    wrong field)."""
    import zstandard

    view = memoryview(payload)  # the chunks as views: no copy of the payload
    chunks = [view[i:i + CHUNK] for i in range(0, len(payload), CHUNK)] or [b""]
    out = zstandard.ZstdCompressor(level=level, write_checksum=True).multi_compress_to_buffer(chunks, threads=_cores())
    return [out[i].tobytes() for i in range(len(out))]


def entropy_decode(frames: list[bytes], size: int, chunk: int = CHUNK, out: np.ndarray | None = None) -> bytes | None:
    """Inverse of either stage: the ``size`` bytes of the payload from its frames of ``chunk`` bytes, on the
    host's cores; written into ``out`` (a writable uint8 array of ``size``: one copy from zstd's buffers,
    e.g. into pinned memory) when given, else returned.  InputError on a wrong count of frames, a declared
    size that is not the header's, a frame that does not decode to its size, or a corrupt stream."""
    import zstandard

    if isinstance(chunk, bool) or not isinstance(chunk, int) or not 0 < chunk <= MAX_CHUNK:
        raise InputError(f"corrupt header: entropy frames of {chunk!r} bytes")
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise InputError(f"corrupt header: a payload of {size!r} bytes")
    if len(frames) != -(-size // chunk):  # before any list the size of the payload's frame count
        raise InputError(f"corrupt payload: {len(frames)} zstd frames where the header says {-(-size // chunk)} "
                         f"({size} bytes in frames of {chunk})")
    expect = _chunks(size, chunk)
    try:
        declared = [zstandard.get_frame_parameters(f).content_size for f in frames]
    except zstandard.ZstdError as exc:
        raise InputError(f"corrupt zstd stream ({exc})") from None
    wrong = [(d, e) for d, e in zip(declared, expect, strict=True) if d not in (e, zstandard.CONTENTSIZE_UNKNOWN)]
    if wrong:
        raise InputError(f"corrupt payload: a zstd frame of {wrong[0][0]} bytes where the header says {wrong[0][1]}")
    try:
        parts = zstandard.ZstdDecompressor().multi_decompress_to_buffer(
            frames, decompressed_sizes=np.asarray(expect, dtype=np.uint64).tobytes(), threads=_cores())
    except (zstandard.ZstdError, ValueError) as exc:
        raise InputError(f"corrupt zstd stream ({exc})") from None
    if out is None:
        return b"".join(parts[i].tobytes() for i in range(len(parts)))
    for i, start in enumerate(range(0, size, chunk)):
        out[start:start + expect[i]] = np.frombuffer(parts[i], dtype=np.uint8)
    return None


# ----------------------------------------------------------------------------- nvCOMP on the device

def nvcomp_module():
    """nvCOMP's Python module; InputError naming the extra that installs it."""
    try:
        from nvidia import nvcomp
    except ImportError:
        raise InputError("the nvcomp entropy stage needs nvCOMP: pip install 'torchhpc[nvcomp]' "
                         "(or use entropy=zstd, the host's)") from None
    return nvcomp


def check_device_stage(device: torch.device) -> None:
    """InputError unless the nvCOMP stage can run for fields on ``device`` (a CUDA device, nvCOMP installed)."""
    if device.type != "cuda":
        raise InputError(f"entropy=nvcomp runs on the CUDA device that holds the field, and this field is on "
                         f"{device}: move it to a GPU (--device cuda) or use entropy=zstd")
    nvcomp_module()


def batch_chunks(lengths: list[int], chunk: int) -> list[tuple[int, int, int]]:
    """``(payload, offset in it, size)`` of every chunk of payloads of ``lengths`` bytes, each payload cut every
    ``chunk`` bytes from its own start (its frames decode without the others).  Offsets keep the payloads'
    alignment: multiples of 16 where ``chunk`` is (nvCOMP asks for at most 16)."""
    return [(f, k * chunk, n) for f, length in enumerate(lengths) for k, n in enumerate(_chunks(length, chunk))]


def payload_sum(payload) -> int:
    """The check the header keeps of a payload whose frames carry none (nvCOMP's): the sum of its little-endian
    int32 words (its length is a multiple of 16), which any single flipped bit changes."""
    return int(np.frombuffer(payload, dtype="<i4").sum(dtype=np.int64))


def device_frames(payloads: list[torch.Tensor]) -> list[tuple[list[bytes], int]]:
    """The nvCOMP stage: each payload (a uint8 tensor on one CUDA device, a multiple of 16 bytes long as
    :class:`.blocks.Layout` makes them) as zstd frames of :data:`DEVICE_CHUNK` bytes, with its
    :func:`payload_sum` (one reduction on the device), every field's chunks in one nvCOMP batch on the
    device's current stream.  Host work: two waits (the frames' sizes, then one copy of all the frames and
    sums into pinned memory)."""
    nvcomp = nvcomp_module()
    device = payloads[0].device
    with torch.cuda.device(device):  # nvCOMP works on the current device
        stream = torch.cuda.current_stream(device)
        codec = nvcomp.Codec(algorithm="Zstd", bitstream_kind=nvcomp.BitstreamKind.RAW, device_id=device.index,
                             cuda_stream=stream.cuda_stream, uncomp_chunk_size=DEVICE_CHUNK)
        if 16 % codec.get_required_compression_alignment():
            raise InputError(f"nvCOMP's Zstd asks for {codec.get_required_compression_alignment()}-byte aligned "
                             "chunks; the block codec's payloads are aligned to 16 bytes")
        table = batch_chunks([p.numel() for p in payloads], DEVICE_CHUNK)
        views = [payloads[f][o:o + n] for f, o, n in table]  # no copy: the chunks where they are
        sums = torch.stack([torch.sum(p.view(torch.int32), dtype=torch.int64) for p in payloads])
        out = codec.encode(nvcomp.as_arrays(views, cuda_stream=stream.cuda_stream))
        lengths = list(out.buffer_sizes)  # waits: the batch is compressed, its sizes read back
        joined = torch.cat([torch.from_dlpack(out[i]).reshape(-1)[:n] for i, n in enumerate(lengths)]
                           + [sums.view(torch.uint8)])
        host = torch.empty(joined.numel(), dtype=torch.uint8, pin_memory=True)
        host.copy_(joined, non_blocking=True)
        stream.synchronize()
    raw = host.numpy().tobytes()
    tail = np.frombuffer(raw[len(raw) - 8 * len(payloads):], dtype=np.int64)
    frames: list[list[bytes]] = [[] for _ in payloads]
    pos = 0
    for (f, _, _), n in zip(table, lengths, strict=True):
        frames[f].append(raw[pos:pos + n])
        pos += n
    return [(fr, int(total)) for fr, total in zip(frames, tail, strict=True)]


__all__ = ["CHUNK", "DEVICE_CHUNK", "ENTROPY_STAGES", "batch_chunks", "check_device_stage", "device_frames",
           "entropy_decode", "entropy_encode", "nvcomp_module", "payload_sum"]
