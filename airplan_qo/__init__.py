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

from .plans.workload import Workload  # noqa: E402
from .session import Session, connect  # noqa: E402

__all__ = [
    "__version__",
    "Session",
    "Workload",
    "connect",
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
