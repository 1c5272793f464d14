"""Cost estimators: predict, for a physical plan, the rounds to the SLA target and the accuracy.

Estimators are pluggable: anything with the :class:`CostEstimator` shape can be registered in
``ESTIMATORS``. Each declares named constants with documented priors; the planner passes the
catalog's current calibration (falling back to the priors) and every estimate records which
calibration rows it used. Resource costs (channel uses, energy, ...) are computed from the rounds
by :mod:`airplan_qo.plans.plan`, the same way for every estimator.

* ``dsgd`` (default): shaped by decentralized-SGD theory in terms of p = 1 - rho(W - J)^2 of the
  mixing matrix actually applied, heterogeneity, channel noise and compression. Predicts "never"
  when its error floor is above the target.
* ``paper``: the AirPlan paper's C_ours = T(G) R(SNR) C_struct(G, k) with T = kappa / lambda2(L),
  faithful and labelled as the paper's model (it does not predict rounds well: lambda2 spans
  three orders of magnitude across families while measured rounds span a few-fold).
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import attrs
from scipy.special import exp1

from ..registry import Registry
from .plan import Estimate, PhysicalPlan
from .topology import TopologyStats


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


class CostEstimator(Protocol):
    """The estimator interface: named constants with priors, an accuracy curve and an estimate."""

    name: str
    description: str
    priors: dict[str, float]

    def accuracy_at(self, ctx: EstimationContext, plan: PhysicalPlan, stats: TopologyStats,
                    rounds: float) -> float: ...

    def estimate(self, ctx: EstimationContext, plan: PhysicalPlan, stats: TopologyStats,
                 target_accuracy: float) -> Estimate: ...


ESTIMATORS: Registry[CostEstimator] = Registry("cost estimator")
DEFAULT_ESTIMATOR = "dsgd"


def heterogeneity(alpha: float, n_classes: int) -> float:
    """zeta^2 = E||p_i - pbar||^2 of Dirichlet(alpha 1_C) label distributions:
    (1 - 1/C) / (C alpha + 1); 0 for IID (alpha = inf), -> 1 - 1/C for one class per client."""
    if alpha is None or math.isinf(alpha):
        return 0.0
    return (1.0 - 1.0 / n_classes) / (n_classes * alpha + 1.0)


def channel_noise(plan: PhysicalPlan, stats: TopologyStats) -> float:
    """Relative effective noise variance of one OTA aggregation, sigma_c^2.

    sigma_eff^2 / (payload power per coordinate) = 1 / (2 SNR |h_min|^2) (DESIGN section 6).
    Above the truncation threshold g, the minimum of m active Rayleigh gains is g + Exp(m), and
    E[1 / (g + X)] = m e^{g m} E1(g m); m = expected active neighbours. The receiver averages
    about (degree + 1) payloads, which divides the noise power relative to the model.
    """
    ch = plan.channel
    if ch.kind == "ideal":
        return 0.0
    snr = 10 ** (ch.snr_db / 10.0)
    m = max(1.0, stats.spectra.mean_degree * ch.active_probability)
    gm = ch.g_th * m
    inv_gain = m * math.exp(gm) * exp1(gm) if gm < 700 else 1.0 / ch.g_th
    return inv_gain / (2.0 * snr) / (stats.spectra.mean_degree + 1.0)


@attrs.frozen
class DSGDEstimator:
    """Error floor and rounds of D-SGD / CHOCO gossip, in terms of the applied W.

    p_eff = p * k^beta_k * q * (1 - dropout), q = exp(-g_th) the link survival probability.
    floor = f0 + f1 (1/p_eff - 1) + f2 zeta^2 (1/p_eff^2 - 1) + f3 sigma_c^2 / p_eff
    e(t)  = floor + (E0 - floor) exp(-t / tau),  tau = tau0 + tau1 (1/p_eff - 1),  E0 = 1 - 1/C
    T     = tau ln((E0 - floor) / (eps - floor)) for a target error eps; "never" if floor >= eps.
    The interval is T e^{+-u}, accuracy 1 - floor e^{+-u}, with u the calibration's log-error.
    """

    name: str = "dsgd"
    description: str = "D-SGD theory: error floor and linear rate in p of the applied W"
    priors: dict[str, float] = attrs.field(factory=lambda: {
        "f0": 0.05,      # error floor of the fully connected, uncompressed, noiseless plan
        "f1": 5e-4,      # consensus (topology) floor per unit of 1/p
        "f2": 1e-4,      # heterogeneity floor: eta^2 zeta^2 / p^2 in D-SGD bounds
        "f3": 5e-3,      # channel-noise floor per unit sigma_c^2 / p
        "tau0": 10.0,    # rounds per e-fold of the error on a perfectly mixing graph
        "tau1": 0.05,    # extra rounds per e-fold per unit of 1/p
        "beta_k": 0.5,   # compression exponent: p_eff ~ p k^beta_k
        "u": 0.35,       # log-space uncertainty of rounds and floor (interval half-width)
    })

    def terms(self, ctx: EstimationContext, plan: PhysicalPlan, stats: TopologyStats
              ) -> dict[str, float]:
        c = ctx.constants
        p = max(stats.spectra.mixing_p, 1e-12)
        q = plan.channel.active_probability * (1.0 - plan.channel.dropout)
        p_eff = max(min(1.0, p * plan.k_ratio ** c["beta_k"] * q), 1e-12)
        zeta2 = heterogeneity(ctx.alpha, ctx.n_classes)
        sigma_c2 = channel_noise(plan, stats)
        inv = 1.0 / p_eff - 1.0
        floor = (c["f0"] + c["f1"] * inv + c["f2"] * zeta2 * (1.0 / p_eff**2 - 1.0)
                 + c["f3"] * sigma_c2 / p_eff)
        return {"p": p, "p_eff": p_eff, "zeta2": zeta2, "sigma_c2": sigma_c2,
                "error_floor": floor, "tau": c["tau0"] + c["tau1"] * inv,
                "e0": 1.0 - 1.0 / ctx.n_classes}

    def accuracy_at(self, ctx, plan, stats, rounds):
        t = self.terms(ctx, plan, stats)
        return self._accuracy(t, rounds)

    @staticmethod
    def _accuracy(t: dict[str, float], rounds: float, floor_scale: float = 1.0) -> float:
        floor = min(t["error_floor"] * floor_scale, t["e0"])
        err = floor + (t["e0"] - floor) * math.exp(-rounds / t["tau"])
        return max(0.0, 1.0 - err)

    def estimate(self, ctx, plan, stats, target_accuracy):
        t = self.terms(ctx, plan, stats)
        u = ctx.constants["u"]
        eps = 1.0 - target_accuracy
        budget = ctx.round_budget
        acc = self._accuracy(t, budget)
        acc_lo = self._accuracy(t, budget, math.exp(u))
        acc_hi = self._accuracy(t, budget, math.exp(-u))
        floor = t["error_floor"]
        rounds = model_term = None
        if floor < eps and t["e0"] > eps:
            model_term = math.log((t["e0"] - floor) / (eps - floor))
            rounds = float(max(1, math.ceil(t["tau"] * model_term)))
        elif t["e0"] <= eps:
            rounds, model_term = 1.0, 0.0
        t = dict(t, privacy_epsilon=ctx.privacy_epsilon) if ctx.privacy_epsilon else t
        return Estimate(
            rounds=rounds, accuracy=acc, accuracy_lo=acc_lo, accuracy_hi=acc_hi,
            rounds_lo=None if rounds is None else rounds * math.exp(-u),
            rounds_hi=None if rounds is None else rounds * math.exp(u),
            terms=t, model_term=model_term, calibration_ids=ctx.calibration_ids)


@attrs.frozen
class PaperEstimator:
    """The AirPlan paper's cost model, reproduced faithfully (its eq. C_ours and eps_eff).

    T(G) = kappa / lambda2(L);  R(SNR) = 1 + alpha_R exp(-beta_R SNR_dB);
    C_struct = 2|E| k (k = transmitted coordinates);  C_ours = T R C_struct;
    eps_eff = sqrt(1 - k/d) / (0.5 + lambda2)  (the paper's, with no derivation: a label only).
    Accuracy, our reading of "Acc(G, T) from the convergence bound": acc(t) = a_max (1 - e^{-3t/T}),
    i.e. 95% of a_max after T(G) rounds. Rounds = T R (epochs including retransmissions).
    """

    name: str = "paper"
    description: str = "the AirPlan paper's C_ours = T(G) R(SNR) C_struct(G, k), T = kappa/lambda2"
    priors: dict[str, float] = attrs.field(factory=lambda: {
        "kappa": 220.0,    # calibrated on Erdos-Renyi: ~70 rounds at lambda2 ~ 3.14 (N = 50)
        "alpha_r": 1.0,    # maximum retransmission overhead
        "beta_r": 0.2,     # per-dB decay of the retransmission overhead
        "a_max": 0.92,     # accuracy ceiling (the paper's FC accuracy on CIFAR-10)
        "eps_target": 1.0,  # eps_eff constraint (the paper's eps_tgt)
    })

    def terms(self, ctx, plan, stats):
        c = ctx.constants
        lam2 = max(stats.spectra.lambda2_laplacian, 1e-12)
        t_g = c["kappa"] / lam2
        reliability = 1.0 + c["alpha_r"] * math.exp(-c["beta_r"] * plan.channel.snr_db)
        coords = max(1, math.ceil(plan.k_ratio * ctx.d))
        c_struct = 2.0 * stats.spectra.n_edges * coords
        return {"lambda2": lam2, "t_g": t_g, "reliability": reliability, "c_struct": c_struct,
                "c_ours": t_g * reliability * c_struct,
                "eps_eff": math.sqrt(max(0.0, 1.0 - plan.k_ratio)) / (0.5 + lam2)}

    def accuracy_at(self, ctx, plan, stats, rounds):
        t = self.terms(ctx, plan, stats)
        return ctx.constants["a_max"] * (1.0 - math.exp(-3.0 * rounds / t["t_g"]))

    def estimate(self, ctx, plan, stats, target_accuracy):
        c = ctx.constants
        t = self.terms(ctx, plan, stats)
        acc = self.accuracy_at(ctx, plan, stats, ctx.round_budget)
        rounds = float(math.ceil(t["t_g"] * t["reliability"]))
        if acc < target_accuracy:
            rounds = None
        eps_ok = t["eps_eff"] <= c["eps_target"]
        if ctx.privacy_epsilon:
            t = dict(t, privacy_epsilon=ctx.privacy_epsilon)
        return Estimate(rounds=rounds, accuracy=acc, terms=t, model_term=1.0 / t["lambda2"],
                        calibration_ids=ctx.calibration_ids,
                        extra_constraints=(("eps_eff", eps_ok),))


ESTIMATORS.register("dsgd", DSGDEstimator())
ESTIMATORS.register("paper", PaperEstimator())


def resolve_constants(estimator: CostEstimator, rows: list[dict[str, Any]], dataset: str
                      ) -> tuple[dict[str, float], tuple[int, ...]]:
    """Priors overridden by current calibration rows: global, then dataset scope (more specific
    wins). Returns the constants and the ids of the calibration rows used."""
    values = dict(estimator.priors)
    used: dict[str, int] = {}
    rank = {"global": 0, "dataset": 1}
    best: dict[str, int] = {}
    for row in rows:
        scope = row["scope"]
        if scope not in rank or (scope == "dataset" and row["scope_key"] != dataset):
            continue
        name = row["constant_name"]
        if name in values and rank[scope] >= best.get(name, -1):
            values[name] = float(row["value"])
            used[name] = int(row["calibration_id"])
            best[name] = rank[scope]
    return values, tuple(sorted(used.values()))
