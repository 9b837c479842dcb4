"""Every option of segalign, defined once: the library, YAML files and ``torchhpc align`` read these.

* :class:`PipelineOptions` — the alignment pipeline's options (LASTZ's names and defaults; ydrop as
  SegAlign);
* :class:`AlignConfig` — what :func:`~torchhpc.ext.segalign.align.align_files` takes: the pipeline's
  options and the device it runs on;
* :class:`AlignCommand` — ``torchhpc align``: the pipeline's options, the command's own (the two FASTA
  files, ``--output``, ``--format``, ``--stats``) and ``dist`` (:class:`AlignDist`: ``--device``,
  ``--threads``, ``--nproc``, ``--timeout-s``, as every torchrun job of the suite spells them);
* :class:`SegalignTour` — the ``torchhpc demo`` step.

The flags of ``torchhpc align`` are generated from these fields
(:func:`torchhpc.ext.core.cli.add_options`) with the spellings LASTZ users know: ``--nogapped``,
``--notransition``, ``--noentropy``, ``--gapped-by``, ``--max-hits``, ``--threads``.  Values are
checked once, when a config is made (:class:`~torchhpc.ext.core.config.Options`); an impossible one
raises :class:`~torchhpc.ext.core.errors.ConfigError` naming the option.  The configs are frozen: what
was checked is what runs (``dataclasses.replace`` makes a changed copy, checked again).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torchhpc.ext.core.config import DistOptions, Options, option
from torchhpc.ext.core.errors import ConfigError, InputError

from .seed_patterns import MAX_SEED_WEIGHT, MIN_SEED_WEIGHT, parse_seed

if TYPE_CHECKING:
    from .scoring import Scoring

#: the filter kernels (``--backend``); ``auto`` picks Triton on CUDA, numba on the CPU where installed
BACKENDS = ("torch", "triton", "numba")

#: gapped-extension paths (``--gapped-by``); ``auto`` and ``native`` pick numba where installed, else numpy
GAPPED_BY = ("auto", "native", "numba", "numpy", "triton", "lastz")

#: output formats of ``torchhpc align``
FORMATS = ("maf", "maf-", "general", "segments")

#: what ``--device auto`` picks: the CPU. Measured on one H200 with its 16 cores (2026-12-04, two H. pylori
#: genomes, docs/core/results.md): the whole alignment took 13.14 s on 16 CPU threads and 15.47 s with the
#: filter on CUDA; the CUDA filter alone was 6.57 s against the CPU's 8.19 s, but the gapped stage waits
#: for it there. Change it to "cuda" when a measurement of the whole alignment says so.
AUTO_DEVICE = "cpu"

_DEVICE_HELP = ("where seeding and the filter run: cpu, cuda[:N] or auto (the CPU: the whole alignment was "
                "measured faster there than with the filter on CUDA)")


@dataclass(frozen=True)
class PipelineOptions(Options):
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
                                         "where installed, else NumPy), numba, numpy (the readable reference), "
                                         "triton (the DP's sweep on the GPU, a batch of anchors per launch; needs "
                                         "--device cuda and numba) or an installed lastz --segments (lastz)",
                            choices=GAPPED_BY)
    ydrop: int = option(9430, help="gapped Y-drop", gt=0)
    gappedthresh: int | None = option(None, help="gapped alignment score threshold (null: the same as --hspthresh)",
                                      gt=0)
    scoring: str | None = option(None, input_file=True, help="LASTZ scoring file (null: HOXD70, gap open 400, gap extend 30)")
    ambiguous: str | None = option(None, help="score N (n), or N and the other IUPAC codes (iupac, else refused), 0 "
                                              "instead of the fill score (-100): LASTZ's --ambiguous",
                                   choices=("n", "iupac"))
    max_hits: int = option(1 << 22, help="seed hits per filter batch: bounds memory, about 200 bytes a hit", gt=0)
    interval: int = option(1 << 20, help="query positions per work interval (the unit of work and of --progress)",
                           gt=0)
    fused: bool = option(True, help="numba backend: seeding and filter in one compiled pass, no tensors of hits "
                                    "(fastest, least memory); --nofused builds the hits as tensors first",
                         neg_flag="--nofused")
    backend: str = option("auto", help="ungapped-filter kernel: auto (Triton on CUDA, numba on the CPU where "
                                       "installed, else torch), torch, triton or numba",
                          choices=("auto", *BACKENDS))
    progress: bool = option(False, help="progress bars over query intervals")
    lastz: str = option("lastz", help="lastz executable for --gapped-by lastz")

    def __post_init__(self) -> None:
        """Check every value once, as the config is made.

        Raises:
            ConfigError: a value out of range or not among the choices (naming the option), an
                invalid seed (naming ``--seed``), or ``--gapped-by`` with ``--nogapped``.
        """
        super().__post_init__()
        if not self.gapped and self.gapped_by != "auto":  # a contradiction, refused rather than ignored
            raise ConfigError(f"--gapped-by {self.gapped_by} with --nogapped: there is no gapped stage to run; "
                              "drop one of them")
        match_n = re.fullmatch(r"match(\d+)", self.seed.strip())
        if match_n and not MIN_SEED_WEIGHT <= int(match_n[1]) <= MAX_SEED_WEIGHT:
            raise ConfigError(f"--seed {self.seed!r}: matchN needs N between {MIN_SEED_WEIGHT} and {MAX_SEED_WEIGHT}")
        try:
            pattern = parse_seed(self.seed)
        except InputError as exc:
            raise ConfigError(str(exc)) from None
        if pattern.count("1") < MIN_SEED_WEIGHT:
            raise ConfigError(f"--seed {self.seed!r}: {pattern.count('1')} care positions are too few (at least "
                              f"{MIN_SEED_WEIGHT}; random hits would swamp the filter)")

    def scoring_scheme(self) -> Scoring:
        """The substitution and gap scores (``--scoring`` file, else HOXD70); an ambiguous base scores the fill
        score (-100 with HOXD70), or 0 with ``--ambiguous`` (LASTZ: "substitutions with N are scored as zero")."""
        from .scoring import hoxd70, read_scoring_file

        sc = read_scoring_file(self.scoring) if self.scoring else hoxd70()
        if self.ambiguous is not None:
            sc.ambiguous_score = 0
        return sc


@dataclass(frozen=True)
class AlignConfig(PipelineOptions):
    """What the library's :func:`~torchhpc.ext.segalign.align.align_files` takes: the pipeline's options
    and where seeding and the filter run."""

    device: str = option("cpu", help=_DEVICE_HELP)


@dataclass
class AlignDist(DistOptions):
    """Where ``torchhpc align`` runs and on how many processes (the ``dist:`` section).

    The suite's :class:`~torchhpc.ext.core.config.DistOptions` with the aligner's defaults: the CPU, and
    600 s for a rank to wait for its peers.
    """

    device: str = option("cpu", flag="--device", help=_DEVICE_HELP + "; under torchrun with CUDA each rank "
                                                                      "takes cuda:LOCAL_RANK")
    timeout_s: float = option(600.0, flag="--timeout-s", gt=0,
                              help="under torchrun: seconds a rank waits for the others before the job fails "
                                   "(a rank that died)")


@dataclass(frozen=True, kw_only=True)
class AlignCommand(PipelineOptions):
    """``torchhpc align TARGET QUERY``: the pipeline's options and the command's own."""

    RENAMED = {"threads": "dist.threads", "dist_timeout": "dist.timeout_s", "device": "dist.device"}
    LEGACY_VALUES = {"dist.threads": {None: 0}}  # "threads: null" meant torch's default

    target: str = option(input_file=True, help="target FASTA (.fa or .fa.gz; many records)", positional=True)
    query: str = option(input_file=True, help="query FASTA (.fa or .fa.gz; many records)", positional=True)
    output: str | None = option(None, help="write the alignments to this file (null or -: standard output)")
    format: str = option("maf", help="maf (with the ##maf header line), maf- (LASTZ maf-: the blocks alone), general "
                                     "(LASTZ's tabular format) or "
                                     "segments (LASTZ --segments input, one HSP a line)", choices=FORMATS)
    stats: bool = option(False, help="print counters, timings and the backend that ran as JSON on standard error")
    dist: AlignDist = option(default_factory=AlignDist,
                             help="device, CPU threads (filter intervals and gapped extensions side by side), "
                                  "torchrun processes and their timeout")


@dataclass
class SegalignTour(Options):
    """The demo step: align a simulated genome pair with known truth; LASTZ beside it when installed."""

    length: int = option(30_000, help="bases of the simulated target", ge=1000)


__all__ = ["BACKENDS", "FORMATS", "GAPPED_BY", "MAX_SEED_WEIGHT", "MIN_SEED_WEIGHT", "AlignCommand", "AlignConfig",
           "AlignDist", "PipelineOptions", "SegalignTour"]
