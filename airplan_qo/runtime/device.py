"""Where a run's tensors live: the ``device`` execution option (``auto``, ``cpu``, ``cuda``,
``cuda:N``).

:func:`check_device` validates and normalises the text without importing torch (the SQL binder
and the session use it); :func:`resolve_device` turns it into a ``torch.device``, failing with a
one-line :class:`~airplan_qo.errors.ExecutionError` when the machine cannot provide it. ``auto``
is CUDA device 0 when CUDA is available, else the CPU; ``cuda`` is the current CUDA device
(normally ``cuda:0``). The default everywhere is ``cpu``: CPU runs are reproducible bit for bit,
which the evaluation cache and resume rely on (docs/runtime.md, Devices).
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import ExecutionError, ValidationError

__all__ = ["DEFAULT_DEVICE", "DEVICE_FORMS", "available_bytes", "check_device", "device_name",
           "resolve_device", "to_device"]

#: The device a run uses when none is given.
DEFAULT_DEVICE = "cpu"
#: The accepted forms, for messages and docs.
DEVICE_FORMS = "auto, cpu, cuda or cuda:N (N the index of a CUDA GPU)"

_PATTERN = re.compile(r"(?:auto|cpu|cuda(?::[0-9]+)?)\Z")


def check_device(value: Any) -> str:
    """The normalised device text (``' CUDA:0 '`` -> ``'cuda:0'``); ValidationError for
    anything else (``'tpu'``, ``'cuda:x'``, a number). A ``torch.device`` is accepted too."""
    if value is not None and type(value).__name__ == "device" and hasattr(value, "type"):
        value = str(value)
    if not isinstance(value, str):
        raise ValidationError(f"device must be {DEVICE_FORMS}, got {value!r}")
    text = value.strip().lower()
    if not _PATTERN.match(text):
        raise ValidationError(f"device must be {DEVICE_FORMS}, got {value!r}")
    if text.startswith("cuda:"):
        text = f"cuda:{int(text[5:])}"      # 'cuda:01' -> 'cuda:0'
    return text


def _no_cuda_reason(torch: Any) -> str:
    if getattr(torch.version, "cuda", None) is None:
        return f"this torch build ({torch.__version__}) has no CUDA support"
    return (f"torch {torch.__version__} (CUDA {torch.version.cuda}) finds no usable CUDA GPU "
            "(torch.cuda.is_available() is false: no GPU, no driver, or CUDA_VISIBLE_DEVICES "
            "hides them)")


def resolve_device(value: Any = DEFAULT_DEVICE, *, hint: str | None = None):
    """The ``torch.device`` a run with device ``value`` uses on this machine; ExecutionError,
    in one line, when CUDA is asked for and cannot be had (ending with ``hint`` when given)."""
    import torch

    text = check_device(value)
    if text == "cpu":
        return torch.device("cpu")
    available = torch.cuda.is_available()
    if text == "auto":
        return torch.device("cuda", 0) if available else torch.device("cpu")
    if not available:
        raise ExecutionError(f"device '{text}' needs a CUDA GPU, but {_no_cuda_reason(torch)}; "
                             + (hint or "use device 'cpu' (or 'auto', which falls back to the "
                                        "CPU)"))
    count = torch.cuda.device_count()
    index = torch.cuda.current_device() if text == "cuda" else int(text[5:])
    if index >= count:
        have = (f"{count} CUDA device" + ("s" if count != 1 else "")
                + (f" (cuda:0 to cuda:{count - 1})" if count > 1 else " (cuda:0)"))
        raise ExecutionError(f"device '{text}' does not exist: this machine has {have}"
                             + (f"; {hint}" if hint else ""))
    return torch.device("cuda", index)


def device_name(device: Any) -> str:
    """``'cpu'`` or ``'cuda:N'`` for a ``torch.device`` (what executions record)."""
    if device.type == "cuda":
        return f"cuda:{0 if device.index is None else device.index}"
    return str(device.type)


def to_device(array: Any, device: Any):
    """A numpy array as a tensor on ``device``: shares the array's memory on the CPU (exactly
    ``torch.from_numpy``), one copy to the device otherwise."""
    import torch

    tensor = torch.from_numpy(array)
    return tensor if device.type == "cpu" else tensor.to(device)


def available_bytes(device: Any = None) -> int | None:
    """Bytes a new allocation may take now on ``device``: a CUDA device's free memory, else the
    machine's available memory (None when the system does not say)."""
    if device is not None and getattr(device, "type", None) == "cuda":
        import torch

        return int(torch.cuda.mem_get_info(device)[0])
    from ..plans.footprint import available_memory

    return available_memory()
