import math

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from airplan_qo.plans import spectra
from airplan_qo.plans.families import build_graph
from airplan_qo.plans.mixing import WEIGHTS, laplacian
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
