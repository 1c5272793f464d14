"""Fitting the ``dsgd`` estimator's constants (:mod:`.dsgd`) to executions.

f0..f3, tau0, tau1 (optionally beta_k) by least squares on the log of the observed test-error
curves, with a Gaussian prior on the log-constants centred on the current values, so a fit from
a few runs stays near them. Runs without a curve fall back to their rounds-to-target; censored
rounds (the budget ended first) are lower bounds. :mod:`.calibration` drives the fit.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy.optimize import least_squares, nnls

from ..catalog.store import Catalog
from ..errors import ValidationError
from .calibration import evaluate
from .interface import ESTIMATORS
from .observations import (MIN_ERROR, P_FLOOR, Fit, Observation, check_min_obs,
                           full_constants)

#: dsgd constants a fit may move (``u``, the interval half-width, is not fitted here).
DSGD_FITTABLE = ("f0", "f1", "f2", "f3", "tau0", "tau1", "beta_k")
_SOFT_MIN_POWER = 4.0     # smoothness of min(floor, e0) while optimising
_LOG_BOUND = 15.0         # log-constants stay within e^+-15 of the prior centre


def observation_reader(catalog: Catalog) -> Callable[[Mapping[str, Any], Mapping[str, Any],
                                                       dict[str, Any]], Observation | str]:
    """Reads a dsgd observation from a feedback row, its plan's recorded terms and the fields
    every observation has (``common``); returns why the row is unusable instead when it is.
    beta_k is the one the plan was costed with (its calibration rows, else the prior), so the
    link survival q can be recovered from the recorded p and p_eff."""
    beta_used = _beta_k_by_id(catalog)
    prior_beta = ESTIMATORS.get("dsgd").priors["beta_k"]

    def read(row: Mapping[str, Any], terms: Mapping[str, Any], common: dict[str, Any]
             ) -> Observation | str:
        p = terms["p"] if terms.get("p") is not None else row["topo_p"]
        p_eff = terms.get("p_eff")
        if (p is None and p_eff is None) or terms.get("e0") is None:
            return f"plan {row['plan_id']} has no dsgd terms (p or p_eff, e0)"
        beta = next((beta_used[i] for i in (row["calibration_ids"] or ())
                     if i in beta_used), prior_beta)
        q = _link_survival(p, p_eff, float(row["k_ratio"]), beta, row["g_th"])
        return Observation(p=p, p_eff=p_eff, link_survival=q,
                           zeta2=float(terms.get("zeta2") or 0.0),
                           sigma_c2=float(terms.get("sigma_c2") or 0.0),
                           e0=terms["e0"], **common)

    return read


def _link_survival(p: float | None, p_eff: float | None, k: float, beta: float,
                   g_th: float | None) -> float:
    """q with p_eff = min(1, p k^beta q), recovered from the recorded terms."""
    if p is not None and p_eff is not None and p > 0:
        if p_eff >= 1.0:
            return 1.0
        return float(min(1.0, max(p_eff / (p * k ** beta), 1e-12)))
    return math.exp(-g_th) if g_th is not None else 1.0


def _beta_k_by_id(catalog: Catalog) -> dict[int, float]:
    rows = catalog.query("SELECT calibration_id, value FROM airplan.calibration "
                         "WHERE estimator = 'dsgd' AND constant_name = 'beta_k'")
    return {int(r["calibration_id"]): float(r["value"]) for r in rows}


def floor_tau(c: Mapping[str, float], p_eff: np.ndarray, zeta2: np.ndarray,
               sigma_c2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    inv = 1.0 / p_eff - 1.0
    floor = (c["f0"] + c["f1"] * inv + c["f2"] * zeta2 * (1.0 / p_eff ** 2 - 1.0)
             + c["f3"] * sigma_c2 / p_eff)
    return floor, c["tau0"] + c["tau1"] * inv


def rounds_to_target(floor: float, tau: float, e0: float, eps: float) -> float | None:
    """Rounds to the target error exactly as the dsgd estimator predicts them."""
    if floor < eps and e0 > eps:
        return float(max(1, math.ceil(tau * math.log((e0 - floor) / (eps - floor)))))
    if e0 <= eps:
        return 1.0
    return None


def predict(obs: Observation, c: Mapping[str, float], rounds: np.ndarray
            ) -> tuple[float | None, np.ndarray]:
    """The rounds to the observation's target under constants ``c`` (None: never) and the
    predicted error after each of ``rounds``."""
    if obs.e0 is None:
        raise ValidationError(f"observation of execution {obs.exec_id} has no e0 term; the "
                              "dsgd estimator needs it")
    p_eff = obs.p_eff_at(c["beta_k"])
    floor, tau = floor_tau(c, np.array(p_eff), np.array(obs.zeta2), np.array(obs.sigma_c2))
    floor, tau = float(floor), float(tau)
    fl = min(floor, obs.e0)
    return (rounds_to_target(floor, tau, obs.e0, obs.target_error),
            fl + (obs.e0 - fl) * np.exp(-rounds / tau))


def _softplus(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """scale * log(1 + exp(x / scale)): a smooth max(x, 0), overflow-free via logaddexp."""
    return scale * np.logaddexp(0.0, x / scale)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)), the derivative of :func:`_softplus` in x, overflow-free."""
    return np.exp(-np.logaddexp(0.0, -x))


