"""Every option of segalign, defined once: the library, YAML files and ``torchhpc align`` read these.

* :class:`AlignConfig` — the pipeline's options (LASTZ's names and defaults; ydrop as SegAlign),
  what :func:`~torchhpc.ext.segalign.align.align_files` takes;
* :class:`AlignCommand` — ``torchhpc align``: an :class:`AlignConfig` plus the command's own
  options (the two FASTA files, ``--output``, ``--format``, ``--stats``, ``--threads``);
* :class:`SegalignTour` — the ``torchhpc demo`` step.

The flags of ``torchhpc align`` are generated from these fields
(:func:`torchhpc.ext.core.cli.add_options`) with the spellings LASTZ users know: ``--nogapped``,
``--notransition``, ``--noentropy``, ``--gapped-by``, ``--max-hits``.  Values are checked when a
config is built, and an impossible one raises :class:`~torchhpc.ext.core.errors.ConfigError`
naming the flag.
"""

from __future__ import annotations

import dataclasses
import operator
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torchhpc.ext.core.cli import option_flag
from torchhpc.ext.core.config import option
from torchhpc.ext.core.errors import ConfigError, InputError

if TYPE_CHECKING:
    from .scoring import Scoring

MAX_SEED_WEIGHT = 31
"""The most care positions a seed may have (its packed key must fit in 62 bits)."""

#: the filter kernels (``--backend``); ``auto`` picks Triton on CUDA, numba on the CPU where installed
BACKENDS = ("torch", "triton", "numba")

#: gapped-extension paths (``--gapped-by``); ``auto`` and ``native`` pick numba where installed, else numpy
GAPPED_BY = ("auto", "native", "numba", "numpy", "lastz")

#: output formats of ``torchhpc align``
FORMATS = ("maf", "maf-", "general", "segments")

MIN_SEED_WEIGHT = 8
"""Fewest care positions of a seed: below this, random hits swamp the filter (with weight ``w`` a
query word hits one target position in ``4**w``: 4**8 = 65536, about 15 random hits a word on a
1 Mbp target; ``match1`` would make one hit per query base for every four target bases)."""


