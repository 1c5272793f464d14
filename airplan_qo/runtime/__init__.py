"""PyTorch execution runtime: stacked client models, gossip rules, channel, metrics, checkpoints.

Importing this package does not import torch; the torch-backed names below load on first use, so
the model registry (:mod:`airplan_qo.model_size`, re-exported here) stays cheap for the planner
(counting parameters itself imports torch).
See docs/runtime.md.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..model_size import MODELS, build_model, parameter_count, register_model

_LAZY = {
    "RunConfig": "engine",
    "RunResult": "engine",
    "Trainer": "engine",
    "ROUND_KEYS": "engine",
    "default_gamma": "engine",
    "CHANNELS": "channel",
    "truncation_probability": "channel",
    "effective_noise_variance": "channel",
    "consensus_distance": "metrics",
    "mean_pairwise_distance": "metrics",
    "jain_index": "metrics",
}

__all__ = ["MODELS", "build_model", "distributed_launch", "parameter_count", "register_model",
           *sorted(_LAZY)]


def distributed_launch() -> bool:
    """Whether a launcher (``torchrun``) started this process as one of several
    (``WORLD_SIZE`` > 1), without importing torch."""
    import os

    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'airplan_qo.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
