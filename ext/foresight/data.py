"""Inputs: NYX-style HDF5, raw binary volumes, NumPy ``.npy``/``.npz``, HACC GenericIO particle files, and
synthetic fields with known answers.

Every loader returns ``{field name: tensor}`` and raises :class:`InputError` naming the file and the
field for a missing field, a malformed file or a size that does not match the given dims.
"""

from __future__ import annotations

import math
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import torch

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.core.paths import load_numpy as read_numpy_file

# ----------------------------------------------------------------------------- files


def load_hdf5(path: str | Path, fields: list[str] | None = None) -> dict[str, torch.Tensor]:
    """Datasets of an HDF5 file; a NYX file's ``native_fields/<name>`` may be named by ``<name>`` alone.

    Args:
        path: the ``.h5`` file.
        fields: dataset names or paths (None: every dataset under ``native_fields``, else every one).
    """
    import h5py

    path = Path(path)
    try:
        fh = h5py.File(path, "r")
    except OSError as exc:
        if not path.exists():
            raise FileNotFoundError(2, "No such file or directory", str(path)) from None
        raise InputError(f"{path}: not an HDF5 file ({exc})") from None
    with fh:
        found: dict[str, str] = {}

        def visit(name: str, obj) -> None:  # (a non-None return would stop h5py's walk)
            if isinstance(obj, h5py.Dataset):
                found[name] = name

        fh.visititems(visit)
        short = {n.rsplit("/", 1)[-1]: n for n in found}
        if fields is None:
            fields = [n for n in short if short[n].startswith("native_fields/")] or list(short)
        out = {}
        for f in fields:
            key = found.get(f) or short.get(f)
            if key is None:
                raise InputError(f"{path}: no field {f!r} (fields: {', '.join(sorted(short))})")
            out[f] = torch.from_numpy(np.ascontiguousarray(fh[key][...]))
    return out


def load_raw(path: str | Path, dims: list[int], dtype: str = "float32", fields: list[str] | None = None
             ) -> dict[str, torch.Tensor]:
    """A raw binary volume of ``dims`` (C order) and ``dtype`` (``float32``, ``<f8``, ...)."""
    path = Path(path)
    dt = np.dtype(dtype)
    n = int(np.prod(dims))
    size = path.stat().st_size
    if size != n * dt.itemsize:
        raise InputError(f"{path}: {size} bytes do not match dims {list(dims)} of {dt.name} "
                         f"({n * dt.itemsize} bytes expected)")
    name = (fields or [path.stem])[0]
    return {name: torch.from_numpy(np.fromfile(path, dtype=dt).reshape(dims))}


def load_numpy(path: str | Path, fields: list[str] | None = None) -> dict[str, torch.Tensor]:
    """A ``.npy`` array (one field, named by the file's stem) or the arrays of a ``.npz``."""
    path = Path(path)
    obj = read_numpy_file(path, what="input")
    if isinstance(obj, np.ndarray):
        arrays = {path.stem: obj}
    else:
        try:
            with obj:
                arrays = {k: obj[k] for k in obj.files}
        except (ValueError, EOFError, OSError, zipfile.BadZipFile, zlib.error) as exc:
            raise InputError(f"input {path}: a damaged .npz file ({exc})") from None
    if fields is None:
        fields = list(arrays)
    out = {}
    for f in fields:
        if f not in arrays:
            raise InputError(f"{path}: no field {f!r} (fields: {', '.join(arrays)})")
        a = np.asarray(arrays[f])
        if not a.dtype.isnative:  # a big-endian file: torch reads the machine's byte order only
            a = a.astype(a.dtype.newbyteorder("="))
        out[f] = torch.from_numpy(a if a.flags.c_contiguous else a.copy(order="C"))  # (0-d stays 0-d)
    return out


# ----------------------------------------------------------------------------- GenericIO

_GIO_MAGIC = {b"HACC01L\0": "<", b"HACC01B\0": ">"}
_GIO_FLOAT, _GIO_SIGNED = 1, 2


