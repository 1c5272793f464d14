"""The cost-model interface: what estimators know about a workload (:class:`EstimationContext`),
the :class:`CostEstimator` protocol, the registry, and the calibration constants an estimate uses
(priors overridden by the catalog's calibration rows, and the range those rows were fitted on).
The built-in estimators are registered by the package (:mod:`airplan_qo.costmodels`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import attrs

from ..plans.plan import Estimate, PhysicalPlan
from ..plans.topology import TopologyStats
from ..registry import Registry


@attrs.frozen
class EstimationContext:
    """What estimators know about the workload besides the plan itself."""

    n_classes: int
    d: int
    alpha: float
    alpha_source: str
    round_budget: int
    constants: dict[str, float]
    calibration_ids: tuple[int, ...] = ()
    privacy_epsilon: float | None = None
    dataset: str = ""
    #: What the executions behind the calibration rows in use spanned (:func:`recorded_range`):
    #: ``k`` and ``clients`` as [lo, hi], ``families`` and ``datasets`` as lists, and
    #: ``unrecorded``, the ids of rows in use that record no range. None: no rows in use.
    fitted_range: Mapping[str, Any] | None = None
    #: The workload's model (``mlp``, ``cnn1d``, a registered one): a model outside the fitted
    #: grid widens the ``ttt`` estimate as an unseen dataset does.
    model: str = ""
    #: A measured pilot of the fully connected reference (:class:`~airplan_qo.plans.pilot.
    #: ReferencePilot`), or None: ``ttt`` then takes the reference from it.
    pilot: Any = None


class CostEstimator(Protocol):
    """The estimator interface: named constants with priors, an accuracy curve and an estimate."""

    name: str
    description: str
    priors: dict[str, float]

    def accuracy_at(self, ctx: EstimationContext, plan: PhysicalPlan, stats: TopologyStats,
                    rounds: float) -> float: ...

    def estimate(self, ctx: EstimationContext, plan: PhysicalPlan, stats: TopologyStats,
                 target_accuracy: float) -> Estimate: ...


def refusal(estimator: CostEstimator, plan: PhysicalPlan) -> str | None:
    """Why ``estimator`` cannot cost ``plan`` (an estimator may define ``refusal(plan)``, e.g.
    for transports or algorithms its model has no terms for), or None."""
    judge = getattr(estimator, "refusal", None)
    return judge(plan) if judge is not None else None


ESTIMATORS: Registry[CostEstimator] = Registry("cost estimator")
DEFAULT_ESTIMATOR = "ttt"


def resolve_constants(estimator: CostEstimator, rows: list[dict[str, Any]], dataset: str,
                      family: str | None = None) -> tuple[dict[str, float], tuple[int, ...]]:
    """Priors overridden by current calibration rows: global, then dataset scope, then the
    dataset_family scope ``dataset:family`` (more specific wins). Returns the constants and the
    ids of the calibration rows used."""
    values = dict(estimator.priors)
    used: dict[str, int] = {}
    rank = {"global": 0, "dataset": 1, "dataset_family": 2}
    keys = {"global": "", "dataset": dataset, "dataset_family": f"{dataset}:{family}"}
    best: dict[str, int] = {}
    for row in rows:
        scope = row["scope"]
        if scope not in rank or row["scope_key"] != keys[scope] or (
                scope == "dataset_family" and family is None):
            continue
        name = row["constant_name"]
        # an estimator may accept constants beyond its priors (ttt: a new dataset's level)
        prefixes = tuple(getattr(estimator, "open_prefixes", ()))
        known = name in values or bool(prefixes) and name.startswith(prefixes)
        if known and rank[scope] >= best.get(name, -1):
            values[name] = float(row["value"])
            used[name] = int(row["calibration_id"])
            best[name] = rank[scope]
    return values, tuple(sorted(used.values()))


#: Separates a calibration row's ``source`` text from the range of the executions it was fitted
#: on: ``fit: log-curve least squares on 5 executions; fitted range {"clients": [10, 20], ...}``.
RANGE_MARK = "; fitted range "


def recorded_range(rows: Iterable[Mapping[str, Any]], ids: Iterable[int]
                   ) -> dict[str, Any] | None:
    """The union of the fitted ranges recorded in the ``source`` of the calibration rows
    ``ids`` (of ``rows``, ``calibration`` rows): ``k`` and ``clients`` as [lo, hi],
    ``families`` and ``datasets`` as sorted lists, ``unrecorded`` the ids whose source records
    none (rows calibrated before ranges were recorded, or written by hand). None when ``ids``
    is empty (the constants are the priors)."""
    wanted = {int(i) for i in ids}
    if not wanted:
        return None
    spans: dict[str, list[float]] = {}
    sets: dict[str, set[str]] = {"families": set(), "datasets": set()}
    unrecorded = []
    for row in rows:
        cid = int(row["calibration_id"])
        if cid not in wanted:
            continue
        source = str(row.get("source") or "")
        at = source.find(RANGE_MARK)
        try:
            found = json.loads(source[at + len(RANGE_MARK):]) if at >= 0 else None
        except ValueError:
            found = None
        if not isinstance(found, dict):
            unrecorded.append(cid)
            continue
        for key in ("k", "clients"):
            if isinstance(found.get(key), list) and len(found[key]) == 2:
                lo, hi = (float(v) for v in found[key])
                old = spans.get(key)
                spans[key] = [lo, hi] if old is None else [min(old[0], lo), max(old[1], hi)]
        for key in sets:
            sets[key].update(str(v) for v in found.get(key) or ())
    out: dict[str, Any] = dict(spans)
    out.update({k: sorted(v) for k, v in sets.items() if v})
    out["unrecorded"] = sorted(unrecorded)
    return out
