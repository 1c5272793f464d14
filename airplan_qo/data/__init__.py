"""Torch-free data layer: datasets as numpy arrays and seeded client partitioners.

Shared by the catalog's statistics and the PyTorch runtime; nothing here imports torch.
"""

from .datasets import (DATA_DIR_ENV, DATASETS, Dataset, dataset_info, load, register_dataset,
                       safe_extract)
from . import generated  # noqa: F401  (registers mnist1d and leaf_synthetic in DATASETS)
from .partition import (PARTITIONERS, Partition, dirichlet, iid, natural, partition,
                        partition_dataset, shards)

__all__ = [
    "DATA_DIR_ENV",
    "DATASETS",
    "Dataset",
    "dataset_info",
    "PARTITIONERS",
    "Partition",
    "dirichlet",
    "iid",
    "load",
    "natural",
    "partition",
    "partition_dataset",
    "register_dataset",
    "safe_extract",
    "shards",
]
