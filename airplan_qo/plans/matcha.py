"""MATCHA: matchings activated at random under a communication budget (Wang et al. 2019).

The graph G is decomposed into matchings M_1..M_M (disjoint edge sets covering G, each a set of
vertex-disjoint edges; :func:`matching_decomposition`). Every round each matching is activated
independently, B_j ~ Bernoulli(p_j), and the round's mixing matrix is

    W_t = I - alpha sum_j B_j L_j,

L_j the Laplacian of matching j. The budget C_b in (0, 1] bounds the expected share of active
matchings: sum_j p_j <= C_b M. The probabilities maximise the algebraic connectivity of the
expected graph, lambda_2(sum_j p_j L_j), a concave function of p (:func:`activation_probabilities`,
projected supergradient ascent; the reference code solves the same problem with cvxpy). Then
alpha minimises rho = ||E[W^T W] - J|| (J = 11^T / N; :func:`best_alpha`, a bounded 1-D
search), with the closed forms (a matching's Laplacian satisfies L_j^2 = 2 L_j, and the B_j are
independent):

    E[W]     = I - alpha Lbar,                 Lbar = sum_j p_j L_j
    E[W^T W] = I - 2 alpha Lbar + alpha^2 (Lbar^2 + 2 sum_j p_j (1 - p_j) L_j).

C_b = 1 activates every matching every round: W_t = I - alpha L, vanilla D-PSGD with that W.
Expected active matchings per round: sum_j p_j (what a round costs in communication).
"""

from __future__ import annotations

import attrs
import networkx as nx
import numpy as np
from scipy.optimize import minimize_scalar

from ..errors import ValidationError

__all__ = ["MatchaSchedule", "activation_probabilities", "best_alpha", "expected_w",
           "expected_wtw", "matching_decomposition", "matching_laplacians", "plan_matcha",
           "spectral_norm_gap"]


