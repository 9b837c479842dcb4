"""segalign: LASTZ-compatible whole-genome alignment (SegAlign, SC20) with seeding and the
ungapped X-drop filter as tensor ops and a Triton kernel, then gapped Y-drop extension.

    from torchhpc.ext.segalign import AlignConfig, align_files
    res = align_files("target.fa", "query.fa", AlignConfig(gapped=False))
"""

from .align import AlignResult, align_files, align_sequences, find_hsps
from .config import AlignCommand, AlignConfig, SegalignTour
from .fasta import SequenceSet, from_strings, parse_fasta, read_fasta
from .ops import HSPs, ungapped_hsps, xdrop_extend, xdrop_extend_torch
from .output import Alignment, write_general, write_maf, write_segments
from .scoring import hoxd70, read_scoring_file
from .seeds import SEEDS, build_index, parse_seed, seed_hits

__all__ = [
    "AlignCommand", "AlignConfig", "AlignResult", "Alignment", "HSPs", "SEEDS", "SegalignTour", "SequenceSet",
    "align_files", "align_sequences", "build_index", "find_hsps", "from_strings", "hoxd70", "parse_fasta",
    "parse_seed", "read_fasta", "read_scoring_file", "seed_hits", "ungapped_hsps", "write_general", "write_maf",
    "write_segments", "xdrop_extend", "xdrop_extend_torch",
]
