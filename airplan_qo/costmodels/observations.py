"""What executions tell the cost estimators, and what a fit makes of it, as values.

An :class:`Observation` is one finished execution as one estimator sees it (the plan's recorded
terms, the SLA target, the observed error curve and rounds); a :class:`Prediction` is an
estimator's rounds for it beside what happened; an :class:`Evaluation` sums the errors of one
set of constants on a set of observations; a :class:`Fit` is what fitting an estimator's
constants gave, and a :class:`Refit` what a calibration records (:mod:`.calibration`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from ..errors import ValidationError
from .interface import ESTIMATORS

MIN_ERROR = 1e-4          # observed errors are clipped here before taking logs
P_FLOOR = 1e-12           # the dsgd estimator's lower clip of p_eff


def _array(values: Any) -> np.ndarray:
    arr = np.array([] if values is None else values, dtype=float).reshape(-1)
    arr.setflags(write=False)
    return arr


def _opt_float(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None



@attrs.frozen
class Observation:
    """What one finished execution tells one estimator: the plan's terms and what happened.

    ``rounds``/``errors`` are the observed test-error curve (error = 1 - test accuracy), possibly
    empty; ``rounds_actual`` is the rounds until the target error was first reached, or the rounds
    run when ``censored`` (the budget ended first: a lower bound). ``p``, ``k_ratio`` and
    ``link_survival`` let a fit recompute p_eff = p k^beta_k q when it moves beta_k.
    """

    estimator: str
    family: str
    target_error: float
    rounds_actual: float = attrs.field(converter=float)
    censored: bool = attrs.field(default=False, converter=bool)
    rounds: np.ndarray = attrs.field(factory=lambda: _array(()), converter=_array, eq=False)
    errors: np.ndarray = attrs.field(factory=lambda: _array(()), converter=_array, eq=False)
    p: float | None = attrs.field(default=None, converter=_opt_float)
    p_eff: float | None = attrs.field(default=None, converter=_opt_float)
    link_survival: float = 1.0
    k_ratio: float = 1.0
    zeta2: float = 0.0
    sigma_c2: float = 0.0
    e0: float | None = attrs.field(default=None, converter=_opt_float)
    lambda2: float | None = attrs.field(default=None, converter=_opt_float)
    #: ttt: the predicted mean and sd of log rounds-to-target the plan was costed with
    mu: float | None = attrs.field(default=None, converter=_opt_float)
    sd: float | None = attrs.field(default=None, converter=_opt_float)
    snr_db: float | None = attrs.field(default=None, converter=_opt_float)
    g_th: float | None = attrs.field(default=None, converter=_opt_float)
    link_drop_rate: float | None = attrs.field(default=None, converter=_opt_float)
    dataset: str = ""
    exec_id: int | None = None
    plan_id: int | None = None
    #: Clients (nodes of the plan's graph), when known.
    clients: int | None = None

    def __attrs_post_init__(self) -> None:
        who = f"observation of execution {self.exec_id}" if self.exec_id is not None \
            else "observation"
        if not 0.0 < self.target_error < 1.0:
            raise ValidationError(f"{who}: target error must be in (0, 1), got "
                                  f"{self.target_error!r}")
        if not (math.isfinite(self.rounds_actual) and self.rounds_actual >= 0):
            raise ValidationError(f"{who}: actual rounds must be a finite number >= 0, got "
                                  f"{self.rounds_actual!r}")
        if self.rounds.shape != self.errors.shape:
            raise ValidationError(f"{who}: the curve has {self.rounds.size} rounds but "
                                  f"{self.errors.size} errors")
        if not 0.0 < self.link_survival <= 1.0:
            raise ValidationError(f"{who}: link survival must be in (0, 1], got "
                                  f"{self.link_survival!r}")
        if not 0.0 < self.k_ratio <= 1.0:
            raise ValidationError(f"{who}: k_ratio must be in (0, 1], got {self.k_ratio!r}")
        for name in ("p", "p_eff"):
            v = getattr(self, name)
            if v is not None and not 0.0 < v <= 1.0:
                raise ValidationError(f"{who}: {name} must be in (0, 1], got {v!r}")

    @property
    def has_curve(self) -> bool:
        """Whether at least two finite curve points were observed."""
        return int(np.isfinite(self.errors).sum()) >= 2

    def p_eff_at(self, beta_k: float) -> float:
        """p_eff = min(1, p k^beta_k q) as the dsgd estimator computes it; the recorded p_eff
        when p is unknown (then beta_k has no effect)."""
        if self.p is None:
            if self.p_eff is None:
                raise ValidationError(f"observation of execution {self.exec_id} has neither p "
                                      "nor p_eff; the dsgd fit needs one of them")
            return self.p_eff
        return max(min(1.0, self.p * self.k_ratio ** beta_k * self.link_survival), P_FLOOR)

    def curve_points(self, max_points: int) -> tuple[np.ndarray, np.ndarray]:
        """At most ``max_points`` finite (round, error) points of the curve, errors clipped at
        :data:`MIN_ERROR`."""
        ok = np.isfinite(self.errors) & np.isfinite(self.rounds)
        t, e = self.rounds[ok], self.errors[ok]
        if t.size > max_points:
            # half the points evenly spaced (the plateau), half geometrically (the early decay)
            n_lin = max_points // 2
            lin = np.linspace(0, t.size - 1, n_lin)
            geo = np.geomspace(1, t.size, max_points - n_lin) - 1
            idx = np.unique(np.round(np.concatenate([lin, geo])).astype(int))
            t, e = t[idx], e[idx]
        return t, np.maximum(e, MIN_ERROR)


@attrs.frozen
class Prediction:
    """An estimator's rounds-to-target for one observation beside what happened.

    ``predicted_rounds`` is None when the model says the target is never reached; ``ape`` is
    the absolute percentage error for uncensored runs with a finite prediction (else None).
    """

    exec_id: int | None
    family: str
    dataset: str
    actual_rounds: float
    censored: bool
    predicted_rounds: float | None
    ape: float | None
    curve_log_rmse: float | None


@attrs.frozen
class Evaluation:
    """Errors of one set of constants on a set of observations (in-sample when they were fitted
    on the same observations)."""

    predictions: tuple[Prediction, ...]
    rounds_mape: float | None
    curve_log_rmse: float | None
    n_unpredicted: int


@attrs.frozen
class Fit:
    """The result of fitting an estimator's constants.

    ``constants`` is the full set (fitted and fixed); ``fitted`` the names that were moved.
    ``rounds_mape`` (percent) is over uncensored observations with a finite prediction and
    ``n_unpredicted`` counts uncensored runs the fitted model says never reach their target.
    ``prior_share`` (dsgd) is, per fitted constant, the fraction of its prior variance left
    after the data: near 1 means the observations do not identify it and the prior holds it.
    """

    estimator: str
    constants: dict[str, float]
    fitted: tuple[str, ...]
    n_obs: int
    rounds_mape: float | None
    curve_log_rmse: float | None
    n_unpredicted: int
    predictions: tuple[Prediction, ...]
    prior_share: dict[str, float] = attrs.field(factory=dict)
    notes: tuple[str, ...] = ()
    success: bool = True
    message: str = ""


@attrs.frozen
class Refit:
    """What a calibration records and reports: the constants it started from (with any it adds,
    at their starting values), the :class:`Fit`, the errors of the starting constants on the
    same observations (``baseline``) and the ``source`` text of the new calibration rows."""

    before: dict[str, float]
    fit: Fit
    baseline: Evaluation
    source: str


def observed_range(observations: Sequence[Observation]) -> dict[str, Any]:
    """What a set of observations spans: ``k`` and ``clients`` as [lo, hi] (``clients`` left
    out when no observation knows it), ``families`` and ``datasets`` as sorted lists. Recorded
    with a fit in its calibration rows' ``source`` (after :data:`RANGE_MARK`), where the
    planner reads it back to flag a plan outside it."""
    if not observations:
        raise ValidationError("observed_range needs observations; got none")
    ks = [float(o.k_ratio) for o in observations]
    out: dict[str, Any] = {"k": [min(ks), max(ks)]}
    clients = [int(o.clients) for o in observations if o.clients is not None]
    if clients:
        out["clients"] = [min(clients), max(clients)]
    out["families"] = sorted({o.family for o in observations})
    datasets = sorted({o.dataset for o in observations if o.dataset})
    if datasets:
        out["datasets"] = datasets
    return out


def check_min_obs(observations: Sequence[Observation], min_obs: int, what: str) -> None:
    if min_obs < 1:
        raise ValidationError(f"min_obs must be >= 1, got {min_obs}")
    if len(observations) < min_obs:
        raise ValidationError(
            f"calibrating {what} needs at least {min_obs} observations (finished executions "
            f"with rounds feedback); only {len(observations)} available")


def full_constants(estimator: str, priors: Mapping[str, float] | None) -> dict[str, float]:
    base = dict(ESTIMATORS.get(estimator).priors)
    for name, value in (priors or {}).items():
        if name not in base:
            raise ValidationError(f"'{name}' is not a constant of the {estimator} estimator; "
                                  f"its constants are {', '.join(base)}")
        base[name] = float(value)
    return base


__all__ = ["Observation", "Prediction", "Evaluation", "Fit", "Refit", "observed_range",
           "check_min_obs", "full_constants", "MIN_ERROR", "P_FLOOR"]
