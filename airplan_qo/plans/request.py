"""What a planning call is asked and what it answers: a :class:`PlanRequest` (the workload, the
SLA, restrictions of the plan space, budgets), the costed :class:`Candidate` plans and the
:class:`PlanResult`. Values only: the planner (:mod:`airplan_qo.planner`) produces them, EXPLAIN
renders them and the runtime re-plans with them.
"""

from __future__ import annotations

from typing import Any

import attrs

from ..errors import ValidationError
from .operators import check_algorithm, parse_transport
from .plan import Cost, PhysicalPlan
from .sla import DEFAULT_SLA, SLA
from .topology import TopologySpec, TopologyStats
from .workload import Workload

#: The sparsity values k planned when a request names none.
DEFAULT_SPARSITY = (0.01, 0.05, 0.1, 0.2, 1.0)

#: ``error``: refuse; ``auto``: plan the whole space; ``complete``: the fully connected plan.
FALLBACKS = ("error", "auto", "complete")


def check_fallback(value: Any) -> str:
    """A valid fallback mode (lower case), else ValidationError naming the choices."""
    text = str(value).lower() if value is not None else ""
    if text not in FALLBACKS:
        raise ValidationError(f"unknown fallback {value!r}; use one of {', '.join(FALLBACKS)}")
    return text


#: The default confidence of the chance constraint P(meets SLA) >= confidence (estimators that
#: predict a distribution of rounds). 0.95 rather than 0.9: on 60 held-out workloads the
#: shipped time-to-target fit's picks meet the SLA in 59 at 0.95 and 56 at 0.9
#: (docs/results.md, "Held-out workloads").
DEFAULT_CONFIDENCE = 0.95


def check_confidence(value: Any, name: str = "confidence") -> float:
    """``value`` as a chance-constraint confidence, or a ValidationError naming ``name``."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValidationError(f"{name} must be a probability in (0, 1), got {value!r}") \
            from None
    if not 0.0 < v < 1.0:
        raise ValidationError(f"{name} must be a probability in (0, 1), got {value!r}")
    return v


def check_mix_rounds(value: Any) -> str | int | None:
    """A request's mixing-only tails (plans/finish.py): ``'auto'`` (each plan that can run
    one planned both without and with the tail its topology needs), an integer m >= 0 (each
    plan that can planned with m mixing-only rounds only), ``'off'`` / 0 (none), or None (the
    planner's default: ``'auto'`` with an estimator that costs tails, else none)."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() in ("off", "none"):
        return 0
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(f"mix_rounds must be 'auto', 'off' or a non-negative integer (the "
                              f"mixing-only rounds at the end of the budget), got {value!r}")
    return int(value)


@attrs.frozen
class PlanRequest:
    """Everything a planning call needs besides the catalog.

    ``min_mixing_p`` and ``exclude_topologies`` restrict the plan space for re-optimisation
    during a run: candidates whose static mixing p (of the cached spectra) is below the minimum,
    or whose topology is excluded, are kept in the run but pruned with a ``connectivity:`` reason.
    """

    workload: Workload
    sla: SLA = DEFAULT_SLA
    topologies: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] | None = None
    weights: tuple[str, ...] | None = None
    sparsity: tuple[float, ...] | None = None
    #: transports to plan, (name, bits) with bits None for the default digital widths
    #: (:func:`~.operators.parse_transport`); None = AUTO (:data:`~.operators.AUTO_TRANSPORTS`)
    transports: tuple[tuple[str, int | None], ...] | None = attrs.field(
        default=None, converter=lambda v: None if v is None else tuple(
            dict.fromkeys(parse_transport(t) for t in v)) or None)
    #: algorithms to plan; None = AUTO (:data:`~.operators.AUTO_ALGORITHMS`)
    algorithms: tuple[str, ...] | None = attrs.field(
        default=None, converter=lambda v: None if v is None else tuple(
            dict.fromkeys(check_algorithm(a) for a in v)) or None)
    budgets: tuple[tuple[str, float], ...] = ()
    estimator: str | None = None
    objective: str | None = None
    statement: str = ""
    min_mixing_p: float | None = None
    exclude_topologies: tuple[TopologySpec, ...] = ()
    confidence: float = DEFAULT_CONFIDENCE
    #: when nothing in a restricted space meets the SLA: ``error``, ``auto`` (plan the whole
    #: space) or ``complete`` (the fully connected plan); planner/restriction.py
    fallback: str = attrs.field(default="complete", converter=check_fallback)
    #: a measured pilot of the fully connected reference (plans/pilot.py): the ``ttt``
    #: estimator takes the reference from it and every cost includes its traffic
    pilot: Any = None
    #: mixing-only tails to plan beside each plan (:func:`check_mix_rounds`; plans/finish.py)
    mix_rounds: str | int | None = attrs.field(default=None, converter=check_mix_rounds)


@attrs.frozen
class Candidate:
    """One costed plan of a planning run. The planner builds each candidate whole (its rank,
    pruning reason and, once recorded, plan id included); a change is a new value."""

    plan: PhysicalPlan
    stats: TopologyStats
    cost: Cost
    pruned_reason: str | None = None
    plan_id: int | None = None
    rank: int | None = None
    topology_id: int | None = None
    #: family-specific facts for EXPLAIN VERBOSE (d_cliques: cliques and their label skew)
    topology_details: dict[str, Any] = attrs.field(factory=dict)

    @property
    def feasible(self) -> bool:
        return self.pruned_reason is None

    def metrics(self) -> dict[str, float | None]:
        # one predicted accuracy serves both accuracy metrics (fitted on the clients' own models)
        return {"accuracy": self.cost.estimate.accuracy,
                "avg_model_accuracy": self.cost.estimate.accuracy, "rounds": self.cost.rounds,
                "energy_j": self.cost.total("energy_j"),
                "airtime_s": self.cost.total("airtime_s"),
                "channel_uses": self.cost.total("channel_uses")}


@attrs.frozen
class PlanResult:
    """The outcome of planning: the chosen candidate, all candidates and the context."""

    request: PlanRequest
    context: Any   # the cost models' EstimationContext the candidates were costed in
    estimator: str
    objective: str
    chosen: Candidate
    candidates: tuple[Candidate, ...]
    fc_accuracy: float
    target_accuracy: float
    fallback: bool
    warnings: tuple[str, ...]
    planning_time_ms: float
    planning_run_id: int | None

    def explain(self, *, format: str = "text", verbose: bool = False, costs: bool = True,
                alternatives: int = 0, analyze: Any = None) -> str:
        from .explain import render

        return render(self, format=format, verbose=verbose, costs=costs,
                      alternatives=alternatives, analyze=analyze)

    def runner_up(self) -> Candidate | None:
        ranked = [c for c in self.candidates if c.feasible and c is not self.chosen]
        return ranked[0] if ranked else None



__all__ = ["Candidate", "DEFAULT_CONFIDENCE", "DEFAULT_SPARSITY", "FALLBACKS", "PlanRequest",
           "PlanResult", "check_confidence", "check_fallback"]