@dataclass
class AlignConfig:
    """Options of the alignment pipeline (LASTZ's names and defaults; ydrop as SegAlign)."""

    seed: str = option("12of19", help=f"spaced seed: 12of19, 14of22, matchN (N = {MIN_SEED_WEIGHT}..{MAX_SEED_WEIGHT}) "
                                      f"or a 0/1 pattern starting and ending with 1 "
                                      f"({MIN_SEED_WEIGHT}..{MAX_SEED_WEIGHT} ones)")
    transition: bool = option(True, help="allow one transition (A<->G, C<->T) in the seed's care positions",
                              neg_flag="--notransition")
    step: int = option(1, help="index every step-th target position", ge=1)
    strand: str = option("both", help="query strand(s): plus, minus (the query's reverse complement) or both",
                         choices=("both", "plus", "minus"))
    xdrop: int = option(910, help="ungapped X-drop: stop extending once the score falls this far below its best",
                        gt=0)
    hspthresh: int = option(3000, help="HSP score threshold of the ungapped filter", gt=0)
    entropy: bool = option(True, help="lower the scores of low-complexity HSPs by LASTZ's entropy factor",
                           neg_flag="--noentropy")
    gapped: bool = option(True, help="run gapped extension (--nogapped: stop after the filter and write the HSPs)",
                          neg_flag="--nogapped")
    gapped_by: str = option("auto", help="gapped extension: auto or native (torchhpc's Y-drop DP, compiled by numba "
                                         "where installed, else NumPy), numba, numpy (the readable reference) or "
                                         "an installed lastz --segments (lastz)", choices=GAPPED_BY)
    ydrop: int = option(9430, help="gapped Y-drop", gt=0)
    gappedthresh: int | None = option(None, help="gapped alignment score threshold (null: the same as --hspthresh)",
                                      gt=0)
    scoring: str | None = option(None, help="LASTZ scoring file (null: HOXD70, gap open 400, gap extend 30)")
    ambiguous: str | None = option(None, help="treat N (n) or every IUPAC code (iupac) as an ambiguous base, "
                                              "as LASTZ's --ambiguous", choices=("n", "iupac"))
    max_hits: int = option(1 << 22, help="seed hits per filter batch: bounds memory, about 200 bytes a hit", gt=0)
    interval: int = option(1 << 20, help="query positions per work interval (the unit of work and of --progress)",
                           gt=0)
    device: str = option("cpu", help="where seeding and the filter run: cpu, cuda[:N] or auto (CUDA when present)")
    fused: bool = option(True, help="numba backend: seeding and filter in one compiled pass, no tensors of hits "
                                    "(fastest, least memory); --nofused builds the hits as tensors first",
                         neg_flag="--nofused")
    backend: str = option("auto", help="ungapped-filter kernel: auto (Triton on CUDA, numba on the CPU where "
                                       "installed, else torch), torch, triton or numba",
                          choices=("auto", *BACKENDS))
    progress: bool = option(False, help="progress bars over query intervals")
    lastz: str = option("lastz", help="lastz executable for --gapped-by lastz")

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Check every value (also after fields were changed in place).

        Raises:
            ConfigError: a value out of range, not among the choices, or an invalid seed; the
                message names the flag.
        """
        for f in dataclasses.fields(self):
            _check_field(self, f)
        match_n = re.fullmatch(r"match(\d+)", self.seed.strip())
        if match_n and not MIN_SEED_WEIGHT <= int(match_n[1]) <= MAX_SEED_WEIGHT:
            raise ConfigError(f"--seed {self.seed!r}: matchN needs N between {MIN_SEED_WEIGHT} and {MAX_SEED_WEIGHT}")
        from .seeds import parse_seed  # torch-free import of this module: the CLI's --help stays quick

        try:
            pattern = parse_seed(self.seed)
        except InputError as exc:
            raise ConfigError(str(exc)) from None
        if pattern.count("1") < MIN_SEED_WEIGHT:
            raise ConfigError(f"--seed {self.seed!r}: {pattern.count('1')} care positions are too few (at least "
                              f"{MIN_SEED_WEIGHT}; random hits would swamp the filter)")

    def scoring_scheme(self) -> Scoring:
        """The substitution and gap scores (``--scoring`` file, else HOXD70 with ``--ambiguous``)."""
        from .scoring import hoxd70, read_scoring_file

        sc = read_scoring_file(self.scoring) if self.scoring else hoxd70()
        if self.ambiguous is not None and self.scoring is None:
            sc.ambiguous_score = -100 if self.ambiguous == "iupac" else 0
        return sc


def _check_field(cfg: object, f: dataclasses.Field) -> None:
    """Raise ConfigError naming the flag when field ``f`` of ``cfg`` breaks its ``option()`` bounds."""
    value, meta = getattr(cfg, f.name), f.metadata
    if value is None or not meta:
        return
    flag = option_flag(f.name, f)
    choices = meta.get("choices")
    if choices and value not in choices:
        raise ConfigError(f"{flag} must be one of {', '.join(map(str, choices))}; got {value!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    for name, sign, ok in (("ge", ">=", operator.ge), ("gt", ">", operator.gt),
                           ("le", "<=", operator.le), ("lt", "<", operator.lt)):
        bound = meta.get(name)
        if bound is not None and not ok(value, bound):
            raise ConfigError(f"{flag} = {value!r} is out of range (must be {sign} {bound})")


@dataclass(kw_only=True)
class AlignCommand(AlignConfig):
    """``torchhpc align TARGET QUERY``: the pipeline's options and the command's own."""

    target: str = option(help="target FASTA (.fa or .fa.gz; many records)", positional=True)
    query: str = option(help="query FASTA (.fa or .fa.gz; many records)", positional=True)
    output: str | None = option(None, help="write the alignments to this file (null or -: standard output)")
    format: str = option("maf", help="maf or maf- (LASTZ maf-, no header), general (LASTZ's tabular format) or "
                                     "segments (LASTZ --segments input, one HSP a line)", choices=FORMATS)
    stats: bool = option(False, help="print counters, timings and the backend that ran as JSON on standard error")
    threads: int | None = option(None, help="CPU threads (null: torch's default)", ge=1)
    dist_timeout: float = option(600.0, help="under torchrun: seconds a rank waits for the others before the job "
                                             "fails (a rank that died)", gt=0)


@dataclass
class SegalignTour:
    """The demo step: align a simulated genome pair with known truth; LASTZ beside it when installed."""

    length: int = option(30_000, help="bases of the simulated target", ge=1000)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check_field(self, f)


__all__ = ["BACKENDS", "FORMATS", "GAPPED_BY", "MIN_SEED_WEIGHT", "AlignCommand", "AlignConfig", "SegalignTour"]
