"""Closed-form parameter counts of the runtime's models, without importing torch.

The planner needs the model dimension d (channel uses, energy and bits scale with it) long before
anything is trained, and planning must not pay for importing torch. Each entry of
:data:`MODEL_SIZES` mirrors one builder of :data:`airplan_qo.runtime.models.MODELS` exactly; the
test suite checks every pair against ``sum(p.numel() for p in model.parameters())``.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from ..errors import ValidationError
from ..registry import Registry

__all__ = [
    "CNN4_CHANNELS",
    "CNN4_HIDDEN",
    "MLP_HIDDEN",
    "MLP2_HIDDEN",
    "MODEL_SIZES",
    "RESNET18_WIDTHS",
    "cnn4_feature_shape",
    "parameter_count",
]

#: Hidden width of ``mlp`` (one hidden layer).
MLP_HIDDEN: tuple[int, ...] = (64,)
#: Hidden widths of ``mlp2`` (two hidden layers).
MLP2_HIDDEN: tuple[int, ...] = (128, 64)
#: Output channels of the two 3x3 convolutions of ``cnn4``.
CNN4_CHANNELS: tuple[int, int] = (16, 32)
#: Width of the hidden fully connected layer of ``cnn4``.
CNN4_HIDDEN = 64
#: Stage widths of the CIFAR ResNet-18 (two basic blocks per stage).
RESNET18_WIDTHS: tuple[int, ...] = (64, 128, 256, 512)

SizeRule = Callable[[tuple[int, ...], int], int]

#: Registry of closed-form parameter counts: ``fn(input_shape, n_classes) -> int``.
MODEL_SIZES: Registry[SizeRule] = Registry("model")


def _shape(input_shape: Sequence[int]) -> tuple[int, ...]:
    try:
        shape = tuple(int(s) for s in input_shape)
    except (TypeError, ValueError):
        raise ValidationError(f"input_shape must be a sequence of integers, got {input_shape!r}")
    if not shape or any(s < 1 for s in shape):
        raise ValidationError(f"input_shape must be non-empty with positive sizes, got {shape}")
    return shape


def _classes(n_classes: int) -> int:
    if isinstance(n_classes, bool) or int(n_classes) != n_classes or n_classes < 1:
        raise ValidationError(f"n_classes must be a positive integer, got {n_classes!r}")
    return int(n_classes)


def _linear(n_in: int, n_out: int) -> int:
    return n_in * n_out + n_out


def _mlp(widths: Sequence[int], shape: tuple[int, ...], n_classes: int) -> int:
    total, n_in = 0, math.prod(shape)
    for width in widths:
        total += _linear(n_in, width)
        n_in = width
    return total + _linear(n_in, n_classes)


@MODEL_SIZES.register("logistic")
def _logistic_size(input_shape: tuple[int, ...], n_classes: int) -> int:
    return _linear(math.prod(input_shape), n_classes)


@MODEL_SIZES.register("mlp")
def _mlp_size(input_shape: tuple[int, ...], n_classes: int) -> int:
    return _mlp(MLP_HIDDEN, input_shape, n_classes)


@MODEL_SIZES.register("mlp2")
def _mlp2_size(input_shape: tuple[int, ...], n_classes: int) -> int:
    return _mlp(MLP2_HIDDEN, input_shape, n_classes)


def cnn4_feature_shape(input_shape: Sequence[int]) -> tuple[int, int, int]:
    """(channels, height, width) entering the first fully connected layer of ``cnn4``.

    Two 3x3 same-padding convolutions, each followed by a 2x2 max-pool (floor), so images must
    be at least 4x4 and channel first: ``(C, H, W)``.
    """
    shape = _shape(input_shape)
    if len(shape) != 3:
        raise ValidationError(
            f"cnn4 needs image inputs shaped (channels, height, width), got {shape}; "
            f"use 'mlp' or 'logistic' for flat features"
        )
    _, h, w = shape
    if h < 4 or w < 4:
        raise ValidationError(f"cnn4 needs images of at least 4x4 pixels, got {h}x{w}")
    return CNN4_CHANNELS[1], h // 4, w // 4


@MODEL_SIZES.register("cnn4")
def _cnn4_size(input_shape: tuple[int, ...], n_classes: int) -> int:
    c_in = input_shape[0]
    c1, c2 = CNN4_CHANNELS
    c, h, w = cnn4_feature_shape(input_shape)
    return (c_in * c1 * 9 + c1) + (c1 * c2 * 9 + c2) + _linear(c * h * w, CNN4_HIDDEN) \
        + _linear(CNN4_HIDDEN, n_classes)


@MODEL_SIZES.register("resnet18")
def _resnet18_size(input_shape: tuple[int, ...], n_classes: int) -> int:
    if len(input_shape) != 3:
        raise ValidationError(
            f"resnet18 needs image inputs shaped (channels, height, width), got {input_shape}"
        )
    c_in = input_shape[0]
    stem = RESNET18_WIDTHS[0]
    total = c_in * stem * 9 + 2 * stem          # bias-free 3x3 stem conv + its norm
    n_in = stem
    for stage, width in enumerate(RESNET18_WIDTHS):
        for block in range(2):
            total += n_in * width * 9 + 2 * width + width * width * 9 + 2 * width
            if block == 0 and (stage > 0 or n_in != width):
                total += n_in * width + 2 * width   # 1x1 projection shortcut + its norm
            n_in = width
    return total + _linear(n_in, n_classes)


def parameter_count(model_name: str, input_shape: Sequence[int], n_classes: int) -> int:
    """Number of trainable parameters d of ``model_name`` for one input shape and class count."""
    rule = MODEL_SIZES.get(model_name)
    return int(rule(_shape(input_shape), _classes(n_classes)))
