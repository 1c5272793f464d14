"""Calibration of cost estimators from executed plans: estimate -> actual -> refit.

Every finished execution of a chosen plan leaves estimated-versus-actual rows in ``feedback``
(one per metric). This module turns them into :class:`Observation` values, refits the
estimator's constants and records the new values as new *versions* in ``calibration``: older
rows are kept and marked ``superseded_by``, never overwritten. The next planning run picks the
new constants up through :func:`~airplan_qo.costmodels.resolve_constants`.

* ``dsgd``: f0..f3, tau0, tau1 (optionally beta_k) by least squares on the log of the observed
  test-error curves, with a Gaussian prior on the log-constants centred on the current values,
  so a fit from a few runs stays near them. Runs without a curve fall back to their
  rounds-to-target; censored rounds (the budget ended first) are lower bounds.
* ``paper``: the paper's procedure: kappa = rounds x lambda2 from an Erdos-Renyi run, and
  alpha_R, beta_R of R(SNR) = 1 + alpha_R exp(-beta_R SNR_dB) from measured link drop rates.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np
from scipy.optimize import least_squares, nnls

from ..catalog.store import Catalog
from ..errors import ValidationError
from .interface import DEFAULT_ESTIMATOR, ESTIMATORS, RANGE_MARK, resolve_constants

#: dsgd constants a fit may move (``u``, the interval half-width, is not fitted here).
DSGD_FITTABLE = ("f0", "f1", "f2", "f3", "tau0", "tau1", "beta_k")
#: Feedback metrics written by the runtime for every finished execution.
FEEDBACK_METRICS = ("rounds", "accuracy", "channel_uses", "energy_j")
SCOPES = ("global", "dataset", "dataset_family")
ER_FAMILY = "erdos_renyi"
MIN_ERROR = 1e-4          # observed errors are clipped here before taking logs
_P_FLOOR = 1e-12          # the estimator's lower clip of p_eff
_SOFT_MIN_POWER = 4.0     # smoothness of min(floor, e0) while optimising
_LOG_BOUND = 15.0         # log-constants stay within e^+-15 of the prior centre


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
        return max(min(1.0, self.p * self.k_ratio ** beta_k * self.link_survival), _P_FLOOR)


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


# ---- model evaluation ---------------------------------------------------------------------

def _dsgd_floor_tau(c: Mapping[str, float], p_eff: np.ndarray, zeta2: np.ndarray,
                    sigma_c2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    inv = 1.0 / p_eff - 1.0
    floor = (c["f0"] + c["f1"] * inv + c["f2"] * zeta2 * (1.0 / p_eff ** 2 - 1.0)
             + c["f3"] * sigma_c2 / p_eff)
    return floor, c["tau0"] + c["tau1"] * inv


def _dsgd_rounds(floor: float, tau: float, e0: float, eps: float) -> float | None:
    """Rounds to the target error exactly as the dsgd estimator predicts them."""
    if floor < eps and e0 > eps:
        return float(max(1, math.ceil(tau * math.log((e0 - floor) / (eps - floor)))))
    if e0 <= eps:
        return 1.0
    return None


def _subsample(obs: Observation, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    ok = np.isfinite(obs.errors) & np.isfinite(obs.rounds)
    t, e = obs.rounds[ok], obs.errors[ok]
    if t.size > max_points:
        # half the points evenly spaced (the plateau), half geometrically (the early decay)
        n_lin = max_points // 2
        lin = np.linspace(0, t.size - 1, n_lin)
        geo = np.geomspace(1, t.size, max_points - n_lin) - 1
        idx = np.unique(np.round(np.concatenate([lin, geo])).astype(int))
        t, e = t[idx], e[idx]
    return t, np.maximum(e, MIN_ERROR)


def _paper_reliability(c: Mapping[str, float], snr_db: float | None) -> float:
    return 1.0 + c["alpha_r"] * math.exp(-c["beta_r"] * (0.0 if snr_db is None else snr_db))


def _predict(obs: Observation, c: Mapping[str, float], estimator: str,
             max_points: int) -> tuple[float | None, float | None]:
    """(predicted rounds, curve log-RMSE) of one observation under constants ``c``."""
    t, e = _subsample(obs, max_points) if obs.has_curve else (np.empty(0), np.empty(0))
    if estimator == "dsgd":
        if obs.e0 is None:
            raise ValidationError(f"observation of execution {obs.exec_id} has no e0 term; the "
                                  "dsgd estimator needs it")
        p_eff = obs.p_eff_at(c["beta_k"])
        floor, tau = _dsgd_floor_tau(c, np.array(p_eff), np.array(obs.zeta2),
                                     np.array(obs.sigma_c2))
        floor, tau = float(floor), float(tau)
        rounds = _dsgd_rounds(floor, tau, obs.e0, obs.target_error)
        fl = min(floor, obs.e0)
        model = fl + (obs.e0 - fl) * np.exp(-t / tau)
    else:
        if obs.lambda2 is None or obs.lambda2 <= 0:
            raise ValidationError(f"observation of execution {obs.exec_id} has no lambda2 term; "
                                  "the paper estimator needs it")
        t_g = c["kappa"] / obs.lambda2
        rounds = float(math.ceil(t_g * _paper_reliability(c, obs.snr_db)))
        model = 1.0 - c["a_max"] * (1.0 - np.exp(-3.0 * t / t_g))
    rmse = None
    if t.size:
        rmse = float(np.sqrt(np.mean((np.log(np.maximum(model, MIN_ERROR)) - np.log(e)) ** 2)))
    return rounds, rmse


def evaluate(observations: Sequence[Observation], constants: Mapping[str, float],
             estimator: str = "dsgd", *, max_points: int = 50) -> Evaluation:
    """Predicted rounds and curve errors of ``constants`` on ``observations``."""
    name = ESTIMATORS.get(estimator).name
    c = {**ESTIMATORS.get(name).priors, **constants}
    preds, apes, sq, never = [], [], [], 0
    for obs in observations:
        rounds, rmse = _predict(obs, c, name, max_points)
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


# ---- dsgd fit -----------------------------------------------------------------------------

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
                t, e = _subsample(o, max_points)
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
        recomputed = np.clip(self.p * self.k ** c["beta_k"] * self.q, _P_FLOOR, 1.0)
        return np.where(np.isnan(self.p), self.p_eff_fixed, recomputed)

    def data_residuals(self, theta: np.ndarray) -> np.ndarray:
        c = self.constants(theta)
        floor, tau = _dsgd_floor_tau(c, self._p_eff(c), self.zeta2, self.sigma_c2)
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
            moving = ~np.isnan(self.p) & (raw > _P_FLOOR) & (raw < 1.0)
            dp = np.where(moving, p_eff * c["beta_k"] * np.log(self.k), 0.0)
            regressor["beta_k"] = (
                dp * -(c["f1"] / p_eff ** 2 + 2.0 * c["f2"] * self.zeta2 / p_eff ** 3
                       + c["f3"] * self.sigma_c2 / p_eff ** 2),          # d floor
                dp * -c["tau1"] / p_eff ** 2)                             # d tau
        floor, tau = _dsgd_floor_tau(c, p_eff, self.zeta2, self.sigma_c2)
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


def _check_min_obs(observations: Sequence[Observation], min_obs: int, what: str) -> None:
    if min_obs < 1:
        raise ValidationError(f"min_obs must be >= 1, got {min_obs}")
    if len(observations) < min_obs:
        raise ValidationError(
            f"calibrating {what} needs at least {min_obs} observations (finished executions "
            f"with rounds feedback); only {len(observations)} available")


def _full_constants(estimator: str, priors: Mapping[str, float] | None) -> dict[str, float]:
    base = dict(ESTIMATORS.get(estimator).priors)
    for name, value in (priors or {}).items():
        if name not in base:
            raise ValidationError(f"'{name}' is not a constant of the {estimator} estimator; "
                                  f"its constants are {', '.join(base)}")
        base[name] = float(value)
    return base


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
    _check_min_obs(observations, min_obs, "the dsgd estimator")
    if not prior_weight > 0:
        raise ValidationError(f"prior_weight must be > 0, got {prior_weight}")
    if max_points < 2:
        raise ValidationError(f"max_points must be >= 2, got {max_points}")
    fixed = tuple(fixed)
    for name in fixed:
        if name not in DSGD_FITTABLE:
            raise ValidationError(f"cannot fix '{name}': the fittable dsgd constants are "
                                  f"{', '.join(DSGD_FITTABLE)}")
    base = _full_constants("dsgd", priors)
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


# ---- paper fit ----------------------------------------------------------------------------

def fit_paper(observations: Sequence[Observation], priors: Mapping[str, float] | None = None,
              *, min_obs: int = 1) -> Fit:
    """The paper's calibration: kappa = rounds x lambda2 on Erdos-Renyi, R(SNR) from drop rates.

    kappa is the median of rounds x lambda2 over uncensored Erdos-Renyi runs (the paper uses
    one). alpha_R, beta_R >= 0 by least squares of alpha_R exp(-beta_R SNR_dB) on the observed
    link drop rates (R = 1 + drop rate); with a single SNR only alpha_R is fitted; without drop
    rates both keep their current values. a_max and eps_target are not fitted.
    """
    _check_min_obs(observations, min_obs, "the paper estimator")
    base = _full_constants("paper", priors)
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


def fit(observations: Sequence[Observation], estimator: str = "dsgd",
        priors: Mapping[str, float] | None = None, *, min_obs: int = 3, **options: Any) -> Fit:
    """Dispatch to :func:`fit_dsgd` or :func:`fit_paper`."""
    name = ESTIMATORS.get(estimator).name
    if name == "dsgd":
        return fit_dsgd(observations, priors, min_obs=min_obs, **options)
    if name == "paper":
        if options:
            raise ValidationError(f"the paper fit takes no options, got {', '.join(options)}")
        return fit_paper(observations, priors, min_obs=min_obs)
    raise ValidationError(f"no calibration procedure for estimator '{name}'; calibratable: "
                          "dsgd, paper")


# ---- hold-out evaluation ------------------------------------------------------------------

@attrs.frozen
class HoldOutReport:
    """Rounds MAPE (percent) of each group when the constants are fitted without it."""

    key: str
    estimator: str
    per_group: dict[str, float | None]
    mape: float | None
    n_unpredicted: int
    predictions: tuple[Prediction, ...]
    notes: tuple[str, ...] = ()

    def render(self) -> str:
        lines = [f"leave-one-{self.key}-out, {self.estimator} estimator (rounds MAPE)"]
        width = max([len(self.key)] + [len(str(g)) for g in self.per_group])
        for g, m in self.per_group.items():
            lines.append(f"  {str(g):<{width}}  {'n/a' if m is None else f'{m:.1f}%'}")
        lines.append(f"  {'all':<{width}}  {'n/a' if self.mape is None else f'{self.mape:.1f}%'}"
                     + (f"  ({self.n_unpredicted} run(s) predicted never to reach the target)"
                        if self.n_unpredicted else ""))
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def leave_one_group_out(observations: Sequence[Observation], key: str = "family", *,
                        estimator: str = "dsgd", priors: Mapping[str, float] | None = None,
                        min_obs: int = 3, **options: Any) -> HoldOutReport:
    """Hold out each group (e.g. each topology family), fit on the rest, predict the group."""
    if not observations:
        raise ValidationError("leave_one_group_out needs observations; got none")
    if not hasattr(observations[0], key):
        raise ValidationError(f"observations have no field '{key}' to group by")
    name = ESTIMATORS.get(estimator).name
    groups = sorted({str(getattr(o, key)) for o in observations})
    if len(groups) < 2:
        raise ValidationError(f"leave-one-{key}-out needs at least two groups; all observations "
                              f"share {key} = {groups[0]!r}")
    per_group: dict[str, float | None] = {}
    preds: list[Prediction] = []
    notes: list[str] = []
    never = 0
    for g in groups:
        train = [o for o in observations if str(getattr(o, key)) != g]
        test = [o for o in observations if str(getattr(o, key)) == g]
        try:
            f = fit(train, name, priors, min_obs=min_obs, **options)
        except ValidationError as exc:
            per_group[g] = None
            notes.append(f"{key} {g}: not evaluated ({exc})")
            continue
        ev = evaluate(test, f.constants, name)
        per_group[g] = ev.rounds_mape
        never += ev.n_unpredicted
        preds.extend(ev.predictions)
    apes = [p.ape for p in preds if p.ape is not None]
    return HoldOutReport(key, name, per_group, float(np.mean(apes)) if apes else None, never,
                         tuple(preds), tuple(notes))


# ---- catalog ------------------------------------------------------------------------------

def _check_scope(scope: str, scope_key: str) -> tuple[str | None, str | None]:
    """(dataset, family) that the scope selects."""
    if scope not in SCOPES:
        raise ValidationError(f"unknown calibration scope '{scope}'; use one of "
                              f"{', '.join(SCOPES)}")
    if scope == "global":
        if scope_key:
            raise ValidationError(f"the global scope takes no scope key, got '{scope_key}'")
        return None, None
    if scope == "dataset":
        if not scope_key:
            raise ValidationError("the dataset scope needs a scope key: the dataset name")
        return scope_key, None
    dataset, sep, family = scope_key.rpartition(":")
    if not sep or not dataset or not family:
        raise ValidationError(f"the dataset_family scope needs a key 'dataset:family', got "
                              f"'{scope_key}'")
    return dataset, family


_LOAD_SQL = """
SELECT * FROM (
SELECT f.feedback_id, f.exec_id, f.plan_id, f.actual, f.censored,
       p.family, p.k_ratio, p.snr_db, p.g_th, p.terms::VARCHAR AS terms,
       p.calibration_ids, pr.planning_run_id, pr.sla_threshold,
       coalesce(w.dataset, json_extract_string(e.options, '$.dataset'), '') AS dataset,
       e.actual_rounds, t.mixing_p AS topo_p, t.lambda2_laplacian AS topo_lambda2,
       coalesce(t.n_nodes, w.n_clients,
                TRY_CAST(json_extract_string(e.options, '$.clients') AS INTEGER)) AS n_clients
FROM airplan.feedback AS f
JOIN airplan.plans AS p ON p.plan_id = f.plan_id
JOIN airplan.planning_runs AS pr ON pr.planning_run_id = p.planning_run_id
LEFT JOIN airplan.workloads AS w ON w.workload_id = pr.workload_id
LEFT JOIN airplan.executions AS e ON e.exec_id = f.exec_id
LEFT JOIN airplan.topologies AS t ON t.topology_id = p.topology_id
WHERE f.metric = 'rounds' AND f.estimator = $estimator
  AND (e.status IS NULL OR e.status NOT IN ('failed', 'running'))
QUALIFY row_number() OVER (PARTITION BY f.exec_id ORDER BY f.feedback_id DESC) = 1
)
WHERE ($dataset IS NULL OR dataset = $dataset) AND ($family IS NULL OR family = $family)
ORDER BY exec_id
"""


def _load(catalog: Catalog, estimator: str, scope: str, scope_key: str
          ) -> tuple[list[Observation], list[str]]:
    name = ESTIMATORS.get(estimator).name
    dataset, family = _check_scope(scope, scope_key)
    rows = catalog.query(_LOAD_SQL, {"estimator": name, "dataset": dataset, "family": family})
    skipped: list[str] = []
    if not rows:
        return [], skipped
    curves = _curves(catalog, [int(r["exec_id"]) for r in rows])
    beta_used = _beta_k_by_id(catalog) if name == "dsgd" else {}
    prior_beta = ESTIMATORS.get("dsgd").priors["beta_k"]
    out: list[Observation] = []
    for r in rows:
        exec_id = int(r["exec_id"])
        terms = json.loads(r["terms"] or "{}")
        actual = r["actual"] if r["actual"] is not None else r["actual_rounds"]
        if r["sla_threshold"] is None or not 0 < r["sla_threshold"] < 1:
            skipped.append(f"execution {exec_id}: its planning run "
                           f"{r['planning_run_id']} has no accuracy target in (0, 1)")
            continue
        if actual is None:
            skipped.append(f"execution {exec_id}: no actual rounds")
            continue
        t, e, drop = curves.get(exec_id, (np.empty(0), np.empty(0), None))
        common = dict(estimator=name, family=r["family"], dataset=r["dataset"],
                      target_error=1.0 - float(r["sla_threshold"]),
                      rounds_actual=float(actual), censored=bool(r["censored"]), rounds=t,
                      errors=e, k_ratio=float(r["k_ratio"]), snr_db=r["snr_db"],
                      g_th=r["g_th"], link_drop_rate=drop, exec_id=exec_id,
                      plan_id=int(r["plan_id"]),
                      clients=None if r["n_clients"] is None else int(r["n_clients"]))
        try:
            if name == "dsgd":
                p = terms["p"] if terms.get("p") is not None else r["topo_p"]
                p_eff = terms.get("p_eff")
                if (p is None and p_eff is None) or terms.get("e0") is None:
                    skipped.append(f"execution {exec_id}: plan {r['plan_id']} has no dsgd terms "
                                   "(p or p_eff, e0)")
                    continue
                beta = next((beta_used[i] for i in (r["calibration_ids"] or ())
                             if i in beta_used), prior_beta)
                q = _link_survival(p, p_eff, float(r["k_ratio"]), beta, r["g_th"])
                out.append(Observation(p=p, p_eff=p_eff, link_survival=q,
                                       zeta2=float(terms.get("zeta2") or 0.0),
                                       sigma_c2=float(terms.get("sigma_c2") or 0.0),
                                       e0=terms["e0"], **common))
            else:
                lam2 = (terms["lambda2"] if terms.get("lambda2") is not None
                        else r["topo_lambda2"])
                if lam2 is None:
                    skipped.append(f"execution {exec_id}: plan {r['plan_id']} has no lambda2")
                    continue
                out.append(Observation(lambda2=lam2, **common))
        except ValidationError as exc:
            skipped.append(f"execution {exec_id}: {exc}")
    return out, skipped


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


def _curves(catalog: Catalog, exec_ids: list[int]
            ) -> dict[int, tuple[np.ndarray, np.ndarray, float | None]]:
    """Per execution: rounds, errors (1 - mean client-model accuracy, the SLA's ``accuracy``) and
    the mean link drop rate."""
    table = catalog.query_arrow(
        "SELECT exec_id, round, client_acc_mean, link_drop_rate FROM airplan.round_stats "
        "WHERE list_contains(?, exec_id) ORDER BY exec_id, round", [exec_ids])
    if table.num_rows == 0:
        return {}
    ids = table.column("exec_id").to_numpy()
    rnd = table.column("round").to_numpy().astype(float)
    acc = np.array(table.column("client_acc_mean").to_numpy(zero_copy_only=False), dtype=float)
    drop = np.array(table.column("link_drop_rate").to_numpy(zero_copy_only=False), dtype=float)
    uniq, starts = np.unique(ids, return_index=True)
    ends = np.append(starts[1:], ids.size)
    out = {}
    for eid, a, b in zip(uniq.tolist(), starts.tolist(), ends.tolist()):
        ok = np.isfinite(acc[a:b])
        d = drop[a:b][np.isfinite(drop[a:b])]
        out[int(eid)] = (rnd[a:b][ok], 1.0 - acc[a:b][ok], float(d.mean()) if d.size else None)
    return out


def load_observations(catalog: Catalog, estimator: str, *, scope: str = "global",
                      scope_key: str = "") -> list[Observation]:
    """Observations of ``estimator`` from the catalog: the latest rounds feedback of each
    execution it planned, with the plan's terms, the SLA target and the round_stats curve.

    Scope ``dataset`` keeps one dataset (``scope_key``), ``dataset_family`` one dataset and
    family (``"dataset:family"``). The dataset is the planning run's workload, else the
    execution's ``options.dataset``. Rows without a target, an actual value or the estimator's
    terms are left out.
    """
    return _load(catalog, estimator, scope, scope_key)[0]


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


def current_constants(catalog: Catalog, estimator: str, scope: str = "global",
                      scope_key: str = "") -> tuple[dict[str, float], tuple[int, ...]]:
    """The constants a planner would use for this scope (priors, then global, dataset and, for
    a dataset_family scope, that scope's own current rows) and the row ids used."""
    est = ESTIMATORS.get(estimator)
    dataset, family = _check_scope(scope, scope_key)
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


@attrs.frozen
class CalibrationReport:
    """What a calibration changed: constants before and after, errors on the same observations,
    and the ids of the new calibration rows."""

    estimator: str
    scope: str
    scope_key: str
    n_obs: int
    before: dict[str, float]
    after: dict[str, float]
    fitted: tuple[str, ...]
    mape_before: float | None
    mape_after: float | None
    curve_log_rmse_before: float | None
    curve_log_rmse_after: float | None
    unpredicted_before: int
    unpredicted_after: int
    calibration_ids: dict[str, int]
    fit: Fit
    skipped: tuple[str, ...] = ()

    def render(self) -> str:
        where = self.scope + (f" '{self.scope_key}'" if self.scope_key else "")
        lines = [f"calibration of the {self.estimator} estimator, scope {where}, "
                 f"{self.n_obs} observations"]
        share = self.fit.prior_share
        rows = [(n, f"{self.before[n]:.6g}", f"{self.after[n]:.6g}",
                 _change(self.before[n], self.after[n]), str(self.calibration_ids.get(n, "")),
                 f"{share[n]:.2f}" if n in share else "")
                for n in self.fitted]
        head = ("constant", "old", "new", "change", "calibration_id",
                "prior share" if share else "")
        w = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(head)]

        def line(r: tuple[str, ...], arrow: str) -> str:
            return (f"  {r[0]:<{w[0]}}  {r[1]:>{w[1]}} {arrow} {r[2]:<{w[2]}}  {r[3]:>{w[3]}}"
                    f"  {r[4]:>{w[4]}}  {r[5]:>{w[5]}}").rstrip()

        lines.append(line(head, "  "))
        lines += [line(r, "->") for r in rows]
        lines.append(f"  rounds MAPE (uncensored, same observations): "
                     f"{_pct(self.mape_before)} -> {_pct(self.mape_after)}")
        if self.unpredicted_before or self.unpredicted_after:
            lines.append(f"  runs predicted never to reach the target although they did: "
                         f"{self.unpredicted_before} -> {self.unpredicted_after}")
        if self.curve_log_rmse_before is not None or self.curve_log_rmse_after is not None:
            lines.append(f"  error-curve log-RMSE: {_num(self.curve_log_rmse_before)} -> "
                         f"{_num(self.curve_log_rmse_after)}")
        lines += [f"  note: {n}" for n in self.fit.notes]
        lines += [f"  skipped: {s}" for s in self.skipped]
        return "\n".join(lines)


def _change(old: float, new: float) -> str:
    if old == 0:
        return "n/a"
    pct = 100.0 * (new - old) / abs(old)
    return f"{pct:+.1f}%" if abs(pct) < 10 else f"{pct:+.0f}%"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f}%"


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


