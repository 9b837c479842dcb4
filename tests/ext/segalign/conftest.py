"""Fixtures shared by the segalign tests that read the real genomes."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def genomes(shared_data):
    """The folder of ../shared/data/genomes (the mitochondrial pairs, H. pylori)."""
    d = shared_data / "genomes"
    if not (d / "MT-human.fa").exists():
        pytest.skip(f"{d} holds no mitochondrial genomes")
    return d