def read_genericio(path: str | Path, fields: list[str] | None = None) -> dict[str, torch.Tensor]:
    """Variables of a HACC GenericIO file (one file, uncompressed blocks), concatenated over its ranks.

    The layout (GenericIO.h): a global header (magic ``HACC01L``/``HACC01B``, header size, element
    count, 3 rank dims, then count/size/start of the variable and rank headers, the global header's
    size, physical origin and scale as 3+3 doubles, block-header size and start), ``NVars`` variable
    headers (256-byte name, flags, element size), ``NRanks`` rank headers (3 coords, element count,
    data start, global rank), an 8-byte CRC; each rank's data is its variables one after another,
    each followed by an 8-byte CRC.

    Raises:
        InputError: not a GenericIO file, a missing variable, or compressed blocks (not supported).
    """
    path = Path(path)
    blob = path.read_bytes()
    end = _GIO_MAGIC.get(blob[:8])
    if end is None:
        raise InputError(f"{path}: not a GenericIO file (magic {blob[:8]!r})")
    u64 = f"{end}Q"
    try:
        g = struct.unpack_from(f"{end}12Q6d2Q", blob, 8)
    except struct.error:
        raise InputError(f"{path}: truncated GenericIO header") from None
    nvars, vars_size, vars_start, nranks, ranks_size, ranks_start = g[5], g[6], g[7], g[8], g[9], g[10]
    blocks_size = g[18]
    if blocks_size:
        raise InputError(f"{path}: GenericIO files with (compressed) block headers are not supported")
    variables = []
    ranks = []
    try:  # offsets past the end, a size no dtype has, a name that is not text: a damaged header
        for v in range(nvars):
            off = vars_start + v * vars_size
            name = blob[off:off + 256].split(b"\0", 1)[0].decode()
            flags, size = struct.unpack_from(f"{end}2Q", blob, off + 256)
            if size not in (1, 2, 4, 8):
                raise struct.error(f"variable {name!r} has elements of {size} bytes")
            variables.append((name, flags, size))
        for r in range(nranks):
            off = ranks_start + r * ranks_size
            _, _, _, n, start = struct.unpack_from(f"{end}5Q", blob, off)[:5]
            ranks.append((n, start))
    except (struct.error, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: damaged GenericIO header ({exc})") from None
    names = [v[0] for v in variables]
    fields = fields or names
    for f in fields:
        if f not in names:
            raise InputError(f"{path}: no variable {f!r} (variables: {', '.join(names)})")
    chunks: dict[str, list[np.ndarray]] = {f: [] for f in fields}
    for n, start in ranks:
        pos = start
        for name, flags, size in variables:
            if name in chunks:
                if flags & _GIO_FLOAT:
                    kind = "f"
                else:
                    kind = "i" if flags & _GIO_SIGNED else "u"
                dt = np.dtype(f"{end}{kind}{size}")
                if pos + n * size > len(blob):
                    raise InputError(f"{path}: variable {name!r} runs past the end of the file")
                chunks[name].append(np.frombuffer(blob, dtype=dt, count=n, offset=pos))
            pos += n * size + 8  # data, then its CRC64
    _ = u64
    return {f: torch.from_numpy(np.concatenate(chunks[f]).astype(chunks[f][0].dtype.newbyteorder("="))) for f in fields}


def genericio_header(path: str | Path) -> dict[str, Any]:
    """The global header of a GenericIO file: element count, rank dims, physical origin and scale."""
    blob = Path(path).read_bytes()[:256]
    end = _GIO_MAGIC.get(blob[:8])
    if end is None:
        raise InputError(f"{path}: not a GenericIO file")
    g = struct.unpack_from(f"{end}12Q6d2Q", blob, 8)
    return {"n_elems": g[1], "dims": list(g[2:5]), "n_vars": g[5], "n_ranks": g[8],
            "phys_origin": list(g[12:15]), "phys_scale": list(g[15:18])}


def load_fields(path: str | Path, fmt: str = "auto", fields: list[str] | None = None,
                dims: list[int] | None = None, dtype: str = "float32") -> dict[str, torch.Tensor]:
    """Load ``fields`` from ``path``; ``fmt`` auto-detects from the suffix (``.h5``/``.hdf5``,
    ``.npy``/``.npz``, ``.raw``/``.bin``/``.dat`` with ``dims``) or the GenericIO magic.

    Raises:
        InputError: an unknown format, a raw file without dims, dims for a file that is not raw, a missing field.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(2, "No such file or directory", str(path))
    suffix = path.suffix.lower()
    if fmt == "auto":
        with open(path, "rb") as fh:
            magic = fh.read(8)
        if magic in _GIO_MAGIC:
            fmt = "genericio"
        elif suffix in (".h5", ".hdf5", ".nc") or magic.startswith(b"\x89HDF"):
            fmt = "hdf5"
        elif suffix in (".npy", ".npz"):
            fmt = "numpy"
        elif suffix in (".raw", ".bin", ".dat", ".f32", ".f64"):
            fmt = "raw"
        else:
            raise InputError(f"{path}: cannot tell the format; set input.format to hdf5, numpy, raw or genericio")
    if dims and fmt != "raw":  # a contradiction, refused rather than ignored
        raise InputError(f"{path}: dims {list(dims)} are for raw volumes; a {fmt} file stores its own shape "
                         "(drop --dims / input.dims)")
    if fmt == "hdf5":
        return load_hdf5(path, fields)
    if fmt == "numpy":
        return load_numpy(path, fields)
    if fmt == "genericio":
        return read_genericio(path, fields)
    if fmt == "raw":
        if not dims:
            raise InputError(f"{path}: a raw volume needs input.dims (e.g. [512, 512, 512])")
        return load_raw(path, dims, dtype, fields)
    raise InputError(f"unknown input format {fmt!r} (hdf5, numpy, raw, genericio)")


# ----------------------------------------------------------------------------- synthetic fields


def _kgrid(n: int, box: float = 1.0, device: str | torch.device = "cpu") -> tuple[torch.Tensor, ...]:
    """Wavenumbers (rad per unit length) of an ``n^3`` rfft grid: kx, ky, kz broadcastable."""
    k = torch.fft.fftfreq(n, d=box / n, dtype=torch.float64, device=device) * 2 * math.pi
    kr = torch.fft.rfftfreq(n, d=box / n, dtype=torch.float64, device=device) * 2 * math.pi
    return k[:, None, None], k[None, :, None], kr[None, None, :]


def gaussian_random_field(n: int, power, box: float = 1.0, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    """A periodic Gaussian random field on ``n^3`` points whose power spectrum is ``power(k)``.

    Convention (the one :func:`~.analyses.power_spectrum` measures): ``P(k) = V <|delta_k|^2>`` with
    ``delta_k = (1/N) sum_x delta(x) e^{-ikx}``, ``V = box^3``, ``N = n^3``.

    Args:
        n: points per side.
        power: a callable ``P(k)`` on a tensor of wavenumbers (rad per unit length).
        box: side length.
        seed: the white noise's seed.
    """
    g = torch.Generator().manual_seed(seed)
    white = torch.randn(n, n, n, generator=g, dtype=torch.float64)
    wk = torch.fft.rfftn(white)  # <|wk|^2> = N
    kx, ky, kz = _kgrid(n, box)
    kk = torch.sqrt(kx**2 + ky**2 + kz**2)
    pk = torch.where(kk > 0, power(torch.where(kk > 0, kk, 1.0)), 0.0)
    vol = box**3
    # delta_k (numpy convention, no 1/N) = wk * sqrt(P N / V) gives <|delta_k / N|^2> V = P
    field = torch.fft.irfftn(wk * torch.sqrt(pk * n**3 / vol), s=(n, n, n))
    return field.to(dtype)


def kolmogorov_velocity(n: int, seed: int = 0, k0: float = 2.0, dtype=torch.float32) -> torch.Tensor:
    """A divergence-free periodic velocity field ``(3, n, n, n)`` with energy spectrum ``E(k) ~ k^-5/3``
    above ``k0`` and ``~ k^4`` below (``k`` in units of the fundamental mode), unit box, unit r.m.s.

    Built as Gaussian modes with ``|u_k|^2 ~ E(k) / (4 pi k^2)``, projected onto the plane normal to
    ``k`` (so ``k . u_k = 0``: divergence-free to round-off).
    """
    g = torch.Generator().manual_seed(seed)
    kx, ky, kz = _kgrid(n, 1.0)
    kk2 = kx**2 + ky**2 + kz**2
    kk = torch.sqrt(kk2)
    kn = kk / (2 * math.pi)
    r = kn.clamp(min=1e-12) / k0
    ek = torch.where(kn > 0, torch.where(r < 1, r**4, r ** (-5 / 3)), 0.0)  # k^4 below k0, Kolmogorov above
    amp = torch.sqrt(ek / (4 * math.pi * kn.clamp(min=1.0) ** 2))
    if n % 2 == 0:  # no Nyquist modes: their k has no sign, so the projection could not stay Hermitian
        nyq = n // 2 * 2 * math.pi
        amp = torch.where((kx.abs() == nyq) | (ky.abs() == nyq) | (kz.abs() == nyq), 0.0, amp)
    comps = []
    for _ in range(3):
        w = torch.randn(n, n, n, generator=g, dtype=torch.float64)
        comps.append(torch.fft.rfftn(w) * amp)
    ux, uy, uz = comps
    kd = (kx * ux + ky * uy + kz * uz) / torch.where(kk2 > 0, kk2, 1.0)
    u = [torch.fft.irfftn(c - kd * kc, s=(n, n, n)) for c, kc in ((ux, kx), (uy, ky), (uz, kz))]
    out = torch.stack(u)
    return (out / out.std()).to(dtype)


def clustered_particles(n_halos: int, per_halo: int, n_background: int, box: float = 1.0, radius: float = 0.005,
                        seed: int = 0, min_sep: float = 0.05) -> tuple[torch.Tensor, torch.Tensor]:
    """Particles in compact clusters ("halos") plus a uniform background, periodic box.

    Returns:
        ``(pos (N, 3) float32, label (N,) int64)``: the halo each particle was drawn in (-1: background).
        Halo centres are at least ``min_sep`` apart.
    """
    g = torch.Generator().manual_seed(seed)
    centres = torch.empty(0, 3, dtype=torch.float64)
    tries = 0
    while centres.shape[0] < n_halos:
        c = torch.rand(3, generator=g, dtype=torch.float64) * box
        d = (centres - c).abs()
        d = torch.minimum(d, box - d)
        if centres.shape[0] == 0 or bool(d.norm(dim=1).min() >= min_sep):
            centres = torch.cat([centres, c[None]])
        tries += 1
        if tries > 100000:
            raise InputError("clustered_particles: cannot place that many halos that far apart")
    sizes = per_halo if isinstance(per_halo, list) else [per_halo] * n_halos
    pos, lab = [], []
    for h, (c, m) in enumerate(zip(centres, sizes, strict=True)):
        pos.append((c + radius * torch.randn(m, 3, generator=g, dtype=torch.float64)) % box)
        lab.append(torch.full((m,), h, dtype=torch.int64))
    pos.append(torch.rand(n_background, 3, generator=g, dtype=torch.float64) * box)
    lab.append(torch.full((n_background,), -1, dtype=torch.int64))
    return torch.cat(pos).to(torch.float32), torch.cat(lab)


def particles_from_field(density: torch.Tensor, n: int, box: float = 1.0, seed: int = 0) -> torch.Tensor:
    """``n`` particles sampled with probability proportional to a non-negative ``density`` grid
    (uniform within the chosen cell): a clustered particle set from a clustered field. ``(n, 3)``."""
    g = torch.Generator().manual_seed(seed)
    w = density.to(torch.float64).clamp(min=0).reshape(-1)
    if not bool(w.sum() > 0):
        raise InputError("particles_from_field: the density has no positive cell")
    cells = torch.multinomial(w, n, replacement=True, generator=g)
    shape = density.shape
    idx = torch.stack(torch.unravel_index(cells, shape), dim=1).to(torch.float64)
    jitter = torch.rand(n, 3, generator=g, dtype=torch.float64)
    return ((idx + jitter) * (box / torch.tensor(shape, dtype=torch.float64))).to(torch.float32)


def halo_model_particles(size: int, seed: int = 0, halo_fraction: float = 0.5, m_min: int = 10,
                         m_max: int = 1000) -> tuple[torch.Tensor, torch.Tensor]:
    """``size^3 / 4`` particles in a periodic box of side ``size``: ``halo_fraction`` of them in compact
    halos whose sizes follow ``dn/dM ~ M^-2`` on ``[m_min, m_max]`` (a cosmological-like mass function),
    the rest uniform.  Halo radius 0.1 and separation >= 3 mean inter-particle spacings, so FoF with the
    usual 0.2 link finds each halo whole.

    Returns:
        ``(pos (N, 3) float32, label (N,) int64: the halo of each particle, -1 for the background)``.
    """
    n = size**3 // 4
    g = torch.Generator().manual_seed(seed)
    sizes, total = [], 0
    while total < halo_fraction * n:
        u = float(torch.rand(1, generator=g))
        m = int(min(m_max, m_min / max(1.0 - u * (1 - m_min / m_max), 1e-9)))  # inverse CDF of M^-2
        sizes.append(m)
        total += m
    spacing = size / n ** (1 / 3)
    return clustered_particles(len(sizes), sizes, max(n - total, 0), box=float(size), radius=0.1 * spacing,
                               seed=seed + 1, min_sep=3 * spacing)


def synthetic_fields(kind: str, size: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Named synthetic inputs for a sweep: ``grf`` (one field ``density``, ``P(k) ~ k^-2`` at large k),
    ``kolmogorov`` (``vx, vy, vz``), ``particles`` (``x, y, z`` in a box of side ``size``: see
    :func:`halo_model_particles`)."""
    if kind == "grf":
        return {"density": gaussian_random_field(size, lambda k: 1e-3 * (k / 10.0) ** -2.0, seed=seed)}
    if kind == "kolmogorov":
        u = kolmogorov_velocity(size, seed=seed)
        return {"vx": u[0].contiguous(), "vy": u[1].contiguous(), "vz": u[2].contiguous()}
    if kind == "particles":
        pos, _ = halo_model_particles(size, seed)
        return {"x": pos[:, 0].contiguous(), "y": pos[:, 1].contiguous(), "z": pos[:, 2].contiguous()}
    raise InputError(f"unknown synthetic input {kind!r} (grf, kolmogorov, particles)")


__all__ = ["clustered_particles", "gaussian_random_field", "genericio_header", "halo_model_particles", "kolmogorov_velocity", "load_fields",
           "load_hdf5", "load_numpy", "load_raw", "particles_from_field", "read_genericio", "synthetic_fields"]
