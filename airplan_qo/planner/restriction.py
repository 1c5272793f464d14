"""What planning does when the user restricted the plan space (USING TOPOLOGY / WEIGHTS /
SPARSITY / TRANSPORT / ALGORITHM) and no plan in the restriction meets the SLA.

An explicit choice is respected: by default (``FALLBACK ERROR``) such a plan request is an error
that says why (the best plan of the restriction and its P(meets SLA) or predicted accuracy) and
what would meet the SLA (the cheapest plan outside the restriction). ``FALLBACK AUTO`` plans the
whole plan space instead and says so; ``complete`` is the planner's own fallback, the fully
connected uncompressed plan (what an unrestricted request that nothing meets gets). The modes
are checked by :func:`airplan_qo.plans.request.check_fallback`.
"""

from __future__ import annotations

from typing import Any, Callable

import attrs

from ..errors import PlanningError


def restriction_text(request: Any) -> str:
    """The user's restriction of the plan space in SQL words (empty when there is none)."""
    parts = []
    if request.topologies:
        parts.append("USING TOPOLOGY " + ", ".join(_spec_text(f, p) for f, p in request.topologies))
    if request.weights:
        parts.append("USING WEIGHTS " + ", ".join(request.weights))
    if request.sparsity:
        parts.append("USING SPARSITY " + ", ".join(f"{k:g}" for k in request.sparsity))
    if getattr(request, "transports", None):
        parts.append("USING TRANSPORT " + ", ".join(
            name if bits is None else f"{name}(bits = {bits})"
            for name, bits in request.transports))
    if getattr(request, "algorithms", None):
        parts.append("USING ALGORITHM " + ", ".join(request.algorithms))
    return " ".join(parts)


def _spec_text(family: Any, params: Any) -> str:
    name = getattr(family, "name", None) or str(family)
    items = dict(params or ())
    return name + (f"({', '.join(f'{k}={v}' for k, v in items.items())})" if items else "")


def _best_rejected(result: Any) -> Any:
    """The restricted candidate closest to meeting the SLA: the highest P(meets SLA), else the
    highest predicted accuracy."""
    own = [c for c in result.candidates if c.pruned_reason is not None] or list(result.candidates)
    return max(own, key=lambda c: (c.cost.estimate.p_meets or 0.0,
                                   c.cost.estimate.accuracy or 0.0))


def _describe(c: Any, confidence: float) -> str:
    est = c.cost.estimate
    reason = c.pruned_reason or (   # the planner's fallback plan has its reason cleared
        f"unlikely: P(meets SLA) {est.p_meets:.2f} < confidence {confidence:g}"
        if est.p_meets is not None and est.p_meets < confidence else "it fails a check")
    if est.p_meets is not None:
        how = f"P(meets SLA) {est.p_meets:.2f}"
    elif est.accuracy is not None:
        how = f"predicted accuracy {est.accuracy:.3f}"
    else:
        how = "no prediction"
    return f"{c.plan.label()} ({how}; rejected by {reason})"


def _inside(request: Any, c: Any) -> bool:
    """Whether candidate ``c`` lies in the request's restriction of the plan space."""
    spec = c.plan.topology
    if request.sparsity and c.plan.k_ratio not in request.sparsity:
        return False
    if request.weights and spec.weights not in request.weights:
        return False
    transports = getattr(request, "transports", None)
    if transports and not any(c.plan.transport == name and (bits is None or
                                                            c.plan.bits == bits)
                              for name, bits in transports):
        return False
    algorithms = getattr(request, "algorithms", None)
    if algorithms and c.plan.effective_algorithm not in {
            a if a != "auto" else c.plan.effective_algorithm for a in algorithms}:
        return False
    if request.topologies:
        from ..plans.families import FAMILIES

        params = spec.param_dict
        return any(FAMILIES.get(getattr(f, "name", None) or str(f)).name == spec.family
                   and all(params.get(k) == v for k, v in dict(p or ()).items())
                   for f, p in request.topologies)
    return True


def _cheapest_outside(request: Any, wider: Any) -> Any:
    if wider.fallback:
        return None
    return next((c for c in wider.candidates if c.feasible and not _inside(request, c)), None)


def respect_restriction(request: Any, result: Any, plan: Callable[[Any], Any]) -> Any:
    """``result`` (a PlanResult of ``request``) unless it is the planner's fallback for a
    restricted request: then, by ``request.fallback``, an error, or the result of ``plan``
    (planning without recording) over the whole plan space, with a warning saying so."""
    if not result.fallback or request.fallback == "complete" or request.min_mixing_p is not None:
        # a re-optimisation (min_mixing_p set) keeps the run going on the planner's fallback
        return result
    what = restriction_text(request) or "the plan space"
    best = _best_rejected(result)
    wider_request = attrs.evolve(request, topologies=None, weights=None, sparsity=None,
                                 transports=None, algorithms=None, fallback="complete")
    closest = _describe(best, request.confidence)
    wider = plan(wider_request) if restriction_text(request) else result
    outside = _cheapest_outside(request, wider)
    if request.fallback == "auto":
        note = (f"no plan in {what} meets the SLA (closest: {closest}); FALLBACK AUTO "
                f"planned the whole plan space instead and chose {wider.chosen.plan.label()}")
        return attrs.evolve(wider, warnings=(note,) + tuple(wider.warnings))
    alternative = (f"the cheapest plan outside it that does is {outside.plan.label()}"
                   + (f" (P(meets SLA) {outside.cost.estimate.p_meets:.2f})"
                      if outside.cost.estimate.p_meets is not None else "")
                   if outside is not None else
                   "no plan of the whole plan space meets it either (relax the SLA, its "
                   "CONFIDENCE or the budgets)")
    raise PlanningError(
        f"no plan in {what} meets the SLA ({request.sla.render()}"
        + (f", confidence {request.confidence:g}" if best.cost.estimate.p_meets is not None
           else "") + f"): the best is {closest}; {alternative}. Widen the restriction, "
        "relax the SLA, or add FALLBACK AUTO to plan the whole space instead")


__all__ = ["respect_restriction", "restriction_text"]