#: Estimators with a calibration procedure, the planner's default first.
CALIBRATABLE = ("ttt", "dsgd", "paper")


@attrs.frozen
class CalibrationSummary:
    """What ``calibrate`` without an estimator did: one report per estimator it refitted, and
    why each other estimator with feedback rows was left alone."""

    reports: tuple[CalibrationReport, ...]
    skipped: tuple[tuple[str, str], ...] = ()

    @property
    def estimators(self) -> tuple[str, ...]:
        return tuple(r.estimator for r in self.reports)

    def render(self) -> str:
        head = [f"calibrated: {', '.join(self.estimators)} (the estimators with enough "
                f"observations)"]
        head += [f"not calibrated: {name}: {why}" for name, why in self.skipped]
        return "\n\n".join(["\n".join(head)] + [r.render() for r in self.reports])


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
    _check_scope(scope, scope_key)
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
    name = ESTIMATORS.get(estimator).name
    if name == "ttt":
        return _calibrate_ttt(catalog, scope, scope_key, min_obs)
    if name not in ("dsgd", "paper"):
        raise ValidationError(f"no calibration procedure for estimator '{name}'; calibratable: "
                              "dsgd, paper, ttt")
    observations, skipped = _load(catalog, name, scope, scope_key)
    where = scope + (f" '{scope_key}'" if scope_key else "")
    if len(observations) < min_obs:
        raise ValidationError(
            f"calibrating the {name} estimator for scope {where} needs at least {min_obs} "
            f"observations (finished executions with rounds feedback); only "
            f"{len(observations)} available" + (f" ({len(skipped)} unusable)" if skipped else ""))
    before, _ = current_constants(catalog, name, scope, scope_key)
    result = fit(observations, name, before, min_obs=min_obs, **options)
    old = evaluate(observations, before, name)
    values = {n: result.constants[n] for n in result.fitted}
    source = (f"fit: {'log-curve least squares' if name == 'dsgd' else 'paper procedure'} "
              f"on {len(observations)} executions"
              f"{RANGE_MARK}{json.dumps(observed_range(observations), sort_keys=True)}")
    ids = catalog.supersede_calibration(name, scope, scope_key, values, n_obs=result.n_obs,
                                        source=source, fit_error=result.rounds_mape)
    return CalibrationReport(
        estimator=name, scope=scope, scope_key=scope_key, n_obs=result.n_obs, before=before,
        after=result.constants, fitted=result.fitted, mape_before=old.rounds_mape,
        mape_after=result.rounds_mape, curve_log_rmse_before=old.curve_log_rmse,
        curve_log_rmse_after=result.curve_log_rmse, unpredicted_before=old.n_unpredicted,
        unpredicted_after=result.n_unpredicted, calibration_ids=ids, fit=result,
        skipped=tuple(skipped))


