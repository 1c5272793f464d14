import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from airplan_qo.errors import UnknownNameError
from airplan_qo.plans.families import build_graph
from airplan_qo.plans import fastest_mixing
from airplan_qo.plans.graphs import from_edge_weights, laplacian
from airplan_qo.plans.mixing import WEIGHTS
from airplan_qo.plans.spectra import spectral_stats

@pytest.fixture(autouse=True)
def no_sdp(monkeypatch):
    """Exercise the always-available subgradient method; the SDP has its own test."""
    monkeypatch.setattr(fastest_mixing, "_have_cvxpy", lambda: False)


GRAPHS = [("ring", {}), ("erdos_renyi", {"p": 0.15}), ("small_world", {}), ("clustered", {}),
          ("star", {}), ("torus", {}), ("exponential", {})]


@pytest.mark.parametrize("rule", WEIGHTS.names())
@pytest.mark.parametrize("family,params", GRAPHS)
def test_weights_symmetric_doubly_stochastic_with_graph_pattern(rule, family, params):
    g = build_graph(family, 30, seed=4, **params)
    w = WEIGHTS.get(rule)(g)
    assert sp.issparse(w)
    dense = w.toarray()
    assert np.allclose(dense, dense.T, atol=1e-12)
    assert np.allclose(dense.sum(axis=0), 1.0, atol=1e-9)
    assert np.allclose(dense.sum(axis=1), 1.0, atol=1e-9)
    adj = nx.to_numpy_array(g, nodelist=range(30)) > 0
    off = ~np.eye(30, dtype=bool)
    assert not np.any((np.abs(dense) > 1e-12) & off & ~adj), "weight outside G's edges"


@pytest.mark.parametrize("rule", ["metropolis_hastings", "max_degree", "fastest_mixing"])
def test_markov_rules_are_nonnegative(rule):
    w = WEIGHTS.get(rule)(build_graph("erdos_renyi", 40, seed=2)).toarray()
    assert w.min() >= -1e-12


def test_metropolis_formula():
    g = nx.path_graph(3)  # degrees 1, 2, 1
    w = WEIGHTS.get("metropolis_hastings")(g).toarray()
    assert w[0, 1] == pytest.approx(1 / 3)
    assert w[0, 0] == pytest.approx(2 / 3)
    assert w[1, 1] == pytest.approx(1 / 3)


def test_best_constant_beats_max_degree():
    g = build_graph("ring", 20)
    gaps = {r: spectral_stats(g, WEIGHTS.get(r)(g)).mixing_gap
            for r in ("max_degree", "best_constant")}
    assert gaps["best_constant"] >= gaps["max_degree"] - 1e-12


@pytest.mark.parametrize("family,params,seed", [
    ("ring", {}, 0), ("erdos_renyi", {"p": 0.2}, 1), ("small_world", {"k": 4}, 2),
    ("clustered", {}, 3), ("k_regular", {"d": 3}, 4), ("star", {}, 5)])
def test_fastest_mixing_never_worse_than_metropolis(family, params, seed):
    g = build_graph(family, 30, seed=seed, **params)
    mh = spectral_stats(g, WEIGHTS.get("metropolis_hastings")(g)).mixing_gap
    fm = spectral_stats(g, WEIGHTS.get("fastest_mixing")(g)).mixing_gap
    assert fm >= mh - 1e-12
    if family in ("ring", "erdos_renyi", "small_world", "clustered"):
        assert fm > 1.2 * mh  # a real improvement, as DESIGN reports 1.5-3.3x at n = 50


def test_fastest_mixing_ring_reaches_known_optimum():
    # the fastest-mixing chain on a cycle has edge weight ~1/2: gap = (1 - cos(2 pi / n))
    n = 20
    g = build_graph("ring", n)
    gap = spectral_stats(g, WEIGHTS.get("fastest_mixing")(g)).mixing_gap
    assert gap == pytest.approx(1 - np.cos(2 * np.pi / n), rel=0.05)


def test_unknown_rule_suggests():
    with pytest.raises(UnknownNameError, match="did you mean 'metropolis_hastings'"):
        WEIGHTS.get("metropolis")


def test_sdp_at_least_as_good_as_subgradient(monkeypatch):
    pytest.importorskip("cvxpy")
    monkeypatch.setattr(fastest_mixing, "_have_cvxpy", lambda: True)
    g = build_graph("erdos_renyi", 16, seed=1, p=0.3)
    exact = spectral_stats(g, WEIGHTS.get("fastest_mixing")(g)).mixing_gap
    monkeypatch.setattr(fastest_mixing, "_have_cvxpy", lambda: False)
    sub = spectral_stats(g, WEIGHTS.get("fastest_mixing")(g)).mixing_gap
    assert exact >= sub - 1e-9


@pytest.mark.parametrize("family,params", GRAPHS)
def test_laplacians_match_networkx(family, params):
    g = build_graph(family, 30, seed=4, **params)
    assert np.allclose(laplacian(g).toarray(),
                       nx.laplacian_matrix(g, nodelist=range(30)).toarray(), atol=1e-12)
    assert np.allclose(laplacian(g, normed=True).toarray(),
                       nx.normalized_laplacian_matrix(g, nodelist=range(30)).toarray(),
                       atol=1e-12)


