"""Why a costed candidate is pruned: a table of rules, each a function of the candidate and the
:class:`Pruning` facts of its planning call that returns a reason (``<kind>: ...``) or None.
The first rule of :data:`RULES` that gives a reason prunes the candidate; a candidate no rule
prunes is feasible.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs

from ..errors import ValidationError
from ..plans.request import Candidate, PlanRequest
from ..plans.sla import ACCURACY_METRICS
from ..plans.topology import TopologySpec
from .clique_planning import NO_CLIQUE_STATISTICS


def budget_limits(request: PlanRequest) -> dict[str, float]:
    """The request's budgets by name, or a ValidationError naming an unknown or non-positive one."""
    out = dict(request.budgets)
    for key, value in out.items():
        if key not in ("rounds", "seconds", "joules"):
            raise ValidationError(f"unknown budget '{key}'; use ROUNDS, SECONDS or JOULES")
        if not value > 0:
            raise ValidationError(f"budget {key} must be positive, got {value}")
    return out


@attrs.frozen
class Pruning:
    """What the rules know of a planning call besides the candidate."""

    request: PlanRequest
    fc_accuracy: float
    budgets: dict[str, Any]
    round_budget: int
    #: d_cliques specs planned without label statistics (costed on a placeholder assignment)
    unanalysed: tuple[TopologySpec, ...] = ()


def no_statistics(c: Candidate, p: Pruning) -> str | None:
    """A d_cliques candidate whose cliques could not be formed: no ANALYZE WORKLOAD."""
    return NO_CLIQUE_STATISTICS if c.plan.topology in p.unanalysed else None


def connectivity(c: Candidate, p: Pruning) -> str | None:
    """The pruning reason of a candidate outside a re-optimisation's connectivity restriction."""
    if c.plan.topology in p.request.exclude_topologies:
        return "connectivity: the topology being replaced"
    floor = p.request.min_mixing_p
    mixing_p = c.stats.spectra.mixing_p
    if floor is not None and mixing_p < floor * (1.0 - 1e-9):
        return (f"connectivity: mixing p {mixing_p:.4g} < {floor:.4g} "
                "(at least as well connected)")
    return None


def _distribution(c: Candidate) -> bool:
    """Whether the estimate is a distribution of rounds (a chance constraint applies)."""
    return c.cost.estimate.p_meets is not None and c.cost.rounds is not None


def chance(c: Candidate, p: Pruning) -> str | None:
    """P(meets SLA) below the request's confidence (estimators that predict a distribution)."""
    est, confidence = c.cost.estimate, p.request.confidence
    if _distribution(c) and est.p_meets < confidence:
        return (f"unlikely: P(meets SLA) {est.p_meets:.2f} < confidence {confidence:g}")
    return None


def sla(c: Candidate, p: Pruning) -> str | None:
    """The SLA's checks; under a chance constraint its accuracy checks are replaced by it."""
    est, sla_, fc_accuracy = c.cost.estimate, p.request.sla, p.fc_accuracy
    if _distribution(c):
        metrics = {k: v for k, v in c.metrics().items() if k not in ACCURACY_METRICS}
        failures = [f for f in sla_.check({**metrics, "accuracy": math.inf,
                                           "avg_model_accuracy": math.inf}, fc_accuracy)]
        return "sla: " + "; ".join(failures) if failures else None
    if c.cost.rounds is None:
        acc = est.accuracy
        return (f"sla: never reaches the accuracy target (predicted {acc:.3f} after "
                f"{p.round_budget} rounds)" if acc is not None else
                "sla: never reaches the accuracy target")
    failures = sla_.check(c.metrics(), fc_accuracy)
    return "sla: " + "; ".join(failures) if failures else None


def budgets(c: Candidate, p: Pruning) -> str | None:
    """Round, airtime and energy budgets."""
    if c.cost.rounds > p.round_budget:
        return f"budget: rounds {c.cost.rounds:.0f} > {p.round_budget}"
    seconds, joules = p.budgets.get("seconds"), p.budgets.get("joules")
    if seconds is not None and c.cost.total("airtime_s") > seconds:
        return f"budget: airtime {c.cost.total('airtime_s'):.4g} s > {seconds:g} s"
    if joules is not None and c.cost.total("energy_j") > joules:
        return f"budget: energy {c.cost.total('energy_j'):.4g} J > {joules:g} J"
    return None


def estimator_constraints(c: Candidate, p: Pruning) -> str | None:
    """The estimator's own constraints (``extra_constraints`` of its estimate)."""
    est = c.cost.estimate
    for name, ok in est.extra_constraints:
        if not ok:
            return f"{name}: {name} {est.terms.get(name, float('nan')):.3g} above target"
    return None


#: The pruning rules in the order they are tried.
RULES: tuple[Callable[[Candidate, Pruning], str | None], ...] = (
    no_statistics, connectivity, chance, sla, budgets, estimator_constraints)


def pruned_reason(c: Candidate, p: Pruning) -> str | None:
    """The reason of the first rule that prunes ``c``, or None when it is feasible."""
    for rule in RULES:
        reason = rule(c, p)
        if reason is not None:
            return reason
    return None


__all__ = ["Pruning", "RULES", "budget_limits", "budgets", "chance", "connectivity",
           "estimator_constraints", "no_statistics", "pruned_reason", "sla"]