class _DSGDProblem:
    """Residuals of the dsgd fit as a function of the log of the fitted constants."""

    def __init__(self, observations: Sequence[Observation], base: dict[str, float],
                 names: tuple[str, ...], prior_weight: float, max_points: int,
                 rounds_weight: float):
        self.base, self.names = base, names
        self.theta0 = np.log([base[n] for n in names])
        self.prior_scale = math.sqrt(prior_weight)
        self.rounds_weight = rounds_weight
        obs = list(observations)
        self.p = np.array([o.p if o.p is not None else np.nan for o in obs])
        self.p_eff_fixed = np.array([o.p_eff_at(base["beta_k"]) for o in obs])
        self.k = np.array([o.k_ratio for o in obs])
        self.q = np.array([o.link_survival for o in obs])
        self.zeta2 = np.array([o.zeta2 for o in obs])
        self.sigma_c2 = np.array([o.sigma_c2 for o in obs])
        self.e0 = np.array([o.e0 for o in obs], dtype=float)
        ts, ys, ws, idx = [], [], [], []
        r_idx, r_eps, r_log_actual, r_censored = [], [], [], []
        for i, o in enumerate(obs):
            if o.has_curve:
                t, e = o.curve_points(max_points)
                ts.append(t)
                ys.append(np.log(e))
                ws.append(np.full(t.size, 1.0 / math.sqrt(t.size)))
                idx.append(np.full(t.size, i))
            elif o.rounds_actual > 0 and o.e0 > o.target_error:
                r_idx.append(i)
                r_eps.append(o.target_error)
                r_log_actual.append(math.log(o.rounds_actual))
                r_censored.append(o.censored)
        cat = (lambda parts, dt=float: np.concatenate(parts).astype(dt) if parts
               else np.empty(0, dtype=dt))
        self.t, self.y, self.w, self.idx = cat(ts), cat(ys), cat(ws), cat(idx, int)
        self.r_idx = np.array(r_idx, dtype=int)
        self.r_eps = np.array(r_eps, dtype=float)
        self.r_log_actual = np.array(r_log_actual, dtype=float)
        self.r_censored = np.array(r_censored, dtype=bool)
        self.n_curves = len(ts)
        self.n_rounds_only = len(r_idx)

    def starts(self) -> list[np.ndarray]:
        """Starting points: the prior centre, and a two-stage estimate (each curve's own floor
        and tau, then non-negative least squares of those on the model's regressors).

        The floor is a sum of terms, so in log-parameters a term that starts negligible has
        almost no gradient; the two-stage start puts every term near the scale the curves show.
        """
        starts = [self.theta0]
        if self.n_curves < 2:
            return starts
        floors, taus, rows = [], [], []
        for i in np.unique(self.idx):
            sel = self.idx == i
            fl, tau = _curve_floor_tau(self.t[sel].tobytes(), self.y[sel].tobytes(),
                                       float(self.e0[i]))
            floors.append(fl)
            taus.append(tau)
            rows.append(i)
        rows = np.array(rows)
        p_eff = self.p_eff_fixed[rows]
        inv = 1.0 / p_eff - 1.0
        x_floor = np.column_stack([np.ones_like(inv), inv,
                                   self.zeta2[rows] * (1.0 / p_eff ** 2 - 1.0),
                                   self.sigma_c2[rows] / p_eff])
        x_tau = np.column_stack([np.ones_like(inv), inv])
        floors, taus = np.array(floors), np.array(taus)
        coef_f = nnls(x_floor / floors[:, None], np.ones_like(floors))[0]
        coef_t = nnls(x_tau / taus[:, None], np.ones_like(taus))[0]
        est = dict(zip(("f0", "f1", "f2", "f3", "tau0", "tau1"),
                       np.concatenate([coef_f, coef_t]).tolist()))
        for zero_scale in (1e-2, 1.0):
            starts.append(np.log([est[n] if est.get(n, 0.0) > 0 else
                                  self.base[n] * zero_scale for n in self.names]))
        return starts

    def constants(self, theta: np.ndarray) -> dict[str, float]:
        c = dict(self.base)
        c.update(zip(self.names, np.exp(theta).tolist()))
        return c

    def _p_eff(self, c: dict[str, float]) -> np.ndarray:
        if "beta_k" not in self.names:
            return self.p_eff_fixed
        recomputed = np.clip(self.p * self.k ** c["beta_k"] * self.q, P_FLOOR, 1.0)
        return np.where(np.isnan(self.p), self.p_eff_fixed, recomputed)

    def data_residuals(self, theta: np.ndarray) -> np.ndarray:
        c = self.constants(theta)
        floor, tau = floor_tau(c, self._p_eff(c), self.zeta2, self.sigma_c2)
        parts = []
        if self.idx.size:
            f, tt, e0 = floor[self.idx], tau[self.idx], self.e0[self.idx]
            # smooth min(floor, e0): keeps a gradient while a floor sits above e0
            fs = f / (1.0 + (f / e0) ** _SOFT_MIN_POWER) ** (1.0 / _SOFT_MIN_POWER)
            model = fs + (e0 - fs) * np.exp(-self.t / tt)
            parts.append(self.w * (np.log(np.maximum(model, 1e-300)) - self.y))
        if self.r_idx.size:
            f, tt, e0 = floor[self.r_idx], tau[self.r_idx], self.e0[self.r_idx]
            scale = 1e-2 * self.r_eps
            # smooth ln((e0 - floor)/(eps - floor)): finite and growing once floor passes eps
            log_ratio = (np.log(_softplus(e0 - f, scale)) - np.log(_softplus(self.r_eps - f,
                                                                              scale)))
            log_t = np.log(tt * np.maximum(log_ratio, 1e-12))
            r = log_t - self.r_log_actual
            # censored: the actual is a lower bound; no residual once the model predicts more
            r = np.where(self.r_censored, np.minimum(r, 0.0), r)
            parts.append(self.rounds_weight * r)
        return np.concatenate(parts) if parts else np.empty(0)

    def residuals(self, theta: np.ndarray) -> np.ndarray:
        prior = self.prior_scale * (theta - self.theta0)
        return np.concatenate([self.data_residuals(theta), prior])

    def jacobian(self, theta: np.ndarray) -> np.ndarray:
        """d residuals / d theta in closed form. The floor and tau are linear in their
        constants, so d/d log c_j = c_j * (regressor j) * d residual / d (floor or tau); beta_k
        acts through p_eff = p k^beta_k q (where not clipped): d p_eff / d log beta_k =
        p_eff beta_k ln k, and the floor and tau fall with p_eff."""
        c = self.constants(theta)
        p_eff = self._p_eff(c)
        inv = 1.0 / p_eff - 1.0
        regressor = {"f0": np.ones_like(inv), "f1": inv,
                     "f2": self.zeta2 * (1.0 / p_eff ** 2 - 1.0), "f3": self.sigma_c2 / p_eff,
                     "tau0": np.ones_like(inv), "tau1": inv}
        if "beta_k" in self.names:
            raw = self.p * self.k ** c["beta_k"] * self.q
            moving = ~np.isnan(self.p) & (raw > P_FLOOR) & (raw < 1.0)
            dp = np.where(moving, p_eff * c["beta_k"] * np.log(self.k), 0.0)
            regressor["beta_k"] = (
                dp * -(c["f1"] / p_eff ** 2 + 2.0 * c["f2"] * self.zeta2 / p_eff ** 3
                       + c["f3"] * self.sigma_c2 / p_eff ** 2),          # d floor
                dp * -c["tau1"] / p_eff ** 2)                             # d tau
        floor, tau = floor_tau(c, p_eff, self.zeta2, self.sigma_c2)
        blocks = []
        if self.idx.size:
            f, tt, e0 = floor[self.idx], tau[self.idx], self.e0[self.idx]
            u = (f / e0) ** _SOFT_MIN_POWER
            fs = f / (1.0 + u) ** (1.0 / _SOFT_MIN_POWER)
            decay = np.exp(-self.t / tt)
            model = fs + (e0 - fs) * decay
            live = model > 1e-300
            scale = np.where(live, self.w / np.maximum(model, 1e-300), 0.0)
            d_floor = scale * (1.0 - decay) * (1.0 + u) ** (-1.0 / _SOFT_MIN_POWER - 1.0)
            d_tau = scale * (e0 - fs) * decay * self.t / tt ** 2
            blocks.append((self.idx, d_floor, d_tau))
        if self.r_idx.size:
            f, tt, e0 = floor[self.r_idx], tau[self.r_idx], self.e0[self.r_idx]
            s = 1e-2 * self.r_eps
            hi, lo = _softplus(e0 - f, s), _softplus(self.r_eps - f, s)
            log_ratio = np.log(hi) - np.log(lo)
            d_log_ratio = (-_sigmoid((e0 - f) / s) / hi + _sigmoid((self.r_eps - f) / s) / lo)
            ok = log_ratio > 1e-12
            r = np.log(tt * np.maximum(log_ratio, 1e-12)) - self.r_log_actual
            active = ~(self.r_censored & (r > 0.0))
            weight = self.rounds_weight * active
            d_floor = weight * np.where(ok, d_log_ratio / np.where(ok, log_ratio, 1.0), 0.0)
            d_tau = weight / tt
            blocks.append((self.r_idx, d_floor, d_tau))
        cols = []
        for name in self.names:
            if name == "beta_k":
                by_floor, by_tau = regressor[name]
                part = [d_floor * by_floor[rows] + d_tau * by_tau[rows]
                        for rows, d_floor, d_tau in blocks]
            else:
                reg = regressor[name] * c[name]
                part = [(d_tau if name.startswith("tau") else d_floor) * reg[rows]
                        for rows, d_floor, d_tau in blocks]
            cols.append(np.concatenate(part) if part else np.empty(0))
        data = np.column_stack(cols) if cols else np.empty((0, 0))
        return np.vstack([data, self.prior_scale * np.eye(len(self.names))])


