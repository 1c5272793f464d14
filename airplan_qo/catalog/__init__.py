"""The DuckDB catalog and the workload statistics it holds."""

from .schema import CATALOG_NAME, MIGRATIONS, SCHEMA_VERSION
from .store import Catalog, Sketches, canonical_json, resolve_path

__all__ = ["CATALOG_NAME", "MIGRATIONS", "SCHEMA_VERSION", "Catalog", "Sketches",
           "canonical_json", "resolve_path"]