def test_from_edge_weights_fills_the_diagonal():
    w = from_edge_weights(4, np.array([0, 1, 1]), np.array([1, 2, 3]), np.array([0.5, 0.25, 0.1]))
    assert np.allclose(w.toarray(), [[0.5, 0.5, 0, 0], [0.5, 0.15, 0.25, 0.1],
                                     [0, 0.25, 0.75, 0], [0, 0.1, 0, 0.9]], atol=1e-15)


def test_edge_arrays_follow_changes_to_the_graph():
    from airplan_qo.plans.families import build_graph
    from airplan_qo.plans.mixing import edge_arrays

    g = build_graph("erdos_renyi", 30, seed=2, p=0.3)   # built with its arrays cached
    u, v = edge_arrays(g)
    assert len(u) == g.number_of_edges()
    assert sorted(zip(u.tolist(), v.tolist())) == sorted(
        (min(a, b), max(a, b)) for a, b in g.edges())
    a, b = next((a, b) for a in range(30) for b in range(a + 1, 30) if not g.has_edge(a, b))
    g.add_edge(a, b)
    u2, v2 = edge_arrays(g)
    assert len(u2) == len(u) + 1 and (a, b) in set(zip(u2.tolist(), v2.tolist()))
    g.remove_edge(a, b)
    assert len(edge_arrays(g)[0]) == len(u)


def test_weights_matrix_is_identity_minus_weighted_laplacian():
    import networkx as nx
    import scipy.sparse as sp
    from scipy.sparse import csgraph

    from airplan_qo.plans.graphs import edge_arrays, from_edge_weights

    rng = np.random.default_rng(0)
    for seed in range(40):
        n = int(rng.integers(2, 40))
        g = nx.gnp_random_graph(n, float(rng.random()), seed=seed)
        u, v = edge_arrays(g)
        w = rng.random(len(u))
        off = sp.coo_matrix((np.concatenate([w, w]), (np.concatenate([u, v]),
                                                      np.concatenate([v, u]))), shape=(n, n))
        ref = sp.identity(n, format="csr") - csgraph.laplacian(off.tocsr())
        for uu, vv in ((u, v), (v[::-1], u[::-1])):   # sorted pairs, and any other order
            got = from_edge_weights(n, uu, vv, w if uu is u else w[::-1])
            assert got.nnz == ref.nnz and (got != ref).nnz == 0


def test_weights_on_a_graph_are_the_matrix_from_its_edge_weights():
    import networkx as nx

    from airplan_qo.plans.graphs import edge_arrays, edge_weights, weights_matrix

    rng = np.random.default_rng(1)
    for seed in range(40):
        n = int(rng.integers(2, 40))
        g = nx.gnp_random_graph(n, float(rng.random()), seed=seed)
        u, v = edge_arrays(g)
        w = rng.random(len(u))
        if seed % 4 == 0 and len(w):
            w[0] = 0.0                      # a zero weight is not stored
        ref = from_edge_weights(n, u, v, w)
        got = weights_matrix(g, w)
        assert got.nnz == ref.nnz and (got != ref).nnz == 0
        on_edges = np.array([ref[a, b] for a, b in zip(u.tolist(), v.tolist())])
        assert np.array_equal(edge_weights(g, got), on_edges)
        assert np.array_equal(edge_weights(g, ref.tocsc()), on_edges)
    g = build_graph("small_world", 200, seed=2, k=6)
    for rule in ("metropolis_hastings", "max_degree", "best_constant"):
        w = WEIGHTS.get(rule)(g)
        assert abs(w - w.T).max() == 0 and np.allclose(np.asarray(w.sum(axis=1)).ravel(), 1.0)


def test_laplacians_are_what_csgraph_gives():
    from scipy.sparse import csgraph

    from airplan_qo.plans.graphs import adjacency

    for g in (build_graph("erdos_renyi", 150, seed=3, p=0.05),
              build_graph("small_world", 120, seed=1, k=4), build_graph("ring", 7)):
        for normed in (False, True):
            ref = sp.csr_matrix(csgraph.laplacian(adjacency(g), normed=normed))
            got = laplacian(g, normed=normed)
            # the same entries, bit for bit, in the same order
            assert np.array_equal(got.indptr, ref.indptr)
            assert np.array_equal(got.indices, ref.indices)
            assert np.array_equal(got.data, ref.data)


def test_graph_matrices_of_a_graph_with_a_self_loop_are_as_before():
    import networkx as nx
    from scipy.sparse import csgraph

    from airplan_qo.plans.graphs import adjacency, edge_arrays, weights_matrix

    g = nx.cycle_graph(6)
    g.add_edge(2, 2)
    u, v = edge_arrays(g)
    a = adjacency(g)
    ref = sp.coo_matrix((np.ones(2 * len(u)), (np.concatenate([u, v]), np.concatenate([v, u]))),
                        shape=(6, 6)).tocsr()
    assert (a != ref).nnz == 0 and a[2, 2] == 2
    assert (laplacian(g) != sp.csr_matrix(csgraph.laplacian(ref))).nnz == 0
    w = np.full(len(u), 0.2)
    assert (weights_matrix(g, w) != from_edge_weights(6, u, v, w)).nnz == 0
