"""The model registry and the model dimension d, counted on the modules themselves.

:data:`MODELS` maps a name to a factory ``fn(input_shape, n_classes) -> nn.Module``. It is
importable without torch, so SQL, the CLI and the planner can validate model names cheaply:
the built-in factories (``runtime/models.py``) load on first call, and a user's own factory is
added with :func:`register_model` (``airplan_qo.register_model``).

The planner needs d (channel uses, energy and bits scale with it) before anything is trained.
:func:`parameter_count` builds the model on torch's ``meta`` device (no memory is allocated,
even for ResNet-18) and counts its parameters, so d always equals what the runtime trains;
nothing keeps a separate table of sizes. Counting needs torch; without it the error says how to
install it. Counts are cached per (factory, input shape, classes).
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable, Sequence

from .errors import AirPlanError, ValidationError
from .registry import Registry, user_key

__all__ = ["BUILTIN_MODELS", "MODELS", "build_model", "parameter_count", "register_model"]

ModelFactory = Callable[[tuple[int, ...], int], Any]

#: Registry of model factories: ``fn(input_shape, n_classes) -> nn.Module``.
MODELS: Registry[ModelFactory] = Registry("model")

#: The models that ship with the runtime (``runtime/models.py``).
BUILTIN_MODELS = ("logistic", "mlp", "mlp2", "cnn4", "cnn1d", "resnet18")


class _Builtin:
    """A built-in factory of ``runtime/models.py``, imported (with torch) on first call."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, input_shape: tuple[int, ...], n_classes: int) -> Any:
        from .runtime.models import BUILDERS

        return BUILDERS[self.name](input_shape, n_classes)

    def __repr__(self) -> str:
        return f"<built-in model {self.name}>"


for _name in BUILTIN_MODELS:
    MODELS.register(_name, _Builtin(_name))

_COUNTS: dict[tuple[int, str, tuple[int, ...], int], int] = {}


def register_model(name: str, factory: Callable[..., Any], *, replace: bool = False) -> None:
    """Make ``factory`` plannable and trainable as model ``name`` (``WITH (model = 'name')``).

    ``factory(input_shape, n_classes)`` returns a new ``torch.nn.Module`` that maps a batch
    ``(b, *input_shape)`` to logits ``(b, n_classes)``; a factory that takes no arguments is
    called as ``factory()``. The module must have no buffers (one client's state is its flat
    parameter vector). d, its number of parameters, is counted on the module itself. A built-in
    name cannot be replaced; a name of your own can with ``replace=True``.
    """
    key = user_key("model", name, BUILTIN_MODELS, MODELS, replace)
    if not callable(factory):
        raise ValidationError(f"model '{name}': the factory must be callable "
                              f"(input_shape, n_classes) -> nn.Module, got {factory!r}")
    MODELS.register(key, _adapt(factory), replace=True)
    for cached in [k for k in _COUNTS if k[1] == key]:
        del _COUNTS[cached]


def _adapt(factory: Callable[..., Any]) -> ModelFactory:
    """``factory`` as a two-argument factory (a zero-argument one ignores the shape)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):     # builtins without a signature: call as documented
        return factory
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    variadic = any(p.kind is p.VAR_POSITIONAL for p in params)
    required = [p for p in positional if p.default is p.empty]
    if not required and not variadic and not positional:

        def no_arguments(input_shape: tuple[int, ...], n_classes: int) -> Any:
            return factory()

        no_arguments.__wrapped__ = factory  # type: ignore[attr-defined]
        return no_arguments
    if len(required) > 2:
        raise ValidationError(f"a model factory is called as factory(input_shape, n_classes); "
                              f"{getattr(factory, '__name__', factory)!r} needs "
                              f"{len(required)} arguments")
    return factory


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


def _torch():
    try:
        import torch
    except ImportError:
        raise ValidationError(
            "counting a model's parameters needs PyTorch, which is not installed; install it "
            "with `pip install torch` (CPU: `pip install torch==2.13.0`)") from None
    return torch


def instantiate(name: str, input_shape: Sequence[int], n_classes: int, *,
                device: Any = None) -> Any:
    """Call model ``name``'s factory and check that it returned an ``nn.Module``."""
    torch = _torch()
    factory = MODELS.get(name)
    shape, classes = _shape(input_shape), _classes(n_classes)
    try:
        if device is None:
            model = factory(shape, classes)
        else:
            with torch.device(device):
                model = factory(shape, classes)
    except AirPlanError:
        raise
    except Exception as exc:
        if device is not None:
            raise
        raise ValidationError(f"model '{name}' could not be built for input shape {shape} and "
                              f"{classes} classes: {type(exc).__name__}: {exc}") from exc
    if not isinstance(model, torch.nn.Module):
        raise ValidationError(f"model '{name}': the factory returned {type(model).__name__}, "
                              f"not a torch.nn.Module")
    return model


def parameter_count(model_name: str, input_shape: Sequence[int], n_classes: int) -> int:
    """Number of trainable parameters d of ``model_name`` for one input shape and class count,
    counted on the module its factory builds (on the ``meta`` device: nothing is allocated)."""
    factory = MODELS.get(model_name)
    shape, classes = _shape(input_shape), _classes(n_classes)
    key = (id(factory), str(model_name).lower(), shape, classes)
    if key not in _COUNTS:
        try:
            model = instantiate(model_name, shape, classes, device="meta")
        except AirPlanError:
            raise
        except Exception:   # a factory that cannot run on the meta device: build it for real
            model = instantiate(model_name, shape, classes)
        _COUNTS[key] = int(sum(math.prod(p.shape) for p in model.parameters()))
    return _COUNTS[key]


def build_model(name: str, input_shape: Sequence[int], n_classes: int) -> Any:
    """Build ``name`` for one input shape and class count; checks it has no buffers."""
    model = instantiate(name, input_shape, n_classes)
    if any(True for _ in model.buffers()):
        raise ValidationError(
            f"model '{name}' has buffers (e.g. BatchNorm running statistics); the runtime keeps "
            f"one flat parameter vector per client and needs buffer-free models (use GroupNorm "
            f"or LayerNorm, or track_running_stats=False)")
    if not any(True for _ in model.parameters()):
        raise ValidationError(f"model '{name}' has no parameters to train")
    return model
