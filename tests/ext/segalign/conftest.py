"""Fixtures shared by the segalign tests: the real genomes, and small related pairs of codes."""

from __future__ import annotations

import pytest
import torch

from torchhpc.ext.segalign.fasta import SEPARATOR


@pytest.fixture(scope="module")
def genomes(shared_data):
    """The folder of ../shared/data/genomes (the mitochondrial pairs, H. pylori)."""
    d = shared_data / "genomes"
    if not (d / "MT-human.fa").exists():
        pytest.skip(f"{d} holds no mitochondrial genomes")
    return d


@pytest.fixture
def code_pair():
    """``make(n, seed) -> (t, q, generator)``: a related pair of code tensors with repeats, masked bases,
    ambiguous bases and record walls (the kernels' awkward cases)."""

    def make(n, seed):
        g = torch.Generator().manual_seed(seed)
        t = torch.randint(0, 4, (n,), generator=g, dtype=torch.uint8)
        t[n // 2:n // 2 + 300] = t[n // 5:n // 5 + 300]  # a repeat: several hits per diagonal region
        q = t.clone()
        mut = torch.rand(n, generator=g) < 0.4  # weak similarity: many short HSPs
        q[mut] = torch.randint(0, 4, (int(mut.sum()),), generator=g, dtype=torch.uint8)
        t[n // 3:n // 3 + 40] += 4
        q[n // 7] = 8
        t[0] = t[-1] = q[0] = q[-1] = SEPARATOR
        q[(2 * n) // 3] = t[(3 * n) // 4] = SEPARATOR
        return t, q, g

    return make
