"""A pilot of the fully connected reference, as a value: what it measured and what it cost.

Before a choice, the planner can train the fully connected, uncompressed plan (the reference
the ``ttt`` model predicts every plan's rounds relative to, and whose final accuracy is the
``fc`` of ``accuracy >= 0.95 * fc``) for a bounded number of rounds
(:func:`airplan_qo.runtime.pilot.run_reference_pilot`). A :class:`ReferencePilot` holds its
measured curve and its traffic; the estimator reads the reference's accuracy and rounds to the
target from the curve (:func:`airplan_qo.costmodels.time_to_target.reference_from_pilot`), and
every candidate's cost includes the pilot's traffic (:meth:`ReferencePilot.total`).
"""

from __future__ import annotations

from typing import Any

import attrs

from ..errors import ValidationError

#: What ``pilot`` may name: the fully connected reference.
PILOT_KINDS = ("fc",)
#: Pilot rounds when none are given: this share of the round budget (at least
#: :data:`MIN_PILOT_ROUNDS`, at most the budget).
DEFAULT_PILOT_SHARE = 0.5
MIN_PILOT_ROUNDS = 5
#: The resources a pilot's traffic is counted in (as a plan's costs are).
PILOT_RESOURCES = ("channel_uses", "energy_j", "airtime_s", "bits", "slots")


def check_pilot(kind: Any, rounds: Any = None) -> tuple[str, int | None]:
    """A valid pilot request: (kind, rounds or None for the default), else ValidationError."""
    text = str(kind).lower() if kind is not None else ""
    if text not in PILOT_KINDS:
        raise ValidationError(f"unknown pilot {kind!r}; the pilot trains the fully connected "
                              f"reference: use pilot = 'fc'")
    if rounds is None:
        return text, None
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < MIN_PILOT_ROUNDS:
        raise ValidationError(f"pilot_rounds must be an integer of at least {MIN_PILOT_ROUNDS} "
                              f"(a curve to read the reference from), got {rounds!r}")
    return text, int(rounds)


def pilot_rounds(requested: int | None, budget: int) -> int:
    """The rounds a pilot trains: ``requested`` (at most the budget), else
    :data:`DEFAULT_PILOT_SHARE` of the budget, at least :data:`MIN_PILOT_ROUNDS`."""
    budget = max(int(budget), 1)
    if requested is not None:
        return min(int(requested), budget)
    return min(budget, max(MIN_PILOT_ROUNDS, int(round(DEFAULT_PILOT_SHARE * budget))))


@attrs.frozen
class ReferencePilot:
    """A measured pilot of the fully connected reference.

    ``rounds``: the rounds it trained; ``budget``: the round budget of the workload it was run
    for; ``accuracy``: the fully connected plan's test accuracy (of the clients' average model,
    the ``fc`` metric) after each of ``rounds``; ``metric``: the SLA's accuracy metric after
    each round (the curve the target is judged on); ``n_classes`` sets the chance level the
    curve starts from. The traffic is the pilot's measured totals.
    """

    exec_id: int
    rounds: int
    budget: int
    accuracy: tuple[float | None, ...]
    metric: tuple[float | None, ...]
    n_classes: int
    channel_uses: float
    energy_j: float
    airtime_s: float
    bits: float
    slots: float
    planning_run_id: int | None = None
    #: the pilot's state after its last round (a checkpoint file) and the plan it trained: when
    #: the planner picks that plan, the run continues from it instead of training its first
    #: ``rounds`` again (:attr:`continuation`)
    checkpoint: str | None = None
    plan_label: str | None = None
    catalog_id: str | None = None

    def continues(self, plan: Any) -> bool:
        """Whether training ``plan`` can continue from this pilot's last round: it is the plan
        the pilot trained, and the pilot's state was kept."""
        return (self.checkpoint is not None and self.plan_label is not None
                and plan.label() == self.plan_label)

    @property
    def owner(self) -> dict[str, Any]:
        """The checkpoint's owner: the catalog and execution that wrote it."""
        return {"catalog_id": self.catalog_id, "exec_id": int(self.exec_id)}

    def total(self, what: str) -> float:
        """The pilot's traffic in one resource (0 for resources a pilot does not spend)."""
        return float(getattr(self, what)) if what in PILOT_RESOURCES else 0.0

    def traffic(self) -> dict[str, float]:
        return {k: float(getattr(self, k)) for k in PILOT_RESOURCES}


__all__ = ["DEFAULT_PILOT_SHARE", "MIN_PILOT_ROUNDS", "PILOT_KINDS", "PILOT_RESOURCES",
           "ReferencePilot", "check_pilot", "pilot_rounds"]
