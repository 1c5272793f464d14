"""Calibration of cost estimators from executed plans: estimate -> actual -> refit.

Every finished execution of a chosen plan leaves estimated-versus-actual rows in ``feedback``
(one per metric). This module drives a calibration, the same way for every estimator: it loads
the estimator's :class:`~.observations.Observation` values (:mod:`.observation_loader`), refits
its constants with the estimator's own procedure (its :class:`~.interface.Calibratable` hooks:
:mod:`.dsgd_fit`, :mod:`.paper_fit`, :mod:`.ttt_fit`) and records the new values as new
*versions* in ``calibration``: older rows are kept and marked ``superseded_by``, never
overwritten. The next planning run picks the new constants up through
:func:`~airplan_qo.costmodels.resolve_constants`. What it did is a
:class:`~.calibration_report.CalibrationReport`.

For the estimators fitted on their own predictions (:class:`~.interface.CurveFitted`: ``dsgd``
and ``paper``) it also evaluates constants on observations (:func:`evaluate`) and dispatches the
fit (:func:`fit`), which cross-validation (:mod:`.cross_validation`) uses.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..catalog.store import Catalog
from ..errors import ValidationError
from .calibration_report import CalibrationReport, CalibrationSummary
from .interface import (DEFAULT_ESTIMATOR, ESTIMATORS, RANGE_MARK, CurveFitted, calibratable,
                        resolve_constants)
from .observation_loader import SCOPES, check_scope, load
from .observations import (MIN_ERROR, Evaluation, Fit, Observation, Prediction, Refit,
                           observed_range)

#: Estimators with a calibration procedure, the planner's default first.
CALIBRATABLE = ("ttt", "dsgd", "paper")

_SCOPE_WORDS = {"global": "globally", "dataset": "per dataset",
                "dataset_family": "per dataset and family"}


def _curve_fitted(estimator: str) -> CurveFitted:
    return calibratable(ESTIMATORS.get(estimator), CurveFitted)


def evaluate(observations: Sequence[Observation], constants: Mapping[str, float],
             estimator: str = "dsgd", *, max_points: int = 50) -> Evaluation:
    """Predicted rounds and curve errors of ``constants`` on ``observations``."""
    est = _curve_fitted(estimator)
    c = {**est.priors, **constants}
    preds, apes, sq, never = [], [], [], 0
    for obs in observations:
        t, e = obs.curve_points(max_points) if obs.has_curve else (np.empty(0), np.empty(0))
        rounds, model = est.predict_observation(obs, c, t)
        rmse = None
        if t.size:
            rmse = float(np.sqrt(np.mean((np.log(np.maximum(model, MIN_ERROR))
                                          - np.log(e)) ** 2)))
        ape = None
        if not obs.censored and obs.rounds_actual > 0:
            if rounds is None:
                never += 1
            else:
                ape = 100.0 * abs(rounds - obs.rounds_actual) / obs.rounds_actual
                apes.append(ape)
        if rmse is not None:
            sq.append(rmse ** 2)
        preds.append(Prediction(obs.exec_id, obs.family, obs.dataset, obs.rounds_actual,
                                obs.censored, rounds, ape, rmse))
    return Evaluation(tuple(preds), float(np.mean(apes)) if apes else None,
                      float(np.sqrt(np.mean(sq))) if sq else None, never)


def fit(observations: Sequence[Observation], estimator: str = "dsgd",
        priors: Mapping[str, float] | None = None, *, min_obs: int = 3, **options: Any) -> Fit:
    """The fit of a curve-fitted estimator's constants (:func:`.dsgd_fit.fit_dsgd`,
    :func:`.paper_fit.fit_paper`)."""
    return _curve_fitted(estimator).fit(observations, priors, min_obs=min_obs, **options)


def curve_refit(estimator: CurveFitted, method: str, observations: Sequence[Observation],
                before: Mapping[str, float], *, min_obs: int, **options: Any) -> Refit:
    """The refit of a curve-fitted estimator: its :func:`fit` from ``before``, the errors of
    ``before`` on the same observations, and a source naming ``method`` and the range of the
    observations (after :data:`~.interface.RANGE_MARK`)."""
    result = estimator.fit(observations, before, min_obs=min_obs, **options)
    baseline = evaluate(observations, before, estimator.name)
    source = (f"fit: {method} on {len(observations)} executions"
              f"{RANGE_MARK}{json.dumps(observed_range(observations), sort_keys=True)}")
    return Refit(before=dict(before), fit=result, baseline=baseline, source=source)


def current_constants(catalog: Catalog, estimator: str, scope: str = "global",
                      scope_key: str = "") -> tuple[dict[str, float], tuple[int, ...]]:
    """The constants a planner would use for this scope (priors, then global, dataset and, for
    a dataset_family scope, that scope's own current rows) and the row ids used."""
    est = ESTIMATORS.get(estimator)
    dataset, family = check_scope(scope, scope_key)
    rows = catalog.current_calibration(est.name)
    values, ids = resolve_constants(est, rows, dataset or "")
    if family is not None:
        used = dict.fromkeys(ids)
        for row in rows:
            if (row["scope"] == "dataset_family" and row["scope_key"] == scope_key
                    and row["constant_name"] in values):
                values[row["constant_name"]] = float(row["value"])
                used[int(row["calibration_id"])] = None
        ids = tuple(sorted(used))
    return values, ids


def _feedback_counts(catalog: Catalog) -> dict[str, int]:
    """Executions with rounds feedback per estimator (what each could be calibrated from)."""
    rows = catalog.query(
        "SELECT f.estimator, count(DISTINCT f.exec_id) AS n FROM airplan.feedback AS f "
        "LEFT JOIN airplan.executions AS e ON e.exec_id = f.exec_id "
        "WHERE f.metric = 'rounds' AND (e.status IS NULL OR e.status NOT IN ('failed', "
        "'running')) GROUP BY f.estimator")
    return {str(r["estimator"]): int(r["n"]) for r in rows}


def calibrate_observed(catalog: Catalog, *, scope: str = "global", scope_key: str = "",
                       min_obs: int = 3) -> CalibrationSummary:
    """Calibrate every estimator that has observations (the planner's default, ``ttt``, first):
    an execution leaves feedback only for the estimator its plan was costed with, so this is
    what ``airplan calibrate`` does without ``--estimator``. Fails only when none could be."""
    check_scope(scope, scope_key)
    counts = _feedback_counts(catalog)
    reports: list[CalibrationReport] = []
    skipped: list[tuple[str, str]] = []
    for name in CALIBRATABLE:
        if not counts.get(name):
            continue
        try:
            reports.append(calibrate(catalog, name, scope=scope, scope_key=scope_key,
                                     min_obs=min_obs))
        except ValidationError as exc:
            skipped.append((name, str(exc)))
    if reports:
        return CalibrationSummary(tuple(reports), tuple(skipped))
    if not counts:
        raise ValidationError(
            "nothing to calibrate: no finished execution has left feedback yet; run TRAIN "
            f"statements first (each estimator needs at least {min_obs} executions planned "
            "with it)")
    found = ", ".join(f"{n} from executions planned with {e}" for e, n in sorted(counts.items()))
    raise ValidationError(
        f"no estimator has enough observations to calibrate (at least {min_obs} needed"
        + (f" for scope {scope}" + (f" '{scope_key}'" if scope_key else "") if scope != "global"
           else "") + f"): {found}; run more TRAIN statements or lower --min-obs")


def calibrate(catalog: Catalog, estimator: str = DEFAULT_ESTIMATOR, *, scope: str = "global",
              scope_key: str = "", min_obs: int = 3, **options: Any) -> CalibrationReport:
    """Refit an estimator's constants from the catalog's feedback and record them as new
    calibration versions for the scope (the previous rows stay, marked superseded)."""
    est = calibratable(ESTIMATORS.get(estimator))
    name = est.name
    if scope in SCOPES and scope not in est.calibration_scopes:
        allowed = " or ".join(_SCOPE_WORDS[s] for s in reversed(est.calibration_scopes))
        raise ValidationError(f"the {name} estimator is calibrated {allowed}, not "
                              f"{_SCOPE_WORDS[scope]}")
    observations, skipped = load(catalog, name, scope, scope_key)
    where = scope + (f" '{scope_key}'" if scope_key else "")
    if len(observations) < min_obs:
        raise ValidationError(
            f"calibrating the {name} estimator for scope {where} needs at least {min_obs} "
            f"observations ({est.observation_kind}); only {len(observations)} available"
            + (f" ({len(skipped)} unusable)" if skipped else ""))
    before, _ = current_constants(catalog, name, scope, scope_key)
    refit = est.refit(observations, before, min_obs=min_obs, **options)
    result, old = refit.fit, refit.baseline
    values = {n: result.constants[n] for n in result.fitted}
    ids = catalog.supersede_calibration(name, scope, scope_key, values, n_obs=result.n_obs,
                                        source=refit.source, fit_error=result.rounds_mape)
    return CalibrationReport(
        estimator=name, scope=scope, scope_key=scope_key, n_obs=result.n_obs,
        before=refit.before, after=result.constants, fitted=result.fitted,
        mape_before=old.rounds_mape, mape_after=result.rounds_mape,
        curve_log_rmse_before=old.curve_log_rmse, curve_log_rmse_after=result.curve_log_rmse,
        unpredicted_before=old.n_unpredicted, unpredicted_after=result.n_unpredicted,
        calibration_ids=ids, fit=result, skipped=tuple(skipped))


__all__ = ["CALIBRATABLE", "calibrate", "calibrate_observed", "current_constants",
           "curve_refit", "evaluate", "fit"]
