"""Cost models of the planner: one module per model behind one small interface.

Each model predicts, for a physical plan, the rounds to the SLA target and the accuracy; resource
costs (channel uses, energy, ...) follow from the rounds the same way for every model
(:mod:`airplan_qo.plans.plan`). A model declares named constants with documented priors; the
planner passes the catalog's current calibration (falling back to the priors) and every estimate
records which calibration rows it used. Anything with the :class:`CostEstimator` shape can be
registered in ``ESTIMATORS``.

* ``dsgd`` (:mod:`.dsgd`): error floor and linear rate shaped by decentralized-SGD theory.
* ``ttt`` (:mod:`.time_to_target`): the distribution of log rounds-to-target relative to the
  fully connected reference, fitted by censored regression; chance-constrained SLAs.
* ``paper`` (:mod:`.paper`): the AirPlan paper's C_ours, for reproduction.

Shared plan quantities (heterogeneity, channel noise, p of the random mixing matrix) are in
:mod:`.features`; fitting constants to the catalog's executions in :mod:`.calibration`.
"""

from __future__ import annotations

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


class CostEstimator(Protocol):
    """The estimator interface: named constants with priors, an accuracy curve and an estimate."""

    name: str
    description: str
    priors: dict[str, float]

    def accuracy_at(self, ctx: EstimationContext, plan: PhysicalPlan, stats: TopologyStats,
                    rounds: float) -> float: ...

    def estimate(self, ctx: EstimationContext, plan: PhysicalPlan, stats: TopologyStats,
                 target_accuracy: float) -> Estimate: ...


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


def _register() -> None:
    from .dsgd import DSGDEstimator
    from .paper import PaperEstimator
    from .time_to_target import TimeToTargetEstimator

    ESTIMATORS.register("dsgd", DSGDEstimator())
    ESTIMATORS.register("paper", PaperEstimator())
    ESTIMATORS.register("ttt", TimeToTargetEstimator())


_register()

__all__ = ["CostEstimator", "DEFAULT_ESTIMATOR", "ESTIMATORS", "EstimationContext",
           "resolve_constants"]
