"""Model builders: ``MODELS[name](input_shape, n_classes) -> nn.Module``.

Every model is buffer-free (no BatchNorm running statistics), so one client's whole state is its
flat parameter vector and N clients fit in one stacked (N x d) tensor. ResNet-18 therefore uses
GroupNorm (same parameter count as BatchNorm): batch statistics would be extra per-client state
that does not average well under label skew. The registry itself lives in :mod:`airplan_qo.model_size`
(torch-free), which loads these builders on first use and counts d on the modules they build.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
from torch import nn

from ..errors import ValidationError

__all__ = ["BUILDERS"]

ModelBuilder = Callable[[tuple[int, ...], int], nn.Module]

#: Hidden width of ``mlp`` (one hidden layer).
MLP_HIDDEN: tuple[int, ...] = (64,)
#: Hidden widths of ``mlp2`` (two hidden layers).
MLP2_HIDDEN: tuple[int, ...] = (128, 64)
#: Output channels of the two 3x3 convolutions of ``cnn4``.
CNN4_CHANNELS: tuple[int, int] = (16, 32)
#: Width of the hidden fully connected layer of ``cnn4``.
CNN4_HIDDEN = 64
#: Output channels of the three stride-2 convolutions of ``cnn1d``.
CNN1D_CHANNELS: tuple[int, int, int] = (16, 32, 32)
#: Stage widths of the CIFAR ResNet-18 (two basic blocks per stage).
RESNET18_WIDTHS: tuple[int, ...] = (64, 128, 256, 512)


def cnn4_feature_shape(input_shape: Sequence[int]) -> tuple[int, int, int]:
    """(channels, height, width) entering the first fully connected layer of ``cnn4``.

    Two 3x3 same-padding convolutions, each followed by a 2x2 max-pool (floor), so images must
    be at least 4x4 and channel first: ``(C, H, W)``.
    """
    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 3:
        raise ValidationError(
            f"cnn4 needs image inputs shaped (channels, height, width), got {shape}; "
            f"use 'cnn1d' for signals (channels, length), 'mlp' or 'logistic' for flat features"
        )
    _, h, w = shape
    if h < 4 or w < 4:
        raise ValidationError(f"cnn4 needs images of at least 4x4 pixels, got {h}x{w}")
    return CNN4_CHANNELS[1], h // 4, w // 4


def _mlp(widths: Sequence[int], input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    layers: list[nn.Module] = [nn.Flatten()]
    n_in = math.prod(input_shape)
    for width in widths:
        layers += [nn.Linear(n_in, width), nn.ReLU()]
        n_in = width
    layers.append(nn.Linear(n_in, n_classes))
    return nn.Sequential(*layers)


def logistic(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """Multinomial logistic regression on the flattened input."""
    return _mlp((), input_shape, n_classes)


def mlp(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """One hidden ReLU layer of width 64."""
    return _mlp(MLP_HIDDEN, input_shape, n_classes)


def mlp2(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """Two hidden ReLU layers (128, 64)."""
    return _mlp(MLP2_HIDDEN, input_shape, n_classes)


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


def cnn1d(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """A small 1-D CNN for signals shaped (channels, length), e.g. MNIST-1D's (1, 40): three
    stride-2 convolutions (kernel 5, 3, 3; 16, 32, 32 channels; ReLU), then one linear layer.
    About 6.4k parameters on MNIST-1D."""
    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 2:
        raise ValidationError(
            f"cnn1d needs signal inputs shaped (channels, length), got {shape}; use 'cnn4' for "
            f"images, 'mlp' or 'logistic' for flat features")
    c_in, length = shape
    if length < 8:
        raise ValidationError(f"cnn1d needs signals of at least 8 steps, got {length}")
    c1, c2, c3 = CNN1D_CHANNELS
    out = length
    for kernel, pad in ((5, 2), (3, 1), (3, 1)):
        out = (out + 2 * pad - kernel) // 2 + 1
    return nn.Sequential(
        nn.Conv1d(c_in, c1, 5, stride=2, padding=2), nn.ReLU(),
        nn.Conv1d(c1, c2, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv1d(c2, c3, 3, stride=2, padding=1), nn.ReLU(),
        nn.Flatten(),
        nn.Linear(c3 * out, n_classes),
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


def resnet18(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """ResNet-18, CIFAR variant (see :class:`ResNet18`)."""
    return ResNet18(input_shape, n_classes)


#: The built-in models by name (``model_size.BUILTIN_MODELS``), loaded by the registry on first use.
BUILDERS: dict[str, ModelBuilder] = {"logistic": logistic, "mlp": mlp, "mlp2": mlp2, "cnn4": cnn4,
                                     "cnn1d": cnn1d, "resnet18": resnet18}
