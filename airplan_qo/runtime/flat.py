"""Flat parameter storage and the local-training strategies.

All N clients' parameters live in one stacked float32 tensor ``X`` of shape (N, d); a
:class:`ParamLayout` maps each named parameter of the model to a column range of ``X``, so the
model is only ever called functionally on views. Three strategies compute the N minibatch
gradients (into a preallocated (N, d) tensor) and the N losses:

- ``loop``: one client at a time through a private copy of the module whose parameters (and
  their ``.grad``) are pointed at that client's rows of the stacked parameters (and of the
  gradient output), so backward writes straight into the flat buffer. Fastest on CPU when a
  client's convolutions keep the core busy (cnn4 on 3x32x32: 1.35 s vs 3.2 s batched and
  4.3 s vmap per step at N = 100, one thread; 10% faster than ``functional_call`` per client).
- ``batched``: one stacked forward for all clients (``baddbmm`` for linear layers, grouped
  convolutions with ``groups = N`` for conv layers) and one backward of the sum of the client
  losses, which yields every client's own gradient (plain MLP stacks use a hand-written
  backward instead of autograd, ~30% faster). Supports ``nn.Sequential`` models of
  Flatten/Linear/ReLU/Conv1d/Conv2d/MaxPool1d/MaxPool2d layers. Fastest where per-call overhead dominates
  (mlp N = 100: 5.5 ms vs 7.3 ms vmap and 54 ms loop; cnn4 on 1x8x8: 114 ms vs 230 ms loop).
- ``vmap``: ``torch.func.vmap(grad_and_value(loss))`` over the stacked parameters; works for
  any functional model.

``auto`` applies the documented rule of :func:`auto_strategy`. The strategies compute the same
mathematics but are not bit-identical to each other, so a run records the strategy it used and a
resumed run must use the same one.
"""

from __future__ import annotations

import copy
import math
from typing import Iterable

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from ..errors import ExecutionError, ValidationError

__all__ = ["STRATEGIES", "ParamLayout", "auto_strategy", "client_gradients", "client_logits"]

STRATEGIES = ("auto", "loop", "batched", "vmap")

#: Layers the ``batched`` strategy can stack over clients.
_BATCHED_LAYERS = (nn.Flatten, nn.Linear, nn.ReLU, nn.Conv1d, nn.Conv2d, nn.MaxPool1d,
                   nn.MaxPool2d)
_CONV = (nn.Conv1d, nn.Conv2d)
#: Above this many input pixels per channel a conv model trains faster client by client.
BATCHED_CONV_MAX_PIXELS = 256


