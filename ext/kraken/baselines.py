"""The torchrec anchors as sparse modules with the same interface as ours (KJT -> KeyedTensor).

* :class:`HashedEBC` — torchrec ``EmbeddingBagCollection``, one table per feature,
  raw IDs taken modulo the table size (collisions once the vocabulary outgrows it).
  With ``num_rows`` at least the vocabulary and IDs that are already dense keys it
  is the full-vocabulary baseline.
* :class:`ManagedCollisionEBC` — torchrec ``ManagedCollisionEmbeddingBagCollection``
  with an ``MCHManagedCollisionModule`` per feature (LRU or LFU eviction every
  ``eviction_interval`` batches): collision-free slots for the IDs it admits.

Both keep their rows as dense ``nn.Parameter``s, trained by a torch optimizer.
:func:`state_bytes` counts what a module and its optimizer hold.
"""

from __future__ import annotations

import torch
from torch import nn


class HashedEBC(nn.Module):
    def __init__(self, feature_names: list[str], dim: int, num_rows: int, device="cpu", seed: int = 0):
        super().__init__()
        from torchrec import EmbeddingBagCollection, EmbeddingBagConfig

        self.num_rows = num_rows
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.ebc = EmbeddingBagCollection(
                tables=[EmbeddingBagConfig(name=f"t_{f}", embedding_dim=dim, num_embeddings=num_rows,
                                           feature_names=[f]) for f in feature_names],
                device=torch.device(device),
            )

    def forward(self, kjt):
        from torchrec import KeyedJaggedTensor

        remapped = KeyedJaggedTensor(keys=kjt.keys(), values=kjt.values() % self.num_rows,
                                     lengths=kjt.lengths(), weights=kjt.weights_or_none())
        return self.ebc(remapped)


class ManagedCollisionEBC(nn.Module):
    def __init__(self, feature_names: list[str], dim: int, num_rows: int, eviction: str = "lru",
                 eviction_interval: int = 1, device="cpu", seed: int = 0):
        super().__init__()
        from torchrec import EmbeddingBagCollection, EmbeddingBagConfig
        from torchrec.modules.mc_embedding_modules import ManagedCollisionEmbeddingBagCollection
        from torchrec.modules.mc_modules import (
            LFU_EvictionPolicy,
            LRU_EvictionPolicy,
            ManagedCollisionCollection,
            MCHManagedCollisionModule,
        )

        device = torch.device(device)
        configs = [EmbeddingBagConfig(name=f"t_{f}", embedding_dim=dim, num_embeddings=num_rows,
                                      feature_names=[f]) for f in feature_names]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            ebc = EmbeddingBagCollection(tables=configs, device=device)
        policy = LRU_EvictionPolicy if eviction == "lru" else LFU_EvictionPolicy
        mcc = ManagedCollisionCollection(
            managed_collision_modules={
                c.name: MCHManagedCollisionModule(zch_size=num_rows, device=device, eviction_policy=policy(),
                                                  eviction_interval=eviction_interval, name=c.name)
                for c in configs
            },
            embedding_configs=configs,
        )
        self.mc_ebc = ManagedCollisionEmbeddingBagCollection(ebc, mcc, return_remapped_features=False)

    def forward(self, kjt):
        out = self.mc_ebc(kjt)
        return out[0] if isinstance(out, tuple) else out


def state_bytes(module: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
    """Bytes of a module's parameters and buffers, and of its optimizer's state tensors."""
    params = sum(p.numel() * p.element_size() for p in module.parameters())
    buffers = sum(b.numel() * b.element_size() for b in module.buffers())
    opt = 0
    if optimizer is not None:
        for st in optimizer.state.values():
            opt += sum(v.numel() * v.element_size() for v in st.values() if torch.is_tensor(v))
    return {"weights": params, "buffers": buffers, "optimizer": opt, "total": params + buffers + opt}
