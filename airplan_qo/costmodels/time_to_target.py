"""Time-to-target cost model: the rounds a plan needs to reach the SLA target, as a distribution.

The decision quantity is T, the first round at which the SLA metric (smoothed, see
:func:`airplan_qo.plans.sla.first_crossing`) reaches the target. It is modelled relative to the
fully connected, uncompressed reference (FC) of the same workload, which removes most of the
dataset's level:

    log T(plan) = log T_FC(workload) + (x(plan) - x(FC)) . beta + e,      e ~ N(0, s^2)

with theory-shaped plan features x (Koloskova et al. 2019, 2020; Lian et al. 2017): the topology
through log 1/p of the *random* mixing matrix (dropout and truncation included), compression
through log 1/k and the D-SGD -> CHOCO switch at k < 1, channel noise sigma_c^2 / p, label
heterogeneity zeta^2 from the catalog's statistics, and their interactions (shrunk towards zero),
and the task's difficulty 1 - fc (the fully connected plan's predicted error) times topology and
compression.
The FC reference has its own model over workload features (:data:`FC_FEATURES`).

Both are fitted by **censored regression** (a Tobit model): a run that never reached the target
within its budget B is right-censored, log T > log B, and contributes log(1 - Phi((log B - mu)/s))
to the likelihood instead of being dropped or read as "never". Coefficients of interactions get a
ridge penalty; main effects a weak one.

Every transport and algorithm enters through the same features (:func:`plan_inputs`, used by
the estimator and by the grid fit alike): a digital plan has no channel noise and its b-bit
quantiser's slowdown as the ``quant`` feature, gradient tracking no heterogeneity terms, MATCHA
its activation budget in p, a server (FedAvg, FedProx) no topology term. Plans whose transport
(or digital width) or algorithm the fitted runs did not use (the fitted range's
``transports``, ``bits`` and ``algorithms``; :func:`fitted_operators`) are flagged in
``notes`` and their log-T spread is widened (:meth:`TimeToTargetEstimator.operator_spread`),
as for an unseen dataset.

A prediction is a normal distribution of log T, so P(meets the SLA) = P(T <= B) =
Phi((log B - mu) / s), which the chance-constrained planner compares with a confidence level.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence

import attrs
import numpy as np

from ..errors import ValidationError
from ..plans.plan import Estimate, averaged_cliques
from ..plans.operators import SERVER_ALGORITHMS
from .tail_level import (DEFAULT_LOCAL_STEPS, LevelInputs, end_level, fitted_datasets,
                         level_above)
from .features import (approximate_survival_factor, channel_noise, channel_noise_at,
                       heterogeneity, plan_heterogeneity, quantisation_slowdown,
                       survival_factor)

#: Plan features, relative to the FC reference of the same workload.
PLAN_FEATURES = (
    "log_inv_p",            # log 1/p of the random mixing matrix
    "log_inv_k",            # log 1/k (compression)
    "choco",                # [k < 1]: D-SGD -> CHOCO with gamma ~ k
    "noise",                # sigma_c^2 / p: channel noise after mixing
    "zeta2_log_inv_p",      # heterogeneity x topology
    "zeta2_log_inv_k",      # heterogeneity x compression
    "log_inv_k_log_inv_p",  # compression x topology
    "dropout_log_inv_p",    # dropout x topology
    "log_n_log_inv_p",      # network size x topology
    "averaged_log_inv_p",   # Clique Averaging x topology (d_cliques: cliques joined sparsely)
    "averaged",             # [Clique Averaging]: its own level, as CHOCO has
    "fc_error_log_inv_p",   # the task's difficulty (1 - fc) x topology
    "fc_error_log_inv_k",   # the task's difficulty (1 - fc) x compression
    "quant",                # log slowdown of a digital plan's b-bit quantiser (0 over the air)
)
#: Features whose coefficients are shrunk harder (interactions). The difficulty terms are not:
#: they carry a difference between tasks (the target sits closer to a slowly reached plateau on
#: a hard task) that no other feature holds.
PLAN_INTERACTIONS = frozenset(PLAN_FEATURES[4:11])

#: Plan features with a coefficient from theory, used where a fit has none for them: a fit
#: fits them only when its runs exercise them (``ttt_crossval.fit``). ``quant``: a quantiser
#: that slows consensus 1/gamma times acts as a mixing rate gamma p, log T one for one with
#: log 1/gamma in the consensus-limited regime (Koloskova et al. 2019, CHOCO-SGD's rate in
#: delta p).
PLAN_PRIORS = {"quant": 1.0}

#: Workload features of the FC reference's log T (plus one offset per dataset).
FC_FEATURES = ("zeta2", "log_n", "noise", "dropout", "log_step")


def plan_features(p_random: float, k: float, zeta2: float, sigma_c2: float, dropout: float,
                  n: int, averaged: bool = False, fc_error: float = 0.0,
                  quant: float = 0.0) -> dict[str, float]:
    """The plan features of :data:`PLAN_FEATURES` (absolute; subtract the FC's to use them).
    ``zeta2`` is the heterogeneity the clients train on (scaled for Clique Averaging,
    :func:`airplan_qo.costmodels.features.plan_heterogeneity`); ``averaged``: the plan runs
    Clique Averaging, whose clique-mean updates make the sparse joins between cliques matter
    less than a graph's p alone says; ``fc_error``: 1 - the fully connected plan's final
    accuracy (predicted by the ceiling model), the task's difficulty. A target at a fixed
    ratio of fc sits closer to a slowly reached plateau on a hard task, where a sparser or more
    compressed plan loses more; ``quant``: the digital quantiser's slowdown
    (:func:`airplan_qo.costmodels.features.quantisation_slowdown`)."""
    lp = math.log(1.0 / max(p_random, 1e-12))
    lk = math.log(1.0 / max(min(k, 1.0), 1e-12))
    return with_fc_error({
        "log_inv_p": lp, "log_inv_k": lk, "choco": float(k < 1.0),
        "noise": sigma_c2 / max(p_random, 1e-12),
        "zeta2_log_inv_p": zeta2 * lp, "zeta2_log_inv_k": zeta2 * lk,
        "log_inv_k_log_inv_p": lk * lp, "dropout_log_inv_p": dropout * lp,
        "log_n_log_inv_p": math.log(max(n, 1)) * lp,
        "averaged_log_inv_p": float(averaged) * lp,
        "averaged": float(averaged),
        "quant": float(quant),
    }, fc_error)


#: The difficulty terms of :data:`PLAN_FEATURES`: each is 1 - fc times the feature named.
FC_ERROR_TERMS = {"fc_error_log_inv_p": "log_inv_p", "fc_error_log_inv_k": "log_inv_k"}


def with_fc_error(x: Mapping[str, float], fc_error: float) -> dict[str, float]:
    """``x`` with its difficulty terms (:data:`FC_ERROR_TERMS`) set for a task whose fully
    connected plan has error ``fc_error``; linear in the features they scale, so it applies to
    features relative to the reference as well as to absolute ones."""
    return {**x, **{name: fc_error * x.get(base, 0.0) for name, base in FC_ERROR_TERMS.items()}}


#: lr x local steps of the workloads the datasets' levels are fitted at (0.05 x 5): the
#: ``log_step`` feature is 0 there.
REFERENCE_STEP = 0.25


def fc_features(zeta2: float, n: int, sigma_c2: float, dropout: float,
                step: float | None = None) -> dict[str, float]:
    """The workload features of :data:`FC_FEATURES` (FC's own sigma_c^2 as the noise).
    ``step``: the learning rate times the local steps per round (what one round of local
    training moves a model; None: the reference's): ``log_step`` is its log relative to
    :data:`REFERENCE_STEP`, so halving it moves the rounds the reference needs as the fit says."""
    return {"zeta2": zeta2, "log_n": math.log(max(n, 1)), "noise": sigma_c2,
            "dropout": dropout,
            "log_step": math.log(step / REFERENCE_STEP) if step and step > 0 else 0.0}


@attrs.frozen
class PlanInputs:
    """The statistics a plan's features are made of (:func:`plan_inputs`)."""

    p_random: float     # p of the random mixing matrix (1 through a server)
    zeta2: float        # the heterogeneity its clients train on (0 for gradient tracking)
    noise: float        # channel noise after one aggregation (0 for a digital plan)
    quant: float        # log slowdown of a digital plan's quantiser (0 over the air)
    averaged: bool      # Clique Averaging


def plan_inputs(plan, stats, alpha: float, n_classes: int, d: int | None,
                cache: dict | None = None) -> PlanInputs:
    """What :func:`plan_features` takes of a plan, the one definition the estimator (when
    planning) and the grid fit (evaluation/ttt_crossval.py) both use, per operator:

    * p of the random mixing matrix: the topology's p times the survival factor of dropout,
      truncation and MATCHA's activation budget
      (:func:`~airplan_qo.costmodels.features.survival_factor`); 1 through a server
      (FedAvg, FedProx: every delivered update enters one exact average, no topology term);
    * the heterogeneity (:func:`~airplan_qo.costmodels.features.plan_heterogeneity`: none for
      gradient tracking, the cliques' residual for Clique Averaging);
    * over the air, the channel noise (:func:`~airplan_qo.costmodels.features.channel_noise`);
      a digital plan has none (a delivered packet arrives intact) and its quantiser enters as
      ``quant`` (:func:`~airplan_qo.costmodels.features.quantisation_slowdown`, of the
      model dimension ``d``).

    ``cache`` (optional) keeps the transport terms, which repeat across a workload's plans."""
    if plan.effective_algorithm in SERVER_ALGORITHMS:
        p_random = 1.0
    else:
        p_random = max(max(stats.spectra.mixing_p, 1e-12) * survival_factor(plan, stats),
                       1e-12)
    key = (plan.transport, plan.bits, plan.effective_algorithm in SERVER_ALGORITHMS,
           stats.spectra.mean_degree, stats.spectra.n_nodes)
    terms = None if cache is None else cache.get(key)
    if terms is None:
        terms = ((0.0 if plan.transport == "digital" else channel_noise(plan, stats, d)),
                 quantisation_slowdown(plan, stats, d))
        if cache is not None:
            cache[key] = terms
    return PlanInputs(p_random, plan_heterogeneity(alpha, n_classes, plan), terms[0], terms[1],
                      bool(averaged_cliques(plan.topology)))


def plan_inputs_features(inputs: PlanInputs, plan, n: int, fc_error: float = 0.0
                         ) -> dict[str, float]:
    """:func:`plan_features` of a plan from its :func:`plan_inputs`."""
    return plan_features(inputs.p_random, plan.k_ratio, inputs.zeta2, inputs.noise,
                         plan.channel.dropout, n, averaged=inputs.averaged, fc_error=fc_error,
                         quant=inputs.quant)


@attrs.frozen
class TobitFit:
    """A fitted censored normal regression of log T."""

    coef: dict[str, float]
    sd: float
    n_obs: int
    n_censored: int
    loglik: float

    def mean(self, x: Mapping[str, float], offset: float = 0.0) -> float:
        return offset + sum(self.coef.get(name, 0.0) * float(v) for name, v in x.items())


def fit_tobit(rows: Sequence[Mapping[str, float]], y: Sequence[float], censored: Sequence[bool],
              names: Sequence[str], *, offset: Sequence[float] | None = None,
              penalty: Mapping[str, float] | None = None) -> TobitFit:
    """Maximum penalised likelihood of log T ~ N(offset + x . beta, s^2) with right-censoring.

    ``y`` is log T for reached runs and log B (the budget) for censored ones. ``penalty`` gives
    each coefficient's ridge weight (default 0). Fitted with L-BFGS on (beta, log s) from the
    penalised least-squares start.
    """
    from scipy import optimize, stats     # fitting only: planning need not import scipy.stats

    X = np.array([[float(r.get(n, 0.0)) for n in names] for r in rows], dtype=float)
    yv = np.asarray(y, dtype=float)
    cens = np.asarray(censored, dtype=bool)
    off = np.zeros_like(yv) if offset is None else np.asarray(offset, dtype=float)
    if X.shape[0] != yv.size or cens.size != yv.size or off.size != yv.size:
        raise ValidationError("fit_tobit: rows, y, censored and offset differ in length")
    if yv.size < 2:
        raise ValidationError(f"fit_tobit needs at least 2 observations, got {yv.size}")
    lam = np.array([float((penalty or {}).get(n, 0.0)) for n in names])
    # the start: penalised least squares (plain least squares runs off to huge coefficients
    # when features are nearly collinear, as on a grid of a few workloads)
    start = (np.linalg.solve(X.T @ X + np.diag(lam) + 1e-9 * np.eye(X.shape[1]),
                             X.T @ (yv - off)) if X.size else np.zeros(0))
    resid = yv - off - (X @ start if X.size else 0.0)
    theta0 = np.append(start, math.log(max(float(np.std(resid)), 0.05)))

    def nll(theta: np.ndarray) -> tuple[float, np.ndarray]:
        beta, log_s = theta[:-1], min(float(theta[-1]), 50.0)
        s = math.exp(log_s)
        mu = off + (X @ beta if X.size else 0.0)
        z = (yv - mu) / s
        ll_obs = stats.norm.logpdf(z[~cens]) - log_s
        ll_cen = stats.norm.logsf(z[cens])
        value = -(ll_obs.sum() + ll_cen.sum()) + float(lam @ (beta ** 2))
        # gradient
        g_mu = np.zeros_like(yv)
        g_mu[~cens] = -z[~cens] / s
        hazard = np.exp(stats.norm.logpdf(z[cens]) - ll_cen)
        g_mu[cens] = -hazard / s
        g_beta = X.T @ g_mu + 2.0 * lam * beta if X.size else np.zeros(0)
        g_logs = float(np.sum(1.0 - z[~cens] ** 2) - np.sum(hazard * z[cens]))
        return value, np.append(g_beta, g_logs)

    res = optimize.minimize(nll, theta0, jac=True, method="L-BFGS-B")
    beta, s = res.x[:-1], math.exp(res.x[-1])
    return TobitFit({n: float(b) for n, b in zip(names, beta)}, float(s), int(yv.size),
                    int(cens.sum()), float(-res.fun))


def fit_ceiling(rows: Sequence[Mapping[str, float]], accuracy: Sequence[float],
                names: Sequence[str], *, ridge: float = 0.1) -> TobitFit:
    """The fully connected plan's final accuracy (the ``fc`` the SLA is relative to) on the logit
    scale, by ridge least squares over workload features (one level per dataset, unpenalised).
    Returned as a :class:`TobitFit` without censoring (``mean`` gives the logit)."""
    X = np.array([[float(r.get(n, 0.0)) for n in names] for r in rows], dtype=float)
    acc = np.clip(np.asarray(accuracy, dtype=float), 1e-3, 1 - 1e-3)
    y = np.log(acc / (1.0 - acc))
    if y.size < 2:
        raise ValidationError(f"fit_ceiling needs at least 2 observations, got {y.size}")
    lam = np.diag([0.0 if n.startswith("dataset:") else ridge for n in names])
    beta = np.linalg.solve(X.T @ X + lam + 1e-9 * np.eye(len(names)), X.T @ y)
    resid = y - X @ beta
    return TobitFit({n: float(b) for n, b in zip(names, beta)},
                    float(np.sqrt(np.mean(resid ** 2))), int(y.size), 0, 0.0)


#: Target ratios (of the fully connected plan's final accuracy) at which the level shift is
#: measured on every run's curve, besides the ratio the model is fitted at.
TARGET_RATIOS = (0.8, 0.85, 0.9, 0.93, 0.95, 0.97)
#: The ratio a reference fit is taken to be fitted at when its constants do not say
#: (``target.base``): the default grid's SLA, ``accuracy >= 0.95 * fc``.
BASE_RATIO = 0.95


def target_level(rho: float) -> float:
    """log log 1/(1 - rho): on an exponential approach a(t) = A (1 - exp(-t / tau)) the target
    rho A is reached at T = tau log 1/(1 - rho), so log T moves one for one with this."""
    return math.log(max(math.log(1.0 / (1.0 - min(max(rho, 1e-9), 1.0 - 1e-9))), 1e-9))


def target_shift(rho: float, relative: float, constants: Mapping[str, float]) -> float:
    """log T at the target ratio ``rho`` minus log T at the ratio the model was fitted at
    (``target.base``), for a plan whose log T there is ``relative`` above the fully connected
    reference's: ``g (target.level + target.relative * relative)`` with
    ``g = target_level(rho) - target_level(base)``. Measured curves approach their plateau more
    slowly than an exponential, and slower plans more so: the fitted ``target.level`` is above 1
    and ``target.relative`` above 0 (docs/planner.md). Without fitted constants: the exponential
    approach (level 1, relative 0, base 0.95)."""
    base = constants.get("target.base", BASE_RATIO)
    g = target_level(rho) - target_level(base)
    return g * (constants.get("target.level", 1.0)
                + constants.get("target.relative", 0.0) * relative)


def fit_target_shift(g: Sequence[float], relative: Sequence[float], shift: Sequence[float],
                     base: float) -> TobitFit:
    """Least squares of the measured shifts ``log T(rho) - log T(base)`` (runs that reached both
    targets) on ``g`` and ``g * relative`` (:func:`target_shift`); ``base`` is kept with the
    coefficients (``target.base``)."""
    gv = np.asarray(g, dtype=float)
    rv = np.asarray(relative, dtype=float)
    y = np.asarray(shift, dtype=float)
    if gv.size < 2:
        raise ValidationError(f"fit_target_shift needs at least 2 observations, got {gv.size}")
    X = np.stack([gv, gv * rv], axis=1)
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    resid = y - X @ beta
    return TobitFit({"level": float(beta[0]), "relative": float(beta[1]), "base": float(base)},
                    float(np.sqrt(np.mean(resid ** 2))), int(gv.size), 0, 0.0)


#: Measurement sd (log rounds) of the time-to-target implied by a short pilot's accuracy.
PILOT_SD = 0.35
#: The least prior sd (log rounds) of the reference's predicted log T when a pilot measured it:
#: on the fitted grid the joint spread holds no more than the plan model's (the reference is
#: predicted about as well as a pilot measures it), and the prediction keeps a floor of doubt.
REFERENCE_PRIOR_SD_FLOOR = 0.05


def pilot_update(mu: float, sd: float, budget: float, pilot_rounds: int,
                 pilot_accuracy: float, reached: bool, ceiling: float,
                 target_ratio: float) -> tuple[float, float, float]:
    """Update the distribution of log T with a pilot of ``pilot_rounds`` rounds.

    A pilot that reached the target settles it (P = 1). Otherwise its last smoothed accuracy
    a_r implies, on the model's curve a(t) = A (1 - exp(-t ln 20 / T95)), a time
    T95 = r ln 20 / -ln(1 - a_r / A), hence a log T for the target ratio rho = target / A; that
    measurement (sd :data:`PILOT_SD`) is combined with the prior N(mu, sd^2), and the posterior is
    truncated at T > r. Returns (posterior mean, posterior sd, P(T <= budget | pilot))."""
    if reached:
        return math.log(max(pilot_rounds, 1)), 1e-6, 1.0
    r = max(int(pilot_rounds), 1)
    frac = min(max(pilot_accuracy / ceiling, 1e-6), 1.0 - 1e-6) if ceiling > 0 else 1e-6
    t95 = r * math.log(20.0) / -math.log(1.0 - frac)
    shift = math.log(max(math.log(1.0 / (1.0 - min(target_ratio, 1.0 - 1e-9))), 1e-9)
                     / math.log(20.0))
    measured = math.log(t95) + shift
    w0, w1 = 1.0 / sd ** 2, 1.0 / PILOT_SD ** 2
    mu_post = (w0 * mu + w1 * measured) / (w0 + w1)
    sd_post = (w0 + w1) ** -0.5
    lo = (math.log(r) - mu_post) / sd_post
    hi = (math.log(budget) - mu_post) / sd_post
    tail = norm_sf(lo)
    p = 0.0 if tail <= 0 else max(0.0, norm_cdf(hi) - norm_cdf(lo)) / tail
    return mu_post, sd_post, min(p, 1.0)


_SQRT2 = math.sqrt(2.0)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def norm_cdf(x: float) -> float:
    """The standard normal CDF (``math.erfc``: the planner calls it per candidate, where
    ``scipy.stats.norm`` costs about 0.1 ms a call in argument checking)."""
    return 0.5 * math.erfc(-x / _SQRT2)


def norm_sf(x: float) -> float:
    """1 - :func:`norm_cdf`, accurate in the upper tail."""
    return 0.5 * math.erfc(x / _SQRT2)


def norm_logcdf(x: float) -> float:
    """log :func:`norm_cdf`, finite where the CDF underflows (the asymptotic series of the
    Mills ratio below about -37)."""
    if x > 0.0:
        return math.log1p(-norm_sf(x))
    v = norm_cdf(x)
    if v > 0.0:
        return math.log(v)
    x2 = x * x
    return -0.5 * x2 - math.log(-x) - _HALF_LOG_2PI + math.log1p(-1.0 / x2 + 3.0 / (x2 * x2))


def meets_probability(mu: float, sd: float, budget: float) -> float:
    """P(T <= budget) for log T ~ N(mu, sd^2)."""
    return norm_cdf((math.log(budget) - mu) / max(sd, 1e-9))


def expected_rounds(mu: float, sd: float, budget: float) -> float:
    """E[min(T, budget)] for log T ~ N(mu, sd^2): the rounds a run stopped at its target or at
    the budget pays for (partial expectation of the lognormal plus the censored mass)."""
    sd = max(sd, 1e-9)
    b = math.log(budget)
    log_below = mu + sd * sd / 2.0 + norm_logcdf((b - mu - sd * sd) / sd)
    below = math.exp(min(log_below, 700.0))
    return float(below + budget * norm_sf((b - mu) / sd))


@attrs.frozen
class ChooserPlan:
    """What the chooser needs of a candidate plan."""

    label: str
    mu: float                 # predicted mean of log T
    per_round_cost: float
    startup: float = 0.0


def choose(candidates: Sequence[ChooserPlan], sd: float, budget: float,
           confidence: float) -> tuple[ChooserPlan, float, bool]:
    """The chance-constrained choice: the cheapest candidate (expected cost
    ``startup + per_round_cost * E[min(T, B)]``) whose P(T <= B) is at least ``confidence``;
    when none is, the most likely to meet it. Returns (candidate, its P, whether feasible)."""
    if not candidates:
        raise ValidationError("choose: no candidates")
    scored = [(c, meets_probability(c.mu, sd, budget),
               c.startup + c.per_round_cost * expected_rounds(c.mu, sd, budget))
              for c in candidates]
    ok = [t for t in scored if t[1] >= confidence]
    if ok:
        c, p, _ = min(ok, key=lambda t: (t[2], t[0].label))
        return c, p, True
    c, p, _ = max(scored, key=lambda t: (t[1], -t[2], t[0].label))
    return c, p, False


__all__ = ["PLAN_FEATURES", "PLAN_INTERACTIONS", "PLAN_PRIORS", "FC_FEATURES", "FC_ERROR_TERMS",
           "REFERENCE_STEP",
           "plan_features", "with_fc_error", "fc_features", "PlanInputs", "plan_inputs",
           "plan_inputs_features",
           "TobitFit", "fit_tobit", "fit_ceiling", "meets_probability", "expected_rounds",
           "pilot_update", "PILOT_SD", "ChooserPlan", "choose", "TARGET_RATIOS", "BASE_RATIO",
           "target_level", "target_shift", "fit_target_shift"]


def _curve(mu: float, ceiling: float, rounds: float) -> float:
    """The model's accuracy curve: the ceiling A reached to 95% at the median T = exp(mu),
    a(t) = A (1 - exp(-t ln 20 / T))."""
    tau = math.exp(min(mu, 700.0)) / math.log(20.0)
    return ceiling * (1.0 - math.exp(-float(rounds) / tau))


# ---- datasets the fit has not seen --------------------------------------------------------------


def unseen_dataset_spread(constants: Mapping[str, float], dataset: str | None
                          ) -> tuple[float, float] | None:
    """For a dataset without fitted (or calibrated) levels: the standard deviations of the
    fitted datasets' fc levels of log rounds (``fc.dataset:*``) and of their fc accuracy logits
    (``ceil.dataset:*``), each at least its fit's residual spread (``fc.sd``, ``ceil.sd``); an
    unseen dataset's levels are drawn from that spread. None when the dataset has its levels."""
    if not dataset or f"fc.dataset:{dataset}" in constants:
        return None
    return level_spread(constants)


def level_spread(constants: Mapping[str, float]) -> tuple[float, float]:
    """The standard deviations of the fitted datasets' fc levels of log rounds and of their fc
    accuracy logits, each at least its fit's residual spread (:func:`unseen_dataset_spread`)."""

    def spread(prefix: str) -> float:
        levels = [v for k, v in constants.items() if k.startswith(f"{prefix}.dataset:")]
        between = float(np.std(levels, ddof=1)) if len(levels) > 1 else 0.0
        return max(between, float(constants.get(f"{prefix}.sd", 0.0)))

    return spread("fc"), spread("ceil")


def ceiling_above(ceiling: float, target: float, logit_sd: float) -> float:
    """P(A > target) for logit(A) ~ N(logit(ceiling), logit_sd^2)."""
    if target <= 0.0:
        return 1.0
    if target >= 1.0 or ceiling <= 0.0:
        return 0.0
    ceiling = min(ceiling, 1.0 - 1e-12)
    z = (math.log(target / (1.0 - target)) - math.log(ceiling / (1.0 - ceiling))) \
        / max(logit_sd, 1e-9)
    return float(norm_sf(z))


#: The model the datasets' levels are fitted for; another fitted model shifts them
#: (``fc.model:NAME``, ``ceil.model:NAME``).
REFERENCE_MODEL = "mlp"


def model_features(model: str | None) -> dict[str, float]:
    """The fully connected reference's model indicator: none for :data:`REFERENCE_MODEL`."""
    return {} if not model or model == REFERENCE_MODEL else {f"model:{model}": 1.0}


def task_level(constants: Mapping[str, float], prefix: str, dataset: str | None,
               model: str | None) -> float:
    """The fully connected reference's level (``fc``: log rounds; ``ceil``: accuracy logit) for
    a dataset and model: the dataset's fitted level (the mean of the fitted ones for a dataset
    the fit has not seen) plus the model's fitted shift (none for a model it has not seen)."""
    level = constants.get(f"{prefix}.dataset:{dataset}")
    if level is None:
        levels = [v for k, v in constants.items() if k.startswith(f"{prefix}.dataset:")]
        level = float(np.mean(levels)) if levels else 0.0
    return level + sum(constants.get(f"{prefix}.{k}", 0.0) * v
                       for k, v in model_features(model).items())


def unseen_model(fitted_range: Mapping, model: str | None) -> bool:
    """Whether ``model`` lies outside the models of the fitted grid (``range.models``). A
    fitted model shifts the datasets' levels (:func:`task_level`); a model it never saw moves
    the fully connected plan's accuracy and rounds as much as a dataset it never saw, so it is
    widened the same way. False when the range records no models or the workload names none."""
    models = fitted_range.get("models")
    return bool(models) and bool(model) and model not in models


def unseen_task(constants: Mapping[str, float], fitted_range: Mapping, dataset: str | None,
                model: str | None) -> tuple[tuple[float, float] | None, tuple[str, ...]]:
    """The widening of :func:`unseen_dataset_spread` for a workload whose dataset or model the
    fit has not seen (applied once: one fully connected reference is unknown), and what is
    unseen (``dataset mnist1d``, ``model cnn1d``)."""
    what = []
    if dataset and f"fc.dataset:{dataset}" not in constants:
        what.append(f"dataset {dataset}")
    if unseen_model(fitted_range, model):
        what.append(f"model {model}")
    if not what:
        return None, ()
    return level_spread(constants), tuple(what)


__all__ += ["unseen_dataset_spread", "level_spread", "ceiling_above", "unseen_model",
            "unseen_task", "REFERENCE_MODEL", "model_features", "task_level"]


# ---- a pilot of the fully connected reference -------------------------------------------------


@attrs.frozen
class MeasuredReference:
    """What a pilot of the fully connected reference says about it: its final accuracy after
    the round budget (``fc``) and log of its rounds to ``base * fc``, and how: ``crossed``
    when the pilot's own (smoothed) curve reached that target, else read from an exponential
    approach fitted to the pilot's curve (``extrapolated``: also when the pilot stopped short
    of the budget, so fc itself comes from the fitted curve)."""

    fc_accuracy: float
    log_t: float
    crossed: bool
    extrapolated: bool


def _approach(points: Sequence[tuple[int, float]]) -> tuple[float, float, float]:
    """(A, D, tau) of a(t) = A - D exp(-t / tau) fitted by least squares to the later two thirds
    of ``points`` (A and D in closed form for each tau on a log grid). Measured curves rise fast
    at first and then keep rising slowly for long, which an exponential approach from chance
    fitted to all of them reads as levelled off; so the first third is left out and the
    starting level is free."""
    late = _late(points)
    t = np.array([p[0] for p in late], dtype=float)
    y = np.array([p[1] for p in late], dtype=float)
    if t.size < 2:
        return float(y[-1]), 0.0, 1.0
    best = (math.inf, float(y.mean()), 0.0, 1.0)
    for tau in np.geomspace(0.5, 100.0 * max(p[0] for p in points), 240):
        X = np.stack([np.ones_like(t), -np.exp(-t / tau)], axis=1)
        coef, *_ = np.linalg.lstsq(X, y, rcond=None)
        amp, drop = float(coef[0]), max(float(coef[1]), 0.0)
        sse = float(np.sum((y - amp + drop * np.exp(-t / tau)) ** 2))
        if sse < best[0]:
            best = (sse, amp, drop, float(tau))
    return best[1], best[2], best[3]


def _at(curve: tuple[float, float, float], t: float) -> float:
    amp, drop, tau = curve
    return amp - drop * math.exp(-t / tau)


def _late(points: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
    """The later two thirds of a pilot's curve (all of it when that leaves fewer than 4)."""
    r_max = max(p[0] for p in points)
    late = [p for p in points if p[0] >= r_max / 3.0]
    return late if len(late) >= 4 else list(points)


def _line_at(points: Sequence[tuple[int, float]], t: float) -> float:
    """The least-squares line through the later two thirds of ``points``, at ``t``: a rising,
    levelling curve lies below it, so it bounds the fitted approach's extrapolation (which
    runs away on a few noisy points)."""
    late = _late(points)
    x = np.array([p[0] for p in late], dtype=float)
    y = np.array([p[1] for p in late], dtype=float)
    if x.size < 2 or float(np.ptp(x)) == 0.0:
        return float(y[-1])
    slope, level = np.polyfit(x, y, 1)
    return float(level + slope * t)


def reference_from_pilot(pilot, base: float = BASE_RATIO) -> MeasuredReference:
    """The fully connected reference measured by ``pilot`` (a
    :class:`~airplan_qo.plans.pilot.ReferencePilot`): its fc after the budget (the pilot's last
    accuracy when it ran the whole budget, else an approach fitted to the pilot's curve
    (:func:`_approach`) at the budget, at most the line through the same rounds there and at
    least the last accuracy) and the rounds its SLA metric needs to reach ``base * fc`` (the
    pilot's smoothed crossing, else the fitted approach, at least the pilot's rounds and at
    most ten budgets)."""
    return _reference(pilot, float(base))


@functools.lru_cache(maxsize=64)
def _reference(pilot, base: float) -> MeasuredReference:
    from ..plans.sla import first_crossing

    acc = [(r, float(a)) for r, a in enumerate(pilot.accuracy, 1) if a is not None]
    metric = [(r, float(a)) for r, a in enumerate(pilot.metric, 1) if a is not None]
    if not acc or not metric:
        raise ValidationError(f"the pilot (execution {pilot.exec_id}) measured no accuracy")
    budget = max(int(pilot.budget), 1)
    full = pilot.rounds >= budget
    fc = acc[-1][1] if full else min(max(min(_at(_approach(acc), budget),
                                             _line_at(acc, budget)), acc[-1][1]), 1.0)
    target = base * fc
    crossing = first_crossing(metric, target)
    if crossing is not None:
        return MeasuredReference(float(fc), math.log(crossing), True, not full)
    cap = 10.0 * budget
    amp, drop, tau = _approach(metric)
    if drop <= 1e-12 or target >= amp:
        rounds = cap
    else:
        rounds = min(-tau * math.log((amp - target) / drop), cap)
    rounds = max(rounds, float(pilot.rounds))   # it was not reached within the pilot
    return MeasuredReference(float(fc), math.log(rounds), False, True)


def combine_reference(predicted: float, prior_sd: float, measured: float,
                      measured_sd: float = PILOT_SD) -> tuple[float, float]:
    """The reference's log T from the model's prediction N(predicted, prior_sd^2) and a pilot's
    measurement N(measured, measured_sd^2), precision-weighted: (mean, sd)."""
    w0 = 1.0 / max(prior_sd, 1e-9) ** 2
    w1 = 1.0 / max(measured_sd, 1e-9) ** 2
    return (w0 * predicted + w1 * measured) / (w0 + w1), (w0 + w1) ** -0.5


__all__ += ["MeasuredReference", "reference_from_pilot", "combine_reference"]


# ---- the estimator ----------------------------------------------------------------------------

#: The reference fit shipped with the package (regenerate: docs/planner.md).
CONSTANTS_FILE = "time_to_target.json"


#: The shipped fit of the same model on the *average model's* accuracy curves of the same grid
#: (``avg_model_accuracy``): what a plan with a mixing-only tail is planned with.
AVERAGE_MODEL_FILE = "time_to_target_avg.json"

#: The accuracy deficit to their average model the clients keep after a long mixing-only tail
#: over the air, times the mixing rate p: the noise each mixing round adds is contracted by
#: 1 - p per round, so the deficit it leaves scales as 1 / p, and as the noise's amplitude,
#: 1 / sqrt(SNR) (:func:`finish_gap`). 0.00085 = the half point measured on the one-peer
#: exponential graph (p_random 0.17) at 10 dB after 40 mixing-only rounds (mnist1d, N = 30).
#: A calibration may set it as ``finish.floor``.
FINISH_FLOOR = 0.00085

#: The same after a tail on the complete graph (``plan.mix_on``): what one noisy exact average
#: leaves between the clients and their average model at 10 dB. 0.0035 = the mean deficit after
#: the second mixing round on the complete graph over 120 branches (mnist1d, N = 30-100, one-peer
#: exponential, Base-2 and small-world plans, 4 seeds; the third and fourth rounds left 0.0031
#: and 0.0030; docs/results.md). A calibration may set it as ``finish.floor_complete``.
FINISH_FLOOR_COMPLETE = 0.0035


@functools.lru_cache(maxsize=4)
def load_reference(name: str = CONSTANTS_FILE) -> dict:
    """A shipped fit (the clients' own models by default, :data:`AVERAGE_MODEL_FILE` for the
    average model): version, source, flat constants and the fitted range."""
    import json
    from importlib import resources

    text = (resources.files("airplan_qo.costmodels") / name).read_text()
    return json.loads(text)


def finish_gap(deficit: float, p: float, mix_rounds: int, channel,
               constants: Mapping[str, float], mix_on: str | None = None) -> float:
    """The accuracy the clients are planned to end below their average model after
    ``mix_rounds`` mixing-only rounds: their ``deficit`` at the end of training shrunk by
    ``1 - p`` per round (``p`` the random mixing matrix's rate, plans/finish.py), plus the
    floor the channel's noise leaves over the air: ``finish.floor`` (:data:`FINISH_FLOOR`)
    / p at 10 dB, scaled by sqrt(10 / SNR) (linear SNR); none on a digital or ideal channel. A
    tail on the complete graph (``mix_on``) averages the deficit away and leaves only the floor
    of one exact average, ``finish.floor_complete`` (:data:`FINISH_FLOOR_COMPLETE`) at 10 dB,
    scaled the same way.

    The floors scale with the noise's amplitude, not its power: on mnist1d with one local
    step (grid ``hungry_onestep_mixed``, N = 60 and 80, 4 seeds each) Base-2's own tail left
    the clients 3.7-3.9 points below their average model at 0 dB, 0.5-1.3 at 10 dB and 0.35 at
    20 dB, about sqrt(10) per 10 dB; a tail on the complete graph left 0.4 points at 0 dB and
    0.05 at 20 dB (0.2-0.7 at 10 dB), where 10 / SNR had planned 3.5 and 0.035."""
    ota = getattr(channel, "kind", "ideal") == "ota"
    scale = 10.0 ** (-(channel.snr_db - 10.0) / 20.0) if ota else 0.0
    if mix_on is not None:
        return float(constants.get("finish.floor_complete", FINISH_FLOOR_COMPLETE)) * scale
    p = min(max(float(p), 1e-6), 1.0)
    left = max(float(deficit), 0.0) * (1.0 - p) ** int(mix_rounds)
    return left + float(constants.get("finish.floor", FINISH_FLOOR)) / p * scale


def flatten(plan_fit: "TobitFit", fc_fit: "TobitFit",
            ceiling_fit: "TobitFit | None" = None,
            joint_fit: "TobitFit | None" = None,
            target_fit: "TobitFit | None" = None,
            spreads: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, float]:
    """The (plan, fc, ceiling, joint, target) fits as the estimator's flat named constants
    (``joint``: only ``joint.sd``, the spread of log T about the end-to-end prediction;
    ``target``: the level shift of :func:`target_shift` and the ratio it is relative to;
    ``spreads``: kind -> dataset -> that dataset's spread, ``KIND.sd.dataset:NAME``, see
    :func:`dataset_spread`)."""
    out: dict[str, float] = {}
    for prefix, f in (("plan", plan_fit), ("fc", fc_fit), ("ceil", ceiling_fit),
                      ("joint", joint_fit), ("target", target_fit)):
        if f is None:
            continue
        out.update({f"{prefix}.{n}": float(v) for n, v in f.coef.items()})
        out[f"{prefix}.sd"] = float(f.sd)
    for kind, by_dataset in (spreads or {}).items():
        out.update({f"{kind}.sd.dataset:{d}": float(v) for d, v in sorted(by_dataset.items())})
    return out


#: How many reached runs a dataset's own spread of log T weighs against the whole fit's in
#: :func:`pooled_spread`: a dataset with few reached runs keeps about the fit's spread.
DATASET_SPREAD_PRIOR_RUNS = 50


def pooled_spread(own_sd: float, reached: int, overall_sd: float) -> float:
    """A dataset's spread of log T about the model's prediction, shrunk towards the whole fit's
    (the root of the mean square, the dataset's own weighing its ``reached`` runs and the fit's
    :data:`DATASET_SPREAD_PRIOR_RUNS`), and never below the whole fit's: a dataset's spread is
    measured on the runs the model was fitted on, so a narrower one would be a promise about
    new workloads of that dataset the fit cannot keep (measured: narrowing digits from 0.32 to
    0.28 cost a held-out SLA and 8% of cost on the held-out grids); a wider one says the model
    fits that task worse than the rest."""
    k = DATASET_SPREAD_PRIOR_RUNS
    pooled = math.sqrt((reached * own_sd ** 2 + k * overall_sd ** 2) / (reached + k))
    return max(pooled, overall_sd)


def dataset_spread(constants: Mapping[str, float], kind: str, dataset: str | None,
                   default: float | None = None) -> float | None:
    """The spread of log T (``kind``: ``plan`` about the measured reference, ``joint`` about
    the end-to-end prediction) for a dataset: its own (``KIND.sd.dataset:NAME``, fitted per
    dataset and shrunk by :func:`pooled_spread`) where the fit has one, else the fit's
    (``KIND.sd``), else ``default``. The model is not equally good on every task: on one
    whose sparse plans it ranks poorly (their residuals large), a sparse plan's P(meets SLA) is
    that much less certain, and the planner keeps to denser plans there."""
    own = constants.get(f"{kind}.sd.dataset:{dataset}") if dataset else None
    if own is not None:
        return own
    return constants.get(f"{kind}.sd", default)


#: The transports and algorithms of a fit whose range does not list them (``range.transports``,
#: ``range.algorithms``, written by ``evaluation/ttt_crossval.reference`` since they were
#: recorded): such fits were made on over-the-air D-SGD and CHOCO runs.
DEFAULT_FITTED_TRANSPORTS = ("ota",)
DEFAULT_FITTED_ALGORITHMS = ("dsgd", "choco")
#: Log-rounds spread added for each operator outside the fit (a factor e^0.5 ~ 1.65 at one sd).
OPERATOR_SD = 0.5


@attrs.frozen
class FittedOperators:
    """The transports, digital widths and algorithms a fit's runs used
    (:func:`fitted_operators`). Transports are recorded by name and the digital widths as
    one interval (``bits``: the quantiser enters the model through a continuous feature,
    ``quant``, so a width between fitted ones is interpolated, one outside them extrapolated
    and treated as an unseen transport); algorithms by the name that runs
    (``effective_algorithm``: ``auto`` resolved, presets by their own name)."""

    transports: tuple[str, ...]
    algorithms: tuple[str, ...]
    bits: tuple[int, int] | None = None

    def transport_fitted(self, plan) -> bool:
        if plan.transport not in self.transports:
            return False
        return (plan.transport != "digital" or self.bits is None
                or self.bits[0] <= plan.bits <= self.bits[1])

    def algorithm_fitted(self, plan) -> bool:
        return plan.effective_algorithm in self.algorithms

    def fitted(self, plan) -> bool:
        return self.transport_fitted(plan) and self.algorithm_fitted(plan)

    def transports_text(self) -> str:
        """``over the air only``, or the fitted transports (digital with its widths)."""
        if self.transports == ("ota",):
            return "over the air only"
        return ", ".join(f"digital ({self.bits[0]}..{self.bits[1]} bits)"
                         if t == "digital" and self.bits else t for t in self.transports)


def fitted_operators(fitted_range: Mapping) -> FittedOperators:
    """The operators of a fit's ``range`` (``transports``, ``bits``, ``algorithms``); a range
    that lists none of them (a fit made before they were recorded) was fitted on
    :data:`DEFAULT_FITTED_TRANSPORTS` and :data:`DEFAULT_FITTED_ALGORITHMS`."""
    transports = tuple(fitted_range.get("transports") or DEFAULT_FITTED_TRANSPORTS)
    algorithms = tuple(fitted_range.get("algorithms") or DEFAULT_FITTED_ALGORITHMS)
    bits = fitted_range.get("bits")
    return FittedOperators(transports, algorithms,
                           (int(bits[0]), int(bits[1])) if bits else None)


def operator_fitted(fitted_range: Mapping, plan) -> bool:
    """Whether a fit with this ``range`` saw runs of the plan's transport (and width) and
    algorithm; the estimator widens a plan for which it did not
    (:meth:`TimeToTargetEstimator.operator_spread`), and the evaluation's baselines table says
    so."""
    return fitted_operators(fitted_range).fitted(plan)


@attrs.frozen
class TimeToTargetEstimator:
    """Predicts the distribution of log rounds-to-target (module docstring).

    ``estimate`` returns the expected rounds paid (E[min(T, budget)]) as ``rounds``, the 90%
    interval of T as ``rounds_lo``/``rounds_hi``, P(T <= budget) as ``p_meets`` and, as
    ``notes``, where the plan lies outside the fitted range. The accuracy curve has the fitted
    ceiling A of the fully connected plan (``ceil.*``: the ``fc`` the SLA is relative to) as its
    plateau and reaches 95% of it at the plan's median T: ``a(t) = A (1 - exp(-t ln 20 / T))``.
    """

    name: str = "ttt"
    description: str = ("time to target: censored regression of log rounds relative to the "
                        "fully connected reference, with a chance-constrained SLA")
    priors: dict[str, float] = attrs.field(factory=lambda: dict(load_reference()["constants"]))
    fitted_range: dict = attrs.field(factory=lambda: dict(load_reference().get("range", {})))
    #: the accuracy the fit's rounds were judged on (the SLA metric): ``accuracy``, the clients'
    #: own models, for the shipped fit
    fitted_metric: str = attrs.field(factory=lambda: load_reference().get("metric", "accuracy"))
    #: constants a calibration may add beyond the priors (the level of a dataset not in the grid)
    open_prefixes: tuple[str, ...] = ("fc.dataset:",)
    #: it costs plans that end with mixing-only rounds (:meth:`_tail_estimate`)
    plans_mixing_tails: bool = True
    #: the tails' level constants (``level.*``, costmodels/tail_level.py) to plan with in place
    #: of the shipped average model fit's (None: the shipped ones)
    level_constants: dict | None = None

    # calibration (interface.Calibratable): a censored level shift per dataset, ttt_fit.py
    calibration_scopes = ("global", "dataset")
    observation_kind = "finished executions planned with COST MODEL ttt"

    def observation_reader(self, catalog):
        from .ttt_fit import observation_reader

        return observation_reader(catalog)

    def refit(self, observations, before, *, min_obs: int, **options):
        if options:
            raise ValidationError(f"the ttt refit takes no options, got {', '.join(options)}")
        from .ttt_fit import refit

        return refit(observations, before)

    def ceiling(self, ctx, plan, stats) -> float:
        """Predicted final accuracy of the fully connected plan on this workload."""
        if ctx.pilot is not None:      # measured: the fc the SLA is relative to
            return self.reference(ctx).fc_accuracy
        return self._ceiling_at(ctx, stats.spectra.n_nodes, plan.channel)

    def _ceiling_at(self, ctx, n: int, channel) -> float:
        """:meth:`ceiling` from the ceiling model, for ``n`` clients on ``channel``."""
        c = ctx.constants
        w = fc_features(heterogeneity(ctx.alpha, ctx.n_classes), n,
                        channel_noise_at(channel, n - 1), channel.dropout, ctx.step)
        logit = task_level(c, "ceil", ctx.dataset, ctx.model) + sum(
            c.get(f"ceil.{k}", 0.0) * v for k, v in w.items())
        return float(1.0 / (1.0 + math.exp(-logit)))

    def reference(self, ctx) -> MeasuredReference:
        """The fully connected reference measured by the context's pilot."""
        return reference_from_pilot(ctx.pilot, ctx.constants.get("target.base", BASE_RATIO))

    def reference_terms(self, ctx, n: int, channel) -> ReferenceTerms:
        """What every plan of a workload shares (:class:`ReferenceTerms`): its fully connected
        reference at ``n`` clients on ``channel``, and the context's constants as the
        per-plan arithmetic uses them."""
        c = ctx.constants
        ceiling = (self.reference(ctx).fc_accuracy if ctx.pilot is not None
                   else self._ceiling_at(ctx, n, channel))
        zeta2 = heterogeneity(ctx.alpha, ctx.n_classes)
        fc_error = 1.0 - ceiling
        fc_p = approximate_survival_factor(1.0, n - 1, channel.dropout,
                                           channel.active_probability)
        fc_noise = channel_noise_at(channel, n - 1)
        x_fc = plan_features(fc_p, 1.0, zeta2, fc_noise, channel.dropout, n, fc_error=fc_error)
        w = fc_features(zeta2, n, fc_noise, channel.dropout, ctx.step)
        log_t_fc = task_level(c, "fc", ctx.dataset, ctx.model) + sum(
            c.get(f"fc.{k}", 0.0) * v for k, v in w.items())
        sd = dataset_spread(c, "joint", ctx.dataset) or math.hypot(
            dataset_spread(c, "plan", ctx.dataset, 0.3), c.get("fc.sd", 0.0))
        unseen, what = unseen_task(c, self.fitted_range, ctx.dataset, ctx.model)
        used_log_t_fc, used_sd, pilot_terms = log_t_fc, sd, {}
        if ctx.pilot is not None:
            # a pilot measured the reference: its log T combined with the model's prediction,
            # whose own uncertainty is what the joint spread holds beyond the plan model's
            # (about none on the fitted grid) plus, for an unseen dataset or model, the spread
            # of levels
            plan_sd = dataset_spread(c, "plan", ctx.dataset, 0.3)
            prior = math.sqrt(max(sd * sd - plan_sd * plan_sd, 0.0))
            if unseen is not None:
                prior = math.hypot(prior, unseen[0])
            measured = self.reference(ctx)
            used_log_t_fc, ref_sd = combine_reference(
                log_t_fc, max(prior, REFERENCE_PRIOR_SD_FLOOR), measured.log_t)
            used_sd = math.hypot(min(plan_sd, sd), ref_sd)
            pilot_terms = {"log_t_fc_predicted": log_t_fc, "log_t_fc_measured": measured.log_t,
                           "reference_sd": ref_sd, "reference_crossed": float(measured.crossed),
                           "reference_extrapolated": float(measured.extrapolated)}
        return ReferenceTerms(
            n=n, channel=channel, ceiling=ceiling, zeta2=zeta2, fc_error=fc_error, x_fc=x_fc,
            log_t_fc=used_log_t_fc, sd=used_sd, pilot_terms=pilot_terms,
            plan_coef=tuple((f, c.get(f"plan.{f}", PLAN_PRIORS.get(f, 0.0)))
                            for f in PLAN_FEATURES),
            unseen=unseen, unseen_what=what)

    def accuracy_at(self, ctx, plan, stats, rounds):
        ref = self.reference_terms(ctx, stats.spectra.n_nodes, plan.channel)
        return _curve(self._terms(ctx, plan, stats, ref)["mu"], ref.ceiling, rounds)

    def terms(self, ctx, plan, stats) -> dict[str, float]:
        return self._terms(ctx, plan, stats,
                           self.reference_terms(ctx, stats.spectra.n_nodes, plan.channel))

    def features(self, ctx, plan, stats) -> dict[str, float]:
        """The plan's features (:data:`PLAN_FEATURES`, absolute, with its workload's
        difficulty terms) as this estimator plans with them: :func:`plan_inputs`, the same
        function the grid fit uses."""
        ref = self.reference_terms(ctx, stats.spectra.n_nodes, plan.channel)
        return plan_inputs_features(
            plan_inputs(plan, stats, ctx.alpha, ctx.n_classes, ctx.d), plan,
            stats.spectra.n_nodes, ref.fc_error)

    def _terms(self, ctx, plan, stats, ref: ReferenceTerms) -> dict[str, float]:
        n = stats.spectra.n_nodes
        inputs = plan_inputs(plan, stats, ctx.alpha, ctx.n_classes, ctx.d, ref.noise)
        p_random = inputs.p_random
        x = plan_inputs_features(inputs, plan, n, ref.fc_error)
        x_fc = ref.x_fc
        delta = sum(coef * (x[f] - x_fc[f]) for f, coef in ref.plan_coef)
        out = {"p_random": p_random, "zeta2": ref.zeta2, "log_t_fc": ref.log_t_fc,
               "relative_log_t": delta, "mu": ref.log_t_fc + delta, "sd": ref.sd}
        if ref.pilot_terms:
            out.update(ref.pilot_terms)
        return out

    @functools.cached_property
    def operators(self) -> FittedOperators:
        """The transports and algorithms of the fitted range (:func:`fitted_operators`)."""
        return fitted_operators(self.fitted_range)

    def operator_spread(self, ctx, plan, stats) -> float:
        """Extra log-rounds spread of a plan whose transport (or digital width) or algorithm
        the fit never saw (the fitted range's ``transports``, ``bits`` and ``algorithms``,
        :func:`fitted_operators`): :data:`OPERATOR_SD` for each, plus the size of the term
        the model extrapolates (the channel noise a digital plan drops, the heterogeneity
        gradient tracking drops), as uncertain as it is large. A quantiser's slowdown is not
        widened further: where the fit has no coefficient for it, the theory's
        (:data:`PLAN_PRIORS`) costs it, so a coarse quantiser stays out of reach instead of
        being made possible by a wide interval. 0 for a plan inside the fit."""
        ops = self.operators
        if ops.fitted(plan):
            return 0.0
        c = ctx.constants
        spread = 0.0
        if not ops.transport_fitted(plan):
            x_ota = channel_noise_at(plan.channel, stats.spectra.mean_degree)
            p_random = max(stats.spectra.mixing_p, 1e-12)
            spread = math.hypot(spread, OPERATOR_SD,
                                c.get("plan.noise", 0.0) * x_ota / p_random)
        if not ops.algorithm_fitted(plan):
            lp = math.log(1.0 / max(stats.spectra.mixing_p, 1e-12))
            lk = math.log(1.0 / max(plan.k_ratio, 1e-12))
            dropped = (heterogeneity(ctx.alpha, ctx.n_classes)
                       * (c.get("plan.zeta2_log_inv_p", 0.0) * lp
                          + c.get("plan.zeta2_log_inv_k", 0.0) * lk)
                       if plan.effective_algorithm == "gradient_tracking" else 0.0)
            spread = math.hypot(spread, OPERATOR_SD, dropped)
        return spread

    def notes(self, ctx, plan, stats) -> tuple[str, ...]:
        r = self.fitted_range
        ops = self.operators
        out = []
        if not ops.transport_fitted(plan):
            out.append(f"transport {plan.transport} (b = {plan.bits}) not in the fitted runs "
                       f"({ops.transports_text()}): rounds without channel noise, with the "
                       f"quantiser's slowdown")
        alg = plan.effective_algorithm
        if not ops.algorithm_fitted(plan):
            what = {"gradient_tracking": "rounds without the heterogeneity term",
                    "fedavg": "rounds of the complete graph's averaging",
                    "fedprox": "rounds of the complete graph's averaging",
                    "dllr_oa": "rounds of D-SGD on the same graph sequence at k"}.get(
                        alg, "rounds of D-SGD on the same graph")
            out.append(f"algorithm {alg} not in the fitted runs ({', '.join(ops.algorithms)})"
                       f": {what}")
        n = stats.spectra.n_nodes
        own = (r.get("clients_by_dataset") or {}).get(ctx.dataset)
        if r.get("clients") and not r["clients"][0] <= n <= r["clients"][1]:
            out.append(f"N = {n} outside the fitted {r['clients'][0]}..{r['clients'][1]}")
        elif own and not own[0] <= n <= own[1]:
            out.append(f"N = {n} outside the fitted {own[0]}..{own[1]} for {ctx.dataset}")
        ks = r.get("k")
        if ks and not min(ks) <= plan.k_ratio <= max(ks):
            out.append(f"k = {plan.k_ratio:g} outside the fitted {min(ks):g}..{max(ks):g}")
        fams = r.get("families")
        if fams and plan.topology.family not in fams:
            out.append(f"family {plan.topology.family} not in the fitted grid")
        ds = r.get("datasets")
        if ds and ctx.dataset and ctx.dataset not in ds:
            out.append(f"dataset {ctx.dataset} not in the fitted grid")
        if unseen_model(r, ctx.model):
            out.append(f"model {ctx.model} not in the fitted grid")
        alpha = r.get("alpha")
        if alpha and ctx.alpha is not None and not alpha[0] <= ctx.alpha <= alpha[1]:
            shown = "inf (iid)" if math.isinf(ctx.alpha) else f"{ctx.alpha:.3g}"
            out.append(f"alpha = {shown} outside the fitted {alpha[0]:.3g}..{alpha[1]:.3g}")
        drop = r.get("dropout")
        if drop and not drop[0] <= plan.channel.dropout <= drop[1]:
            out.append(f"dropout {plan.channel.dropout:g} outside the fitted {drop[0]:g}.."
                       f"{drop[1]:g}")
        snr = r.get("snr_db")
        if snr and plan.channel.kind == "ota" and not snr[0] <= plan.channel.snr_db <= snr[1]:
            out.append(f"SNR {plan.channel.snr_db:g} dB outside the fitted {snr[0]:g}.."
                       f"{snr[1]:g}")
        return tuple(out)

    def estimate(self, ctx, plan, stats, target_accuracy):
        return self._estimate(ctx, plan, stats, target_accuracy,
                              self.reference_terms(ctx, stats.spectra.n_nodes, plan.channel))

    def estimate_many(self, ctx, items, target_accuracy):
        """:meth:`estimate` of each (plan, stats) of ``items``, the reference terms they share
        (:meth:`reference_terms`, one per client count and channel) computed once."""
        refs: dict[tuple, ReferenceTerms] = {}
        out = []
        for plan, stats in items:
            key = (stats.spectra.n_nodes, plan.channel)
            ref = refs.get(key)
            if ref is None:
                ref = refs[key] = self.reference_terms(ctx, key[0], key[1])
            out.append(self._estimate(ctx, plan, stats, target_accuracy, ref))
        return out

    def _target_terms(self, ctx, ref: ReferenceTerms, target_accuracy: float) -> tuple:
        """What every plan of ``ref`` shares for one target accuracy: (rho, the notes it adds,
        and the g, level and relative of :func:`target_shift`, P(fc accuracy above the
        target)). The model is fitted for targets at a fixed ratio of the fully connected
        plan's final accuracy A (target.base, 0.95 for the shipped fit); another target rho A
        is reached target_shift(...) later in log rounds (fitted on the measured curves), and
        never when rho >= 1."""
        ceiling, c = ref.ceiling, ctx.constants
        rho = float(target_accuracy) / ceiling if ceiling > 0 else math.inf
        if rho >= 1.0:
            return rho, (), 0.0, 0.0, 0.0, 0.0
        notes: tuple[str, ...] = ()
        ratios = self.fitted_range.get("target_ratio")
        if ratios and not ratios[0] <= rho <= ratios[1]:
            notes += (f"target at {rho:.3g} of the predicted fc outside the fitted "
                      f"{ratios[0]:g}..{ratios[1]:g}",)
        g = target_level(rho) - target_level(c.get("target.base", BASE_RATIO))
        p_ceiling = 1.0
        unseen, what = ref.unseen, ref.unseen_what
        if unseen is not None and ctx.pilot is None:
            # the target is out of reach when the real fc accuracy lies below it
            p_ceiling = ceiling_above(ceiling, float(target_accuracy), unseen[1])
            notes += (f"{' and '.join(what)} unseen: its fully connected accuracy and rounds "
                      f"are unknown, so P(meets SLA) and the rounds interval are widened "
                      f"(P(fc accuracy above the target) {p_ceiling:.2f}); a pilot of the "
                      f"fully connected reference (WITH (pilot = 'fc'))"
                      f"{' or CALIBRATE' if what[0].startswith('dataset') else ''} "
                      f"measures them",)
        return (rho, notes, g, c.get("target.level", 1.0), c.get("target.relative", 0.0),
                p_ceiling)

    @functools.cached_property
    def average_model(self) -> "TimeToTargetEstimator":
        """The same model fitted on the average model's curves (:data:`AVERAGE_MODEL_FILE`)."""
        fit = load_reference(AVERAGE_MODEL_FILE)
        constants = dict(fit["constants"])
        if self.level_constants is not None:
            constants = {k: v for k, v in constants.items() if not k.startswith("level.")}
            constants.update(self.level_constants)
        return TimeToTargetEstimator(priors=constants,
                                     fitted_range=dict(fit.get("range", {})),
                                     fitted_metric=fit.get("metric", "avg_model_accuracy"))

    def level_inputs(self, ctx, plan, stats, ref: ReferenceTerms, train_rounds: int,
                     dataset: str, p_random: float | None = None) -> LevelInputs:
        """What the tails' level model (costmodels/tail_level.py) predicts ``plan``'s average
        model from after ``train_rounds`` training rounds: the one definition the planner and
        the level fit (evaluation/tail_level_fit.py) both use. ``p_random``: the plan's, when
        the caller has it."""
        avg = self.average_model
        actx = attrs.evolve(ctx, constants=avg.priors, fitted_range=avg.fitted_range)
        aref = ref.average.get("terms")
        if aref is None:   # shared by the workload's plans, as ref is
            aref = ref.average["terms"] = avg.reference_terms(actx, ref.n, ref.channel)
        if p_random is None:
            p_random = self._terms(ctx, plan, stats, ref)["p_random"]
        return LevelInputs(
            dataset=dataset, train_rounds=float(train_rounds),
            average_median=math.exp(min(avg._terms(actx, plan, stats, aref)["mu"], 700.0)),
            p_random=float(p_random), n=ref.n, zeta2=ref.zeta2,
            averaged=bool(averaged_cliques(plan.topology)), k=float(plan.k_ratio),
            local_steps=int(ctx.local_steps or DEFAULT_LOCAL_STEPS),
            budget_rounds=float(ctx.round_budget))

    def _tail_estimate(self, ctx, plan, stats, target_accuracy, ref: ReferenceTerms):
        """A plan that trains ``budget - m`` rounds and then only mixes for ``m``
        (``plan.mix_rounds``; plans/finish.py). It meets the SLA when its clients reach the
        target while training (this model, on the shorter budget) or when its *average*
        model is at least :func:`finish_gap` above the target when the training ends: the tail
        then draws the clients to it (on the plan's own topology, or on the complete graph:
        ``mix_on``). Where the average model stands then, relative to the fully connected
        plan's final accuracy, is the tails' level model (costmodels/tail_level.py), fed by the
        fit on the average model's curves (:attr:`average_model`) for how far along its curve
        it has come. Its rounds: those of the training, plus the whole tail where the clients
        have not reached the target by then (``tail_rounds_paid``, costed at the complete
        graph's round for a tail there)."""
        m = int(plan.mix_rounds)
        train = max(int(ctx.round_budget) - m, 1)
        base = attrs.evolve(plan, mix_rounds=0, mix_on=None)
        trained = self._estimate(attrs.evolve(ctx, round_budget=train), base, stats,
                                 target_accuracy, ref)
        avg = self.average_model
        p_random = trained.terms.get("p_random", 1.0)
        # a dataset or model the fit has not seen takes the fitted datasets' mean level
        unseen = ref.unseen is not None and ctx.pilot is None
        level_inputs = self.level_inputs(ctx, base, stats, ref, train,
                                         "" if unseen else ctx.dataset, p_random)
        level = end_level(avg.priors, level_inputs)
        if level is None:
            raise ValidationError("the average model's fit holds no level constants "
                                  "(level.*): mixing-only tails cannot be costed")
        mean, sd, seen = level
        # the clients' deficit to their average model when the training ends (the level's
        # median accuracy less the clients' predicted one), and what the tail leaves of it
        average_acc = math.exp(mean) * ref.ceiling
        deficit = average_acc - (trained.accuracy or 0.0)
        gap = finish_gap(deficit, p_random, m, plan.channel, ctx.constants, plan.mix_on)
        need = (float(target_accuracy) + gap) / max(ref.ceiling, 1e-12)
        p_avg = (level_above(avg.priors, mean, sd, need)
                 * trained.terms.get("p_ceiling_above_target", 1.0))
        p_train = trained.p_meets or 0.0
        p = max(p_train, p_avg)
        # the tail's rounds are paid where the clients have not reached the target training
        tail_paid = (1.0 - p_train) * m
        rounds = (trained.rounds or float(train)) + tail_paid
        acc = max(trained.accuracy or 0.0, average_acc - gap)
        terms = dict(trained.terms, p_meets=p, p_meets_training=p_train,
                     p_meets_average_model=p_avg, mix_rounds=float(m), training_rounds=train,
                     tail_rounds_paid=tail_paid, finish_deficit=deficit, finish_gap=gap,
                     average_model_level=math.exp(mean), average_model_level_sd=sd)
        notes = trained.notes
        if not seen:
            notes += (f"average model's level: {' and '.join(ref.unseen_what) or ctx.dataset}"
                      f" not in its fit ({', '.join(fitted_datasets(avg.priors))}): the fitted "
                      f"datasets' mean level, widened",)
        return Estimate(rounds=rounds, accuracy=acc, rounds_lo=trained.rounds_lo,
                        rounds_hi=trained.rounds_hi, terms=terms,
                        model_term=trained.model_term, calibration_ids=ctx.calibration_ids,
                        p_meets=p, notes=notes)

    def _estimate(self, ctx, plan, stats, target_accuracy, ref: ReferenceTerms):
        if plan.mix_rounds:
            return self._tail_estimate(ctx, plan, stats, target_accuracy, ref)
        ceiling = ref.ceiling
        t = self._terms(ctx, plan, stats, ref)
        budget = max(int(ctx.round_budget), 1)
        sd = t["sd"]
        key = (plan.transport, plan.bits, plan.effective_algorithm, stats.spectra.n_nodes,
               plan.k_ratio, plan.topology.family)
        notes = ref.notes.get(key)
        if notes is None:
            notes = ref.notes[key] = self.notes(ctx, plan, stats)
        fixed = ref.targets.get(target_accuracy)
        if fixed is None:
            fixed = ref.targets[target_accuracy] = self._target_terms(ctx, ref, target_accuracy)
        rho, target_notes, g, level, relative, p_ceiling = fixed
        acc = float(_curve(t["mu"], ceiling, budget))
        if rho >= 1.0:
            terms = {k: float(v) for k, v in t.items()}
            terms.update(p_meets=0.0, target_over_ceiling=rho)
            return Estimate(rounds=None, accuracy=acc, terms=terms, model_term=float(t["mu"]),
                            calibration_ids=ctx.calibration_ids, p_meets=0.0, notes=notes)
        notes += target_notes
        # target_shift(rho, relative log T, constants)
        mu = t["mu"] + g * (level + relative * t["relative_log_t"])
        unseen = ref.unseen
        outside = self.operator_spread(ctx, plan, stats)
        if outside:
            # a transport or algorithm the fit never saw: widened as for an unseen dataset
            sd = math.hypot(sd, outside)
        if unseen is not None and ctx.pilot is None:
            # a dataset or model the fit never saw: its fc level (log rounds) and its fc
            # accuracy are the fitted datasets' mean, as uncertain as those levels are spread
            sd = math.hypot(sd, unseen[0])
        p = meets_probability(mu, sd, budget) * p_ceiling
        rounds = max(1.0, expected_rounds(mu, sd, budget))
        lo = math.exp(min(mu - 1.6448536269514722 * sd, 700.0))
        hi = math.exp(min(mu + 1.6448536269514722 * sd, 700.0))
        terms = {k: float(v) for k, v in dict(t, mu=mu, p_meets=p,
                                              median_rounds=math.exp(min(mu, 700.0)),
                                              target_over_ceiling=rho).items()}
        if unseen is not None or outside or ctx.pilot is not None:
            terms.update(sd=float(sd))
        if unseen is not None or ctx.pilot is not None:
            terms.update(p_ceiling_above_target=float(p_ceiling))
        if ctx.privacy_epsilon:
            terms["privacy_epsilon"] = ctx.privacy_epsilon
        return Estimate(rounds=rounds, accuracy=acc, rounds_lo=max(1.0, lo),
                        rounds_hi=max(1.0, hi), terms=terms, model_term=float(mu),
                        calibration_ids=ctx.calibration_ids, p_meets=p, notes=notes)


@attrs.frozen
class ReferenceTerms:
    """What every plan of one workload shares in a ``ttt`` estimate, computed once per
    planning call (:meth:`TimeToTargetEstimator.reference_terms`): the fully connected
    reference at ``n`` clients on ``channel`` (its accuracy ``ceiling``, its log T after any
    pilot, its plan features ``x_fc``), the spread of log T, the plan model's coefficients in
    :data:`PLAN_FEATURES` order, and what of the workload the fit has not seen; ``noise`` and
    ``notes`` keep the transport terms (:func:`plan_inputs`) and extrapolation notes of the
    plans estimated so far (they repeat across sparsity, transport and algorithm), ``targets``
    what a target
    accuracy makes of them all (:meth:`TimeToTargetEstimator._target_terms`)."""

    n: int
    channel: object
    ceiling: float
    zeta2: float
    fc_error: float
    x_fc: dict[str, float]
    log_t_fc: float
    sd: float
    pilot_terms: dict[str, float]
    plan_coef: tuple[tuple[str, float], ...]
    unseen: tuple[float, float] | None
    unseen_what: tuple[str, ...]
    noise: dict = attrs.field(factory=dict, eq=False)
    notes: dict = attrs.field(factory=dict, eq=False)
    targets: dict = attrs.field(factory=dict, eq=False)
    #: the average model's fit's reference terms (``"terms"``), once a plan with a mixing-only
    #: tail needs them
    average: dict = attrs.field(factory=dict, eq=False)


__all__ += ["DEFAULT_FITTED_ALGORITHMS", "DEFAULT_FITTED_TRANSPORTS", "FittedOperators",
            "fitted_operators", "operator_fitted", "OPERATOR_SD", "ReferenceTerms",
            "TimeToTargetEstimator", "load_reference", "flatten", "CONSTANTS_FILE",
            "AVERAGE_MODEL_FILE", "FINISH_FLOOR", "finish_gap",
            "DATASET_SPREAD_PRIOR_RUNS", "pooled_spread", "dataset_spread"]