def matching_decomposition(graph: nx.Graph) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Disjoint matchings covering every edge of ``graph``: repeatedly a maximum-cardinality
    matching of the edges left (as the reference code does), so the first matchings are large.
    Edges are (u, v) with u < v, sorted within a matching."""
    left = nx.Graph()
    left.add_nodes_from(graph.nodes())
    left.add_edges_from(graph.edges())
    out = []
    while left.number_of_edges():
        m = nx.max_weight_matching(left, maxcardinality=True)
        edges = tuple(sorted((min(a, b), max(a, b)) for a, b in m))
        out.append(edges)
        left.remove_edges_from(edges)
    return tuple(out)


def matching_laplacians(n: int, matchings) -> np.ndarray:
    """(M, N, N) Laplacians of the matchings."""
    out = np.zeros((len(matchings), n, n))
    for j, edges in enumerate(matchings):
        for a, b in edges:
            out[j, a, a] += 1.0
            out[j, b, b] += 1.0
            out[j, a, b] -= 1.0
            out[j, b, a] -= 1.0
    return out


def _project(p: np.ndarray, total: float) -> np.ndarray:
    """Euclidean projection onto {0 <= p <= 1, sum p <= total}."""
    q = np.clip(p, 0.0, 1.0)
    if q.sum() <= total + 1e-12:
        return q
    lo, hi = 0.0, float(p.max())
    for _ in range(100):
        tau = 0.5 * (lo + hi)
        if np.clip(p - tau, 0.0, 1.0).sum() > total:
            lo = tau
        else:
            hi = tau
    return np.clip(p - hi, 0.0, 1.0)


def _lambda2(lap: np.ndarray) -> tuple[float, np.ndarray]:
    vals, vecs = np.linalg.eigh(lap)
    return float(vals[1]), vecs[:, 1]


def activation_probabilities(laplacians: np.ndarray, budget: float,
                             iterations: int = 400) -> np.ndarray:
    """p maximising lambda_2(sum_j p_j L_j) subject to sum p <= budget * M, 0 <= p <= 1:
    projected supergradient ascent (the supergradient of lambda_2 at p is (v^T L_j v)_j for the
    Fiedler vector v), steps 1/sqrt(k), the best iterate kept. budget >= 1 gives p = 1."""
    budget = float(budget)
    if not 0.0 < budget <= 1.0:
        raise ValidationError(f"MATCHA's budget C_b must be in (0, 1], got {budget}")
    m = laplacians.shape[0]
    if budget >= 1.0 or m == 0:
        return np.ones(m)
    total = budget * m
    p = np.full(m, budget)
    best, best_val = p.copy(), _lambda2(np.tensordot(p, laplacians, 1))[0]
    for k in range(1, iterations + 1):
        val, v = _lambda2(np.tensordot(p, laplacians, 1))
        if val > best_val:
            best, best_val = p.copy(), val
        grad = np.einsum("i,jik,k->j", v, laplacians, v)
        norm = float(np.linalg.norm(grad))
        if norm == 0.0:
            break
        p = _project(p + (0.5 / np.sqrt(k)) * grad / norm, total)
    val = _lambda2(np.tensordot(p, laplacians, 1))[0]
    return p if val > best_val else best


def expected_w(laplacians: np.ndarray, p: np.ndarray, alpha: float) -> np.ndarray:
    """E[W_t] = I - alpha sum_j p_j L_j."""
    n = laplacians.shape[1]
    return np.eye(n) - alpha * np.tensordot(p, laplacians, 1)


def expected_wtw(laplacians: np.ndarray, p: np.ndarray, alpha: float) -> np.ndarray:
    """E[W_t^T W_t] = I - 2 alpha Lbar + alpha^2 (Lbar^2 + 2 sum_j p_j (1 - p_j) L_j)."""
    n = laplacians.shape[1]
    lbar = np.tensordot(p, laplacians, 1)
    var = np.tensordot(p * (1.0 - p), laplacians, 1)
    return np.eye(n) - 2.0 * alpha * lbar + alpha ** 2 * (lbar @ lbar + 2.0 * var)


def spectral_norm_gap(laplacians: np.ndarray, p: np.ndarray, alpha: float) -> float:
    """rho = ||E[W^T W] - J||_2: the expected contraction of the disagreement per round."""
    n = laplacians.shape[1]
    m = expected_wtw(laplacians, p, alpha) - np.full((n, n), 1.0 / n)
    return float(np.max(np.abs(np.linalg.eigvalsh(m))))


def best_alpha(laplacians: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    """(alpha, rho): the alpha in (0, 2 / lambda_max(Lbar)] minimising rho (bounded 1-D
    search; rho is convex in alpha on the disagreement space)."""
    lbar = np.tensordot(p, laplacians, 1)
    lmax = float(np.linalg.eigvalsh(lbar)[-1]) if lbar.size else 0.0
    if lmax <= 0.0:
        return 0.0, 1.0
    res = minimize_scalar(lambda a: spectral_norm_gap(laplacians, p, a),
                          bounds=(1e-6, 2.0 / lmax), method="bounded",
                          options={"xatol": 1e-8})
    return float(res.x), float(res.fun)


@attrs.frozen
class MatchaSchedule:
    """A graph's MATCHA schedule: ``matchings`` (edge tuples), activation probabilities ``p``,
    the step ``alpha`` and the resulting ``rho`` = ||E[W^T W] - J||, for budget ``budget``."""

    n: int
    matchings: tuple[tuple[tuple[int, int], ...], ...]
    p: np.ndarray = attrs.field(eq=False)
    alpha: float
    rho: float
    budget: float
    _laplacians: np.ndarray = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_laplacians", matching_laplacians(self.n, self.matchings))

    @property
    def expected_active(self) -> float:
        """Expected active matchings per round, sum_j p_j (<= budget * M)."""
        return float(np.sum(self.p))

    def laplacians(self) -> np.ndarray:
        """(M, N, N) Laplacians of the matchings."""
        return self._laplacians

    def base_weights(self) -> np.ndarray:
        """I - alpha L (every matching active): the W of a round with B = 1."""
        return np.eye(self.n) - self.alpha * self.laplacians().sum(axis=0)

    def sample(self, uniforms: np.ndarray) -> np.ndarray:
        """The round's activations B_j = [u_j < p_j] from M uniforms."""
        return np.asarray(uniforms) < self.p

    def round_matrix(self, active: np.ndarray) -> np.ndarray:
        """W_t = I - alpha sum_j B_j L_j for activations ``active``."""
        return np.eye(self.n) - self.alpha * np.tensordot(
            np.asarray(active, dtype=np.float64), self.laplacians(), 1)


def plan_matcha(graph: nx.Graph, budget: float) -> MatchaSchedule:
    """Decompose ``graph`` into matchings and choose p and alpha for ``budget`` C_b."""
    n = graph.number_of_nodes()
    matchings = matching_decomposition(graph)
    laps = matching_laplacians(n, matchings)
    p = activation_probabilities(laps, budget)
    alpha, rho = best_alpha(laps, p)
    return MatchaSchedule(n, matchings, p, alpha, rho, float(budget))
