"""Cost estimators: predict, for a physical plan, the rounds to the SLA target and the accuracy.

Estimators are pluggable: anything with the :class:`CostEstimator` shape can be registered in
``ESTIMATORS``. Each declares named constants with documented priors; the planner passes the
catalog's current calibration (falling back to the priors) and every estimate records which
calibration rows it used. Resource costs (channel uses, energy, ...) are computed from the rounds
by :mod:`airplan_qo.plans.plan`, the same way for every estimator.

* ``dsgd`` (default): shaped by decentralized-SGD theory in terms of p = 1 - rho(W - J)^2 of the
  mixing matrix actually applied, heterogeneity, channel noise and compression. Client dropout
  and link truncation enter per topology through the expected contraction of the random mixing
  matrix (:func:`random_mixing_p`). Predicts "never" when its error floor is above the target.
* ``paper``: the AirPlan paper's C_ours = T(G) R(SNR) C_struct(G, k) with T = kappa / lambda2(L),
  faithful and labelled as the paper's model (it does not predict rounds well: lambda2 spans
  three orders of magnitude across families while measured rounds span a few-fold).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Protocol

import attrs
import networkx as nx
import numpy as np
import scipy.linalg as la
import scipy.sparse as sp
from scipy.special import exp1

from ..registry import Registry
from .families import build_graph
from .mixing import WEIGHTS, edge_arrays
from .plan import Estimate, PhysicalPlan
from .topology import TopologySpec, TopologyStats

#: Largest N for which the contraction of the random mixing matrix is computed exactly (one
#: dense eigenvalue problem per topology, dropout and threshold); beyond, a second-order
#: approximation from the cached spectra (:func:`approximate_survival_factor`).
RANDOM_P_DENSE_MAX_N = 500


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
    E[1 / (g + X)] = m e^{g m} E1(g m); m = expected active neighbours (online and not
    truncated). Transmitters pre-scale by W_ij, so the power normaliser is max_j W_ij^2 times
    the payload power: relative to the payload (the model for D-SGD, the replica values on the
    mask for CHOCO) the noise is W_ij^2 ~ 1 / (degree + 1)^2 times the inverse gain over 2 SNR
    (checked against the runtime's noise energy in tests/runtime/test_accounting.py).
    """
    return channel_noise_at(plan.channel, stats.spectra.mean_degree)


def channel_noise_at(ch, mean_degree: float) -> float:
    """:func:`channel_noise` for a channel configuration and a mean degree."""
    if ch.kind == "ideal":
        return 0.0
    snr = 10 ** (ch.snr_db / 10.0)
    m = max(1.0, mean_degree * ch.active_probability * (1.0 - ch.dropout))
    gm = ch.g_th * m
    inv_gain = m * math.exp(gm) * exp1(gm) if gm < 700 else 1.0 / ch.g_th
    return inv_gain / (2.0 * snr) / (mean_degree + 1.0) ** 2


def survival_probabilities(dropout: float, link_survival: float) -> tuple[float, float]:
    """(pi1, pi2): the probability that one edge delivers in a round, and that two edges sharing
    an end both deliver. A client is online with probability 1 - dropout, a link is not truncated
    with probability ``link_survival`` (independently per edge), and an edge delivers when both
    ends are online and it is not truncated."""
    on = 1.0 - float(dropout)
    r = float(link_survival)
    return on * on * r, on ** 3 * r * r


def expected_second_moment(graph: nx.Graph, w: sp.spmatrix, dropout: float,
                           link_survival: float) -> np.ndarray:
    """E[W_t^T W_t] (dense) of the round's mixing matrix under dropout and truncation.

    The runtime re-weights W locally: a link that does not deliver moves its weight to both
    ends' self-weights, so W_t = I - sum_e s_e w_e L_e with s_e the edge's delivery indicator
    and L_e = (e_i - e_j)(e_i - e_j)^T. L_e L_f vanishes for disjoint edges and L_e^2 = 2 L_e,
    hence, with L = I - W and L2 the Laplacian with edge weights w_e^2,
    E[W_t^2] = I - 2 pi1 L + pi2 L^2 + 2 (pi1 - pi2) L2 exactly (pi1, pi2 from
    :func:`survival_probabilities`).
    """
    n = graph.number_of_nodes()
    w = sp.csr_matrix(w)
    u, v = edge_arrays(graph)
    we = np.asarray(w[u, v]).ravel()
    pi1, pi2 = survival_probabilities(dropout, link_survival)
    lap = np.eye(n) - w.toarray()
    lap2 = np.zeros((n, n))
    np.add.at(lap2, (u, v), -we * we)
    np.add.at(lap2, (v, u), -we * we)
    lap2[np.diag_indices(n)] = -lap2.sum(axis=1)
    return np.eye(n) - 2.0 * pi1 * lap + pi2 * (lap @ lap) + 2.0 * (pi1 - pi2) * lap2


def random_mixing_p(graph: nx.Graph, w: sp.spmatrix, dropout: float,
                    link_survival: float) -> float:
    """p = 1 - ||E[W_t^T W_t] - J||_2 of the random mixing matrix (Koloskova et al. 2020), the
    expected consensus contraction per round under client dropout and link truncation.

    Equals 1 - rho(W - J)^2 when every link always delivers. Computed as the smallest
    eigenvalue of I - E[W_t^2] + J, which is PSD with 1 as the eigenvalue of the consensus
    direction, so small values keep their precision.
    """
    n = graph.number_of_nodes()
    gap = np.eye(n) - expected_second_moment(graph, w, dropout, link_survival) + 1.0 / n
    low = la.eigvalsh(gap, subset_by_index=[0, 0])[0]
    return float(min(max(low, 0.0), 1.0))


