"""The cost-model interface: what estimators know about a workload (:class:`EstimationContext`),
the :class:`CostEstimator` protocol, the registry, and the calibration constants an estimate uses
(priors overridden by the catalog's calibration rows, and the range those rows were fitted on).
The built-in estimators are registered by the package (:mod:`airplan_qo.costmodels`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from ..errors import ValidationError
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
    #: The workload's learning rate times its local steps per round (None: not known).
    step: float | None = None
    #: The workload's local steps per round (None: not known).
    local_steps: int | None = None


class CostEstimator(Protocol):
    """The estimator interface: named constants with priors, an accuracy curve and an estimate.

    Optional parts, each a protocol of its own below (an estimator without one gets the default
    its docstring names): :class:`AccuracyBand` (its own accuracy band), :class:`OpenConstants`
    (constants a calibration may add beyond the priors), :class:`Calibratable` (``airplan
    calibrate`` refits its constants) and :class:`CurveFitted` (a calibratable estimator whose
    constants are fitted to the observed error curves, with cross-validation).
    """

    name: str
    description: str
    priors: dict[str, float]

    def accuracy_at(self, ctx: EstimationContext, plan: PhysicalPlan, stats: TopologyStats,
                    rounds: float) -> float: ...

    def estimate(self, ctx: EstimationContext, plan: PhysicalPlan, stats: TopologyStats,
                 target_accuracy: float) -> Estimate: ...


@runtime_checkable
class AccuracyBand(Protocol):
    """An estimator with its own accuracy band: ``accuracy_band_at`` gives (lower, upper)
    accuracy after ``rounds`` rounds. Without it, the lower curve a run's monitor checks is the
    curve slowed down by e^u (``u`` from the constants, 0.35 by default;
    :mod:`airplan_qo.runtime.feedback`)."""

    def accuracy_band_at(self, ctx: EstimationContext, plan: PhysicalPlan,
                         stats: TopologyStats, rounds: float) -> tuple[float, float]: ...


@runtime_checkable
class OpenConstants(Protocol):
    """An estimator whose calibration may add constants beyond its priors: those whose name
    starts with one of ``open_prefixes`` (``ttt``: the level of a dataset not in its grid).
    Without it, only the priors' names are constants (:func:`open_prefixes`)."""

    open_prefixes: tuple[str, ...]


@runtime_checkable
class Calibratable(Protocol):
    """An estimator whose constants ``airplan calibrate`` refits from the catalog's executions
    (:mod:`.calibration` drives it; :mod:`.observation_loader` loads the observations).

    * ``calibration_scopes``: the scopes it is calibrated for (of ``global``, ``dataset``,
      ``dataset_family``);
    * ``observation_kind``: what one observation is, said when there are too few;
    * ``observation_reader(catalog)``: a function of (feedback row, the plan's recorded terms,
      the fields every observation has) returning the estimator's
      :class:`~.observations.Observation`, or why the row is unusable;
    * ``refit(observations, before, *, min_obs, **options)``: the
      :class:`~.observations.Refit` of its constants, starting from ``before``.
    """

    calibration_scopes: tuple[str, ...]
    observation_kind: str

    def observation_reader(self, catalog: Any) -> Callable[..., Any]: ...

    def refit(self, observations: Sequence[Any], before: Mapping[str, float], *,
              min_obs: int, **options: Any) -> Any: ...


@runtime_checkable
class CurveFitted(Calibratable, Protocol):
    """A calibratable estimator fitted to observations on its own predictions (what
    :func:`.calibration.evaluate` and :func:`.cross_validation.leave_one_group_out` use):

    * ``fit(observations, priors=None, *, min_obs, **options)``: the
      :class:`~.observations.Fit` of its constants;
    * ``predict_observation(observation, constants, rounds)``: the rounds to the observation's
      target under ``constants`` (None: never) and the predicted error after each of
      ``rounds`` (an array).
    """

    def fit(self, observations: Sequence[Any], priors: Mapping[str, float] | None = None, *,
            min_obs: int = 3, **options: Any) -> Any: ...

    def predict_observation(self, observation: Any, constants: Mapping[str, float],
                            rounds: Any) -> tuple[float | None, Any]: ...


