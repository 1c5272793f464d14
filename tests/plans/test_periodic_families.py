"""Periodic (time-varying) topologies: one_peer_exponential and base_k, their exact averaging,
schedules, spectra, per-round accounting and how the planner and EXPLAIN show them."""

import json
import math

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

import airplan_qo as aq
from airplan_qo.errors import PlanningError, ValidationError
from airplan_qo.plans.graphs import directed_links
from airplan_qo.plans.mixing import PRESCRIBED
from airplan_qo.plans.periodic import Round, base_k_rounds, check_exact
from airplan_qo.plans.channel_config import ChannelConfig
from airplan_qo.plans.plan import PhysicalPlan, round_cost
from airplan_qo.plans.schedule import directed_conflicts, square_adjacency
from airplan_qo.plans.topology import TopologySpec, build, describe


def _product(topo) -> np.ndarray:
    m = np.eye(topo.spec.n)
    for r in topo.rounds:
        m = r.weights.toarray() @ m
    return m


@pytest.mark.parametrize("n", [2, 4, 8, 16, 32])
def test_one_peer_exponential_averages_exactly_after_log2_n_rounds(n):
    topo = build(TopologySpec.create("one_peer_exponential", n))
    tau = int(math.log2(n))
    assert topo.period == tau
    assert np.abs(_product(topo) - 1.0 / n).max() < 1e-14
    for t, r in enumerate(topo.rounds):
        w = r.weights.toarray()
        expected = np.eye(n) / 2
        expected[np.arange(n), (np.arange(n) + 2 ** t) % n] += 0.5
        assert np.array_equal(w, expected), t           # W_t = (I + P_t) / 2
    if n >= 4:   # one period short of the last round is not yet the average
        partial = np.eye(n)
        for r in topo.rounds[:-1]:
            partial = r.weights.toarray() @ partial
        assert np.abs(partial - 1.0 / n).max() > 0.5 / n      # half the clients each


def test_one_peer_exponential_off_powers_of_two_averages_only_approximately():
    topo, stats = describe(TopologySpec.create("one_peer_exponential", 10))
    err = np.linalg.norm(_product(topo) - 0.1, 2)
    assert topo.period == 4 and err > 0.05
    assert stats.spectra.period_rho == pytest.approx(err, rel=1e-9)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_base_k_averages_exactly_with_at_most_k_neighbours(k):
    for n in [*range(max(2, k + 1), 65), 100]:
        topo = build(TopologySpec.create("base_k", n, k=k))
        assert np.abs(_product(topo) - 1.0 / n).max() < 1e-12, n
        for r in topo.rounds:
            w = r.weights.toarray()
            assert np.allclose(w, w.T) and (w >= 0).all(), n
            assert np.allclose(w.sum(axis=0), 1) and np.allclose(w.sum(axis=1), 1), n
            assert max(dict(r.graph.degree()).values()) <= k, n


@pytest.mark.parametrize("n, k, period", [(16, 1, 4), (64, 1, 6), (27, 2, 3), (25, 4, 2),
                                          (36, 5, 2), (5, 4, 1), (6, 1, 4)])
def test_base_k_periods(n, k, period):
    # (k+1)-smooth n: the k-peer hyper-hypercube, one round per factor; n = 6 with k = 1: the
    # 2 x 3 split, one exchange round of the simple Base-2 graph on 3 and one across the halves
    assert build(TopologySpec.create("base_k", n, k=k)).period == period


@pytest.mark.parametrize("k, message", [(0, "must be in [1, n - 1 = 9]"),
                                        (10, "must be in [1, n - 1 = 9]")])
def test_base_k_refuses_a_degree_out_of_range(k, message):
    with pytest.raises(ValidationError) as err:
        TopologySpec.create("base_k", 10, k=k)
    assert message in str(err.value)


def test_a_period_that_does_not_average_is_refused():
    n = 4
    g = nx.empty_graph(n)
    g.add_edge(0, 1)
    w = sp.csr_matrix(np.array([[.5, .5, 0, 0], [.5, .5, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1.]]))
    with pytest.raises(PlanningError, match="is not 11\\^T/n"):
        check_exact((Round(g, w),), "test")
    check_exact((Round(g, sp.csr_matrix(np.full((n, n), 1 / n))),), "test")   # 11^T/n passes


