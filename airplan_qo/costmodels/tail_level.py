"""The average model's level when a plan's training ends: what a mixing-only tail can draw the
clients up to.

A plan with a tail (plans/finish.py) meets a relative SLA when, at the end of its training, the
network average of its clients' models lies above the target by the gap the tail leaves. The
quantity that decides it is the ratio

    r = (average model's accuracy after the plan's training rounds) / fc

with fc the fully connected plan's final accuracy over the whole budget (the SLA's ``fc``). It
is modelled directly, log r as a Student-t variable (:data:`DOF` degrees of freedom):

    log r = beta . x + beta_d . x_d + e,     e ~ s t(dof),     log s = gamma_d . z

with ``x`` (:data:`LEVEL_FEATURES`, one coefficient for all datasets): how far the average
model has come along its own curve (``progress``: log(1 - exp(-t ln 20 / T)) with T its median
rounds to 0.95 fc from the average model's time-to-target fit, t the training rounds), log 1/p
of the plan's random mixing matrix times the local steps, the clients (more clients on the same
data) and the label heterogeneity zeta^2, Clique Averaging (alone and times log N), and
compression (log 1/k); ``x_d`` (:data:`DATASET_LEVEL_FEATURES`, a coefficient per dataset): its
level, log 1/p, the local steps a round, the log share of the round budget the plan trains
(``log_train_share``: a tail of m rounds trains ``budget - m``. Without it, the average
model's rise from 0.8 of its budget to the budget's end, measured within each mnist1d run, came
out 0.02-0.03 in log r above what ``progress`` gave, where the fitted curve has levelled off; a
plain log t, fitted across workloads too, took the lower levels of the longer budgets instead
and did not close that gap) and log N (more clients on the same data hold fewer samples each,
so the same local steps cover more of them a round: a larger drift, a lower level, by how much
depends on the dataset); ``z`` (:data:`SPREAD_FEATURES`, a coefficient per dataset): the
spread's level, zeta^2, log 1/p, log 1/k and the local steps. The seeds spread differently on
every dataset (on mnist1d 0.02-0.03 in log r at alpha 1 and 0.1 and more at alpha
0.1; on leaf_synthetic several times that), and a run now and then ends far below its
workload's others, which the t's tails hold without widening the spread everywhere.

Why a model of its own: the average model's time-to-target fit has the fully connected plan's
accuracy as every plan's plateau. Measured on the data-hungry grids, a sparse plan's average
model instead ends 2-5 points below fc with 5 local steps a round at N = 60-100 over 200 rounds
(where the fit predicted it at fc), yet 2-6 points above what that fit's curve says after 100
rounds at N = 20-40 (where the fit's curve is still rising): the tails were costed optimistic
in one regime and pessimistic in the other.

The constants (``level.*``) are fitted by :func:`fit_level` on rows measured by
``python -m airplan_qo.evaluation.tail_level_fit`` and shipped with the average model's fit
(``time_to_target_avg.json``). A dataset the fit has not seen takes the fitted datasets' mean
level and slope, its spread widened by theirs (:func:`end_level`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import attrs
import numpy as np

from ..errors import ValidationError

#: Mean features of log r, one coefficient for every dataset.
LEVEL_FEATURES = ("progress", "log_steps_log_inv_p", "log_n_log_inv_p", "zeta2_log_inv_p",
                  "averaged", "averaged_log_n", "log_inv_k")
#: Mean features of log r with a coefficient per dataset (``const``: its level).
DATASET_LEVEL_FEATURES = ("const", "log_inv_p", "log_steps", "log_train_share", "log_n")
#: Features of log s, each with a coefficient per dataset: how much the seeds spread differs
#: more between datasets than their levels do.
SPREAD_FEATURES = ("const", "zeta2", "log_inv_p", "log_inv_k", "log_steps")
#: The local steps a round of a workload that does not say (the workloads' default).
DEFAULT_LOCAL_STEPS = 5
#: The floor of the curve fraction whose log is ``progress`` (a plan that has barely started).
PROGRESS_FLOOR = 1e-3
#: Degrees of freedom of the Student-t residual of log r: a run now and then ends far below
#: its workload's others (a seed whose partition trains badly), which a normal spread would
#: have to be wide everywhere to hold. Held out (eight folds of the shipped rows by workload),
#: the mean log-likelihood per row was 1.303 at 3 degrees, 1.314 at 4, 1.322 at 6, 1.325 at 10,
#: 1.326 at 20 and 1.321 at 50.
DOF = 10.0
#: The widest spread (t scale of log r) a prediction takes: the log-linear spread grows without
#: bound outside the fitted features (k = 0.01 where the fit saw 0.1 and more), and a scale of 0.5
#: already spans r from about 0.5 to 2 times its median at the t's quartiles-to-tails.
MAX_SPREAD = 0.5
#: Ridge penalty on the coefficients of :data:`LEVEL_FEATURES` and :data:`SPREAD_FEATURES`.
RIDGE = 1e-2


@attrs.frozen
class LevelInputs:
    """What the level of one plan's average model is predicted from."""

    dataset: str
    train_rounds: float       # the rounds the plan trains before its tail
    average_median: float     # the average model's median rounds to 0.95 fc (its ttt fit)
    p_random: float           # p of the plan's random mixing matrix
    n: int                    # clients
    zeta2: float              # the workload's label heterogeneity
    averaged: bool            # Clique Averaging
    k: float = 1.0            # the sparsification ratio (CHOCO below 1)
    local_steps: int = DEFAULT_LOCAL_STEPS   # local steps a round
    budget_rounds: float = 0.0   # the plan's whole round budget (0: unknown, taken as train_rounds)