@functools.lru_cache(maxsize=1 << 16)
def _curve_floor_tau(t_bytes: bytes, y_bytes: bytes, e0: float) -> tuple[float, float]:
    """One curve's own (floor, tau): log e(t) = log(floor + (e0 - floor) exp(-t / tau)) fitted
    by least squares. Cached on the curve's values: cross-validation fits the same curves once
    per fold, and the answer depends on nothing else."""
    t, y = np.frombuffer(t_bytes), np.frombuffer(y_bytes)
    guess = np.log([max(min(float(np.exp(y.min())), 0.9 * e0), MIN_ERROR),
                    max(float(t.max()) / 5.0, 1.0)])

    def resid(x: np.ndarray) -> np.ndarray:
        fl = min(math.exp(x[0]), e0)
        return np.log(fl + (e0 - fl) * np.exp(-t / math.exp(x[1]))) - y

    res = least_squares(resid, guess, method="lm", xtol=1e-8, ftol=1e-8)
    return min(math.exp(res.x[0]), e0), math.exp(res.x[1])


def fit_dsgd(observations: Sequence[Observation], priors: Mapping[str, float] | None = None, *,
             prior_weight: float = 1e-3, fixed: Iterable[str] = ("beta_k",), min_obs: int = 3,
             max_points: int = 50, rounds_weight: float = 1.0) -> Fit:
    """Fit the dsgd constants to observed error curves by least squares in log space.

    Residuals: log e_model(t) - log e_obs(t) at up to ``max_points`` rounds per curve, each curve
    weighted to count as one run; runs without a curve contribute log T_model - log T_actual
    (censored: one-sided, zero when the model already predicts at least the bound). The
    constants are optimised as logarithms (so they stay positive) with the Gaussian prior
    ``prior_weight * sum (log c - log c_prior)^2``, i.e. prior_weight = (typical log-error of one
    run / prior log-sd)^2. ``priors`` are the current constants (estimator priors fill gaps).
    """
    check_min_obs(observations, min_obs, "the dsgd estimator")
    if not prior_weight > 0:
        raise ValidationError(f"prior_weight must be > 0, got {prior_weight}")
    if max_points < 2:
        raise ValidationError(f"max_points must be >= 2, got {max_points}")
    fixed = tuple(fixed)
    for name in fixed:
        if name not in DSGD_FITTABLE:
            raise ValidationError(f"cannot fix '{name}': the fittable dsgd constants are "
                                  f"{', '.join(DSGD_FITTABLE)}")
    base = full_constants("dsgd", priors)
    for name in DSGD_FITTABLE:
        if not base[name] > 0:
            raise ValidationError(f"dsgd constant {name} must be > 0 to be fitted in log space, "
                                  f"got {base[name]}")
    for o in observations:
        if o.e0 is None:
            raise ValidationError(f"observation of execution {o.exec_id} has no e0 term; the "
                                  "dsgd fit needs the terms of a dsgd-planned execution")
    names = tuple(n for n in DSGD_FITTABLE if n not in fixed)
    notes: list[str] = []
    if "beta_k" in fixed:
        notes.append(f"beta_k kept fixed at {base['beta_k']:g}")
    problem = _DSGDProblem(observations, base, names, prior_weight, max_points, rounds_weight)
    if problem.n_curves + problem.n_rounds_only == 0:
        raise ValidationError("no observation has an error curve or a usable rounds-to-target "
                              "(initial error above the target); nothing to fit")
    if problem.n_rounds_only:
        notes.append(f"{problem.n_rounds_only} observation(s) without a curve fitted on rounds "
                     "to target only")
    if not names:
        result_theta, success, message, jac = problem.theta0, True, "nothing to fit", None
    else:
        lo, hi = problem.theta0 - _LOG_BOUND, problem.theta0 + _LOG_BOUND
        best = None
        for start in problem.starts():
            res = least_squares(problem.residuals, np.clip(start, lo + 1e-9, hi - 1e-9),
                                jac=problem.jacobian,
                                bounds=(lo, hi), x_scale=1.0, method="trf", xtol=1e-10,
                                ftol=1e-10, max_nfev=2000)
            if best is None or res.cost < best.cost:
                best = res
        result_theta, success, message, jac = (best.x, bool(best.success), str(best.message),
                                               best.jac)
    constants = problem.constants(result_theta)
    share: dict[str, float] = {}
    if jac is not None:
        jd = jac[: jac.shape[0] - len(names)]
        h = jd.T @ jd + prior_weight * np.eye(len(names))
        cov = np.linalg.pinv(h)
        share = {n: float(min(1.0, max(0.0, prior_weight * cov[i, i])))
                 for i, n in enumerate(names)}
        weak = [n for n, s in share.items() if s > 0.5]
        if weak:
            notes.append("held mostly by the prior (weakly identified by these observations): "
                         + ", ".join(weak))
    if "beta_k" in names and len({o.k_ratio for o in observations}) < 2:
        notes.append("beta_k cannot be identified: every observation has the same k_ratio")
    ev = evaluate(observations, constants, "dsgd", max_points=max_points)
    return Fit("dsgd", constants, names, len(observations), ev.rounds_mape, ev.curve_log_rmse,
               ev.n_unpredicted, ev.predictions, share, tuple(notes), success, message)


__all__ = ["DSGD_FITTABLE", "fit_dsgd", "observation_reader", "predict"]
