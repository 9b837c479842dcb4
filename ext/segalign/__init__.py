"""segalign: LASTZ-compatible whole-genome alignment (SegAlign, SC20) with seeding and the
ungapped X-drop filter as tensor ops and a Triton kernel, then gapped Y-drop extension.

    from torchhpc.ext.segalign import AlignConfig, align_files
    res = align_files("target.fa", "query.fa", AlignConfig(gapped=False))
"""

from __future__ import annotations

from torchhpc.ext.core.lazy import lazy_exports

_EXPORTS = {
    "AlignPlan": "align", "AlignResult": "align", "align_files": "align", "align_sequences": "align",
    "find_hsps": "align", "plan_alignment": "align",
    "AlignCommand": "config", "AlignConfig": "config", "AlignDist": "config", "PipelineOptions": "config",
    "SegalignTour": "config",
    "SequenceSet": "fasta", "from_strings": "fasta", "parse_fasta": "fasta", "read_fasta": "fasta",
    "HSPs": "ops", "ungapped_hsps": "ops", "xdrop_extend": "ops", "xdrop_extend_torch": "ops",
    "Alignment": "output", "write_general": "output", "write_maf": "output", "write_maf_file": "output", "write_segments": "output",
    "hoxd70": "scoring", "read_scoring_file": "scoring",
    "SEEDS": "seed_patterns", "parse_seed": "seed_patterns",
    "build_index": "seeds", "seed_hits": "seeds",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