def test_periodic_families_prescribe_their_weights():
    spec = TopologySpec.create("one_peer_exponential", 16, weights="best_constant")
    assert spec.weights == PRESCRIBED and spec.periodic
    assert TopologySpec.create("base_k", 16).weights == PRESCRIBED
    assert not TopologySpec.create("ring", 16).periodic
    with pytest.raises(aq.AirPlanError, match="weights"):
        TopologySpec.create("one_peer_exponential", 16, weights="no_such_rule")
    with pytest.raises(aq.AirPlanError, match="weights"):
        TopologySpec.create("ring", 16, weights=PRESCRIBED)


def test_directed_conflicts_of_symmetric_links_are_g_squared():
    g = build(TopologySpec.create("small_world", 30, k=4)).graph
    u = np.array([a for a, b in g.edges()] + [b for a, b in g.edges()])
    v = np.array([b for a, b in g.edges()] + [a for a, b in g.edges()])
    assert (directed_conflicts(30, u, v) != square_adjacency(g)).nnz == 0


@pytest.mark.parametrize("family, n, params", [("one_peer_exponential", 16, {}),
                                               ("one_peer_exponential", 12, {}),
                                               ("base_k", 10, {"k": 2}),
                                               ("base_k", 23, {"k": 1})])
def test_round_schedules_separate_conflicting_receivers(family, n, params):
    topo = build(TopologySpec.create(family, n, **params))
    for r in topo.rounds:
        recv, send, _, _ = directed_links(r.graph, r.weights)
        conflicts = directed_conflicts(n, recv, send).tocoo()
        slot = r.schedule.slot_of()
        receives = np.isin(np.arange(n), recv)
        both = receives[conflicts.row] & receives[conflicts.col]
        assert (slot[conflicts.row][both] != slot[conflicts.col][both]).all()
        assert sorted(i for s in r.schedule.slots for i in s) == list(range(n))


def test_one_peer_rounds_are_directed_and_need_two_slots():
    topo = build(TopologySpec.create("one_peer_exponential", 16))
    for t, r in enumerate(topo.rounds):
        recv, send, _, _ = directed_links(r.graph, r.weights)
        assert recv.size == 16 and np.array_equal(np.sort(send), np.arange(16))
        assert r.schedule.slots_per_round == 2
        if t < topo.period - 1:           # i hears i + 2^t only (the last shift is n/2)
            assert not np.isin((recv + 2 ** t) % 16 * 16 + recv, recv * 16 + send).any()


@pytest.mark.parametrize("family, n, params", [("one_peer_exponential", 16, {}),
                                               ("base_k", 25, {"k": 1}),
                                               ("base_k", 10, {"k": 2})])
def test_exact_periods_have_per_round_p_one_over_the_period(family, n, params):
    _, stats = describe(TopologySpec.create(family, n, **params))
    s = stats.spectra
    assert s.period == stats.period > 1 and s.period_rho == 0.0
    assert s.mixing_p == pytest.approx(1.0 / s.period)
    assert s.mixing_gap * (2 - s.mixing_gap) == pytest.approx(s.mixing_p)


@pytest.mark.parametrize("n", [12, 520])      # a dense SVD, ARPACK on the sparse chain
def test_inexact_period_p_is_the_period_contraction_per_round(n):
    topo, stats = describe(TopologySpec.create("one_peer_exponential", n))
    rho = np.linalg.norm(_product(topo) - 1 / n, 2)
    assert rho > 1e-3
    assert stats.spectra.mixing_p == pytest.approx((1 - rho ** 2) / topo.period, rel=1e-9)


def test_static_topologies_have_period_one():
    _, stats = describe(TopologySpec.create("ring", 12))
    assert stats.period == stats.spectra.period == 1 and stats.spectra.period_rho is None
    assert stats.as_dict()["period"] == 1 and "slots_by_round" not in stats.as_dict()


def test_per_round_cost_is_the_mean_of_each_rounds_own_figures():
    topo, stats = describe(TopologySpec.create("base_k", 10, k=2))
    slots = [r.schedule.slots_per_round for r in topo.rounds]
    links = [directed_links(r.graph, r.weights)[0].size for r in topo.rounds]
    assert len(set(slots)) > 1 and len(set(links)) > 1    # rounds differ
    d = 1000
    ideal = round_cost(PhysicalPlan(stats.spec, 0.1, ChannelConfig(kind="ideal")), stats, d)
    assert ideal.channel_uses == pytest.approx(np.mean(slots) * 50)
    assert ideal.slots == pytest.approx(np.mean(slots))
    assert ideal.bits == pytest.approx(np.mean(links) * 100 * 32)    # shared mask: no index
    topk = round_cost(PhysicalPlan(stats.spec, 0.1, ChannelConfig(kind="ideal"), mask="topk"),
                      stats, d)
    assert topk.bits == pytest.approx(np.mean(links) * 100 * (32 + 10))
    ota = ChannelConfig(kind="ota", g_th=0.1, dropout=0.1)
    cost = round_cost(PhysicalPlan(stats.spec, 1.0, ota), stats, d)
    assert cost.energy_j == pytest.approx(
        ota.tx_power_w / ota.bandwidth_hz * np.mean(links) * math.exp(-0.1) * 0.81 * 500)
    assert cost.channel_uses < np.mean(slots) * 500     # silent slots cost nothing


