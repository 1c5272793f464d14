"""Model builders: ``MODELS[name](input_shape, n_classes) -> nn.Module``.

Every model is buffer-free (no BatchNorm running statistics), so one client's whole state is its
flat parameter vector and N clients fit in one stacked (N x d) tensor. ResNet-18 therefore uses
GroupNorm (same parameter count as BatchNorm): batch statistics would be extra per-client state
that does not average well under label skew. Sizes follow :mod:`.model_size` exactly.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
from torch import nn

from ..errors import ValidationError
from ..registry import Registry
from .model_size import (
    CNN4_CHANNELS,
    CNN4_HIDDEN,
    MLP2_HIDDEN,
    MLP_HIDDEN,
    RESNET18_WIDTHS,
    cnn4_feature_shape,
    parameter_count,
)

__all__ = ["MODELS", "build_model", "parameter_count"]

ModelBuilder = Callable[[tuple[int, ...], int], nn.Module]

#: Registry of model builders: ``fn(input_shape, n_classes) -> nn.Module``.
MODELS: Registry[ModelBuilder] = Registry("model")


def _mlp(widths: Sequence[int], input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    layers: list[nn.Module] = [nn.Flatten()]
    n_in = math.prod(input_shape)
    for width in widths:
        layers += [nn.Linear(n_in, width), nn.ReLU()]
        n_in = width
    layers.append(nn.Linear(n_in, n_classes))
    return nn.Sequential(*layers)


@MODELS.register("logistic")
def logistic(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """Multinomial logistic regression on the flattened input."""
    return _mlp((), input_shape, n_classes)


@MODELS.register("mlp")
def mlp(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """One hidden ReLU layer of width 64."""
    return _mlp(MLP_HIDDEN, input_shape, n_classes)


@MODELS.register("mlp2")
def mlp2(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """Two hidden ReLU layers (128, 64)."""
    return _mlp(MLP2_HIDDEN, input_shape, n_classes)


@MODELS.register("cnn4")
def cnn4(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """The light four-layer CNN: two 3x3 conv + 2x2 max-pool stages (16, 32 channels), then two
    fully connected layers (64 hidden). Works on 1x8x8 digits as on 3x32x32 CIFAR."""
    c, h, w = cnn4_feature_shape(input_shape)
    c1, c2 = CNN4_CHANNELS
    return nn.Sequential(
        nn.Conv2d(input_shape[0], c1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(c * h * w, CNN4_HIDDEN), nn.ReLU(),
        nn.Linear(CNN4_HIDDEN, n_classes),
    )


def _norm(channels: int) -> nn.Module:
    return nn.GroupNorm(min(32, channels), channels)


class _BasicBlock(nn.Module):
    def __init__(self, n_in: int, n_out: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(n_in, n_out, 3, stride=stride, padding=1, bias=False)
        self.norm1 = _norm(n_out)
        self.conv2 = nn.Conv2d(n_out, n_out, 3, padding=1, bias=False)
        self.norm2 = _norm(n_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or n_in != n_out:
            self.shortcut = nn.Sequential(nn.Conv2d(n_in, n_out, 1, stride=stride, bias=False),
                                          _norm(n_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    """CIFAR ResNet-18: 3x3 stride-1 stem, no max-pool, four stages of two basic blocks,
    global average pooling and a linear classifier; GroupNorm instead of BatchNorm."""

    def __init__(self, input_shape: tuple[int, ...], n_classes: int):
        super().__init__()
        if len(input_shape) != 3:
            raise ValidationError(
                f"resnet18 needs image inputs shaped (channels, height, width), got {input_shape}"
            )
        stem = RESNET18_WIDTHS[0]
        self.stem = nn.Sequential(nn.Conv2d(input_shape[0], stem, 3, padding=1, bias=False),
                                  _norm(stem), nn.ReLU())
        blocks: list[nn.Module] = []
        n_in = stem
        for stage, width in enumerate(RESNET18_WIDTHS):
            stride = 1 if stage == 0 else 2
            blocks += [_BasicBlock(n_in, width, stride), _BasicBlock(width, width, 1)]
            n_in = width
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(n_in, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.pool(self.blocks(self.stem(x)))
        return self.fc(torch.flatten(out, 1))


@MODELS.register("resnet18")
def resnet18(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """ResNet-18, CIFAR variant (see :class:`ResNet18`)."""
    return ResNet18(input_shape, n_classes)


def build_model(name: str, input_shape: Sequence[int], n_classes: int) -> nn.Module:
    """Build ``name`` for one input shape and class count; checks it has no buffers."""
    shape = tuple(int(s) for s in input_shape)
    model = MODELS.get(name)(shape, int(n_classes))
    if any(True for _ in model.buffers()):
        raise ValidationError(f"model '{name}' has buffers; the runtime needs buffer-free models")
    expected = parameter_count(name, shape, n_classes)
    actual = sum(p.numel() for p in model.parameters())
    if actual != expected:  # a builder and its closed-form size drifted apart
        raise ValidationError(
            f"model '{name}' has {actual} parameters but model_size says {expected}"
        )
    return model