#: Prior sd of a dataset's level shift in the ttt refit (log rounds): the shipped fit is trusted
#: to within about a factor e^0.5 until the catalog's own runs say otherwise.
TTT_LEVEL_PRIOR_SD = 0.5


def _calibrate_ttt(catalog: Catalog, scope: str, scope_key: str, min_obs: int
                   ) -> CalibrationReport:
    """Refine the ``ttt`` model from the catalog's executions: per dataset, the level of the
    fully connected reference (``fc.dataset:NAME``) is shifted by the maximum a posteriori
    estimate of delta in log T_actual ~ N(mu + delta, sd^2), with runs that did not reach their
    target right-censored and a N(0, TTT_LEVEL_PRIOR_SD^2) prior on delta. mu and sd are what
    the planner predicted for each executed plan (recorded with its terms). The slopes stay the
    shipped ones: a few executions of one workload cannot identify them."""
    from scipy import optimize, stats

    if scope == "dataset_family":
        raise ValidationError("the ttt estimator is calibrated per dataset or globally, not per "
                              "dataset and family")
    dataset, _ = _check_scope(scope, scope_key)
    rows = catalog.query(_LOAD_SQL, {"estimator": "ttt", "dataset": dataset, "family": None})
    by_ds: dict[str, list[tuple[float, float, float, bool]]] = {}
    skipped = []
    for r in rows:
        terms = json.loads(r["terms"] or "{}")
        actual = r["actual"] if r["actual"] is not None else r["actual_rounds"]
        if terms.get("mu") is None or terms.get("sd") is None or not actual:
            skipped.append(f"execution {r['exec_id']}: no ttt prediction or actual rounds")
            continue
        if terms.get("log_t_fc_measured") is not None:
            # its prediction used a pilot's measured reference, not the dataset's level
            skipped.append(f"execution {r['exec_id']}: planned with a pilot of the fully "
                           f"connected reference, not with the dataset's level")
            continue
        by_ds.setdefault(r["dataset"], []).append(
            (float(terms["mu"]), float(terms["sd"]), math.log(float(actual)),
             bool(r["censored"])))
    n = sum(len(v) for v in by_ds.values())
    where = scope + (f" '{scope_key}'" if scope_key else "")
    if n < min_obs:
        raise ValidationError(
            f"calibrating the ttt estimator for scope {where} needs at least {min_obs} "
            f"observations (finished executions planned with COST MODEL ttt); only {n} available")
    before, _ = current_constants(catalog, "ttt", scope, scope_key)
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

    ids = catalog.supersede_calibration(
        "ttt", scope, scope_key, values, n_obs=n,
        source=f"fit: censored level shift per dataset on {n} executions",
        fit_error=mape(preds_after))
    fit_ = Fit(estimator="ttt", constants=after, fitted=tuple(sorted(values)), n_obs=n,
               rounds_mape=mape(preds_after), curve_log_rmse=None, n_unpredicted=0,
               predictions=())
    return CalibrationReport(
        estimator="ttt", scope=scope, scope_key=scope_key, n_obs=n, before=before, after=after,
        fitted=fit_.fitted, mape_before=mape(preds_before), mape_after=mape(preds_after),
        curve_log_rmse_before=None, curve_log_rmse_after=None, unpredicted_before=0,
        unpredicted_after=0, calibration_ids=ids, fit=fit_, skipped=tuple(skipped))


__all__ = ["Observation", "Prediction", "Evaluation", "Fit", "HoldOutReport",
           "CalibrationReport", "fit_dsgd", "fit_paper", "fit", "evaluate",
           "leave_one_group_out", "load_observations", "observed_range", "current_constants",
           "calibrate", "calibrate_observed", "CalibrationSummary", "CALIBRATABLE",
           "DSGD_FITTABLE", "FEEDBACK_METRICS", "SCOPES"]
