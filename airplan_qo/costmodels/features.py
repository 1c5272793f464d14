"""Plan quantities every cost model may use: label heterogeneity, relative channel noise, and p
of the random mixing matrix under client dropout and link truncation."""

from __future__ import annotations

import functools
import math

import networkx as nx
import numpy as np
import scipy.linalg as la
import scipy.sparse as sp
from scipy.special import exp1

from ..errors import PlanningError
from ..plans.families import build_graph
from ..plans.graphs import edge_arrays
from ..plans.mixing import WEIGHTS
from ..plans.operators import SERVER_ALGORITHMS, activation
from ..plans.plan import PhysicalPlan
from ..plans.topology import TopologySpec, TopologyStats

#: Largest N for which the contraction of the random mixing matrix is computed exactly (one
#: dense eigenvalue problem per topology, dropout and threshold); beyond, a second-order
#: approximation from the cached spectra (:func:`approximate_survival_factor`).
RANDOM_P_DENSE_MAX_N = 500


def heterogeneity(alpha: float, n_classes: int) -> float:
    """zeta^2 = E||p_i - pbar||^2 of Dirichlet(alpha 1_C) label distributions:
    (1 - 1/C) / (C alpha + 1); 0 for IID (alpha = inf), -> 1 - 1/C for one class per client."""
    if alpha is None or math.isinf(alpha):
        return 0.0
    return (1.0 - 1.0 / n_classes) / (n_classes * alpha + 1.0)


def plan_heterogeneity(alpha: float, n_classes: int, plan: PhysicalPlan) -> float:
    """The heterogeneity a plan's clients train on: :func:`heterogeneity`, scaled for a
    ``d_cliques`` plan with Clique Averaging by the fraction its cliques leave
    (:func:`airplan_qo.plans.cliques.residual_heterogeneity`, filled in by the planner from the
    label statistics): every client then applies its clique's mean update, whose
    dissimilarity is the cliques' label mix, not its own. Gradient tracking removes the
    heterogeneity term: 0."""
    from ..plans.plan import averaged_cliques

    if plan.effective_algorithm == "gradient_tracking":
        # the tracking variable follows the mean gradient: no heterogeneity term in its rate
        # (Koloskova, Lin & Stich 2021)
        return 0.0
    zeta2 = heterogeneity(alpha, n_classes)
    residual = plan.topology.param_dict.get("residual")
    if residual is not None and averaged_cliques(plan.topology):
        return zeta2 * float(residual)
    return zeta2


def label_distributions(label_counts) -> tuple[np.ndarray, np.ndarray]:
    """(per-client label distributions q (N x C), their mean p) of released counts: p is what
    averaging with a doubly stochastic W preserves (every client weighs the same in the
    decentralized objective); a client without counts gets the pooled distribution."""
    counts = np.asarray(label_counts, dtype=np.float64)
    pooled = counts.sum(axis=0)
    pooled = pooled / pooled.sum() if pooled.sum() > 0 else np.full(counts.shape[1],
                                                                    1.0 / counts.shape[1])
    tot = counts.sum(axis=1, keepdims=True)
    q = np.divide(counts, tot, out=np.tile(pooled, (counts.shape[0], 1)), where=tot > 0)
    return q, q.mean(axis=0)


def neighbourhood_heterogeneity(weights, label_counts) -> float:
    """zeta^2_W / zeta^2: the label heterogeneity left after one mixing step,
    ``(1/N) sum_i ||sum_j W_ij q_j - p||^2`` over ``(1/N) sum_i ||q_i - p||^2`` (q_j client j's
    label distribution from the released counts, p their mean). 0 on the complete graph,
    1 without mixing; about 1 / (degree + 1) for independent clients on a regular graph. 0 when
    the clients are already identical."""
    q, p = label_distributions(label_counts)
    own = float(np.mean(np.sum((q - p) ** 2, axis=1)))
    if own <= 1e-15:
        return 0.0
    mixed = np.asarray(sp.csr_matrix(weights) @ q)
    return float(np.mean(np.sum((mixed - p) ** 2, axis=1))) / own


def effective_neighbours(weights) -> float:
    """The effective number of neighbours of a mixing matrix, ``1 / mean_i sum_j W_ij^2``
    (Vogels et al. 2022): N on the complete graph with uniform weights, degree + 1 on a regular
    graph with uniform weights, 1 without mixing."""
    w = sp.csr_matrix(weights)
    rows = np.asarray(w.multiply(w).sum(axis=1)).ravel()
    return float(1.0 / np.mean(rows))


#: Model dimension assumed by :func:`quantisation_noise` when a caller does not know it.
DEFAULT_DIMENSION = 5000


