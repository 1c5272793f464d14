"""The advisor's pick under given estimator constants, without writing to the catalog.

The planner reads its constants from the catalog. To judge the advisor before calibration (the
estimator's priors) and after calibration (constants fitted on the other cross-validation
folds), the candidates of a recorded planning run are re-costed with those constants: the same
estimator, context, topology statistics and per-round resources, the same SLA pruning, ordering
and fully connected fallback as :class:`~airplan_qo.planner.optimizer.Optimizer`. With the
planning run's own constants this reproduces the planner's choice (a test checks it) as long
as the catalog holds no ``dataset_family`` calibration rows, which the planner applies per
candidate family; the evaluation always passes explicit constants (priors or fitted ones).
Pruning that does not depend on the constants (a re-optimisation's connectivity restriction) is
taken from the planning run as recorded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ..costmodels import ESTIMATORS
from ..plans.request import DEFAULT_CONFIDENCE
from ..plans.plan import Cost, PhysicalPlan
from ..plans.sla import parse_sla
from ..plans.topology import TopologySpec


@attrs.frozen
class Pick:
    """The plan the advisor chooses under one set of constants."""

    plan: PhysicalPlan
    label: str
    family: str
    predicted_rounds: float | None
    target: float
    fc_accuracy: float
    fallback: bool
    #: every candidate's planned P(meets the SLA) at ``target``, by label (None where the
    #: estimator predicts no distribution)
    planned_p: Mapping[str, float | None] = attrs.field(factory=dict)


#: The transports the runtime trains (an evaluation trains every candidate it plans); a grid
#: workload that names none is planned over the air (:data:`~.grid.DEFAULT_TRANSPORTS`).
TRAINED_TRANSPORTS = ("ota", "digital")
#: The operators of the fully connected reference (``fc``): over the air, the default rule.
REFERENCE_OPERATORS = {"transports": ("ota",), "algorithms": ("auto",)}


def fc_plan(result) -> PhysicalPlan:
    """The fully connected, uncompressed plan the planner uses as ``fc`` and fallback."""
    w = result.request.workload
    spec = TopologySpec.fully_connected(w.clients, seed=w.topology_seed)
    return PhysicalPlan(spec, 1.0, result.chosen.plan.channel)


def context_with(result, constants: Mapping[str, float] | None):
    """The planning run's estimation context with ``constants`` (None: its own)."""
    if constants is None:
        return result.context
    est = ESTIMATORS.get(result.estimator)
    return attrs.evolve(result.context, constants={**est.priors, **dict(constants)})


def estimate(result, candidate, constants: Mapping[str, float] | None, target: float):
    """The estimator's estimate for one candidate of ``result`` at ``target``."""
    est = ESTIMATORS.get(result.estimator)
    return est.estimate(context_with(result, constants), candidate.plan, candidate.stats,
                        float(target))


def predicted_rounds(result, candidate, constants: Mapping[str, float] | None,
                     target: float) -> float | None:
    """Predicted rounds to ``target`` (None = never) under ``constants``."""
    return estimate(result, candidate, constants, target).rounds


def pick(result, constants: Mapping[str, float] | None, candidates: Sequence[Any],
         fc_candidate, fc_accuracy: float | None = None) -> Pick:
    """Re-cost ``candidates`` (of ``result``) with ``constants`` and choose as the planner does.

    ``fc_candidate`` is a costed fully connected k = 1 candidate (from this planning run or a
    reference run of the same workload and seed): its accuracy after the round budget sets
    ``fc`` and it is the fallback when nothing is feasible. ``fc_accuracy`` replaces the
    predicted ``fc`` (the evaluation passes the measured one, to judge the ranking alone).
    """
    est = ESTIMATORS.get(result.estimator)
    ctx = context_with(result, constants)
    request = result.request
    sla = request.sla if not isinstance(request.sla, str) else parse_sla(request.sla)
    w = request.workload
    budget = ctx.round_budget
    fc_acc = (est.accuracy_at(ctx, fc_candidate.plan, fc_candidate.stats, budget)
              if fc_accuracy is None else float(fc_accuracy))
    threshold = sla.accuracy_threshold(fc_acc)
    if threshold is not None:
        target = float(threshold)
    elif w.target_accuracy is not None:
        target = float(w.target_accuracy)
    else:
        target = 0.95 * fc_acc
    budgets = dict(request.budgets)
    ranked = []
    planned_p = {}
    for cand in candidates:
        e = est.estimate(ctx, cand.plan, cand.stats, target)
        planned_p[cand.plan.label()] = e.p_meets
        cost = Cost(e, cand.cost.per_round, cand.cost.startup, result.objective,
                    tail=cand.cost.tail)
        feasible = (not (cand.pruned_reason or "").startswith("connectivity:")
                    and _feasible(cost, e, sla, fc_acc, budget, budgets,
                                  getattr(request, "confidence", DEFAULT_CONFIDENCE)))
        ranked.append(((not feasible,) + cost.sort_key(cand.plan.label()), cand, cost, feasible))
    ranked.sort(key=lambda r: r[0])
    if ranked and ranked[0][3]:
        _, cand, cost, _ = ranked[0]
        return Pick(cand.plan, cand.plan.label(), cand.plan.topology.family, cost.rounds, target,
                    fc_acc, False, planned_p)
    e = est.estimate(ctx, fc_candidate.plan, fc_candidate.stats, target)
    return Pick(fc_candidate.plan, fc_candidate.plan.label(), "complete", e.rounds, target,
                fc_acc, True, planned_p)


def _feasible(cost: Cost, e, sla, fc_acc: float, round_budget: int,
              budgets: dict[str, float], confidence: float = DEFAULT_CONFIDENCE) -> bool:
    """The planner's pruning rules: reaches the target (or, for an estimator that predicts a
    distribution of rounds, meets it with at least ``confidence``), SLA, round/time/energy
    budgets and the estimator's own constraints."""
    if cost.rounds is None:
        return False
    acc = e.accuracy
    if e.p_meets is not None:
        if e.p_meets < confidence:
            return False
        acc = math.inf          # the chance constraint replaces the accuracy point check
    metrics = {"accuracy": acc, "avg_model_accuracy": acc, "rounds": cost.rounds,
               "energy_j": cost.total("energy_j"), "airtime_s": cost.total("airtime_s"),
               "channel_uses": cost.total("channel_uses")}
    if sla.check(metrics, fc_acc):
        return False
    if cost.rounds > round_budget:
        return False
    seconds, joules = budgets.get("seconds"), budgets.get("joules")
    if seconds is not None and cost.total("airtime_s") > seconds:
        return False
    if joules is not None and cost.total("energy_j") > joules:
        return False
    return all(ok for _, ok in e.extra_constraints)


def finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


__all__ = ["TRAINED_TRANSPORTS", "REFERENCE_OPERATORS", "Pick", "pick", "predicted_rounds", "estimate", "fc_plan", "context_with"]
