"""What an execution's feedback compares against, fixed when the plan is chosen: the estimator's
rounds, its uncalibrated term, per-round resources and its predicted accuracy curve with a lower
band. Stored with the execution (so a resumed run records the same feedback) and read by the
monitor, which checks the observed accuracy against the band.
"""

from __future__ import annotations

import math
from typing import Any

from ..costmodels import ESTIMATORS
from ..costmodels.interface import AccuracyBand


def feedback_basis(result) -> dict[str, Any]:
    """What the feedback rows compare against, fixed at planning time (stored with the
    execution so a resumed run records the same feedback): the estimator's rounds, its
    uncalibrated term, per-round resources, and its predicted accuracy after each round."""
    chosen = result.chosen
    est = chosen.cost.estimate
    estimator = ESTIMATORS.get(result.estimator)
    budget = result.context.round_budget
    curve = [estimator.accuracy_at(result.context, chosen.plan, chosen.stats, t)
             for t in range(1, budget + 1)]
    tail = chosen.cost.tail     # a tail on another topology: its rounds cost that one's
    return {"estimator": result.estimator, "rounds": est.rounds, "model_term": est.model_term,
            "target_accuracy": result.target_accuracy,
            "target_metric": result.request.sla.accuracy_metric,
            "per_round_channel_uses": chosen.cost.per_round.channel_uses,
            "per_round_energy_j": chosen.cost.per_round.energy_j, "accuracy_curve": curve,
            "accuracy_curve_lo": _lower_curve(result, estimator, curve),
            **({} if tail is None else {
                "tail_from_round": budget - chosen.plan.mix_rounds,
                "tail_per_round_channel_uses": tail.channel_uses,
                "tail_per_round_energy_j": tail.energy_j})}


def _lower_curve(result, estimator, curve: list[float]) -> list[float]:
    """The estimator's lower accuracy curve (the upper error band the monitor checks): its own
    band when it has one, else the curve slowed down by e^u (u from its constants, 0.35 by
    default), the rounds interval read as a curve."""
    chosen, ctx = result.chosen, result.context
    if isinstance(estimator, AccuracyBand):
        return [estimator.accuracy_band_at(ctx, chosen.plan, chosen.stats, t)[0]
                for t in range(1, len(curve) + 1)]
    slow = math.exp(ctx.constants.get("u", 0.35))
    return [estimator.accuracy_at(ctx, chosen.plan, chosen.stats, t / slow)
            for t in range(1, len(curve) + 1)]
