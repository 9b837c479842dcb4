"""The LASTZ hand-off (SegAlign's gapped stage): our HSPs -> ``lastz --segments=FILE`` -> alignments.

As SegAlign's driver does, the HSPs of each strand go to a segments file (LASTZ's
own ``--format=segments`` layout, 1-based closed, ordered by query) and one
``lastz TARGET QUERY --segments=FILE --strand=plus|minus --format=maf-`` runs per
strand; LASTZ then skips its seeding and ungapped stage and extends the given
HSPs with its Y-drop gapped extension.  Its MAF is read back into
:class:`~torchhpc.ext.segalign.output.Alignment` s.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from torchhpc.ext.core.errors import InputError

from .fasta import SequenceSet
from .ops import HSPs
from .output import Alignment, hsps_to_alignments, write_segments


def read_maf(text: str) -> list[Alignment]:
    """Two-row MAF blocks (LASTZ ``maf``/``maf-``) -> alignments."""
    out: list[Alignment] = []
    score = 0
    rows: list[list[str]] = []
    for line in text.splitlines() + [""]:
        if line.startswith("a"):
            score = 0
            for f in line.split()[1:]:
                if f.startswith("score="):
                    score = int(float(f[6:]))
        elif line.startswith("s "):
            rows.append(line.split())
        elif not line.strip() and rows:
            if len(rows) == 2:
                (_, n1, s1, z1, _, l1, x1), (_, n2, s2, z2, st2, l2, x2) = rows
                out.append(Alignment(n1, int(l1), int(s1), int(s1) + int(z1), n2, int(l2), int(s2),
                                     int(s2) + int(z2), st2, score, x1, x2))
            rows = []
    return out


def _without_bom(path: str, tmp: str, tag: str) -> str:
    """``path``, or a copy without its UTF-8 byte-order mark in ``tmp`` (LASTZ reads the mark as a bad base)."""
    with open(path, "rb") as fh:
        if fh.read(3) != b"\xef\xbb\xbf":
            return str(path)
        copy = Path(tmp) / f"{tag}-{Path(path).name}"
        with open(copy, "wb") as out:
            shutil.copyfileobj(fh, out)
    return str(copy)


def lastz_gapped(hsps: dict[str, HSPs], target: SequenceSet, sets: dict[str, SequenceSet | None],
                 target_path: str, query_path: str, cfg) -> list[Alignment]:
    """Gapped extension of our HSPs by an installed lastz (one run per strand).

    Raises:
        InputError: lastz is not installed or fails (its message is passed on).
    """
    exe = shutil.which(cfg.lastz)
    if exe is None:
        raise InputError(f"--gapped-by lastz: the lastz executable {cfg.lastz!r} is not on PATH "
                         "(apt-get install lastz, or use --gapped-by native)")
    alns: list[Alignment] = []
    with tempfile.TemporaryDirectory(prefix="segalign-") as tmp:
        target_path, query_path = _without_bom(target_path, tmp, "t"), _without_bom(query_path, tmp, "q")
        tspec = f"{target_path}[multiple]" if len(target.names) > 1 else target_path
        for strand, h in hsps.items():
            if len(h) == 0:
                continue
            seg = Path(tmp) / f"hsps{'plus' if strand == '+' else 'minus'}.segments"
            with open(seg, "w") as fh:
                write_segments(hsps_to_alignments(h, target, sets[strand]), fh)
            cmd = [exe, tspec, query_path, f"--segments={seg}", f"--strand={'plus' if strand == '+' else 'minus'}",
                   f"--ydrop={cfg.ydrop}", f"--gappedthresh={cfg.gappedthresh or cfg.hspthresh}", "--nochain",
                   "--format=maf-"]
            if cfg.scoring:
                cmd.append(f"--scores={cfg.scoring}")  # LASTZ's name for the scoring file
            if cfg.ambiguous:
                cmd.append(f"--ambiguous={cfg.ambiguous}")
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                raise InputError(f"lastz --segments failed ({res.returncode}): {res.stderr.strip()[:400]}")
            alns += read_maf(res.stdout)
    return alns