def progress(train_rounds: float, average_median: float) -> float:
    """log of the fraction of its plateau the average model's fitted curve has reached after
    ``train_rounds`` (``a(t) = A (1 - exp(-t ln 20 / T))``)."""
    tau = max(average_median, 1e-9) / math.log(20.0)
    frac = 1.0 - math.exp(-max(train_rounds, 0.0) / tau)
    return math.log(max(frac, PROGRESS_FLOOR))


def level_features(v: LevelInputs) -> tuple[dict[str, float], dict[str, float]]:
    """(the mean features, :data:`LEVEL_FEATURES` and :data:`DATASET_LEVEL_FEATURES`, the
    spread features :data:`SPREAD_FEATURES`) of one plan."""
    lp = math.log(1.0 / max(v.p_random, 1e-12))
    ln = math.log(max(v.n, 1))
    av = float(v.averaged)
    lk = math.log(1.0 / min(max(v.k, 1e-12), 1.0))
    ls = math.log(max(v.local_steps, 1))
    share = v.train_rounds / v.budget_rounds if v.budget_rounds > 0 else 1.0
    x = {"progress": progress(v.train_rounds, v.average_median),
         "log_steps_log_inv_p": ls * lp, "log_n_log_inv_p": ln * lp,
         "zeta2_log_inv_p": v.zeta2 * lp, "averaged": av, "averaged_log_n": av * ln,
         "log_inv_k": lk, "const": 1.0, "log_inv_p": lp, "log_steps": ls,
         "log_train_share": math.log(min(max(share, 1e-3), 1.0)), "log_n": ln}
    return x, {"const": 1.0, "zeta2": v.zeta2, "log_inv_p": lp, "log_inv_k": lk,
               "log_steps": ls}


def fitted_datasets(constants: Mapping[str, float]) -> list[str]:
    """The datasets with a fitted level (``level.const.dataset:NAME``)."""
    prefix = "level.const.dataset:"
    return sorted(k[len(prefix):] for k in constants if k.startswith(prefix))


def _dataset_part(constants: Mapping[str, float], prefix: str, names: Sequence[str],
                  values: Mapping[str, float], dataset: str) -> float:
    return sum(constants.get(f"{prefix}{f}.dataset:{dataset}", 0.0) * values[f] for f in names)


def end_level(constants: Mapping[str, float], v: LevelInputs
              ) -> tuple[float, float, bool] | None:
    """(mean, sd) of log r for one plan (module docstring), and whether its dataset is one the
    fit saw; None when the constants hold no level fit. A dataset the fit has not seen takes the
    fitted datasets' mean level and mean spread, widened by the spread of their levels for this
    plan. The spread is at most :data:`MAX_SPREAD`."""
    datasets = fitted_datasets(constants)
    if not datasets:
        return None
    x, z = level_features(v)
    shared = sum(constants.get(f"level.{f}", 0.0) * x[f] for f in LEVEL_FEATURES)

    def at(dataset: str) -> tuple[float, float]:
        mean = shared + _dataset_part(constants, "level.", DATASET_LEVEL_FEATURES, x, dataset)
        return mean, math.exp(_dataset_part(constants, "level.sd.", SPREAD_FEATURES, z,
                                             dataset))

    if v.dataset in datasets:
        mean, sd = at(v.dataset)
        return mean, min(sd, MAX_SPREAD), True
    pairs = [at(d) for d in datasets]
    means = [m for m, _ in pairs]
    between = float(np.std(means, ddof=1)) if len(means) > 1 else 0.0
    sd = math.hypot(float(np.mean([min(s, MAX_SPREAD) for _, s in pairs])), between)
    return float(np.mean(means)), min(sd, MAX_SPREAD), False


