import math

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from airplan_qo.plans import spectra
from airplan_qo.plans.families import build_graph
from airplan_qo.plans.graphs import laplacian
from airplan_qo.plans.mixing import WEIGHTS
from airplan_qo.plans.spectra import second_smallest, spectral_stats


def _mh(g):
    return WEIGHTS.get("metropolis_hastings")(g)


@pytest.mark.parametrize("n", [3, 10, 50, 1000])
def test_ring_closed_form(n):
    g = build_graph("ring", n)
    s = spectral_stats(g, _mh(g), family="ring")
    assert s.lambda2_laplacian == pytest.approx(2 - 2 * math.cos(2 * math.pi / n), rel=1e-12)
    assert s.lambda2_normalized == pytest.approx(s.lambda2_laplacian / 2, rel=1e-12)
    # Metropolis on a ring is I - L/3
    assert s.mixing_gap == pytest.approx(s.lambda2_laplacian / 3, rel=1e-9)


def test_ring_1000_tiny_gap():
    s = spectral_stats(build_graph("ring", 1000), _mh(build_graph("ring", 1000)), family="ring")
    assert s.lambda2_laplacian == pytest.approx(3.9478e-5, rel=1e-4)


@pytest.mark.parametrize("n", [2, 5, 50])
def test_complete_closed_form(n):
    g = build_graph("complete", n)
    s = spectral_stats(g, _mh(g), family="complete")
    assert s.lambda2_laplacian == n
    assert s.lambda2_normalized == pytest.approx(n / (n - 1))
    assert s.mixing_gap == pytest.approx(1.0)  # Metropolis on K_n is the exact average
    assert s.mixing_p == pytest.approx(1.0)


@pytest.mark.parametrize("seed", range(6))
def test_against_networkx_and_dense_numpy(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(8, 60))
    g = build_graph("erdos_renyi", n, seed=seed, p=float(rng.uniform(0.1, 0.5)))
    w = _mh(g)
    s = spectral_stats(g, w)
    ref = nx.algebraic_connectivity(g, method="tracemin_lu", tol=1e-12)
    assert s.lambda2_laplacian == pytest.approx(ref, rel=1e-6)
    nl = nx.normalized_laplacian_matrix(g, nodelist=range(n)).toarray()
    assert s.lambda2_normalized == pytest.approx(np.linalg.eigvalsh(nl)[1], rel=1e-9)
    ev = np.linalg.eigvalsh(w.toarray() - np.ones((n, n)) / n)
    rho = np.max(np.abs(ev))
    assert s.mixing_rho == pytest.approx(rho, rel=1e-9)
    assert s.mixing_p == pytest.approx(1 - rho**2, rel=1e-9)
    assert s.n_edges == g.number_of_edges()
    assert s.max_degree == max(d for _, d in g.degree())


def test_closed_form_matches_dense_for_non_uniform_rule():
    g = build_graph("ring", 12)
    w = WEIGHTS.get("fastest_mixing")(g)
    s = spectral_stats(g, w, family="ring")
    ev = np.linalg.eigvalsh(w.toarray() - np.ones((12, 12)) / 12)
    assert s.mixing_rho == pytest.approx(np.max(np.abs(ev)), rel=1e-9)


def test_sparse_solver_matches_dense(monkeypatch):
    g = build_graph("small_world", 400, seed=3, k=4)
    w = _mh(g)
    dense = spectral_stats(g, w)
    monkeypatch.setattr(spectra, "DENSE_LIMIT", 100)
    sparse = spectral_stats(g, w)
    assert sparse.method != "dense"
    assert sparse.lambda2_laplacian == pytest.approx(dense.lambda2_laplacian, rel=1e-6)
    assert sparse.lambda2_normalized == pytest.approx(dense.lambda2_normalized, rel=1e-6)
    assert sparse.mixing_gap == pytest.approx(dense.mixing_gap, rel=1e-5)


def test_second_smallest_lobpcg_fallback(monkeypatch):
    # a path graph has a tiny gap; force the sparse path and check against the closed form
    monkeypatch.setattr(spectra, "DENSE_LIMIT", 50)
    n = 300
    g = nx.path_graph(n)
    lam, method = second_smallest(laplacian(g), np.ones(n))
    assert method in ("arpack", "lobpcg")
    assert lam == pytest.approx(2 - 2 * math.cos(math.pi / n), rel=1e-4)


