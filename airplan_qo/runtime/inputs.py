"""What a plan trains on: the workload's dataset, its partition and the built topology."""

from __future__ import annotations

from typing import Any

from ..data import load, partition_dataset
from ..plans.topology import TopologySpec, build

__all__ = ["trainer_inputs"]


def trainer_inputs(w, spec: TopologySpec) -> tuple[Any, Any, Any]:
    """The dataset, partition and built topology a workload's plan trains on (the same in
    every process of a distributed run)."""
    dataset = load(w.dataset, seed=w.seed)
    part = partition_dataset(dataset, w.partition, w.clients, seed=w.seed, alpha=w.alpha)
    return dataset, part, build(spec)
