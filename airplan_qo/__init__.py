"""AirPlan-QO: a query-optimizer-style planning engine for over-the-air decentralized FL."""

from __future__ import annotations

from .errors import (
    AirPlanError,
    BindError,
    CatalogError,
    CatalogLockedError,
    DataError,
    ExecutionError,
    MemoryLimitError,
    ParseError,
    PlanningError,
    ResourceLimitError,
    SandboxError,
    SchemaVersionError,
    StatementTimeoutError,
    UnknownNameError,
    ValidationError,
)

__version__ = "0.1.0"

from .data.datasets import Dataset, register_dataset  # noqa: E402
from .plans.workload import Workload  # noqa: E402
from .model_size import register_model  # noqa: E402
from .session import Session, connect  # noqa: E402

__all__ = [
    "__version__",
    "Dataset",
    "Session",
    "Workload",
    "connect",
    "register_dataset",
    "register_model",
    "AirPlanError",
    "BindError",
    "CatalogError",
    "CatalogLockedError",
    "DataError",
    "ExecutionError",
    "MemoryLimitError",
    "ParseError",
    "PlanningError",
    "ResourceLimitError",
    "SandboxError",
    "SchemaVersionError",
    "StatementTimeoutError",
    "UnknownNameError",
    "ValidationError",
]
