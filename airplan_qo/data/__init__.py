"""Torch-free data layer: datasets as numpy arrays and seeded client partitioners.

Shared by the catalog's statistics and the PyTorch runtime; nothing here imports torch.
"""

from .datasets import DATA_DIR_ENV, DATASETS, Dataset, dataset_info, load, safe_extract
from .partition import PARTITIONERS, Partition, dirichlet, iid, partition, shards

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
    "partition",
    "safe_extract",
    "shards",
]
