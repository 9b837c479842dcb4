"""The models gems pipelines: ResNet-v2 (pre-activation bottleneck) of any depth ``9n + 2`` and an MLP.

Both are returned as a flat list of blocks, the unit the partitioner assigns to
stages.  A block takes one tensor and returns one tensor, so any contiguous run of
blocks is a stage:

    ResNet-v2, depth = 9n + 2 (110 -> n = 12, 1001 -> n = 111):
        [stem] [bottleneck x n] [bottleneck x n] [bottleneck x n] [head]      3n + 2 blocks
        (N, C, H, W) -> (N, w, H, W) -> (N, 4w, H, W) -> (N, 8w, H/2, W/2) -> (N, 16w, H/4, W/4) -> (N, classes)

    MLP, depth d:
        [flatten + linear + relu] [linear + relu] x (d - 1) [linear]              d + 1 blocks
        (N, C, H, W) -> (N, hidden) -> ... -> (N, classes)

``norm="group"`` (the default) keeps every sample independent of the others in its
micro-batch, so pipelined training equals full-batch training exactly;
``norm="batch"`` is the paper's ResNet (statistics then depend on the micro-batch).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from torchhpc.ext.core.errors import ConfigError

NORMS = ("group", "batch", "none")


def _norm(kind: str, channels: int) -> nn.Module:
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(math.gcd(8, channels), channels)
    return nn.Identity()


class Stem(nn.Module):
    """3x3 convolution: ``(N, C, H, W) -> (N, w, H, W)``."""

    def __init__(self, in_channels: int, width: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, width, 3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class PreActBottleneck(nn.Module):
    """Pre-activation bottleneck (He et al., "Identity Mappings in Deep Residual Networks", 2016, Fig. 4e):
    ``x + conv1x1(relu(norm(conv3x3(relu(norm(conv1x1(relu(norm(x)))))))))`` with a 1x1 projection
    shortcut where the shape changes."""

    def __init__(self, in_channels: int, inner: int, out_channels: int, stride: int, norm: str) -> None:
        super().__init__()
        self.norm1 = _norm(norm, in_channels)
        self.conv1 = nn.Conv2d(in_channels, inner, 1, bias=False)
        self.norm2 = _norm(norm, inner)
        self.conv2 = nn.Conv2d(inner, inner, 3, stride=stride, padding=1, bias=False)
        self.norm3 = _norm(norm, inner)
        self.conv3 = nn.Conv2d(inner, out_channels, 1, bias=False)
        self.shortcut = (nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False)
                         if stride != 1 or in_channels != out_channels else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = torch.relu(self.norm1(x))
        skip = x if self.shortcut is None else self.shortcut(pre)
        h = self.conv1(pre)
        h = self.conv2(torch.relu(self.norm2(h)))
        h = self.conv3(torch.relu(self.norm3(h)))
        return skip + h


class Head(nn.Module):
    """norm, relu, global average pool, linear: ``(N, C, h, w) -> (N, classes)``."""

    def __init__(self, channels: int, num_classes: int, norm: str) -> None:
        super().__init__()
        self.norm = _norm(norm, channels)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.norm(x)).mean(dim=(2, 3)))


def resnet_v2_blocks(depth: int = 110, width: int = 16, in_channels: int = 3, num_classes: int = 10,
                     norm: str = "group") -> list[nn.Module]:
    """ResNet-v2 of ``depth = 9n + 2`` layers as ``3n + 2`` blocks (see the module docstring).

    Raises:
        ConfigError: ``depth`` is not ``9n + 2`` with ``n >= 1``, or ``norm`` is unknown.
    """
    if depth < 11 or (depth - 2) % 9:
        raise ConfigError(f"model.depth = {depth}: a ResNet-v2 depth must be 9n + 2 (11, 20, ..., 110, ..., 1001)")
    if norm not in NORMS:
        raise ConfigError(f"model.norm = {norm!r}: must be one of {', '.join(NORMS)}")
    n = (depth - 2) // 9
    blocks: list[nn.Module] = [Stem(in_channels, width)]
    c_in = width
    for stage in range(3):
        inner = width * 2**stage
        c_out = 4 * inner
        for i in range(n):
            stride = 2 if stage > 0 and i == 0 else 1
            blocks.append(PreActBottleneck(c_in, inner, c_out, stride, norm))
            c_in = c_out
    blocks.append(Head(c_in, num_classes, norm))
    return blocks


class _LinearReLU(nn.Module):
    def __init__(self, d_in: int, d_out: int, flatten: bool) -> None:
        super().__init__()
        self.flatten = flatten
        self.fc = nn.Linear(d_in, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.flatten:
            x = x.flatten(1)
        return torch.relu(self.fc(x))


def mlp_blocks(in_features: int, hidden: int = 256, depth: int = 4, num_classes: int = 10) -> list[nn.Module]:
    """MLP with ``depth`` hidden layers as ``depth + 1`` blocks; the first flattens its input."""
    if depth < 1:
        raise ConfigError(f"model.depth = {depth}: an MLP needs at least one hidden layer")
    blocks: list[nn.Module] = [_LinearReLU(in_features, hidden, flatten=True)]
    blocks += [_LinearReLU(hidden, hidden, flatten=False) for _ in range(depth - 1)]
    blocks.append(nn.Linear(hidden, num_classes))
    return blocks


def count_blocks(kind: str, depth: int) -> int:
    """How many blocks :func:`build_blocks` makes, without building them (for config checks)."""
    if kind == "resnet_v2":
        return 3 * ((depth - 2) // 9) + 2
    return depth + 1


def build_blocks(kind: str, *, depth: int, width: int, in_shape: tuple[int, int, int], num_classes: int,
                 norm: str = "group", seed: int = 0) -> list[nn.Module]:
    """The model as blocks, initialised from ``seed`` (every rank builds the same weights).

    Args:
        kind: ``resnet_v2`` or ``mlp``.
        in_shape: one sample's shape ``(C, H, W)``.
    """
    torch.manual_seed(seed)
    if kind == "resnet_v2":
        return resnet_v2_blocks(depth, width, in_shape[0], num_classes, norm)
    if kind == "mlp":
        return mlp_blocks(int(math.prod(in_shape)), width, depth, num_classes)
    raise ConfigError(f"model.kind = {kind!r}: must be resnet_v2 or mlp")