def test_explain_shows_the_period():
    db = aq.connect(":memory:")
    [result] = db.sql("EXPLAIN TRAIN digits ON 16 CLIENTS USING TOPOLOGY one_peer_exponential "
                      "COST MODEL dsgd SLA accuracy >= 0.5")
    text = result.text
    assert "period=4" in text and 'period_contraction="exact averaging"' in text
    assert "weights=prescribed" in text and 'slots_by_round="2 2 2 2"' in text
    [result] = db.sql("EXPLAIN (FORMAT JSON) TRAIN digits ON 16 CLIENTS USING TOPOLOGY "
                      "base_k(k = 2) COST MODEL dsgd SLA accuracy >= 0.5")
    doc = json.loads(result.text)
    setup = [p for p in doc[0]["plan"]["plans"] if p["node_type"] == "Topology Setup"][0]
    assert setup["period"] == 4 and setup["family"] == "base_k"
    [result] = db.sql("EXPLAIN TRAIN digits ON 16 CLIENTS USING TOPOLOGY ring "
                      "COST MODEL dsgd SLA accuracy >= 0.5")
    assert "period" not in result.text
    db.close()


def test_planner_costs_periodic_candidates_without_caching_them():
    db = aq.connect(":memory:")
    w = aq.Workload(dataset="digits", clients=16, alpha=0.5, channel="ideal")
    result = db.plan(w, topologies=["one_peer_exponential", "base_k", "ring"],
                     weights=["metropolis_hastings", "best_constant"], sparsity=[1.0],
                     estimator="dsgd", transports=["ota"], algorithms=["auto"])
    periodic = [c for c in result.candidates if c.plan.topology.periodic]
    assert sorted(c.plan.topology.family for c in periodic) == ["base_k", "one_peer_exponential"]
    for c in periodic:
        assert c.plan.topology.weights == PRESCRIBED and c.topology_id is None
        assert c.cost.per_round.channel_uses == pytest.approx(2 * math.ceil(4810 / 2))
    rows = db.catalog.query("SELECT family FROM airplan.topologies")
    assert {r["family"] for r in rows} <= {"ring", "complete"}
    db.close()


@pytest.mark.parametrize("family, n, params", [("one_peer_exponential", 1000, {}),
                                               ("base_k", 1000, {"k": 1}),
                                               ("base_k", 999, {"k": 3})])
def test_planning_memory_counts_every_rounds_graph(family, n, params):
    from airplan_qo.plans import footprint
    from airplan_qo.plans.families import FAMILIES

    topo = build(TopologySpec.create(family, n, **params))
    held = sum(r.graph.number_of_edges() for r in topo.rounds) + topo.graph.number_of_edges()
    expected = footprint.expected_edges(family, n, FAMILIES.get(family).resolve(n, params))
    assert held <= expected <= 3 * held


@pytest.mark.parametrize("n, period", [(12, 60), (320, 4)])
def test_resample_er_per_round_p_is_the_expected_one_round_contraction(n, period):
    """Independent draws: p = 1 - lambda_max(mean W_t^T W_t - J), dense below 300 nodes and by
    ARPACK above, and far above the period product's p / period."""
    from airplan_qo.plans.families import build_rounds
    from airplan_qo.plans.spectra import periodic_spectral_stats

    rounds = build_rounds("resample_er", n, seed=1, period=period)
    m = sum(r.weights.toarray().T @ r.weights.toarray() for r in rounds) / period - 1.0 / n
    expected = 1.0 - np.linalg.eigvalsh(m).max()
    drawn = periodic_spectral_stats(rounds, drawn=True)
    assert drawn.mixing_p == pytest.approx(expected, rel=1e-6)
    assert drawn.mixing_p > periodic_spectral_stats(rounds).mixing_p
    assert drawn.period == period and drawn.max_degree > n / 4
