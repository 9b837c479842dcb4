"""LASTZ's spaced seeds as 0/1 patterns: the named ones, the weight limits and ``--seed`` parsing.

A spaced seed is a 0/1 pattern; only the ``1`` ("care") positions enter a seed key (see
:mod:`.seeds`).  This module needs no torch, so that the options (:mod:`.config`) can check
``--seed`` without importing it and ``torchhpc align --help`` stays quick.
"""

from __future__ import annotations

from torchhpc.ext.core.errors import InputError

MAX_SEED_WEIGHT = 31
"""The most care positions a seed may have (its packed key must fit in 62 bits)."""

MIN_SEED_WEIGHT = 8
"""Fewest care positions of a seed the aligner takes: below this, random hits swamp the filter (with
weight ``w`` a query word hits one target position in ``4**w``: 4**8 = 65536, about 15 random hits a
word on a 1 Mbp target; ``match1`` would make one hit per query base for every four target bases)."""

#: named seeds (LASTZ's)
SEEDS = {
    "12of19": "1110100110010101111",
    "14of22": "1110101100110010101111",
}


def parse_seed(spec: str) -> str:
    """``"12of19"``, ``"14of22"``, LASTZ's ``"matchN"`` or a 0/1 pattern -> the 0/1 pattern.

    Raises:
        InputError: an unknown name, a pattern with other characters, one that does not
            start and end with 1, or fewer than 1 or more than :data:`MAX_SEED_WEIGHT` care
            positions (``match0``, ``match99`` included).
    """
    spec = spec.strip()
    if spec in SEEDS:
        return SEEDS[spec]
    if spec.startswith("match") and spec[5:].isdigit():
        n = int(spec[5:])
        if not 1 <= n <= MAX_SEED_WEIGHT:
            raise InputError(f"--seed {spec!r}: matchN needs N between 1 and {MAX_SEED_WEIGHT}")
        return "1" * n
    if not spec or set(spec) - {"0", "1"}:
        raise InputError(f"--seed {spec!r}: expected 12of19, 14of22, matchN or a pattern of 0s and 1s")
    if spec[0] != "1" or spec[-1] != "1":
        raise InputError(f"--seed {spec!r}: a spaced seed must start and end with 1")
    if not 1 <= spec.count("1") <= MAX_SEED_WEIGHT:
        raise InputError(f"--seed {spec!r}: between 1 and {MAX_SEED_WEIGHT} care positions are supported")
    return spec


__all__ = ["MAX_SEED_WEIGHT", "MIN_SEED_WEIGHT", "SEEDS", "parse_seed"]
