"""One exception root for everything a user can get wrong.

Every error a user can trigger derives from :class:`AirPlanError`; the CLI turns it into a
one-paragraph message and exit status 2, never a traceback. Anything else escaping is a bug.
"""

from __future__ import annotations


class AirPlanError(Exception):
    """Root of every error the engine raises on purpose."""

    exit_code = 2


class ValidationError(AirPlanError, ValueError):
    """A parameter or an input value is out of its allowed range."""


class UnknownNameError(ValidationError):
    """A registry lookup failed; the message carries a "did you mean" suggestion."""


class ParseError(AirPlanError):
    """A statement cannot be parsed; carries line, column and a caret excerpt."""

    def __init__(self, message: str, *, line: int | None = None, col: int | None = None,
                 excerpt: str | None = None):
        self.line, self.col, self.excerpt = line, col, excerpt
        text = message
        if line is not None and col is not None:
            text = f"{message} (line {line}, column {col})"
        if excerpt:
            text = f"{text}\n{excerpt}"
        super().__init__(text)


class BindError(ParseError):
    """A statement parsed but names something unknown or a value out of range."""


class PlanningError(AirPlanError):
    """The planner cannot produce a plan for the given workload."""


class CatalogError(AirPlanError):
    """The catalog file cannot be opened, read or written."""


class CatalogLockedError(CatalogError):
    """Another process holds the catalog file for writing."""


class SchemaVersionError(CatalogError):
    """The catalog was written by a newer (or unknown) version of the engine."""


class SandboxError(CatalogError):
    """User SQL tried to reach outside the catalog (a file, a URL, an extension, a setting) or
    is not a read-only query."""


class ResourceLimitError(CatalogError):
    """User SQL was stopped at a resource limit; the catalog is unchanged and still usable."""


class StatementTimeoutError(ResourceLimitError):
    """User SQL ran past its statement time limit."""


class MemoryLimitError(ResourceLimitError):
    """User SQL needed more memory than the catalog's memory limit."""


class ExecutionError(AirPlanError):
    """A training run failed or cannot start."""


class DataError(AirPlanError):
    """A dataset is missing, malformed, or cannot be partitioned as asked."""
