"""Fitting the ``paper`` estimator's constants (:mod:`.paper`) to executions, by the paper's
procedure: kappa = rounds x lambda2 from an Erdos-Renyi run, and alpha_R, beta_R of
R(SNR) = 1 + alpha_R exp(-beta_R SNR_dB) from measured link drop rates. :mod:`.calibration`
drives the fit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from ..catalog.store import Catalog
from ..errors import ValidationError
from .calibration import evaluate
from .observations import Fit, Observation, check_min_obs, full_constants

ER_FAMILY = "erdos_renyi"


def observation_reader(catalog: Catalog) -> Callable[[Mapping[str, Any], Mapping[str, Any],
                                                       dict[str, Any]], Observation | str]:
    """Reads a paper observation (its plan's lambda2) from a feedback row, its plan's recorded
    terms and the fields every observation has; returns why the row is unusable instead."""

    def read(row: Mapping[str, Any], terms: Mapping[str, Any], common: dict[str, Any]
             ) -> Observation | str:
        lam2 = terms["lambda2"] if terms.get("lambda2") is not None else row["topo_lambda2"]
        if lam2 is None:
            return f"plan {row['plan_id']} has no lambda2"
        return Observation(lambda2=lam2, **common)

    return read


def reliability(c: Mapping[str, float], snr_db: float | None) -> float:
    return 1.0 + c["alpha_r"] * math.exp(-c["beta_r"] * (0.0 if snr_db is None else snr_db))


def predict(obs: Observation, c: Mapping[str, float], rounds: np.ndarray
            ) -> tuple[float | None, np.ndarray]:
    """The rounds to the observation's target under constants ``c`` and the predicted error
    after each of ``rounds``."""
    if obs.lambda2 is None or obs.lambda2 <= 0:
        raise ValidationError(f"observation of execution {obs.exec_id} has no lambda2 term; "
                              "the paper estimator needs it")
    t_g = c["kappa"] / obs.lambda2
    return (float(math.ceil(t_g * reliability(c, obs.snr_db))),
            1.0 - c["a_max"] * (1.0 - np.exp(-3.0 * rounds / t_g)))


def fit_paper(observations: Sequence[Observation], priors: Mapping[str, float] | None = None,
              *, min_obs: int = 1) -> Fit:
    """The paper's calibration: kappa = rounds x lambda2 on Erdos-Renyi, R(SNR) from drop rates.

    kappa is the median of rounds x lambda2 over uncensored Erdos-Renyi runs (the paper uses
    one). alpha_R, beta_R >= 0 by least squares of alpha_R exp(-beta_R SNR_dB) on the observed
    link drop rates (R = 1 + drop rate); with a single SNR only alpha_R is fitted; without drop
    rates both keep their current values. a_max and eps_target are not fitted.
    """
    check_min_obs(observations, min_obs, "the paper estimator")
    base = full_constants("paper", priors)
    notes: list[str] = []
    er = [o for o in observations if o.family == ER_FAMILY and not o.censored]
    if not er:
        censored = sum(1 for o in observations if o.family == ER_FAMILY)
        extra = (f" ({censored} Erdos-Renyi run(s) were censored: their rounds are only a lower "
                 "bound)") if censored else ""
        raise ValidationError("the paper's calibration needs at least one Erdos-Renyi "
                              f"('{ER_FAMILY}') run that reached its target{extra}; found none "
                              f"among {len(observations)} observations")
    products = []
    for o in er:
        if o.lambda2 is None or o.lambda2 <= 0:
            raise ValidationError(f"Erdos-Renyi observation of execution {o.exec_id} has no "
                                  "lambda2 term")
        products.append(o.rounds_actual * o.lambda2)
    constants = dict(base)
    constants["kappa"] = float(np.median(products))
    fitted = ["kappa"]
    if len(er) > 1:
        notes.append(f"kappa is the median over {len(er)} Erdos-Renyi runs")
    pairs = np.array([(o.snr_db, o.link_drop_rate) for o in observations
                      if o.snr_db is not None and o.link_drop_rate is not None], dtype=float)
    if pairs.size == 0:
        notes.append("no (SNR, link drop rate) pairs: alpha_r and beta_r keep their values")
    else:
        snr, drop = pairs[:, 0], np.clip(pairs[:, 1], 0.0, None)
        if np.unique(snr).size < 2:
            b = base["beta_r"]
            constants["alpha_r"] = float(np.mean(drop * np.exp(b * snr)))
            fitted.append("alpha_r")
            notes.append("a single SNR was observed: beta_r kept, alpha_r fitted")
        else:
            a, b = _fit_reliability(snr, drop, base["alpha_r"], base["beta_r"])
            constants["alpha_r"], constants["beta_r"] = a, b
            fitted += ["alpha_r", "beta_r"]
    ev = evaluate(observations, constants, "paper")
    return Fit("paper", constants, tuple(fitted), len(observations), ev.rounds_mape,
               ev.curve_log_rmse, ev.n_unpredicted, ev.predictions, {}, tuple(notes), True, "")


def _fit_reliability(snr: np.ndarray, drop: np.ndarray, a0: float, b0: float
                     ) -> tuple[float, float]:
    """Non-negative least squares of drop = a exp(-b snr), started from a log-linear fit."""
    pos = drop > 0
    if pos.sum() >= 2 and np.unique(snr[pos]).size >= 2:
        slope, intercept = np.polyfit(snr[pos], np.log(drop[pos]), 1)
        a0, b0 = math.exp(intercept), max(-slope, 0.0)
    start = np.array([max(a0, 1e-9), max(b0, 0.0)])

    def resid(x: np.ndarray) -> np.ndarray:
        return x[0] * np.exp(-x[1] * snr) - drop

    res = least_squares(resid, start, bounds=([0.0, 0.0], [np.inf, np.inf]), xtol=1e-12,
                        ftol=1e-12)
    return float(res.x[0]), float(res.x[1])


__all__ = ["ER_FAMILY", "fit_paper", "observation_reader", "predict"]
