"""Every compressor behind one interface: ``compress(tensor, **params) -> Compressed`` and ``decompress``.

=============  ======================================================  ==========================
name           what                                                    error-bound modes
=============  ======================================================  ==========================
``ours``       dual-quantised Lorenzo / interpolation prediction,      abs, rel, pw_rel
               linear quantisation (Triton kernel), zstd
``sz3``        SZ3 through ``pysz``                                    abs, rel, pw_rel
``zfp``        ZFP through ``zfpy`` (fixed accuracy; or ``rate`` /     abs, rel, pw_rel
               ``precision`` fixed modes)
``fpzip``      fpzip through ``fpzip`` (``precision`` bits kept)       abs, rel, pw_rel
``bitgroom``   mantissa rounding to the fewest bits, byte shuffle,     abs, rel, pw_rel
               zstd
``downsample`` keep every ``factor``-th sample, restore by (tri)linear  none (``factor``)
               interpolation
``zstd``       lossless zstd of the raw bytes                          none (lossless)
=============  ======================================================  ==========================

Error-bound modes are SZ's: ``abs`` ``|x - x'| <= E``; ``rel`` (value-range relative)
``|x - x'| <= E (max x - min x)``; ``pw_rel`` (point-wise relative) ``|x - x'| <= E |x|``.
``pw_rel`` runs the abs-bounded compressors on ``log2 |x|`` with bound ``log2(1 + E)`` (signs and
zeros kept exactly as bit masks), SZ's own construction for that mode.

Every error-bounded compression ends with the same guard: the decompressed result is compared with
the input element by element and any value off the bound is stored exactly (``stats["patched"]``
counts them; 0 for a compressor that honours its bound by itself).  The bound therefore holds on
every element for every compressor, and ``patched`` says which compressor needed help.
"""

from __future__ import annotations

import json
import math
import struct
import sys
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from torchhpc.ext.core.errors import InputError

from .blocks import blocks_decode, blocks_encode_many, payload_layout
from .entropy import (
    CHUNK,
    DEVICE_CHUNK,
    ENTROPY_STAGES,
    check_device_stage,
    device_frames,
    entropy_decode,
    entropy_encode,
    payload_sum,
)
from .ops import (
    PREDICTORS,
    exact_values,
    lorenzo_decode,
    lorenzo_encode,
    pack_sections,
    unpack_sections,
    zstd_compress,
    zstd_decompress,
)

MODES = ("abs", "rel", "pw_rel")
MAGIC = b"FORESIGHT2\n"
"""The file's first bytes: magic, the JSON header's length, the header, the payload, then a CRC-32 of all
before it (a flipped bit anywhere is an error, not a wrong field)."""
MAGIC_V1 = b"FORESIGHT1\n"
"""Files written before the checksum: the same layout without the CRC-32 (still read)."""


@dataclass
class Compressed:
    """One compressed array: the payload bytes, what is needed to decode them, and the stats.

    ``stats``: ``nbytes_in``, ``nbytes_out`` (payload), ``ratio`` (in / out), ``compress_s``,
    ``patched`` (values the bound guard stored exactly) and ``eb`` (the absolute bound, where one applies).
    """

    compressor: str
    params: dict[str, Any]
    shape: tuple[int, ...]
    dtype: str
    payload: bytes
    meta: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        """The self-describing file format: magic, a JSON header, the payload, a CRC-32 of them."""
        head = json.dumps({"compressor": self.compressor, "params": self.params, "shape": list(self.shape),
                           "dtype": self.dtype, "meta": self.meta, "stats": self.stats}).encode()
        body = MAGIC + struct.pack("<I", len(head)) + head + self.payload
        return body + struct.pack("<I", zlib.crc32(body))

    @classmethod
    def from_bytes(cls, blob: bytes, where: str = "input") -> Compressed:
        """Inverse of :meth:`to_bytes` (and of the format before the checksum); InputError names ``where`` on
        anything else, a checksum that does not match included."""
        if blob.startswith(MAGIC) and len(blob) >= len(MAGIC) + 8:
            (crc,) = struct.unpack_from("<I", blob, len(blob) - 4)
            blob = memoryview(blob)[:-4]
            if zlib.crc32(blob) != crc:
                raise InputError(f"{where}: corrupt foresight file (its CRC-32 does not match: the file was changed "
                                 "or damaged after it was written)")
        elif not blob.startswith(MAGIC_V1) or len(blob) < len(MAGIC) + 4:
            raise InputError(f"{where}: not a foresight compressed file (missing the {MAGIC[:-1].decode()} header)")
        (n,) = struct.unpack_from("<I", blob, len(MAGIC))
        start = len(MAGIC) + 4
        try:
            head = json.loads(bytes(blob[start:start + n]))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"{where}: corrupt header ({exc})") from None
        ok = (isinstance(head, dict) and isinstance(head.get("compressor"), str) and isinstance(head.get("params"), dict)
              and isinstance(head.get("shape"), list)
              and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in head["shape"])
              and head.get("dtype") in ("float32", "float64") and isinstance(head.get("meta", {}), dict)
              and isinstance(head.get("stats", {}), dict))
        if not ok:
            raise InputError(f"{where}: corrupt header (compressor, params, shape, dtype float32/float64, meta "
                             "and stats are not all there or not of their kinds)")
        return cls(head["compressor"], head["params"], tuple(head["shape"]), head["dtype"], bytes(blob[start + n:]),
                   head.get("meta", {}), head.get("stats", {}))