def test_star_spectrum():
    g = build_graph("star", 10)
    s = spectral_stats(g, _mh(g), family="star")
    assert s.lambda2_laplacian == pytest.approx(1.0)
    assert isinstance(sp.csr_matrix(_mh(g)), sp.csr_matrix)


def _dense_second_and_last(m):
    ev = np.linalg.eigvalsh(m.toarray())
    return ev[1], ev[-1]


@pytest.mark.parametrize("family,kw", [("small_world", {"k": 6}), ("k_regular", {}),
                                       ("clustered", {"c": 40})])
def test_lanczos_matches_dense_on_a_few_thousand_nodes(family, kw):
    g = build_graph(family, 3000, seed=1, **kw)
    w = _mh(g)
    n = g.number_of_nodes()
    for m, null in ((laplacian(g), np.ones(n)),
                    (laplacian(g, normed=True), np.sqrt(spectra.degrees(g))),
                    ((sp.identity(n, format="csr") - w).tocsr(), np.ones(n))):
        small, large, ill = spectra._lanczos_extremes(m, null)
        ref_small, ref_large = _dense_second_and_last(m)
        assert not ill
        assert small == pytest.approx(ref_small, rel=1e-6)
        assert large == pytest.approx(ref_large, rel=1e-6)
    s = spectral_stats(g, w)
    assert s.method == "lanczos"


def test_amg_lobpcg_matches_dense_on_an_ill_conditioned_torus():
    pytest.importorskip("pyamg")
    g = build_graph("torus", 2500)  # 50 x 50: lambda2 ~ 0.016 against lambda_max = 8
    n = g.number_of_nodes()
    for m, null in ((laplacian(g), np.ones(n)),
                    ((sp.identity(n, format="csr") - _mh(g)).tocsr(), np.ones(n))):
        ref = _dense_second_and_last(m)[0]
        assert spectra._amg_lobpcg(m, null) == pytest.approx(ref, rel=1e-6)


def test_ill_conditioned_matrix_goes_to_amg(monkeypatch):
    pytest.importorskip("pyamg")
    monkeypatch.setattr(spectra, "DENSE_LIMIT", 100)
    n = 3000
    g = nx.path_graph(n)  # lambda2 ~ 1e-6 against lambda_max ~ 4
    small, large, ill = spectra._lanczos_extremes(laplacian(g), np.ones(n))
    assert ill and small is None
    lam, method = second_smallest(laplacian(g), np.ones(n))
    assert method == "lobpcg"
    assert lam == pytest.approx(2 - 2 * math.cos(math.pi / n), rel=1e-6)


def test_residual_check_rejects_a_wrong_eigenpair():
    g = build_graph("small_world", 3000, seed=2, k=6)
    lap = laplacian(g)
    ev, vecs = np.linalg.eigh(lap.toarray())
    x = vecs[:, 1]
    assert spectra.eigenpair_ok(lap, x, ev[1])
    assert not spectra.eigenpair_ok(lap, x, ev[1] * (1 + 1e-3))   # wrong value
    assert not spectra.eigenpair_ok(lap, vecs[:, 1] + 1e-3 * vecs[:, 2], ev[1])  # wrong vector
    assert not spectra.eigenpair_ok(lap, np.zeros(3000), ev[1])
    assert not spectra.eigenpair_ok(lap, x, float("nan"))


def test_failed_residual_check_falls_back_to_arpack(monkeypatch):
    g = build_graph("small_world", 3000, seed=2, k=6)
    lap = laplacian(g)
    n = lap.shape[0]
    ref = np.linalg.eigvalsh(lap.toarray())[1]
    # every Ritz pair fails its check: Lanczos reports nothing and ARPACK answers
    monkeypatch.setattr(spectra, "eigenpair_ok", lambda *a, **k: False)
    small, large, _ = spectra._lanczos_extremes(lap, np.ones(n))
    assert small is None and large is None
    lam, method = second_smallest(lap, np.ones(n))
    assert method == "arpack"
    assert lam == pytest.approx(ref, rel=1e-6)


