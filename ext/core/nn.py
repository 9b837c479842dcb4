"""Small building blocks several systems share."""

from __future__ import annotations

from torch import nn


def mlp(sizes: list[int], last_activation: bool = False) -> nn.Sequential:
    """``Linear`` layers through ``sizes`` with ReLU between them (and after the last with ``last_activation``)."""
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_activation:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)
