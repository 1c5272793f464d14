"""MATCHA's schedule: matchings cover G, the budget holds, the sampled W_t agree with the closed
forms of E[W] and E[W^T W], and C_b = 1 is vanilla D-PSGD."""

import networkx as nx
import numpy as np
import pytest

from airplan_qo.errors import ValidationError
from airplan_qo.plans.matcha import (activation_probabilities, expected_w, expected_wtw,
                                     matching_decomposition, plan_matcha, spectral_norm_gap)
from airplan_qo.plans.topology import TopologySpec, build


def _graphs():
    return [build(TopologySpec.create("erdos_renyi", 12, p=0.4, seed=1)).graph,
            build(TopologySpec.create("ring", 10)).graph,
            nx.petersen_graph()]


@pytest.mark.parametrize("graph", _graphs())
def test_matchings_partition_the_edges(graph):
    ms = matching_decomposition(graph)
    seen = [e for m in ms for e in m]
    assert sorted(seen) == sorted((min(a, b), max(a, b)) for a, b in graph.edges())
    for m in ms:
        nodes = [v for e in m for v in e]
        assert len(nodes) == len(set(nodes))           # vertex-disjoint
    assert len(ms) <= max(dict(graph.degree()).values()) + 1 + 1


@pytest.mark.parametrize("budget", [0.2, 0.5, 0.8])
def test_sampled_w_matches_the_closed_forms(budget):
    graph = _graphs()[0]
    s = plan_matcha(graph, budget)
    laps = s.laplacians()
    m = len(s.matchings)
    assert s.p.sum() <= budget * m + 1e-9 and (s.p >= 0).all() and (s.p <= 1).all()
    assert 0 < s.rho < 1
    rng = np.random.default_rng(0)
    t = 10_000
    mean_w = np.zeros((s.n, s.n))
    mean_wtw = np.zeros((s.n, s.n))
    for _ in range(t):
        w = s.round_matrix(s.sample(rng.random(m)))
        mean_w += w
        mean_wtw += w.T @ w
    mean_w /= t
    mean_wtw /= t
    ew, ewtw = expected_w(laps, s.p, s.alpha), expected_wtw(laps, s.p, s.alpha)
    # error of a mean of T draws ~ 1 / sqrt(T): entries are bounded by ~1
    assert np.abs(mean_w - ew).max() < 5 / np.sqrt(t)
    assert np.abs(mean_wtw - ewtw).max() < 5 / np.sqrt(t)
    # and the closed form is not trivially satisfied: another alpha is far off
    assert np.abs(mean_wtw - expected_wtw(laps, s.p, 2 * s.alpha)).max() > 20 / np.sqrt(t)


def test_alpha_minimises_rho_and_budget_raises_connectivity():
    graph = _graphs()[0]
    s = plan_matcha(graph, 0.5)
    laps = s.laplacians()
    for a in (0.8 * s.alpha, 1.2 * s.alpha):
        assert spectral_norm_gap(laps, s.p, a) >= s.rho - 1e-9
    # the optimised probabilities connect better than spending the budget uniformly
    lam = lambda p: np.linalg.eigvalsh(np.tensordot(p, laps, 1))[1]
    assert lam(s.p) >= lam(np.full(len(s.matchings), 0.5)) - 1e-9
    assert plan_matcha(graph, 0.3).rho > plan_matcha(graph, 0.8).rho


def test_full_budget_is_vanilla_dpsgd():
    graph = _graphs()[0]
    s = plan_matcha(graph, 1.0)
    assert (s.p == 1).all()
    lap = nx.laplacian_matrix(graph, nodelist=range(s.n)).toarray()
    w = np.eye(s.n) - s.alpha * lap
    rng = np.random.default_rng(0)
    for _ in range(5):
        assert np.allclose(s.round_matrix(s.sample(rng.random(len(s.matchings)))), w)
    assert np.allclose(w.sum(axis=0), 1) and np.allclose(w, w.T)


def test_budget_is_checked():
    with pytest.raises(ValidationError, match="budget"):
        activation_probabilities(np.zeros((2, 3, 3)), 0.0)
    with pytest.raises(ValidationError, match="budget"):
        activation_probabilities(np.zeros((2, 3, 3)), 1.5)