def open_prefixes(estimator: CostEstimator) -> tuple[str, ...]:
    """The name prefixes of constants a calibration may add (:class:`OpenConstants`; none)."""
    return tuple(estimator.open_prefixes) if isinstance(estimator, OpenConstants) else ()


def calibratable(estimator: CostEstimator, kind: type = Calibratable) -> Any:
    """``estimator`` when ``airplan calibrate`` can refit it (as a ``kind``: Calibratable, or
    CurveFitted for the fits on its own predictions), else a ValidationError naming the ones it
    can."""
    if not isinstance(estimator, kind):
        names = ", ".join(sorted(n for n in ESTIMATORS.names()
                                 if isinstance(ESTIMATORS.get(n), kind)))
        raise ValidationError(f"no calibration procedure for estimator '{estimator.name}'; "
                              f"calibratable: {names}")
    return estimator


@runtime_checkable
class Refusing(Protocol):
    """An estimator that cannot cost some plans (transports or algorithms its model has no
    terms for): ``refusal(plan)`` says why, or None. Without it, every plan is costed."""

    def refusal(self, plan: PhysicalPlan) -> str | None: ...


def refusal(estimator: CostEstimator, plan: PhysicalPlan) -> str | None:
    """Why ``estimator`` cannot cost ``plan`` (:class:`Refusing`), or None."""
    return estimator.refusal(plan) if isinstance(estimator, Refusing) else None


@runtime_checkable
class BatchEstimator(Protocol):
    """An estimator that costs many plans of one workload at once: ``estimate_many(ctx,
    items, target_accuracy)`` returns the :meth:`CostEstimator.estimate` of each (plan, stats)
    of ``items`` (an iterable it consumes once, in order), identical to it, computing once what
    the plans share. Without
    it, the planner calls ``estimate`` for each (:func:`estimate_many`)."""

    def estimate_many(self, ctx: EstimationContext,
                      items: Iterable[tuple[PhysicalPlan, TopologyStats]],
                      target_accuracy: float) -> list[Estimate]: ...


def estimate_many(estimator: CostEstimator, ctx: EstimationContext,
                  items: Iterable[tuple[PhysicalPlan, TopologyStats]],
                  target_accuracy: float) -> list[Estimate]:
    """The estimate of each (plan, stats) of ``items``: :class:`BatchEstimator`'s batch when
    the estimator has one, else one :meth:`~CostEstimator.estimate` call per plan."""
    if isinstance(estimator, BatchEstimator):
        return list(estimator.estimate_many(ctx, items, target_accuracy))
    return [estimator.estimate(ctx, plan, stats, target_accuracy) for plan, stats in items]


def plans_mixing_tails(estimator: CostEstimator) -> bool:
    """Whether ``estimator`` costs plans that end with mixing-only rounds
    (``plans_mixing_tails = True``; plans/finish.py): only ``ttt`` among the built-in ones."""
    return bool(getattr(estimator, "plans_mixing_tails", False))


def refuser(estimator: CostEstimator) -> Callable[[PhysicalPlan], str | None]:
    """:func:`refusal` bound to ``estimator`` (whether it is :class:`Refusing` is checked
    once: the planner asks for every plan it enumerates); a plan with a mixing-only tail is
    refused by an estimator that does not model one (:func:`plans_mixing_tails`)."""
    own = estimator.refusal if isinstance(estimator, Refusing) else _costs_every_plan
    if plans_mixing_tails(estimator):
        return own
    why = (f"estimator {estimator.name} does not model mixing-only rounds; COST MODEL ttt "
           f"does")

    def refuse(plan: PhysicalPlan) -> str | None:
        return why if plan.mix_rounds else own(plan)

    return refuse


def _costs_every_plan(plan: PhysicalPlan) -> None:
    return None


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
        prefixes = open_prefixes(estimator)
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