def test_large_n_spectral_stats_match_arpack(monkeypatch):
    g = build_graph("small_world", 2500, seed=4, k=6)
    w = _mh(g)
    dense = spectral_stats(g, w)
    monkeypatch.setattr(spectra, "DENSE_LIMIT", 1000)
    g2 = build_graph("small_world", 2500, seed=4, k=6)
    fast = spectral_stats(g2, w)
    assert fast.method == "lanczos"
    for f in ("lambda2_laplacian", "lambda2_normalized", "mixing_gap", "mixing_rho"):
        assert getattr(fast, f) == pytest.approx(getattr(dense, f), rel=1e-6)
    assert spectra.laplacian_extremes(g2) == pytest.approx(
        _dense_second_and_last(laplacian(g2)), rel=1e-6)


@pytest.mark.parametrize("rule", ["best_constant", "max_degree"])
def test_constant_rule_gap_comes_from_the_laplacian(monkeypatch, rule):
    # W = I - a L: the gap is a times the Laplacian's extremes, with no eigensolve of I - W
    g = build_graph("small_world", 2500, seed=5, k=6)
    dense = spectral_stats(g, WEIGHTS.get(rule)(g))
    monkeypatch.setattr(spectra, "DENSE_LIMIT", 1000)
    g2 = build_graph("small_world", 2500, seed=5, k=6)
    calls = []
    extremes = spectra._extremes
    monkeypatch.setattr(spectra, "_extremes", lambda m, *a, **k: calls.append(m.shape) or
                        extremes(m, *a, **k))
    lam = spectra.graph_lambda2(g2, "small_world")
    fast = spectral_stats(g2, WEIGHTS.get(rule)(g2), laplacian_lambda2=lam)
    assert len(calls) == 1   # the Laplacian's run only
    for f in ("mixing_gap", "mixing_rho", "mixing_p"):
        assert getattr(fast, f) == pytest.approx(getattr(dense, f), rel=1e-6)


def test_varying_weights_are_not_taken_for_a_constant_rule():
    g = build_graph("small_world", 300, seed=1, k=4)
    u, v = spectra.edge_arrays(g)
    w_mh = _mh(g)
    assert not spectra._is_constant_rule(g, w_mh, np.asarray(w_mh[u, v]).ravel())
    w_bc = WEIGHTS.get("best_constant")(g)
    assert spectra._is_constant_rule(g, w_bc, np.asarray(w_bc[u, v]).ravel())
    # the same weight on every edge, but a diagonal that does not make W = I - a L
    off = sp.csr_matrix(w_bc - sp.diags(w_bc.diagonal()))
    bad = (off + sp.identity(300) * 0.5).tocsr()
    assert not spectra._is_constant_rule(g, bad, np.asarray(bad[u, v]).ravel())


@pytest.mark.parametrize("n", [6, 8, 12, 31, 64, 100, 257])
def test_exponential_graph_spectra_in_closed_form_match_dense(n, monkeypatch):
    monkeypatch.setattr(spectra, "DENSE_LIMIT", 4)
    g = build_graph("exponential", n)
    assert spectra._closed_form(g, "exponential") == "circulant"
    s = spectral_stats(g, _mh(g), family="exponential")
    assert s.method == "closed-form"
    lap = laplacian(g).toarray()
    ev = np.linalg.eigvalsh(lap)
    assert s.lambda2_laplacian == pytest.approx(ev[1], rel=1e-9)
    assert spectra.laplacian_extremes(g) == pytest.approx((ev[1], ev[-1]), rel=1e-9)
    nl = laplacian(g, normed=True).toarray()
    assert s.lambda2_normalized == pytest.approx(np.linalg.eigvalsh(nl)[1], rel=1e-9)
    w = _mh(g).toarray()
    rho = np.max(np.abs(np.linalg.eigvalsh(w - np.ones((n, n)) / n)))
    assert s.mixing_rho == pytest.approx(rho, rel=1e-9, abs=1e-12)
    # the same family name on another graph is not taken for the circulant
    h = g.copy()
    h.remove_edge(*next(iter(h.edges())))
    assert spectra._closed_form(h, "exponential") is None
