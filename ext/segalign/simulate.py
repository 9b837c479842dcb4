"""A simulator of evolved genome pairs with known truth (demo, tests, the large benchmark).

An ancestor (the target) is drawn base by base with a given GC content, with repeat families
inserted in it where asked (each family a random consensus, its copies a little diverged from it and
on either strand: IS elements, rRNA operons); the query descends from it by, in order: segmental duplications (a copy of a stretch
inserted elsewhere), inversions (a stretch reverse-complemented), small indels
(geometric lengths) and substitutions (transitions twice as likely as each
transversion).  Each query base remembers the target base it came from and on
which strand, so the true aligned pairs are known::

    origin[q] = target position of query base q, or -1 (inserted)
    flipped[q] = True where the base sits in an inversion (aligns on the minus strand)

All randomness comes from one ``numpy.random.Generator`` seeded by ``seed``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_BASES = np.frombuffer(b"ACGT", dtype=np.uint8)


@dataclass
class SimulatedPair:
    """A target, its evolved query and the truth.

    Attributes:
        target, query: sequences as ``str`` (uppercase ACGT).
        origin: ``(len(query),)`` int64 target position of each query base (-1: inserted).
        flipped: ``(len(query),)`` bool, True for bases inside an inversion.
    """

    target: str
    query: str
    origin: np.ndarray
    flipped: np.ndarray
    params: dict

    def true_pairs(self, strand: str = "+") -> np.ndarray:
        """Packed ``(t_pos << 32) | q_pos`` of the true aligned pairs on one strand.

        Minus-strand query positions count along the query's reverse complement (LASTZ's convention).
        """
        q = np.arange(self.origin.size)
        keep = (self.origin >= 0) & (self.flipped if strand == "-" else ~self.flipped)
        qpos = q[keep] if strand == "+" else self.origin.size - 1 - q[keep]
        return np.sort((self.origin[keep].astype(np.int64) << 32) | qpos.astype(np.int64))

    def write(self, target_path, query_path, target_name: str = "target", query_name: str = "query") -> None:
        from .fasta import write_fasta

        write_fasta(target_path, {target_name: self.target})
        write_fasta(query_path, {query_name: self.query})


def _random_codes(rng: np.random.Generator, n: int, gc: float) -> np.ndarray:
    p = np.array([(1 - gc) / 2, gc / 2, gc / 2, (1 - gc) / 2])
    return rng.choice(4, size=n, p=p).astype(np.uint8)


def _substitute(rng: np.random.Generator, codes: np.ndarray, rate: float) -> np.ndarray:
    """``codes`` with a share ``rate`` substituted, transitions (xor 2) twice as likely as each transversion."""
    codes = codes.copy()
    sub = np.flatnonzero(rng.random(len(codes)) < rate)
    kind = rng.integers(0, 4, sub.size)
    codes[sub] = np.where(kind < 2, codes[sub] ^ 2, codes[sub] ^ np.where(kind == 2, 1, 3))
    return codes


def _ancestor(rng: np.random.Generator, length: int, gc: float, repeats) -> tuple[np.ndarray, list]:
    """``length`` random bases with the copies of each repeat family ``(element length, copies, divergence)``
    placed at random, non-overlapping places (a family's copies on either strand); and the copies as
    ``(family, strand, target start)``."""
    copies, names = [], []
    for family, (size, count, divergence) in enumerate(repeats):
        if size < 1 or count < 0 or not 0 <= divergence < 1:
            raise ValueError(f"a repeat family is (length >= 1, copies >= 0, 0 <= divergence < 1), got "
                             f"{(size, count, divergence)}")
        consensus = _random_codes(rng, size, gc)
        for _ in range(count):
            copy = _substitute(rng, consensus, divergence)
            minus = rng.random() < 0.5
            copies.append(3 - copy[::-1] if minus else copy)
            names.append((family, "-" if minus else "+"))
    spacer = length - sum(len(c) for c in copies)
    if not copies:
        return _random_codes(rng, length, gc), []
    if spacer < len(copies) + 1:
        raise ValueError(f"repeats of {length - spacer} bases do not fit a {length}-base target")
    cuts = np.sort(rng.choice(np.arange(1, spacer), size=len(copies), replace=False))
    order = rng.permutation(len(copies))
    background = _random_codes(rng, spacer, gc)
    parts, prev, placed, at = [], 0, [], 0
    for cut, which in zip(cuts, order, strict=True):
        parts += [background[prev:cut], copies[which]]
        at += cut - prev
        placed.append((*names[which], int(at)))
        at += len(copies[which])
        prev = cut
    return np.concatenate(parts + [background[prev:]]), placed


def simulate_pair(
    length: int = 100_000,
    substitution_rate: float = 0.08,
    indel_rate: float = 0.005,
    mean_indel: float = 3.0,
    inversions: int = 2,
    inversion_length: int = 5_000,
    duplications: int = 2,
    duplication_length: int = 2_000,
    gc: float = 0.42,
    seed: int = 0,
    repeats: tuple[tuple[int, int, float], ...] = (),
) -> SimulatedPair:
    """Draw a target of ``length`` bases and evolve a query from it (see the module docstring).

    Args:
        repeats: repeat families of the ancestor, each ``(element length, copies, divergence)``: the
            copies (substituted at ``divergence`` from the family's consensus, reverse-complemented half
            of the time) sit at random places of the target, inside its ``length``.
        substitution_rate: fraction of query bases substituted (transition : each transversion = 2 : 1).
        indel_rate: indel events per base (half insertions, half deletions), lengths geometric
            with mean ``mean_indel``.
        inversions, inversion_length: number and (maximum) length of inverted stretches.
        duplications, duplication_length: number and length of duplicated stretches.
    """
    rng = np.random.default_rng(seed)
    target, placed = _ancestor(rng, length, gc, repeats)
    codes = target.copy()
    origin = np.arange(length, dtype=np.int64)
    flipped = np.zeros(length, dtype=bool)
    # segmental duplications: copy a stretch to a random place
    for _ in range(duplications):
        n = min(duplication_length, max(len(codes) // 10, 1))
        src = int(rng.integers(0, len(codes) - n))
        dst = int(rng.integers(0, len(codes)))
        codes = np.concatenate([codes[:dst], codes[src:src + n], codes[dst:]])
        origin = np.concatenate([origin[:dst], origin[src:src + n], origin[dst:]])
        flipped = np.concatenate([flipped[:dst], flipped[src:src + n], flipped[dst:]])
    # inversions: reverse-complement a stretch in place
    for _ in range(inversions):
        n = int(rng.integers(inversion_length // 2, inversion_length + 1))
        n = min(n, max(len(codes) // 4, 1))
        s = int(rng.integers(0, len(codes) - n))
        codes[s:s + n] = 3 - codes[s:s + n][::-1]
        origin[s:s + n] = origin[s:s + n][::-1].copy()
        flipped[s:s + n] = ~flipped[s:s + n][::-1]
    # small indels, vectorised: deletions drop runs, insertions repeat a base slot and fill with random bases
    n = len(codes)
    p_geo = 1.0 / max(mean_indel, 1.0)
    dels = np.flatnonzero(rng.random(n) < indel_rate / 2)
    keep = np.ones(n, dtype=bool)
    if dels.size:
        dlen = rng.geometric(p_geo, dels.size)
        idx = np.repeat(dels, dlen) + (np.arange(dlen.sum()) - np.repeat(np.cumsum(dlen) - dlen, dlen))
        keep[idx[idx < n]] = False
    codes, origin, flipped = codes[keep], origin[keep], flipped[keep]
    n = len(codes)
    ins = np.zeros(n, dtype=np.int64)
    where = np.flatnonzero(rng.random(n) < indel_rate / 2)
    ins[where] = rng.geometric(p_geo, where.size)
    reps = 1 + ins
    new_codes = np.repeat(codes, reps)
    new_origin = np.repeat(origin, reps)
    new_flipped = np.repeat(flipped, reps)
    first = np.cumsum(reps) - reps
    inserted = np.ones(new_codes.size, dtype=bool)
    inserted[first] = False
    new_codes[inserted] = _random_codes(rng, int(inserted.sum()), gc)
    new_origin[inserted] = -1
    codes, origin, flipped = new_codes, new_origin, new_flipped
    # substitutions: transitions (xor 2) twice as likely as each of the two transversions
    codes = _substitute(rng, codes, substitution_rate)
    params = dict(length=length, substitution_rate=substitution_rate, indel_rate=indel_rate, mean_indel=mean_indel,
                  inversions=inversions, inversion_length=inversion_length, duplications=duplications,
                  duplication_length=duplication_length, gc=gc, seed=seed, repeats=[list(r) for r in repeats],
                  repeat_copies=placed)
    return SimulatedPair(_BASES[target].tobytes().decode(), _BASES[codes].tobytes().decode(), origin, flipped,
                         params)