def approximate_survival_factor(mixing_gap: float, mean_degree: float, dropout: float,
                                link_survival: float) -> float:
    """p_random / p from the static spectrum alone (used above :data:`RANDOM_P_DENSE_MAX_N`).

    Takes the slowest consensus mode of L = I - W, eigenvalue mu = mixing gap, as an eigenvector
    of both L^2 and L2 with L2 ~ L / (mean degree + 1) (exact for a ring or a complete graph with
    uniform weights): 1 - p_random = 1 - 2 pi1 mu + pi2 mu^2 + 2 (pi1 - pi2) mu / (deg + 1).
    At N = 50 it is within a few percent of the exact factor for the default families.
    """
    mu = float(mixing_gap)
    if mu <= 0.0:
        return 1.0
    pi1, pi2 = survival_probabilities(dropout, link_survival)
    p = mu * (2.0 - mu)
    p_rand = 2.0 * pi1 * mu - pi2 * mu * mu - 2.0 * (pi1 - pi2) * mu / (mean_degree + 1.0)
    return float(min(max(p_rand / p, 0.0), 1.0)) if p > 0 else 1.0


@functools.lru_cache(maxsize=4096)
def _exact_survival_factor(spec: TopologySpec, dropout: float, link_survival: float) -> float:
    graph = build_graph(spec.family, spec.n, seed=spec.seed, **spec.param_dict)
    w = WEIGHTS.get(spec.weights)(graph)
    p_static = random_mixing_p(graph, w, 0.0, 1.0)
    if p_static <= 0.0:
        return 1.0
    return min(1.0, random_mixing_p(graph, w, dropout, link_survival) / p_static)


def survival_factor(plan: PhysicalPlan, stats: TopologyStats) -> float:
    """p_random / p for the plan's topology, dropout and truncation threshold (1 when every
    link always delivers).

    A ratio rather than p_random itself, so that it multiplies whatever p the statistics carry
    (cached, or supplied by hand in tests). Exact up to :data:`RANDOM_P_DENSE_MAX_N` clients,
    cached per (topology, dropout, link survival) for the life of the process; beyond, for the
    complete graph (where it is exact) and for user-supplied graphs,
    :func:`approximate_survival_factor`.
    """
    ch = plan.channel
    q, r = float(ch.dropout), float(ch.active_probability)
    if q <= 0.0 and r >= 1.0:
        return 1.0
    spec = plan.topology
    s = stats.spectra
    if (s.n_nodes <= RANDOM_P_DENSE_MAX_N and spec.family not in ("from_edges", "complete")
            and spec.n == s.n_nodes):
        return _exact_survival_factor(spec, round(q, 12), round(r, 12))
    return approximate_survival_factor(s.mixing_gap, s.mean_degree, q, r)


@attrs.frozen
class DSGDEstimator:
    """Error floor and rounds of D-SGD / CHOCO gossip, in terms of the applied W.

    p_random = p of the random mixing matrix under client dropout and link truncation
    (:func:`random_mixing_p`; p itself when every link always delivers), p_eff = p_random k^beta_k.
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
        p_random = max(p * survival_factor(plan, stats), 1e-12)
        p_eff = max(min(1.0, p_random * plan.k_ratio ** c["beta_k"]), 1e-12)
        zeta2 = heterogeneity(ctx.alpha, ctx.n_classes)
        sigma_c2 = channel_noise(plan, stats)
        inv = 1.0 / p_eff - 1.0
        floor = (c["f0"] + c["f1"] * inv + c["f2"] * zeta2 * (1.0 / p_eff**2 - 1.0)
                 + c["f3"] * sigma_c2 / p_eff)
        return {"p": p, "p_random": p_random, "p_eff": p_eff, "zeta2": zeta2,
                "sigma_c2": sigma_c2,
                "error_floor": floor, "tau": c["tau0"] + c["tau1"] * inv,
                "e0": 1.0 - 1.0 / ctx.n_classes}

    def accuracy_at(self, ctx, plan, stats, rounds):
        t = self.terms(ctx, plan, stats)
        return self._accuracy(t, rounds)

    def accuracy_band_at(self, ctx: EstimationContext, plan: PhysicalPlan, stats: TopologyStats,
                         rounds: float) -> tuple[float, float]:
        """(lower, upper) predicted accuracy after ``rounds``: the error floor and the time
        constant both scaled by e^{+-u}, the estimate's interval (rounds and floor) as a curve.
        The run monitor compares observed progress with the lower one."""
        t = self.terms(ctx, plan, stats)
        wide = math.exp(ctx.constants["u"])
        return (self._accuracy(t, rounds, wide, wide),
                self._accuracy(t, rounds, 1.0 / wide, 1.0 / wide))

    @staticmethod
    def _accuracy(t: dict[str, float], rounds: float, floor_scale: float = 1.0,
                  tau_scale: float = 1.0) -> float:
        floor = min(t["error_floor"] * floor_scale, t["e0"])
        err = floor + (t["e0"] - floor) * math.exp(-rounds / (t["tau"] * tau_scale))
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


def _register_time_to_target() -> None:
    from ..costmodels.time_to_target import TimeToTargetEstimator

    ESTIMATORS.register("ttt", TimeToTargetEstimator())


_register_time_to_target()


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
        if name in values and rank[scope] >= best.get(name, -1):
            values[name] = float(row["value"])
            used[name] = int(row["calibration_id"])
            best[name] = rank[scope]
    return values, tuple(sorted(used.values()))