# ----------------------------------------------------------------------------- the base class


class Compressor:
    """A compressor: subclasses set ``name``, ``modes`` and ``PARAMS`` and implement ``_encode``/``_decode``.

    ``PARAMS``: parameter -> default (``None``: no default).  ``mode``/``bound`` are the error-bound
    parameters of compressors with ``modes``.
    """

    name = ""
    modes: tuple[str, ...] = ()
    PARAMS: dict[str, Any] = {}

    # -- public interface ----------------------------------------------------------------------------

    def check_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """Fill defaults and check ``params``; InputError names the bad parameter."""
        valid = dict(self.PARAMS)
        if self.modes:
            valid = {"mode": "abs", "bound": None, **valid}
        for k in params:
            if k not in valid:
                raise InputError(f"compressor '{self.name}' has no parameter '{k}' "
                                 f"(valid: {', '.join(sorted(valid)) or 'none'})")
        out = {k: params.get(k, v) for k, v in valid.items()}
        if self.modes:
            fixed = self.fixed_mode(out)
            if not fixed:
                if out["mode"] not in self.modes:
                    raise InputError(f"compressor '{self.name}': mode must be one of {', '.join(self.modes)}; "
                                     f"got {out['mode']!r}")
                b = out["bound"]
                if b is None:
                    raise InputError(f"compressor '{self.name}': give an error bound (bound=E > 0)")
                if isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b) or b <= 0:
                    raise InputError(f"compressor '{self.name}': error bound must be a number > 0, got {b!r}")
                if out["mode"] == "pw_rel" and b >= 1:
                    raise InputError(f"compressor '{self.name}': a pw_rel bound must be < 1, got {b!r}")
                out["bound"] = float(b)
        return out

    def fixed_mode(self, params: dict[str, Any]) -> bool:
        """True when ``params`` select a mode that is not error-bounded (e.g. ZFP's fixed rate)."""
        return False

    def compress(self, x: torch.Tensor, *, verify: bool = True, **params: Any) -> Compressed:
        """Compress ``x`` (float32/float64, any shape) with ``params``; the bound holds on every element.

        ``verify=False`` skips the guard (the compressor's own guarantee only; for timing the bare
        compressors side by side).  A compressor that checks every element while it encodes
        (``self_bounded``: ours, in ``abs`` and ``rel``) skips the guard either way: decoding the result
        again would double the work and find nothing.

        Raises:
            InputError: an unknown parameter, a bound <= 0, an unsupported mode or dtype, an empty tensor.
        """
        x = self._input(x)
        p = self.check_params(params)
        t0 = time.perf_counter()
        bounded = bool(self.modes) and not self.fixed_mode(p)
        if bounded and p["mode"] == "pw_rel" and not self.native_pw_rel:
            payload, meta = self._encode_pw_rel(x, p)
        else:
            eb = self.absolute_bounds([x], p)[0] if bounded and p["mode"] != "pw_rel" else None
            payload, meta = self._encode(x, p, eb)
            meta["eb"] = eb
        c = Compressed(self.name, p, tuple(x.shape), str(x.dtype).replace("torch.", ""), b"", meta)
        patched = 0
        if bounded and (not verify or (self.self_bounded and p["mode"] != "pw_rel")):
            payload = pack_sections([payload, zstd_compress(b""), zstd_compress(b"")])
        elif bounded:  # the guard: every element within its bound, or stored exactly
            c.payload = payload
            y = self._decode_any(c, x.device)
            tol = self.elementwise_bound(x, p)
            if meta.get("log2"):  # decoded through exp2, whose last bit differs between math libraries (torch's
                # CPU one, CUDA's): kept 4 ulps of the dtype inside the bound, a file written on one device holds
                # its bound decoded on the other
                tol = tol - 4 * torch.finfo(x.dtype).eps * x.to(torch.float64).abs()
            bad = ~((y.to(torch.float64) - x.to(torch.float64)).abs() <= tol)
            bad |= ~torch.isfinite(x)  # inf and NaN come back as they are (pw_rel's bound at inf is inf)
            bad &= ~((y == x) | (torch.isnan(x) & torch.isnan(y)))
            patched = int(bad.sum())
            idx = torch.nonzero(bad.reshape(-1)).reshape(-1).cpu().numpy().astype("<i8")
            vals = x.reshape(-1)[bad.reshape(-1)].cpu().numpy()
            payload = pack_sections([payload, zstd_compress(np.diff(idx, prepend=0).tobytes()),
                                     zstd_compress(vals.tobytes())])
        return self._finish(c, x, payload, time.perf_counter() - t0, patched)

    def compress_many(self, xs: list[torch.Tensor], *, verify: bool = True, bounds: list[float] | None = None,
                      **params: Any) -> list[Compressed]:
        """Each of ``xs`` compressed with the same ``params`` (a sweep's fields at one setting): what
        :meth:`compress` gives for each; a compressor that can batch (ours on CUDA) does them in one pass.

        ``bounds``: one ``bound`` per field in place of ``params["bound"]`` (a sweep's fields at several
        bounds of one mode, batched together); each result is what :meth:`compress` gives at its bound."""
        return [self.compress(x, verify=verify, **p) for x, p in zip(xs, self._per_field(xs, bounds, params),
                                                                      strict=True)]

    def _per_field(self, xs: list[torch.Tensor], bounds: list[float] | None, params: dict[str, Any]
                   ) -> list[dict[str, Any]]:
        """Each field's ``params``: ``params`` itself, or with its own ``bound`` from ``bounds``."""
        if bounds is None:
            return [params] * len(xs)
        if not self.modes:
            raise InputError(f"compressor '{self.name}' takes no error bound, so no bounds per field")
        if len(bounds) != len(xs):
            raise InputError(f"give one bound per field: {len(xs)} fields, {len(bounds)} bounds")
        return [{**params, "bound": b} for b in bounds]

    def _input(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` as a contiguous float32/float64 tensor; InputError for another dtype or an empty one."""
        if not isinstance(x, torch.Tensor):
            x = torch.as_tensor(np.asarray(x))
        if x.requires_grad:  # the values (the same tensor object otherwise: a sweep's fields are read once)
            x = x.detach()
        if x.dtype not in (torch.float32, torch.float64):
            raise InputError(f"compressor '{self.name}' takes float32 or float64 data, got {x.dtype}")
        if x.numel() == 0:
            raise InputError(f"compressor '{self.name}': the input is empty (shape {tuple(x.shape)})")
        return x.contiguous()

    @staticmethod
    def _finish(c: Compressed, x: torch.Tensor, payload: bytes, seconds: float, patched: int = 0) -> Compressed:
        """``c`` with its final payload and its stats."""
        c.payload = payload
        nin = x.numel() * x.element_size()
        c.stats = {"nbytes_in": nin, "nbytes_out": len(payload), "ratio": nin / max(len(payload), 1),
                   "compress_s": seconds, "patched": patched, "eb": c.meta.get("eb")}
        return c

    def decompress(self, c: Compressed, device: torch.device | str = "cpu") -> torch.Tensor:
        """The array from ``c`` (its shape and dtype)."""
        if c.compressor != self.name:
            raise InputError(f"payload was written by '{c.compressor}', not '{self.name}'")
        bounded = bool(self.modes) and not self.fixed_mode(c.params)
        if not bounded:
            return self._decode_any(c, device)
        base, idx_b, vals_b = unpack_sections(c.payload)
        y = self._decode_any(Compressed(c.compressor, c.params, c.shape, c.dtype, base, c.meta), device)
        idx = np.cumsum(exact_values(idx_b, np.dtype("<i8")))
        vals = exact_values(vals_b, np.dtype(c.dtype))
        if idx.size != vals.size or (idx.size and (idx.min() < 0 or idx.max() >= y.numel())):
            raise InputError("corrupt payload: the values kept exactly do not match the field (their count or "
                             "an index)")
        if idx.size:
            flat = y.reshape(-1)
            flat[torch.from_numpy(idx).to(flat.device)] = torch.from_numpy(vals.copy()).to(flat.device)
        return y

    # -- bounds ----------------------------------------------------------------------------------------

    native_pw_rel = False
    self_bounded = False
    """True when ``_encode`` itself keeps every value off the bound exactly (so the guard would find none)."""

    @staticmethod
    def absolute_bound(x: torch.Tensor, p: dict[str, Any]) -> float:
        """The absolute bound ``e`` of mode ``abs`` or ``rel`` (``E (max - min)``)."""
        return Compressor.absolute_bounds([x], p)[0]

    @staticmethod
    def absolute_bounds(xs: list[torch.Tensor], p: dict[str, Any], bounds: list[float] | None = None) -> list[float]:
        """:meth:`absolute_bound` of each of ``xs``, their ranges read by the host at once (one sync);
        ``bounds``: each field's own ``bound`` in place of ``p["bound"]``."""
        bounds = [p["bound"]] * len(xs) if bounds is None else bounds
        if p["mode"] == "abs":
            return list(bounds)
        seen: dict[int, int] = {}
        for x in xs:
            seen.setdefault(id(x), len(seen))
        fields = list({id(x): x for x in xs}.values())
        # one pass each (aminmax): max - min in x's dtype, max |x|, the count; exact where every value is finite
        quick = []
        for x in fields:
            low, top = torch.aminmax(x.reshape(-1))
            quick.append(torch.stack([top.double() - low.double(), torch.maximum(top.abs(), low.abs()).double(),
                                      torch.tensor(float(x.numel()), dtype=torch.float64, device=x.device)]))
        ranges = torch.stack(quick).tolist()
        for i, x in enumerate(fields):  # NaN or inf: the same over the finite values only (a second sync, rare)
            if not all(math.isfinite(v) for v in ranges[i][:2]):
                fin = torch.isfinite(x)
                top = x.masked_fill(~fin, -math.inf).amax()
                low = x.masked_fill(~fin, math.inf).amin()
                ranges[i] = torch.stack([top.double() - low.double(), x.abs().masked_fill(~fin, 0.0).amax().double(),
                                         fin.sum().double()]).tolist()
        out = []
        for (rng, big, count), bound in zip((ranges[seen[id(x)]] for x in xs), bounds, strict=True):
            if not count:
                rng = 0.0
            rng = min(rng, sys.float_info.max)  # a float64 field from -1.7e308 to 1.7e308: its range overflows
            if rng == 0.0:  # a constant field: any positive bound is exact
                rng = max(big if count else 1.0, 1.0)
            if not bound * rng > 0:
                raise InputError(f"the relative bound {bound:g} of this field's value range {rng:g} is "
                                 f"{bound * rng:g} in absolute terms (below the smallest float64): give a larger "
                                 "bound, or mode abs")
            out.append(bound * rng)
        return out

    def elementwise_bound(self, x: torch.Tensor, p: dict[str, Any]) -> torch.Tensor | float:
        """What ``|x - x'|`` may be, per element (a tensor for ``pw_rel``)."""
        if p["mode"] == "pw_rel":
            return p["bound"] * x.to(torch.float64).abs()
        return self.absolute_bound(x, p)

    # -- pw_rel through log2 ---------------------------------------------------------------------------

    def _encode_pw_rel(self, x: torch.Tensor, p: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
        """``|x'/x - 1| <= E`` from ``|y' - y| <= log2(1 + E)`` on ``y = log2 |x|`` (zeros and signs kept)."""
        ax = x.to(torch.float64).abs()
        nz = ax > 0
        y = torch.where(nz & torch.isfinite(ax), torch.log2(torch.where(nz, ax, 1.0)), 0.0)
        fill = float(y[nz].min()) if bool(nz.any()) else 0.0
        y = torch.where(nz, y, torch.full_like(y, fill))  # zeros get the smallest log: smooth for the predictor
        y = torch.nan_to_num(y, nan=0.0, posinf=0.0, neginf=0.0)
        # log2(1 + E), less what the decoder's last roundings may add (exp2, whose last bit differs between
        # math libraries, and the cast to the dtype): every value decodes 4 ulps of its dtype inside the bound,
        # on either device (the guard checks that margin); 1e-6 of it for log2's own rounding
        eps = torch.finfo(x.dtype).eps
        delta = (math.log2(1.0 + p["bound"]) - 6 * eps / math.log(2.0)) * (1.0 - 1e-6)
        if delta <= 0:
            raise InputError(f"pw_rel bound {p['bound']:g} is finer than {str(x.dtype).replace('torch.', '')} "
                             f"resolves (a relative step of {eps:.3g}): give a larger bound")
        payload, meta = self._encode(y, {**p, "mode": "abs", "bound": delta}, delta)
        signs = np.packbits((x < 0).reshape(-1).cpu().numpy())
        zeros = np.packbits((~nz).reshape(-1).cpu().numpy())
        meta = {**meta, "eb": delta, "log2": True}
        return pack_sections([payload, zstd_compress(signs.tobytes()), zstd_compress(zeros.tobytes())]), meta

    def _decode_any(self, c: Compressed, device: torch.device | str) -> torch.Tensor:
        if not c.meta.get("log2"):
            return self._decode(c, device)
        base, signs_b, zeros_b = unpack_sections(c.payload)
        n = int(np.prod(c.shape))
        y = self._decode(Compressed(c.compressor, c.params, c.shape, "float64", base, c.meta), device)
        signs = np.unpackbits(np.frombuffer(zstd_decompress(signs_b), dtype=np.uint8))[:n].astype(bool)
        zeros = np.unpackbits(np.frombuffer(zstd_decompress(zeros_b), dtype=np.uint8))[:n].astype(bool)
        mag = torch.exp2(y.reshape(-1).to(torch.float64))
        mag = torch.where(torch.from_numpy(zeros).to(mag.device), 0.0, mag)
        out = torch.where(torch.from_numpy(signs).to(mag.device), -mag, mag)
        return out.to(getattr(torch, c.dtype)).reshape(c.shape)

    # -- to implement ----------------------------------------------------------------------------------

    def _encode(self, x: torch.Tensor, p: dict[str, Any], eb: float | None) -> tuple[bytes, dict[str, Any]]:
        raise NotImplementedError

    def _decode(self, c: Compressed, device: torch.device | str) -> torch.Tensor:
        raise NotImplementedError


def _np(x: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(x.detach().cpu().numpy())


def _dtype(c: Compressed) -> np.dtype:
    return np.dtype(c.dtype)


# ----------------------------------------------------------------------------- ours


class OursCompressor(Compressor):
    """Our compressor: dual-quantised prediction and one of two codecs (see :mod:`.ops`, :mod:`.blocks`).

    ``codec``: ``planes`` (the residuals' byte planes, zstd), ``blocks`` (the residuals bit-packed in
    blocks of 32 where the data is, then zstd frames) or ``auto`` (``blocks`` for a tensor on CUDA,
    ``planes`` elsewhere: each is the faster on its device).  ``entropy`` (the block codec's frames,
    :mod:`.entropy`): ``zstd`` on the host's cores (``auto``) or ``nvcomp`` on the field's CUDA device.
    Either codec, whichever stage wrote it, decodes on either device.
    """

    name = "ours"
    modes = MODES
    self_bounded = True  # both codecs compare the decoder's value with the input while encoding
    PARAMS = {"predictor": "auto", "level": "auto", "backend": "auto", "codec": "auto", "entropy": "auto"}
    CODECS = ("auto", "planes", "blocks")
    BLOCKS_AUTO = "interp"
    """The block codec's predictor for ``predictor: auto``: linear interpolation packed smaller than Lorenzo
    on every field set of the benchmark (``docs/foresight/results.md``), with no sampling pass."""
    SMALL = 1 << 20
    """``level: auto`` is each byte plane's smallest frame of ``SMALL_LEVELS`` up to this many values and of
    ``LARGE_LEVELS`` above; the block codec's frames use level 1 (the packing has done most of the work)."""
    SMALL_LEVELS = (1, "btopt-s1")
    """Level 1 and zstd's optimal parser with a shallow search (:data:`.ops.ZSTD_SETTINGS`): on NYX's 32^3
    planes at 1e-2 of the range the pair writes 20.5 % less than level 1 alone (19-28 % a field; level 15:
    22.6 %), 1.6 % less than level 1 and 15 at 1e-3, in 0.4 of level 15's time; on a 2^20 GRF at 1e-2 level 1
    is the smaller."""
    LARGE_LEVELS = (1, 6)
    """On a 256^3 field's planes neither level wins everywhere: level 1's frame is 11 % smaller than level 6's
    at 1e-2 of the range, 1.7 % larger at 1e-4 (``docs/foresight/results.md``); level 1 costs a sixth of level
    6's time, so both cost ~15 % more than level 6 alone."""

    def check_params(self, params: dict[str, Any]) -> dict[str, Any]:
        p = super().check_params(params)
        if p["predictor"] not in PREDICTORS:
            raise InputError(f"compressor 'ours': predictor must be one of {', '.join(PREDICTORS)}; "
                             f"got {p['predictor']!r}")
        if p["level"] != "auto" and (not isinstance(p["level"], int) or isinstance(p["level"], bool)
                                     or not 1 <= p["level"] <= 22):
            raise InputError(f"compressor 'ours': level must be auto or an integer in 1..22, got {p['level']!r}")
        if p["codec"] not in self.CODECS:
            raise InputError(f"compressor 'ours': codec must be one of {', '.join(self.CODECS)}; got {p['codec']!r}")
        if p["entropy"] not in ENTROPY_STAGES:
            raise InputError(f"compressor 'ours': entropy must be one of {', '.join(ENTROPY_STAGES)}; "
                             f"got {p['entropy']!r}")
        if p["entropy"] == "nvcomp" and p["codec"] == "planes":
            raise InputError("compressor 'ours': entropy=nvcomp is the block codec's stage on the device; "
                             "use codec blocks or auto")
        if p["entropy"] == "nvcomp" and p["level"] != "auto":
            raise InputError("compressor 'ours': nvCOMP's Zstd has no level; leave level auto with entropy=nvcomp")
        return p

    def _codec(self, p, xs) -> str:
        if p["codec"] != "auto":
            return p["codec"]
        return "blocks" if p["entropy"] == "nvcomp" or all(x.is_cuda for x in xs) else "planes"

    def _encode(self, x, p, eb):
        if self._codec(p, [x]) == "blocks":
            return self._blocks([x], [eb], p)[0]
        level = p["level"] if p["level"] != "auto" else (self.SMALL_LEVELS if x.numel() <= self.SMALL
                                                         else self.LARGE_LEVELS)
        used, sections = lorenzo_encode(x, eb, backend=p["backend"], level=level, predictor=p["predictor"])
        return pack_sections(sections), {"codec": "planes", "predictor": used}

    def _blocks(self, xs, ebs, p) -> list[tuple[bytes, dict[str, Any]]]:
        """The block codec's sections and header of each field (one dtype, one device) in one batch."""
        predictor = self.BLOCKS_AUTO if p["predictor"] == "auto" else p["predictor"]
        if p["entropy"] == "nvcomp":
            check_device_stage(xs[0].device)
            packed = blocks_encode_many(xs, ebs, backend=p["backend"], predictor=predictor, on_device=True)
            encoded = device_frames([payload for payload, _ in packed])
            frames = [f for f, _ in encoded]
            extra = [{"chunk": DEVICE_CHUNK, "sum32": total} for _, total in encoded]
            stage = "nvcomp-zstd"
        else:
            packed = blocks_encode_many(xs, ebs, backend=p["backend"], predictor=predictor)
            level = 1 if p["level"] == "auto" else p["level"]
            frames = [entropy_encode(payload, level) for payload, _ in packed]
            extra = [{"chunk": CHUNK}] * len(xs)
            stage = f"zstd{level}"
        return [(pack_sections(f), {"codec": "blocks", "stages": ["quantize", predictor, "zigzag", "bitpack32", stage],
                                    **e, **meta})
                for f, e, (_, meta) in zip(frames, extra, packed, strict=True)]

    def compress_many(self, xs, *, verify=True, bounds=None, **params):
        """The fields' block payloads in one batch per dtype (:func:`.blocks.blocks_encode_many`: two kernel
        launches and one host sync for all of them; with ``entropy=nvcomp`` one nvCOMP batch too) where the
        codec is ``blocks`` and the mode ``abs`` or ``rel``; field by field otherwise.  ``bounds`` (one per
        field) puts several bounds of a sweep in the same batch.  Each field gets the payload it gets alone;
        its ``compress_s`` is the batch's time shared by bytes."""
        each = [self.check_params(q) for q in self._per_field(xs, bounds, params)]
        p = each[0] if each else self.check_params(params)
        xs = [self._input(x) for x in xs]
        if len(xs) < 2 or self._codec(p, xs) != "blocks" or p["mode"] == "pw_rel" or len({x.device for x in xs}) > 1:
            return super().compress_many(xs, verify=verify, bounds=bounds, **params)
        t0 = time.perf_counter()
        ebs = self.absolute_bounds(xs, p, [q["bound"] for q in each])
        encoded: dict[int, tuple[bytes, dict]] = {}
        for dtype in {x.dtype for x in xs}:
            group = [i for i, x in enumerate(xs) if x.dtype == dtype]
            for i, got in zip(group, self._blocks([xs[i] for i in group], [ebs[i] for i in group], p), strict=True):
                encoded[i] = got
        out = []
        for i, x in enumerate(xs):
            body, meta = encoded[i]
            sections = [body, zstd_compress(b""), zstd_compress(b"")]
            out.append((Compressed(self.name, each[i], tuple(x.shape), str(x.dtype).replace("torch.", ""), b"",
                                   {**meta, "eb": ebs[i]}), pack_sections(sections)))
        seconds = time.perf_counter() - t0
        total = sum(x.numel() * x.element_size() for x in xs)
        return [self._finish(c, x, payload, seconds * x.numel() * x.element_size() / total)
                for (c, payload), x in zip(out, xs, strict=True)]

    def _decode(self, c, device):
        dtype = getattr(torch, c.dtype)
        if c.meta.get("codec") == "blocks":
            size = payload_layout(c.meta, dtype, c.shape).starts[-1]  # checked against the shape first
            # decoded into the buffer the device reads: pinned for a GPU, so one copy crosses, asynchronously
            payload = torch.empty(size, dtype=torch.uint8, pin_memory=torch.device(device).type == "cuda")
            entropy_decode(unpack_sections(c.payload), size, c.meta.get("chunk", CHUNK), out=payload.numpy())
            if "sum32" in c.meta and payload_sum(payload.numpy()) != c.meta["sum32"]:  # frames without a checksum
                raise InputError("corrupt payload: its sum is not the one in the header (a changed byte)")
            return blocks_decode(payload, c.meta, c.shape, dtype, c.meta["eb"], device)
        if "eb" not in c.meta or "predictor" not in c.meta:
            raise InputError("corrupt header: the error bound or the predictor is missing")
        return lorenzo_decode(unpack_sections(c.payload), c.shape, dtype, c.meta["eb"], c.meta["predictor"], device)


# ----------------------------------------------------------------------------- SZ3


class SZ3Compressor(Compressor):
    """SZ3 (``pip install pysz``): abs and rel are SZ3's own modes; ``algorithm`` picks its predictor."""

    name = "sz3"
    modes = MODES
    PARAMS = {"algorithm": "interp_lorenzo"}
    ALGORITHMS = ("interp_lorenzo", "interp", "lorenzo_reg", "nopred")

    def check_params(self, params):
        p = super().check_params(params)
        if p["algorithm"] not in self.ALGORITHMS:
            raise InputError(f"compressor 'sz3': algorithm must be one of {', '.join(self.ALGORITHMS)}")
        return p

    def _encode(self, x, p, eb):
        import pysz

        cfg = pysz.szConfig()
        cfg.cmprAlgo = getattr(pysz.szAlgorithm, p["algorithm"].upper())
        cfg.errorBoundMode = pysz.szErrorBoundMode.ABS
        cfg.absErrorBound = float(eb)
        data = _np(x)
        comp, _ = pysz.sz.compress(data, cfg)
        return comp.tobytes(), {}

    def _decode(self, c, device):
        import pysz

        out, _ = pysz.sz.decompress(np.frombuffer(c.payload, dtype=np.uint8).copy(), _dtype(c), c.shape)
        return torch.from_numpy(np.ascontiguousarray(out).reshape(c.shape)).to(device)


# ----------------------------------------------------------------------------- ZFP


class ZFPCompressor(Compressor):
    """ZFP (``pip install zfpy``): fixed accuracy for the bound modes; ``rate`` or ``precision`` select
    ZFP's fixed-rate / fixed-precision modes (not error-bounded)."""

    name = "zfp"
    modes = MODES
    PARAMS = {"rate": None, "precision": None}

    def fixed_mode(self, params):
        return params.get("rate") is not None or params.get("precision") is not None

    def check_params(self, params):
        p = super().check_params(params)
        if p["rate"] is not None and p["precision"] is not None:
            raise InputError("compressor 'zfp': give rate or precision, not both")
        if p["rate"] is not None and not (isinstance(p["rate"], (int, float)) and p["rate"] > 0):
            raise InputError(f"compressor 'zfp': rate must be > 0 bits per value, got {p['rate']!r}")
        if p["precision"] is not None and not (isinstance(p["precision"], int) and 1 <= p["precision"] <= 64):
            raise InputError(f"compressor 'zfp': precision must be an integer in 1..64, got {p['precision']!r}")
        return p

    def _encode(self, x, p, eb):
        import zfpy

        data = _np(x)
        if p["rate"] is not None:
            return zfpy.compress_numpy(data, rate=float(p["rate"])), {}
        if p["precision"] is not None:
            return zfpy.compress_numpy(data, precision=int(p["precision"])), {}
        return zfpy.compress_numpy(data, tolerance=float(eb)), {}

    def _decode(self, c, device):
        import zfpy

        out = zfpy.decompress_numpy(c.payload)
        return torch.from_numpy(np.ascontiguousarray(out).astype(_dtype(c), copy=False).reshape(c.shape)).to(device)


# ----------------------------------------------------------------------------- fpzip


class FpzipCompressor(Compressor):
    """fpzip (``pip install fpzip``): keeps ``precision`` leading bits of each value (0: lossless).

    Bound modes pick the fewest bits that meet the bound: ``pw_rel`` E needs the mantissa kept to
    ``ceil(log2(1/E)) + 1`` bits; ``abs``/``rel`` e needs it to ``ceil(log2(max|x| / e)) + 1``.
    """

    name = "fpzip"
    modes = MODES
    native_pw_rel = True
    PARAMS = {"precision": None}

    def fixed_mode(self, params):
        return params.get("precision") is not None

    def check_params(self, params):
        p = super().check_params(params)
        if p["precision"] is not None and not (isinstance(p["precision"], int) and 0 <= p["precision"] <= 64):
            raise InputError(f"compressor 'fpzip': precision must be an integer in 0..64, got {p['precision']!r}")
        return p

    def _encode(self, x, p, eb):
        import fpzip

        data = _np(x)
        total = 32 if data.dtype == np.float32 else 64
        head = 9 if data.dtype == np.float32 else 12  # sign + exponent bits
        if p["precision"] is not None:
            prec = p["precision"]
        else:
            rel = p["bound"] if p["mode"] == "pw_rel" else eb / max(float(np.abs(data[np.isfinite(data)]).max(
                initial=0.0)), np.finfo(data.dtype).tiny)
            prec = min(total, head + max(1, math.ceil(math.log2(1.0 / min(rel, 1.0))) + 1))
            if total == 64:
                prec += prec % 2  # fpzip codes doubles in steps of two bits
        if data.ndim > 4:
            data = data.reshape(-1, *data.shape[-3:])
        return fpzip.compress(data, precision=int(prec), order="C"), {"bits": int(prec)}

    def _decode(self, c, device):
        import fpzip

        out = fpzip.decompress(c.payload, order="C")
        return torch.from_numpy(np.ascontiguousarray(out).reshape(c.shape).astype(_dtype(c), copy=False)).to(device)


# ----------------------------------------------------------------------------- bit grooming


def round_mantissa(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Round ``x`` to ``bits`` explicit mantissa bits (round half away from zero in magnitude), so
    ``|x' - x| <= 2^-(bits+1) |x|`` for every normal value (NaN/inf unchanged).

    Args:
        x: float32 or float64 tensor.
        bits: mantissa bits kept (0..23 for float32, 0..52 for float64).
    """
    mant = 23 if x.dtype == torch.float32 else 52
    ity = torch.int32 if x.dtype == torch.float32 else torch.int64
    drop = mant - int(bits)
    if drop <= 0:
        return x.clone()
    u = x.contiguous().view(ity)
    half = 1 << (drop - 1)
    mask = ~((1 << drop) - 1)
    r = ((u + half) & mask).view(x.dtype)
    keep = ~torch.isfinite(x) | ~torch.isfinite(r)  # NaN/inf, or a round-up into inf: keep the input
    return torch.where(keep, x, r)


def _check_level(name: str, level: Any) -> None:
    """A zstd level: an integer in 1..22."""
    if not (isinstance(level, int) and not isinstance(level, bool) and 1 <= level <= 22):
        raise InputError(f"compressor {name!r}: level must be an integer in 1..22 (zstd's levels), got {level!r}")


class BitGroomCompressor(Compressor):
    """Mantissa rounding ("bit grooming", as netCDF's quantize) to the fewest bits that meet the bound,
    then a byte shuffle and zstd."""

    name = "bitgroom"
    modes = MODES
    native_pw_rel = True
    PARAMS = {"bits": None, "level": 9}

    def fixed_mode(self, params):
        return params.get("bits") is not None

    def check_params(self, params):
        p = super().check_params(params)
        if p["bits"] is not None and not (isinstance(p["bits"], int) and 0 <= p["bits"] <= 52):
            raise InputError(f"compressor 'bitgroom': bits must be an integer in 0..52 (mantissa bits kept), "
                             f"got {p['bits']!r}")
        _check_level(self.name, p["level"])
        return p

    def _encode(self, x, p, eb):
        mant = 23 if x.dtype == torch.float32 else 52
        if p["bits"] is not None:
            bits = int(p["bits"])
        else:
            rel = p["bound"] if p["mode"] == "pw_rel" else eb / max(float(x[torch.isfinite(x)].abs().max()), 1e-300)
            bits = max(0, math.ceil(math.log2(1.0 / min(rel, 1.0))) - 1)
        bits = min(bits, mant)
        r = round_mantissa(x, bits)
        raw = _np(r).view(np.uint8).reshape(-1, x.element_size())
        shuffled = np.ascontiguousarray(raw.T)  # byte planes: the zeroed low bytes compress to nothing
        return zstd_compress(shuffled.tobytes(), int(p["level"])), {"bits": bits}

    def _decode(self, c, device):
        item = np.dtype(c.dtype).itemsize
        planes = np.frombuffer(zstd_decompress(c.payload), dtype=np.uint8).reshape(item, -1)
        out = np.ascontiguousarray(planes.T).view(np.dtype(c.dtype)).reshape(c.shape)
        return torch.from_numpy(out.copy()).to(device)


# ----------------------------------------------------------------------------- downsampling


class DownsampleCompressor(Compressor):
    """Keep every ``factor``-th sample along each axis; restore by (tri)linear interpolation.  Not
    error-bounded: what it does to the analyses is the point of sweeping it."""

    name = "downsample"
    PARAMS = {"factor": 2}

    def check_params(self, params):
        p = super().check_params(params)
        if isinstance(p["factor"], bool) or not isinstance(p["factor"], int) or p["factor"] < 1:
            raise InputError(f"compressor 'downsample': factor must be an integer >= 1, got {p['factor']!r}")
        return p

    def _encode(self, x, p, eb):
        f = p["factor"]
        sub = x[tuple(slice(None, None, f) for _ in range(x.dim()))].contiguous()
        return zstd_compress(_np(sub).tobytes(), 3), {"sub_shape": list(sub.shape)}

    def _decode(self, c, device):
        sub = np.frombuffer(zstd_decompress(c.payload), dtype=np.dtype(c.dtype)).reshape(c.meta["sub_shape"])
        t = torch.from_numpy(sub.copy()).to(device)
        f = c.params["factor"]
        if f == 1:
            return t
        nd = len(c.shape)
        mode = {1: "linear", 2: "bilinear", 3: "trilinear"}.get(nd)
        if mode is None:
            raise InputError("downsample restores 1-3D arrays only")
        # interpolate on the sample positions i*f, clamping beyond the last kept sample
        grid_in = t[None, None]
        out_size = [(s - 1) * f + 1 for s in t.shape]
        up = torch.nn.functional.interpolate(grid_in.to(torch.float64), size=out_size, mode=mode, align_corners=True)
        up = up[0, 0]
        pad = [(0, c.shape[d] - out_size[d]) for d in range(nd)]
        for d, (_, extra) in enumerate(pad):
            if extra > 0:
                last = up.narrow(d, up.shape[d] - 1, 1)
                up = torch.cat([up, last.expand(*[extra if k == d else up.shape[k] for k in range(nd)])], dim=d)
            elif extra < 0:
                up = up.narrow(d, 0, c.shape[d])
        return up.to(getattr(torch, c.dtype)).contiguous()


class ZstdCompressor(Compressor):
    """Lossless: zstd of the raw bytes (the floor every lossy setting must beat)."""

    name = "zstd"
    PARAMS = {"level": 3}

    def check_params(self, params):
        p = super().check_params(params)
        _check_level(self.name, p["level"])
        return p

    def _encode(self, x, p, eb):
        return zstd_compress(_np(x).tobytes(), int(p["level"])), {}

    def _decode(self, c, device):
        out = np.frombuffer(zstd_decompress(c.payload), dtype=np.dtype(c.dtype)).reshape(c.shape)
        return torch.from_numpy(out.copy()).to(device)


COMPRESSORS: dict[str, type[Compressor]] = {
    cls.name: cls for cls in (OursCompressor, SZ3Compressor, ZFPCompressor, FpzipCompressor, BitGroomCompressor,
                              DownsampleCompressor, ZstdCompressor)
}


def get_compressor(name: str) -> Compressor:
    """The compressor called ``name``; InputError lists the known ones."""
    cls = COMPRESSORS.get(name)
    if cls is None:
        raise InputError(f"unknown compressor {name!r} (known: {', '.join(COMPRESSORS)})")
    return cls()


def compress(x: torch.Tensor, compressor: str = "ours", **params: Any) -> Compressed:
    """``get_compressor(compressor).compress(x, **params)``."""
    return get_compressor(compressor).compress(x, **params)


def decompress(c: Compressed, device: torch.device | str = "cpu") -> torch.Tensor:
    """The array of ``c``, by the compressor that wrote it."""
    return get_compressor(c.compressor).decompress(c, device)


def save_compressed(c: Compressed, path) -> None:
    from torchhpc.ext.core.runs import atomic_write_bytes

    atomic_write_bytes(path, c.to_bytes())


def load_compressed(path) -> Compressed:
    with open(path, "rb") as fh:
        return Compressed.from_bytes(fh.read(), str(path))


__all__ = ["COMPRESSORS", "MODES", "Compressed", "Compressor", "compress", "decompress", "get_compressor",
           "load_compressed", "round_mantissa", "save_compressed"]
