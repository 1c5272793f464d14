"""The plan cache: a planning call whose inputs have not changed since an earlier one reuses
that call's candidates, as a DBMS reuses a prepared statement's plan.

A planning call reads the catalog (the workload's row and statistics, the privacy spent on it,
its released label counts, the current calibration, cached topologies: the tables of
:data:`PLANNING_INPUTS`) and the process's registries (datasets, models, topology families,
weights rules, estimators), and is otherwise a function of its request. The cache keeps, per
Catalog, the result of a request (less its statement text) with the catalog's count of writes
to those tables (:meth:`~airplan_qo.catalog.store.Catalog.changes`) and the registries' count of
registrations (:func:`~airplan_qo.registry.registrations`) read before the call began; it serves
the result again while both counts are unchanged. Writes by other Catalogs of this process on
the same file are counted too; no other process can write while this one holds the file, and
the cache lives in the Catalog's :attr:`~airplan_qo.catalog.store.Catalog.memo`, emptied when
the file is given back or closed and on every rollback.

A call served from the cache is still recorded in full: its own ``planning_runs`` row and a
``plans`` row for every candidate, the same rows an uncached call records (copied inside
DuckDB from the run that first recorded the result: ``plans`` rows never change once
inserted, and a rollback that undoes that run empties the cache).
"""

from __future__ import annotations

from typing import Any

import attrs

from ..catalog.store import Catalog
from ..plans.request import PlanRequest, PlanResult
from ..registry import registrations

#: The catalog tables a planning call reads (tests/plans/test_plan_cache.py checks the list).
PLANNING_INPUTS = ("workloads", "workload_stats", "client_sketches", "privacy_ledger",
                   "calibration", "topologies")

#: Results kept per Catalog, the least recently used dropped first beyond it.
PLANS_KEPT = 32

_MEMO = "plan_cache"


@attrs.frozen
class CachedPlan:
    """A planning call's outcome as the cache keeps it: the result before recording, the
    workload's row id it was recorded under and the planning run that recorded it, whose
    ``plans`` rows later recordings copy (both None on a read-only catalog)."""

    result: PlanResult
    workload_id: int | None
    planning_run_id: int | None


@attrs.frozen
class Lookup:
    """One planning call's look-up: its key and the counts read before the call began."""

    key: Any
    counts: tuple[int, int]
    #: whether the request's data split was checked (it need not be when the cache holds it)
    split_checked: bool = False


class PlanCache:
    """The cache of one Catalog (:meth:`of`)."""

    def __init__(self, catalog: Catalog, entries: dict[Any, tuple[tuple[int, int], CachedPlan]]):
        self.catalog = catalog
        self._entries = entries

    @classmethod
    def of(cls, catalog: Catalog) -> PlanCache:
        """The plan cache of ``catalog`` (kept in its memo)."""
        return cls(catalog, catalog.memo.setdefault(_MEMO, {}))

    def counts(self) -> tuple[int, int]:
        """The catalog's writes to :data:`PLANNING_INPUTS` and the registrations, as counted
        now."""
        return self.catalog.changes(PLANNING_INPUTS), registrations()

    def lookup(self, request: PlanRequest) -> Lookup | None:
        """The look-up of ``request``, to be made before its transaction begins; None when the
        request cannot be a key (it holds something unhashable, e.g. a pilot's arrays)."""
        key = attrs.evolve(request, statement="")
        try:
            hash(key)
        except TypeError:
            return None
        return Lookup(key, self.counts())

    def holds(self, lookup: Lookup | None) -> bool:
        """Whether the look-up's request has a valid cached outcome now."""
        entry = None if lookup is None else self._entries.get(lookup.key)
        return entry is not None and entry[0] == lookup.counts

    def get(self, lookup: Lookup | None) -> CachedPlan | None:
        """The cached outcome of the look-up's request when nothing it read has changed."""
        if lookup is None:
            return None
        entry = self._entries.get(lookup.key)
        if entry is None:
            return None
        counts, cached = entry
        if counts != lookup.counts:
            del self._entries[lookup.key]
            return None
        self._entries[lookup.key] = self._entries.pop(lookup.key)   # the most recently used
        return cached

    def put(self, lookup: Lookup | None, cached: CachedPlan) -> None:
        """Keep ``cached`` for the look-up's request, with the counts read before its call."""
        if lookup is None:
            return
        self._entries.pop(lookup.key, None)
        self._entries[lookup.key] = (lookup.counts, cached)
        while len(self._entries) > PLANS_KEPT:
            del self._entries[next(iter(self._entries))]

    def clear(self) -> None:
        """Forget every cached result of this Catalog."""
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def served(cached: CachedPlan, request: PlanRequest, planning_ms: float) -> PlanResult:
    """The cached result as the answer to ``request`` (its statement text) planned in
    ``planning_ms``."""
    result = cached.result
    if result.request.statement != request.statement:
        result = attrs.evolve(result, request=attrs.evolve(result.request,
                                                           statement=request.statement))
    return attrs.evolve(result, planning_time_ms=planning_ms)


__all__ = ["CachedPlan", "Lookup", "PLANNING_INPUTS", "PLANS_KEPT", "PlanCache", "served"]
