"""Refining the ``ttt`` estimator's constants (:mod:`.time_to_target`) from the catalog's
executions: per dataset, the level of the fully connected reference (``fc.dataset:NAME``) is
shifted by the maximum a posteriori estimate of delta in log T_actual ~ N(mu + delta, sd^2),
with runs that did not reach their target right-censored and a N(0, TTT_LEVEL_PRIOR_SD^2) prior
on delta. mu and sd are what the planner predicted for each executed plan (recorded with its
terms). The slopes stay the shipped ones: a few executions of one workload cannot identify
them. The shipped constants themselves are fitted on an evaluation grid
(:mod:`airplan_qo.evaluation.ttt_crossval`). :mod:`.calibration` drives the refit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..catalog.store import Catalog
from .observations import Evaluation, Fit, Observation, Refit

#: Prior sd of a dataset's level shift in the ttt refit (log rounds): the shipped fit is trusted
#: to within about a factor e^0.5 until the catalog's own runs say otherwise.
TTT_LEVEL_PRIOR_SD = 0.5


def observation_reader(catalog: Catalog) -> Callable[[Mapping[str, Any], Mapping[str, Any],
                                                       dict[str, Any]], Observation | str]:
    """Reads a ttt observation (the predicted mu and sd of log rounds) from a feedback row, its
    plan's recorded terms and the fields every observation has; returns why the row is unusable
    instead."""

    def read(row: Mapping[str, Any], terms: Mapping[str, Any], common: dict[str, Any]
             ) -> Observation | str:
        if terms.get("mu") is None or terms.get("sd") is None or not common["rounds_actual"]:
            return "no ttt prediction or actual rounds"
        if terms.get("log_t_fc_measured") is not None:
            # its prediction used a pilot's measured reference, not the dataset's level
            return ("planned with a pilot of the fully connected reference, not with the "
                    "dataset's level")
        return Observation(mu=terms["mu"], sd=terms["sd"], **common)

    return read


def refit(observations: Sequence[Observation], before: Mapping[str, float]) -> Refit:
    """The level shift of every dataset the observations cover (module docstring)."""
    from scipy import optimize, stats

    by_ds: dict[str, list[tuple[float, float, float, bool]]] = {}
    for o in observations:
        by_ds.setdefault(o.dataset, []).append(
            (float(o.mu), float(o.sd), math.log(float(o.rounds_actual)), bool(o.censored)))
    n = len(observations)
    before = dict(before)
    after = dict(before)
    values: dict[str, float] = {}
    preds_before, preds_after = [], []
    for ds, obs in sorted(by_ds.items()):
        mu, sd, y, cens = (np.array(v) for v in zip(*obs))
        cens = cens.astype(bool)

        def nlp(delta: float) -> float:
            z = (y - mu - delta) / sd
            return -(stats.norm.logpdf(z[~cens]).sum() + stats.norm.logsf(z[cens]).sum()) \
                + 0.5 * (delta / TTT_LEVEL_PRIOR_SD) ** 2

        delta = float(optimize.minimize_scalar(nlp, bounds=(-5.0, 5.0), method="bounded").x)
        key = f"fc.dataset:{ds}"
        levels = [v for k, v in before.items() if k.startswith("fc.dataset:")]
        base = before.get(key, float(np.mean(levels)) if levels else 0.0)
        after[key] = values[key] = base + delta
        before.setdefault(key, base)
        for m, yy, c in zip(mu, y, cens):
            if not c:
                preds_before.append((math.exp(m), math.exp(yy)))
                preds_after.append((math.exp(m + delta), math.exp(yy)))

    def mape(pairs):
        return (100.0 * float(np.mean([abs(p - a) / a for p, a in pairs]))) if pairs else None

    fit = Fit(estimator="ttt", constants=after, fitted=tuple(sorted(values)), n_obs=n,
              rounds_mape=mape(preds_after), curve_log_rmse=None, n_unpredicted=0,
              predictions=())
    return Refit(before=before, fit=fit, baseline=Evaluation((), mape(preds_before), None, 0),
                 source=f"fit: censored level shift per dataset on {n} executions")


__all__ = ["TTT_LEVEL_PRIOR_SD", "observation_reader", "refit"]
