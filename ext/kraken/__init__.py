"""kraken: sparse embeddings for continual recommendation training (SC20 Kraken).

So far: the jagged embedding-bag op (:func:`jagged_embedding_bag`) over
``KeyedJaggedTensor`` values/offsets, with its fused Triton kernels.
"""

from .ops import (
    check_bags,
    jagged_embedding_bag,
    jagged_embedding_bag_reference,
    jagged_embedding_bag_torch,
    pooled_embeddings,
)

__all__ = [
    "check_bags",
    "jagged_embedding_bag",
    "jagged_embedding_bag_reference",
    "jagged_embedding_bag_torch",
    "pooled_embeddings",
]
