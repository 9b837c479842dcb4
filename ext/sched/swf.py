"""Standard Workload Format (SWF) traces.

An SWF file (Parallel Workloads Archive) has header lines starting with ``;``
(``; MaxNodes: 256``, ``; MaxProcs: 338 (batch partition)``, ...) and one job
per line with 18 whitespace-separated numeric fields, ``-1`` meaning unknown:

    ==  =====================  ==  =====================
    1   job id                 10  requested memory
    2   submit time (s)        11  status
    3   wait time              12  user id
    4   run time (s)           13  group id
    5   allocated processors   14  executable id
    6   average CPU time       15  queue id
    7   used memory            16  partition id
    8   requested processors   17  preceding job id
    9   requested time (s)     18  think time
    ==  =====================  ==  =====================

:func:`read_swf` parses any SWF file into a :class:`Trace` of numpy columns;
:meth:`Trace.for_scheduling` applies the conventions RLScheduler's published
numbers use (processors = max(allocated, requested); requested time falls back
to run time; negative run time becomes 10 s; zero-run-time jobs are dropped;
jobs sorted by id) and checks that every job fits the machine.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from torchhpc.ext.core.errors import InputError

FIELDS = (
    "job_id", "submit", "wait", "run", "alloc_procs", "avg_cpu", "used_mem", "req_procs", "req_time",
    "req_mem", "status", "user", "group", "executable", "queue", "partition", "preceding", "think",
)
_HEADER_INT = re.compile(r"^\s*;\s*(MaxNodes|MaxProcs)\s*:\s*(-?\d+)")


@dataclass
class Trace:
    """A workload: one numpy array per SWF field (float64; ``-1`` = unknown) plus the machine size.

    Attributes:
        columns: field name -> ``(J,)`` array, in file order (or scheduling order after
            :meth:`for_scheduling`).
        max_nodes, max_procs: from the header (``None`` when absent).
        name: where it came from.
        skipped: malformed lines skipped in lenient mode, as ``(line number, reason)``.
    """

    columns: dict[str, np.ndarray]
    max_nodes: int | None = None
    max_procs: int | None = None
    name: str = "trace"
    skipped: list[tuple[int, str]] = field(default_factory=list)
    max_run_time: float = 0.0
    """Largest run time of all parsed jobs (RLScheduler's feature normaliser)."""

    def __len__(self) -> int:
        return len(self.columns["job_id"])

    def __getattr__(self, name: str) -> np.ndarray:
        cols = self.__dict__.get("columns")
        if cols is not None and name in cols:
            return cols[name]
        raise AttributeError(name)

    @property
    def machine_procs(self) -> int | None:
        """Processors of the machine: ``MaxProcs`` when present, else ``MaxNodes``."""
        return self.max_procs if self.max_procs and self.max_procs > 0 else self.max_nodes

    @property
    def procs(self) -> np.ndarray:
        """Processors a job occupies: max(allocated, requested)."""
        return np.maximum(self.columns["alloc_procs"], self.columns["req_procs"])

    def for_scheduling(self, procs: int | None = None) -> SchedTrace:
        """The jobs as a scheduler sees them (RLScheduler conventions, see the module docstring).

        Args:
            procs: machine size override (default: :attr:`machine_procs`).

        Raises:
            InputError: no machine size is known, or a job asks for more processors than the
                machine has (the message suggests ``--procs``).
        """
        if procs is not None and procs < 1:
            raise InputError(f"{self.name}: the machine size (procs) must be >= 1, got {procs}")
        c = self.columns
        run = c["run"].copy()
        run[run < 0] = 10.0
        keep = run > 0
        order = np.argsort(c["job_id"][keep], kind="stable")
        sel = np.nonzero(keep)[0][order]
        job_procs = self.procs[sel]
        req_time = c["req_time"][sel].copy()
        run_sel = run[sel]
        req_time[req_time <= 0] = run_sel[req_time <= 0]
        machine = procs if procs is not None else self.machine_procs
        if machine is None or machine <= 0:
            raise InputError(f"{self.name}: the header gives no MaxProcs/MaxNodes; pass the machine size (--procs N)")
        if len(sel) == 0:
            raise InputError(f"{self.name}: no job with a positive run time")
        if job_procs.min() <= 0:
            bad = int(np.argmin(job_procs))
            raise InputError(f"{self.name}: job {int(c['job_id'][sel][bad])} asks for {int(job_procs[bad])} processors")
        too_big = job_procs > machine
        if too_big.any():
            n_bad = int(too_big.sum())
            first = int(np.argmax(too_big))
            raise InputError(
                f"{self.name}: {n_bad} job(s) ask for more processors than the machine's {machine} "
                f"(job {int(c['job_id'][sel][first])} asks for {int(job_procs[first])}, the largest for "
                f"{int(job_procs.max())}); pass the machine size, e.g. --procs {int(job_procs.max())}"
            )

        def col(name: str) -> np.ndarray:
            return c[name][sel]

        def norm_max(name: str) -> float:
            v = c[name]
            return float(v.max()) if len(v) and v.max() > 0 else 1.0

        return SchedTrace(
            name=self.name, procs_total=int(machine),
            job_id=col("job_id").astype(np.int64), submit=col("submit").astype(np.int64),
            run=run_sel.astype(np.int64), req_time=req_time.astype(np.int64), procs=job_procs.astype(np.int64),
            req_mem=col("req_mem"), user=col("user"), group=col("group"), executable=col("executable"),
            max_run_time=float(self.max_run_time or run_sel.max()),
            max_req_mem=norm_max("req_mem"), max_user=norm_max("user"), max_group=norm_max("group"),
            max_executable=norm_max("executable"),
        )


@dataclass
class SchedTrace:
    """Jobs ready for the simulator: int64 columns ``(J,)`` in scheduling order (0-based job index)."""

    name: str
    procs_total: int
    job_id: np.ndarray
    submit: np.ndarray
    run: np.ndarray
    req_time: np.ndarray
    procs: np.ndarray
    req_mem: np.ndarray
    user: np.ndarray
    group: np.ndarray
    executable: np.ndarray
    max_run_time: float
    max_req_mem: float = 1.0
    max_user: float = 1.0
    max_group: float = 1.0
    max_executable: float = 1.0

    def __len__(self) -> int:
        return len(self.job_id)

    def window(self, start: int, length: int) -> SchedTrace:
        """Jobs ``[start, start + length)`` (normalisers unchanged)."""
        if start < 0 or length < 1 or start + length > len(self):
            raise InputError(f"{self.name}: job window [{start}, {start + length}) is outside the {len(self)} jobs")
        sl = slice(start, start + length)
        return replace(self, **{k: getattr(self, k)[sl] for k in
                                ("job_id", "submit", "run", "req_time", "procs", "req_mem", "user", "group",
                                 "executable")})


def _raw_lines(path: Path):
    """``(line number, bytes)`` of each line of ``path``, streamed: plain or gzip-compressed (told by the
    magic bytes, not the name), with LF, CRLF or CR-only line endings (the ending itself left out).

    The bytes go through :func:`~torchhpc.ext.core.paths.open_text` as Latin-1, which maps every byte to
    one character and back, so the caller still sees (and names) the exact bytes of a line that is not UTF-8.

    Raises:
        InputError: gzip data that is damaged or cut short, naming the line it reached.
    """
    import gzip
    import zlib

    from torchhpc.ext.core.paths import open_text

    lineno = 0  # the last line read whole: a damaged gzip stream is named at the line after it
    try:
        with open_text(path, what="trace", encoding="latin-1") as fh:
            for lineno, text in enumerate(fh, 1):
                yield lineno, text.removesuffix("\n").encode("latin-1")
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise InputError(f"{path}:{lineno + 1}: damaged or truncated gzip data ({exc or type(exc).__name__}); "
                         f"check the file with gzip -t") from None


def read_swf(path: str | Path, *, strict: bool = True) -> Trace:
    """Parse an SWF file, plain or gzip-compressed (``.swf.gz`` as the Parallel Workloads Archive ships
    them), with LF, CRLF or CR line endings.

    Args:
        path: the ``.swf`` or ``.swf.gz`` file (any name: gzip is told by its magic bytes).
        strict: a malformed line (wrong field count, non-numeric field) is an error naming its
            line number; with ``strict=False`` such lines are skipped and listed in
            :attr:`Trace.skipped`.

    Raises:
        InputError: missing or empty file, damaged gzip data, malformed line (strict), no job at all.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: trace file not found" if not p.exists() else f"{p}: a folder, not a trace file")
    max_nodes = max_procs = None
    rows: list[list[float]] = []
    skipped: list[tuple[int, str]] = []
    for lineno, raw in _raw_lines(p):
        if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark is not part of the line
            raw = raw[3:]
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            if raw.lstrip().startswith(b";"):  # a comment (e.g. a Latin-1 site name) is not read anyway
                line = raw.decode("utf-8", errors="replace")
            else:
                why = (f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); an SWF trace "
                       "is plain text")
                if strict:
                    raise InputError(f"{p}:{lineno}: {why}") from None
                skipped.append((lineno, why))
                continue
        if "\x00" in line:
            why = "binary data (a NUL byte); an SWF trace is plain text"
            if strict:
                raise InputError(f"{p}:{lineno}: {why}")
            skipped.append((lineno, why))
            continue
        s = line.strip()
        if not s:
            continue
        if s.startswith(";"):
            m = _HEADER_INT.match(s)  # tolerates "; MaxNodes: 338 (batch partition; 512 total)"
            if m:
                if m.group(1) == "MaxNodes":
                    max_nodes = int(m.group(2))
                else:
                    max_procs = int(m.group(2))
            continue
        parts = s.split()
        reason = None
        if len(parts) != 18:
            reason = f"expected 18 fields, found {len(parts)}"
        else:
            try:
                vals = [float(x) for x in parts]
            except ValueError:
                bad = next(x for x in parts if not _is_number(x))
                reason = f"field {parts.index(bad) + 1} is not a number: {bad!r}"
            else:
                reason = _bad_value(vals, parts)
        if reason is not None:
            if strict:
                raise InputError(f"{p}:{lineno}: malformed SWF line ({reason}); to skip such lines give --lenient "
                                 "(heuristics, eval) or --trace.strict false (train)")
            skipped.append((lineno, reason))
            continue
        rows.append(vals)
    if not rows:
        raise InputError(f"{p}: no job lines found (is this an SWF file?)")
    data = np.asarray(rows, dtype=np.float64)
    columns = {name: data[:, i].copy() for i, name in enumerate(FIELDS)}
    return Trace(columns=columns, max_nodes=max_nodes, max_procs=max_procs, name=p.name, skipped=skipped,
                 max_run_time=float(data[:, 3].max()))


#: SWF field descriptions for error messages (1-based field number - 1)
FIELD_NAMES = (
    "job id", "submit time", "wait time", "run time", "allocated processors", "average CPU time", "used memory",
    "requested processors", "requested time", "requested memory", "status", "user id", "group id",
    "executable id", "queue id", "partition id", "preceding job id", "think time",
)


def _bad_value(vals: list[float], parts: list[str]) -> str | None:
    """Why a parsed job line cannot be scheduled: a value that is not a finite number (``inf``, ``nan``), or a
    negative submit time; ``None`` when it is fine."""
    for i, v in enumerate(vals):
        if not math.isfinite(v):
            return f"field {i + 1} ({FIELD_NAMES[i]}) is {parts[i]!r}, not a finite number"
    if vals[1] < 0:
        return f"field 2 (submit time) is negative: {parts[1]}"
    return None


def _is_number(x: str) -> bool:
    try:
        float(x)
    except ValueError:
        return False
    return True


def write_swf(trace: Trace, path: str | Path, comment: str = "") -> None:
    """Write ``trace`` as an SWF file (integers where the value is integral)."""
    lines = ["; Version: 2.2"]
    if comment:
        lines += [f"; {c}" for c in comment.splitlines()]
    if trace.max_nodes:
        lines.append(f"; MaxNodes: {trace.max_nodes}")
    if trace.max_procs:
        lines.append(f"; MaxProcs: {trace.max_procs}")
    data = np.stack([trace.columns[f] for f in FIELDS], axis=1)
    for row in data:
        lines.append(" ".join(str(int(v)) if float(v).is_integer() else f"{v:.2f}" for v in row))
    Path(path).write_text("\n".join(lines) + "\n")
