"""Neighbourhood heterogeneity zeta^2_W and the effective number of neighbours."""

import numpy as np
import pytest

from airplan_qo.costmodels.features import effective_neighbours, neighbourhood_heterogeneity
from airplan_qo.plans.topology import TopologySpec, build


def _w(family, n, **params):
    return build(TopologySpec.create(family, n, weights="metropolis_hastings", **params)).weights


def test_complete_graph_removes_all_heterogeneity_and_no_mixing_keeps_it():
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 20, size=(12, 5))
    assert neighbourhood_heterogeneity(_w("complete", 12), counts) == pytest.approx(0.0,
                                                                                   abs=1e-12)
    assert neighbourhood_heterogeneity(np.eye(12), counts) == pytest.approx(1.0)
    assert neighbourhood_heterogeneity(_w("complete", 4), np.tile([3, 1], (4, 1))) == 0.0


def test_ring_of_independent_clients_keeps_about_a_third():
    rng = np.random.default_rng(1)
    counts = np.stack([rng.multinomial(200, rng.dirichlet(np.full(10, 0.1)))
                       for _ in range(400)])
    r = neighbourhood_heterogeneity(_w("ring", 400), counts)   # W_ij = 1/3 on a ring
    assert r == pytest.approx(1 / 3, abs=0.05)


def test_effective_neighbours():
    assert effective_neighbours(_w("complete", 10)) == pytest.approx(10.0)
    assert effective_neighbours(_w("ring", 10)) == pytest.approx(3.0)
    assert effective_neighbours(np.eye(5)) == pytest.approx(1.0)