def quantisation_noise(bits: int, mean_degree: float, d: int | None = None) -> float:
    """Relative noise variance a digital round adds: each neighbour's message is quantised
    independently by a stochastic (unbiased) b-bit quantiser whose levels span the message's
    largest coordinate, ``omega_b = crest^2 / (2^b - 1)^2`` per coordinate relative to the
    coordinates' mean square, with ``crest^2 = 2 ln d`` (the largest of d Gaussian-like
    coordinates over their RMS); the receiver weighs each of its ``deg`` neighbours by
    ``W_ij ~ 1 / (deg + 1)``: ``deg omega_b / (deg + 1)^2``. 0 for b = 32 (float32 is what the
    model holds)."""
    if bits >= 32:
        return 0.0
    crest2 = 2.0 * math.log(max(int(d or DEFAULT_DIMENSION), 2))
    omega = crest2 / (2.0 ** bits - 1.0) ** 2
    return mean_degree * omega / (mean_degree + 1.0) ** 2


def quantisation_omega(bits: int, d: int | None = None) -> float:
    """The variance bound of the runtime's unbiased b-bit quantiser of a ``d``-coordinate
    vector, ``E||Q(v) - v||^2 <= omega ||v||^2`` with ``omega = d / (2^b - 1)^2`` (0 for
    b = 32), the same as ``airplan_qo.runtime.compression.quantization_omega``."""
    if bits >= 32:
        return 0.0
    return float(d or DEFAULT_DIMENSION) / float(2 ** int(bits) - 1) ** 2


def quantisation_slowdown(plan: PhysicalPlan, stats: TopologyStats, d: int | None = None
                          ) -> float:
    """log of the factor by which a digital plan's b-bit quantiser slows training, from the
    runtime's protocol (docs/runtime.md). Gossip (D-SGD, gradient tracking, MATCHA) sends
    quantised differences against a shared copy, CHOCO-style, and mixes with the consensus
    step ``gamma = 1 / (1 + omega)`` (:func:`quantisation_omega`): consensus is ``1 / gamma``
    times slower, ``log(1 + omega)`` (the quantisation error itself shrinks as the models
    converge, so it is no noise floor). A server (FedAvg, FedProx) averages the N clients'
    independently quantised updates, whose variance grows by ``1 + omega / N``:
    ``log(1 + omega / N)``. 0 over the air and for exact (b = 32) packets."""
    if plan.transport != "digital" or plan.bits >= 32:
        return 0.0
    omega = quantisation_omega(plan.bits, d)
    if plan.effective_algorithm in SERVER_ALGORITHMS:
        return math.log1p(omega / max(stats.spectra.n_nodes, 1))
    return math.log1p(omega)


def channel_noise(plan: PhysicalPlan, stats: TopologyStats, d: int | None = None) -> float:
    """Relative effective noise variance of one OTA aggregation, sigma_c^2.

    sigma_eff^2 / (payload power per coordinate) = 1 / (2 SNR |h_min|^2) (docs/runtime.md).
    Above the truncation threshold g, the minimum of m active Rayleigh gains is g + Exp(m), and
    E[1 / (g + X)] = m e^{g m} E1(g m); m = expected active neighbours (online and not
    truncated). Transmitters pre-scale by W_ij, so the power normaliser is max_j W_ij^2 times
    the payload power: relative to the payload (the model for D-SGD, the replica values on the
    mask for CHOCO) the noise is W_ij^2 ~ 1 / (degree + 1)^2 times the inverse gain over 2 SNR
    (checked against the runtime's noise energy in tests/runtime/test_accounting.py).
    A digital plan has no channel noise, only its quantisation (:func:`quantisation_noise`,
    ``d`` the model dimension).
    """
    if plan.transport == "digital":
        # packets carry no channel noise: a truncated link loses its packet (in p_random)
        return quantisation_noise(plan.bits, stats.spectra.mean_degree, d)
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
    complete graph (where it is exact), for user-supplied graphs and for periodic topologies
    (from their per-round p and mean degree), :func:`approximate_survival_factor`.
    """
    ch = plan.channel
    # MATCHA uses a random share of the links each round (its budget): for the mixing rate
    # that is one more independent chance that a link is down
    q, r = float(ch.dropout), float(ch.active_probability) * activation(plan.effective_algorithm)
    if q <= 0.0 and r >= 1.0:
        return 1.0
    spec = plan.topology
    s = stats.spectra
    if (s.n_nodes <= RANDOM_P_DENSE_MAX_N and spec.family not in ("from_edges", "complete")
            and spec.n == s.n_nodes and s.period == 1):
        try:
            return _exact_survival_factor(spec, round(q, 12), round(r, 12))
        except PlanningError:       # a graph that needs inputs the spec lacks (d_cliques)
            pass
    return approximate_survival_factor(s.mixing_gap, s.mean_degree, q, r)