def level_above(constants: Mapping[str, float], mean: float, sd: float, ratio: float) -> float:
    """P(r >= ``ratio``) for the Student-t log r of :func:`end_level` (``level.dof`` degrees
    of freedom)."""
    if ratio <= 0.0:
        return 1.0
    from scipy.special import stdtr

    z = (mean - math.log(ratio)) / max(sd, 1e-9)
    return float(stdtr(float(constants.get("level.dof", DOF)), z))


def fit_level(rows: Sequence[Mapping], ridge: float = RIDGE, dof: float | None = None
              ) -> dict[str, float]:
    """The ``level.*`` constants by maximum likelihood over measured ``rows`` (each a
    :class:`LevelInputs` under ``inputs`` and the measured ratio ``r``): a normal log r whose
    log sd is linear too (:data:`SPREAD_FEATURES`), each dataset with its own level, log 1/p
    slope and spread; a ridge penalty on the shared coefficients."""
    from scipy.optimize import minimize

    dof = DOF if dof is None else float(dof)
    rows = [r for r in rows if r["r"] > 0 and math.isfinite(r["r"])]
    if len(rows) < 10:
        raise ValidationError(f"the level fit needs at least 10 measured runs, got {len(rows)}")
    datasets = sorted({r["inputs"].dataset for r in rows})
    names = list(LEVEL_FEATURES) + [f"{f}.dataset:{d}" for d in datasets
                                    for f in DATASET_LEVEL_FEATURES]
    snames = [f"{f}.dataset:{d}" for d in datasets for f in SPREAD_FEATURES]
    col = {n: i for i, n in enumerate(names)}
    scol = {n: i for i, n in enumerate(snames)}
    X = np.zeros((len(rows), len(names)))
    Z = np.zeros((len(rows), len(snames)))
    y = np.array([math.log(r["r"]) for r in rows])
    for i, r in enumerate(rows):
        x, z = level_features(r["inputs"])
        d = r["inputs"].dataset
        for f in LEVEL_FEATURES:
            X[i, col[f]] = x[f]
        for f in DATASET_LEVEL_FEATURES:
            X[i, col[f"{f}.dataset:{d}"]] = x[f]
        for f in SPREAD_FEATURES:
            Z[i, scol[f"{f}.dataset:{d}"]] = z[f]
    # the levels (constants) go unpenalised
    shared = np.array([not n.startswith("const.") for n in names], dtype=float)
    sshared = np.array([not n.startswith("const.") for n in snames], dtype=float)
    nb = len(names)

    def nll(theta: np.ndarray) -> tuple[float, np.ndarray]:
        # Student-t residuals with ``dof`` degrees of freedom and scale exp(Z g)
        b, g = theta[:nb], theta[nb:]
        log_s = Z @ g
        inv = np.exp(-2.0 * log_s)
        res = y - X @ b
        q = res * res * inv / dof
        val = float(np.sum(0.5 * (dof + 1.0) * np.log1p(q) + log_s)
                    + ridge * (np.sum(shared * b * b) + np.sum(sshared * g * g)))
        w = (dof + 1.0) / (dof * (1.0 + q))          # d/d(res^2 inv) of the first term, x2
        grad_b = -(X.T @ (w * res * inv)) + 2.0 * ridge * shared * b
        grad_g = Z.T @ (1.0 - w * res * res * inv) + 2.0 * ridge * sshared * g
        return val, np.concatenate([grad_b, grad_g])

    theta0 = np.zeros(nb + len(snames))
    for d in datasets:
        theta0[nb + scol[f"const.dataset:{d}"]] = math.log(max(float(np.std(y)), 1e-3))
    res = minimize(nll, theta0, jac=True, method="L-BFGS-B")
    b, g = res.x[:nb], res.x[nb:]
    out = {f"level.{n}": float(v) for n, v in zip(names, b)}
    out.update({f"level.sd.{n}": float(v) for n, v in zip(snames, g)})
    out["level.dof"] = dof
    return out


__all__ = ["DEFAULT_LOCAL_STEPS", "LEVEL_FEATURES", "DATASET_LEVEL_FEATURES", "SPREAD_FEATURES",
           "LevelInputs", "progress", "level_features", "fitted_datasets", "end_level",
           "level_above", "fit_level", "DOF", "MAX_SPREAD"]