class ParamLayout:
    """Names, shapes and column offsets of a model's parameters in a flat vector of length d."""

    def __init__(self, model: nn.Module):
        self.names: tuple[str, ...] = tuple(n for n, _ in model.named_parameters())
        self.shapes: tuple[torch.Size, ...] = tuple(p.shape for _, p in model.named_parameters())
        self.numels: tuple[int, ...] = tuple(int(p.numel()) for _, p in model.named_parameters())
        offsets, total = [], 0
        for n in self.numels:
            offsets.append(total)
            total += n
        self.offsets: tuple[int, ...] = tuple(offsets)
        self.d = total

    def flatten(self, model: nn.Module) -> torch.Tensor:
        """The model's current parameters as one flat float32 vector (a copy)."""
        return torch.cat([p.detach().reshape(-1).float() for p in model.parameters()])

    def views(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Named views into ``flat`` of shape (d,) or (n, d): no copy."""
        lead = flat.shape[:-1]
        return {name: flat[..., off:off + n].view(*lead, *shape)
                for name, shape, off, n in zip(self.names, self.shapes, self.offsets, self.numels)}


def supports_batched(model: nn.Module) -> bool:
    """Whether ``batched`` can stack this model: a Sequential of supported plain layers."""
    if not isinstance(model, nn.Sequential):
        return False
    for layer in model:
        if not isinstance(layer, _BATCHED_LAYERS):
            return False
        if isinstance(layer, _CONV) and (layer.groups != 1 or layer.padding_mode != "zeros"
                                             or isinstance(layer.padding, str)):
            return False
        if isinstance(layer, nn.Flatten) and (layer.start_dim != 1 or layer.end_dim != -1):
            return False
    return True


def has_conv(model: nn.Module) -> bool:
    """Whether ``model`` has a Conv1d or Conv2d layer."""
    return any(isinstance(m, _CONV) for m in model.modules())


def auto_strategy(model: nn.Module, input_shape: tuple[int, ...], on_gpu: bool = False) -> str:
    """The documented rule behind ``strategy='auto'``: ``batched`` for stackable models (on the
    CPU, measured with one thread, only for models without convolutions and for conv models on
    small images, at most :data:`BATCHED_CONV_MAX_PIXELS` pixels per channel; on a GPU for
    every stackable model, where one grouped convolution beats N small ones at every size
    measured); ``loop`` for everything else (bigger images on the CPU, ResNet-18)."""
    if not supports_batched(model):
        return "loop"
    if has_conv(model) and not on_gpu and math.prod(input_shape[1:]) > BATCHED_CONV_MAX_PIXELS:
        return "loop"
    return "batched"


def resolve_strategy(strategy: str, model: nn.Module, input_shape: tuple[int, ...],
                     on_gpu: bool = False) -> str:
    if strategy not in STRATEGIES:
        raise ValidationError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if strategy == "auto":
        return auto_strategy(model, input_shape, on_gpu)
    if strategy == "batched" and not supports_batched(model):
        raise ValidationError(
            "strategy 'batched' supports nn.Sequential models of Flatten/Linear/ReLU/Conv1d/"
            "Conv2d/MaxPool1d/MaxPool2d layers only; use 'loop' or 'vmap' for this model"
        )
    return strategy


def _loss(model: nn.Module):
    def loss(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(model, params, (x,)), y)
    return loss


#: On a GPU, a grouped convolution whose groups have fewer input channels than this (an RGB or
#: grey image: 3 or 1) is padded with zero channels up to it, and cuDNN picks a faster kernel
#: (unpadded it launched one kernel per group for cnn4's first layer). cnn4 on 3x32x32 on an
#: H200: 68.6 -> 49.2 ms per round at N = 1000, 6.78 -> 6.45 ms at N = 100.
GPU_MIN_GROUP_CHANNELS = 8


def channel_padding(x: torch.Tensor) -> int:
    """Zero channels to add to a (n, batch, C, H, W) input before the first grouped convolution:
    up to :data:`GPU_MIN_GROUP_CHANNELS` on a GPU, none on the CPU (whose runs stay bit for bit
    what they were)."""
    return max(0, GPU_MIN_GROUP_CHANNELS - x.shape[2]) if x.is_cuda else 0


def stacked_forward(model: nn.Sequential, views: dict[str, torch.Tensor],
                    x: torch.Tensor) -> torch.Tensor:
    """Logits of n clients at once: ``views`` of stacked (n, ...) parameters (see
    :meth:`ParamLayout.views`), ``x`` (n, batch, *input_shape) -> (n, batch, C). Linear layers
    run as one ``baddbmm``; conv layers as one grouped convolution over a
    (batch, n * channels, *spatial) activation (H, W for Conv2d, the length for Conv1d)."""
    n, batch = x.shape[0], x.shape[1]
    h, image = x, False     # image: h is (batch, n * C, H, W); else (n, batch, *features)
    for index, layer in enumerate(model):
        key = str(index)
        if isinstance(layer, _CONV):
            weight = views[f"{key}.weight"]
            bias = views.get(f"{key}.bias")
            if not image:
                extra = channel_padding(h)
                if extra:   # zero input channels, and zero weights for them: the same sums
                    spatial = (0, 0) * (h.dim() - 3)
                    h = F.pad(h, (*spatial, 0, extra))
                    weight = F.pad(weight, (*spatial, 0, extra))
                h = h.transpose(0, 1).reshape(batch, n * h.shape[2], *h.shape[3:])
                image = True
            conv = F.conv2d if isinstance(layer, nn.Conv2d) else F.conv1d
            h = conv(h, weight.reshape(n * weight.shape[1], *weight.shape[2:]),
                     None if bias is None else bias.reshape(-1), stride=layer.stride,
                     padding=layer.padding, dilation=layer.dilation, groups=n)
        elif isinstance(layer, (nn.MaxPool1d, nn.MaxPool2d)):
            if not image:
                h = h.transpose(0, 1).reshape(batch, n * h.shape[2], *h.shape[3:])
                image = True
            h = layer(h)
        elif isinstance(layer, nn.Flatten):
            h = h.reshape(batch, n, -1).transpose(0, 1) if image else h.reshape(n, batch, -1)
            image = False
        elif isinstance(layer, nn.Linear):
            if image:
                h = h.reshape(batch, n, -1).transpose(0, 1)
                image = False
            weight = views[f"{key}.weight"]
            bias = views.get(f"{key}.bias")
            if bias is None:
                h = torch.bmm(h, weight.transpose(1, 2))
            else:
                h = torch.baddbmm(bias.unsqueeze(1), h, weight.transpose(1, 2))
        else:  # ReLU
            h = torch.relu(h)
    if image:
        h = h.reshape(batch, n, -1).transpose(0, 1)
    return h


def dense_stack(model: nn.Module) -> list[tuple[str, bool]] | None:
    """For a Sequential of [Flatten,] (Linear, ReLU)*, Linear: each Linear's key and whether a
    ReLU follows it; None for anything else."""
    if not isinstance(model, nn.Sequential):
        return None
    layers = list(model)
    if layers and isinstance(layers[0], nn.Flatten):
        if layers[0].start_dim != 1 or layers[0].end_dim != -1:
            return None
        layers, first = layers[1:], 1
    else:
        first = 0
    spec: list[tuple[str, bool]] = []
    i = 0
    while i < len(layers):
        if not isinstance(layers[i], nn.Linear):
            return None
        relu = i + 1 < len(layers) and isinstance(layers[i + 1], nn.ReLU)
        spec.append((str(first + i), relu))
        i += 2 if relu else 1
    if not spec or spec[-1][1]:
        return None
    return spec


def dense_stack_gradients(spec: list[tuple[str, bool]], views: dict[str, torch.Tensor],
                          grads: dict[str, torch.Tensor], x: torch.Tensor,
                          y: torch.Tensor) -> torch.Tensor:
    """Forward and hand-written backward of stacked MLPs (cross-entropy, mean over the batch):
    writes every client's gradient into ``grads`` (views of the flat output) and returns the
    (n,) losses. About 30% faster than autograd here (no graph, no intermediate copies)."""
    n, batch = x.shape[0], x.shape[1]
    h = x.reshape(n, batch, -1)
    inputs = []
    for key, relu in spec:
        inputs.append(h)
        weight, bias = views[f"{key}.weight"], views.get(f"{key}.bias")
        h = (torch.bmm(h, weight.transpose(1, 2)) if bias is None
             else torch.baddbmm(bias.unsqueeze(1), h, weight.transpose(1, 2)))
        if relu:
            h.clamp_min_(0.0)
    # softmax and cross-entropy by hand: log_softmax over a small class dimension was 3.8x
    # slower on CPU than these few elementwise ops
    target = y.unsqueeze(2)
    peak = h.amax(dim=2, keepdim=True)
    delta = (h - peak).exp_()
    total = delta.sum(dim=2, keepdim=True)
    losses = (total.log() + peak - h.gather(2, target)).squeeze(2).mean(dim=1)
    delta.div_(total)
    delta.scatter_add_(2, target, torch.full(target.shape, -1.0, dtype=delta.dtype,
                                             device=delta.device))
    delta.div_(batch)
    for layer in range(len(spec) - 1, -1, -1):
        key, _ = spec[layer]
        grads[f"{key}.weight"].copy_(torch.bmm(delta.transpose(1, 2), inputs[layer]))
        if f"{key}.bias" in grads:
            grads[f"{key}.bias"].copy_(delta.sum(dim=1))
        if layer > 0:
            delta = torch.bmm(delta, views[f"{key}.weight"])
            if spec[layer - 1][1]:
                delta = torch.ops.aten.threshold_backward(delta, inputs[layer], 0.0)
    return losses


class GradientEngine:
    """Computes per-client minibatch gradients into a flat (n, d) tensor with one strategy."""

    def __init__(self, model: nn.Module, layout: ParamLayout, strategy: str):
        self.model = model
        self.layout = layout
        self.strategy = strategy
        self._loss = _loss(model)
        self._vmapped = vmap(grad_and_value(self._loss)) if strategy == "vmap" else None
        self._dense = dense_stack(model) if strategy == "batched" else None
        if strategy == "loop":
            # one private module whose parameters are pointed at each client's row in turn,
            # with .grad pointed at the client's row of the output: backward then accumulates
            # straight into the flat gradients (no functional_call, no copies)
            self._module = copy.deepcopy(model).requires_grad_(True)
            named = dict(self._module.named_parameters())
            self._params = [named[name] for name in layout.names]

    def __call__(self, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                 out: torch.Tensor) -> torch.Tensor:
        """Gradients of each row's mean cross-entropy into ``out`` (same shape as ``params``);
        returns the (n,) losses. ``x`` is (n, batch, *input_shape), ``y`` is (n, batch)."""
        n = params.shape[0]
        names = self.layout.names
        if self._dense is not None:
            with torch.no_grad():
                return dense_stack_gradients(self._dense, self.layout.views(params),
                                             self.layout.views(out), x, y)
        if self.strategy == "batched":
            views = self.layout.views(params.detach().requires_grad_(True))
            logits = stacked_forward(self.model, views, x)
            per_sample = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                         reduction="none")
            losses = per_sample.view(n, -1).mean(dim=1)
            # the clients are independent, so the gradient of the sum is every client's own
            grads = torch.autograd.grad(losses.sum(), [views[name] for name in names])
            for grad, target in zip(grads, self.layout.views(out).values()):
                target.copy_(grad)      # one strided copy, straight into the flat rows
            return losses.detach()
        if self._vmapped is not None:
            grads, losses = self._vmapped(self.layout.views(params), x, y)
            torch.cat([grads[name].reshape(n, -1) for name in names], dim=1, out=out)
            return losses.detach()
        losses = torch.empty(n, dtype=params.dtype, device=params.device)
        out.zero_()
        names = self.layout.names
        for i in range(n):
            weights, grads = self.layout.views(params[i]), self.layout.views(out[i])
            for p, name in zip(self._params, names):
                p.data = weights[name]
                p.grad = grads[name]
            loss = F.cross_entropy(self._module(x[i]), y[i])
            loss.backward()
            losses[i] = loss.detach()
            if i == 0 and self._params[0].grad.data_ptr() != grads[names[0]].data_ptr():
                raise ExecutionError(
                    "autograd did not accumulate into the flat gradient buffer; use "
                    "strategy='vmap' or 'batched'"
                )
        return losses


def client_logits(model: nn.Module, layout: ParamLayout, params: torch.Tensor,
                  x: torch.Tensor, strategy: str) -> torch.Tensor:
    """Logits of every row of ``params`` (n, d) on the same inputs ``x``: shape (n, m, C)."""
    n = params.shape[0]
    with torch.no_grad():
        if strategy == "batched":
            return stacked_forward(model, layout.views(params),
                                   x.unsqueeze(0).expand(n, *x.shape))
        if strategy == "vmap":
            fn = vmap(lambda p: functional_call(model, p, (x,)))
            return fn(layout.views(params))
        return torch.stack([functional_call(model, layout.views(params[i]), (x,))
                            for i in range(n)])


def client_correct(model: nn.Module, layout: ParamLayout, params: torch.Tensor,
                   x: torch.Tensor, y: torch.Tensor, strategy: str) -> torch.Tensor:
    """How many of the same inputs ``x`` (m, *input_shape) each row of ``params`` (n, d)
    classifies as ``y`` (m,): shape (n,), int64, the count ``argmax == y`` gives (its first
    maximum on ties). On the CPU a stack of dense layers runs class by sample, (n, C, m): the
    first layer as one matrix product over every client's units, the class scores with the
    samples as the long dimension, and the count from the true class's score against the
    highest, 1.4x as fast as (n, m, C) logits and an argmax over the classes there (mnist1d's
    MLP, ``benchmarks/bench_eval_dense.py``). A GPU keeps the logits and the argmax, which
    need no synchronisation."""
    spec = dense_stack(model) if strategy == "batched" and not params.is_cuda else None
    if spec is None:
        return (client_logits(model, layout, params, x, strategy).argmax(dim=2)
                == y.unsqueeze(0)).sum(dim=1)
    n, m = params.shape[0], x.shape[0]
    views = layout.views(params)
    with torch.no_grad():
        h = x.reshape(m, -1).t()
        for index, (key, relu) in enumerate(spec):
            weight, bias = views[f"{key}.weight"], views.get(f"{key}.bias")
            if index == 0:      # every client's units on the shared inputs: one product
                units = weight.shape[1]
                flat = weight.reshape(n * units, -1)
                h = (flat @ h if bias is None
                     else torch.addmm(bias.reshape(-1, 1), flat, h)).view(n, units, m)
            else:
                h = (torch.bmm(weight, h) if bias is None
                     else torch.baddbmm(bias.unsqueeze(2), weight, h))
            if relu:
                h.clamp_min_(0.0)
        top = h.amax(dim=1)
        truth = h.gather(1, y.view(1, 1, m).expand(n, 1, m)).squeeze(1)
        hit = truth == top
        # a tie (several classes at the highest) or a NaN (none equal to it): argmax's answer
        if bool(((h == top.unsqueeze(1)).sum(dim=1) != 1).any()):
            hit = h.argmax(dim=1) == y.unsqueeze(0)
        return hit.sum(dim=1)


def single_logits(model: nn.Module, layout: ParamLayout, flat: torch.Tensor,
                  x: torch.Tensor) -> torch.Tensor:
    """Logits of one flat parameter vector on ``x``."""
    with torch.no_grad():
        return functional_call(model, layout.views(flat), (x,))


def chunks(n: int, size: int) -> Iterable[slice]:
    """Consecutive slices of at most ``size`` covering range(n)."""
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


def client_gradients(model: nn.Module, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                     strategy: str = "loop") -> tuple[torch.Tensor, torch.Tensor]:
    """Convenience wrapper: (gradients (n, d), losses (n,)) for stacked ``params``."""
    layout = ParamLayout(model)
    out = torch.empty_like(params)
    strategy = resolve_strategy(strategy, model, tuple(x.shape[2:]))
    losses = GradientEngine(model, layout, strategy)(params, x, y, out)
    return out, losses
