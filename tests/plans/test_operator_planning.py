"""Planning with transports and algorithms: SQL and Python requests, AUTO enumeration, the
exclusion rules as errors, and picks that follow the cost model."""

import math

import pytest

import airplan_qo as aq
from airplan_qo.errors import ValidationError
from airplan_qo.plans.operators import AUTO_TRANSPORTS
from airplan_qo.sql import parse_one
from airplan_qo.sql.binder import bind


@pytest.fixture()
def db(tmp_path):
    with aq.connect(tmp_path / "cat.duckdb") as session:
        yield session


W = aq.Workload(dataset="digits", clients=20, alpha=0.5, snr_db=10)
#: gradient tracking takes one gradient per round: workloads that plan it train one local step
W1 = aq.Workload(dataset="digits", clients=20, alpha=0.5, snr_db=10, local_steps=1)


def test_bind_transport_and_algorithm_clauses():
    bound = bind(parse_one("EXPLAIN TRAIN digits ON 20 CLIENTS USING TRANSPORT digital(bits = 8), "
                           "ota, digital USING ALGORITHM choco, gradient_tracking"))
    assert bound.transports == (("digital", 8), ("ota", None), ("digital", None))
    assert bound.algorithms == ("choco", "gradient_tracking")
    auto = bind(parse_one("TRAIN digits ON 20 CLIENTS USING TRANSPORT AUTO USING ALGORITHM AUTO"))
    assert auto.transports is None and auto.algorithms is None


def test_auto_enumerates_digital_candidates(db):
    r = db.plan(W, topologies=["ring"], sparsity=[1.0], weights=["metropolis_hastings"],
                algorithms=["auto"], fallback="complete", mix_rounds="off")
    labels = {c.plan.label() for c in r.candidates}
    assert {"ring [metropolis_hastings] k=1", "ring [metropolis_hastings] k=1 digital(b=8)",
            "ring [metropolis_hastings] k=1 digital(b=32)"} <= labels
    assert len([c for c in r.candidates if c.plan.topology.family == "ring"]) \
        == len(AUTO_TRANSPORTS)
    # the catalog records each candidate's transport and width
    rows = db.catalog.query("SELECT transport, bits_per_coord FROM airplan.plans WHERE "
                            "planning_run_id = ? AND family = 'ring'", [r.planning_run_id])
    assert sorted((x["transport"], x["bits_per_coord"]) for x in rows) == sorted(AUTO_TRANSPORTS)
    # AUTO algorithms keep the default rule: D-SGD at k = 1 (no "choco at k = 1" duplicates)
    assert {c.plan.algorithm for c in r.candidates} == {"auto"}


def test_digital_without_width_plans_the_default_widths(db):
    r = db.plan(W, topologies=["ring"], sparsity=[1.0], weights=["metropolis_hastings"],
                transports=["digital"], fallback="complete")
    assert {c.plan.bits for c in r.candidates if c.plan.topology.family == "ring"} == {8, 32}
    assert {c.plan.transport for c in r.candidates
            if c.plan.topology.family == "ring"} == {"digital"}


@pytest.mark.parametrize("kwargs, message", [
    ({"algorithms": ["gradient_tracking"], "transports": ["ota"]}, "random walk"),
    ({"algorithms": ["fedavg"]}, "access point"),
    ({"algorithms": ["dsgd"], "sparsity": [0.1]}, "whole models"),
    ({"algorithms": ["matcha"], "topologies": ["one_peer_exponential"]}, "static graph"),
])
def test_excluded_combination_is_refused_with_its_reason(db, kwargs, message):
    before = db.catalog.query("SELECT count(*) AS n FROM airplan.plans")[0]["n"]
    with pytest.raises(ValidationError, match=message):
        db.plan(W, **{"topologies": ["ring"], **kwargs})
    assert db.catalog.query("SELECT count(*) AS n FROM airplan.plans")[0]["n"] == before


def test_excluded_combination_from_sql(db):
    with pytest.raises(aq.AirPlanError, match="USING ALGORITHM gradient_tracking: gradient "
                                              "tracking over the air"):
        db.sql("EXPLAIN TRAIN digits ON 20 CLIENTS USING TRANSPORT ota "
               "USING ALGORITHM gradient_tracking")


def test_gradient_tracking_and_fedavg_plan_where_they_make_sense(db):
    w = aq.Workload(dataset="digits", clients=20, alpha=0.5, snr_db=10, access_point=True,
                    local_steps=1)
    r = db.plan(w, topologies=["ring", "complete"], sparsity=[1.0],
                algorithms=["gradient_tracking", "fedavg"], fallback="complete")
    got = {(c.plan.topology.family, c.plan.algorithm, c.plan.transport) for c in r.candidates
           if c.plan.algorithm != "auto"}
    # gradient tracking only digital; FedAvg only on the complete graph (the server average)
    assert ("ring", "gradient_tracking", "ota") not in got
    assert ("ring", "gradient_tracking", "digital") in got
    assert ("complete", "fedavg", "ota") in got and ("ring", "fedavg", "ota") not in got
    gt = next(c for c in r.candidates if c.plan.algorithm == "gradient_tracking")
    # the shipped fit saw gradient tracking's runs (the default grid's operator workloads)
    assert not any("not in the fitted runs" in n for n in gt.cost.estimate.notes)
    assert gt.cost.estimate.terms["zeta2"] > 0      # the workload's, reported; the plan drops it


def test_paper_estimator_refuses_digital(db):
    with pytest.raises(ValidationError, match="paper estimator costs over-the-air"):
        db.plan(W, topologies=["ring"], transports=["digital"], sparsity=[1.0],
                estimator="paper")
    r = db.plan(W, topologies=["ring"], estimator="paper", fallback="complete")
    assert {c.plan.transport for c in r.candidates} == {"ota"}


def test_ttt_costs_digital_plans_and_widens_operators_outside_its_fit(db):
    r = db.plan(W, topologies=["complete"], sparsity=[1.0], fallback="complete")
    ota = next(c for c in r.candidates if c.plan.transport == "ota")
    dig = next(c for c in r.candidates if c.plan.transport == "digital" and c.plan.bits == 32)
    # the shipped fit saw digital runs: neither transport is flagged
    assert not any("transport" in n for n in ota.cost.estimate.notes + dig.cost.estimate.notes)
    # no channel noise: the median rounds are not above the over-the-air plan's
    assert dig.cost.estimate.terms["median_rounds"] <= ota.cost.estimate.terms["median_rounds"]
    # FedProx lies outside the fitted algorithms: flagged, and its interval wider than FedAvg's
    w = aq.Workload(dataset="digits", clients=20, alpha=0.5, snr_db=10, access_point=True)
    r = db.plan(w, topologies=["complete"], sparsity=[1.0], algorithms=["fedavg", "fedprox"],
                fallback="complete")
    fedavg = next(c for c in r.candidates if c.plan.algorithm == "fedavg")
    fedprox = next(c for c in r.candidates if c.plan.algorithm == "fedprox")
    assert not any("not in the fitted runs" in n for n in fedavg.cost.estimate.notes)
    assert any("fedprox" in n for n in fedprox.cost.estimate.notes)
    width = lambda c: math.log(c.cost.estimate.rounds_hi / c.cost.estimate.rounds_lo)
    assert width(fedprox) > width(fedavg)


def _pick(db, objective, snr_db, bits):
    w = aq.Workload(dataset="digits", clients=20, alpha=0.5, snr_db=snr_db)
    r = db.plan(w, topologies=["complete"], sparsity=[1.0], objective=objective,
                transports=["ota", f"digital(bits={bits})"], sla="accuracy >= 0.8 * fc",
                fallback="complete")
    feasible = [c for c in r.candidates if c.feasible]
    cheapest = min(feasible, key=lambda c: c.cost.total(objective))
    assert r.chosen is cheapest             # the pick follows the cost model
    return r


def test_digital_wins_energy_on_a_dense_graph_at_high_snr(db):
    r = _pick(db, "energy_j", 30.0, 8)
    assert r.chosen.plan.transport == "digital"
    ota = next(c for c in r.candidates if c.plan.transport == "ota")
    assert r.chosen.cost.per_round.energy_j < ota.cost.per_round.energy_j


def test_ota_wins_channel_uses(db):
    r = _pick(db, "channel_uses", 30.0, 8)
    assert r.chosen.plan.transport == "ota"
    dig = next(c for c in r.candidates if c.plan.transport == "digital")
    assert dig.cost.per_round.channel_uses > r.chosen.cost.per_round.channel_uses


def test_estimators_model_quantisation_and_gradient_tracking(db):
    from airplan_qo.costmodels.features import quantisation_noise

    assert quantisation_noise(32, 2.0, 4810) == 0.0
    assert 0 < quantisation_noise(8, 2.0, 4810) < quantisation_noise(1, 2.0, 4810)
    w = aq.Workload(dataset="digits", clients=20, alpha=0.1, snr_db=10, local_steps=1)
    for estimator in ("ttt", "dsgd"):
        r = db.plan(w, topologies=["ring"], sparsity=[1.0], weights=["metropolis_hastings"],
                    transports=["digital(bits=1)", "digital(bits=32)"],
                    algorithms=["dsgd", "gradient_tracking"], estimator=estimator,
                    fallback="complete")
        by = {(c.plan.effective_algorithm, c.plan.bits): c.cost.estimate
              for c in r.candidates if c.plan.topology.family == "ring"}
        key = "mu" if estimator == "ttt" else "error_floor"
        # coarser quantisation needs more rounds (ttt) or leaves a higher floor (dsgd)
        assert by[("dsgd", 1)].terms[key] > by[("dsgd", 32)].terms[key]
        # gradient tracking drops the heterogeneity term: fewer rounds / a lower floor
        assert by[("gradient_tracking", 32)].terms[key] < by[("dsgd", 32)].terms[key]
        # dsgd's model has no gradient-tracking term and says so; the shipped ttt fit saw its runs
        flagged = any("gradient_tracking" in n for n in by[("gradient_tracking", 32)].notes)
        assert flagged == (estimator != "ttt")


def test_dllr_oa_preset_plans_its_own_er_half_sequence(db):
    """USING ALGORITHM dllr_oa alone plans exactly the preset: a fresh G(n, 1/2) every round,
    over the air, the mask fraction as k; AUTO does not enumerate it."""
    w = aq.Workload(dataset="digits", clients=12, alpha=0.5, snr_db=10)
    r = db.plan(w, algorithms=["dllr_oa"], sparsity=[1.0, 0.5], fallback="complete")
    mine = [c for c in r.candidates if c.plan.algorithm == "dllr_oa"]
    assert {(c.plan.topology.family, c.plan.topology.param_dict["p"], c.plan.transport,
             c.plan.k_ratio) for c in mine} == {("resample_er", 0.5, "ota", 1.0),
                                                ("resample_er", 0.5, "ota", 0.5)}
    full = next(c for c in mine if c.plan.k_ratio == 1.0)
    half = next(c for c in mine if c.plan.k_ratio == 0.5)
    # chi(G_t^2) slots, about N on the dense G(n, 1/2); half the tensors, half the uses
    assert 10 <= full.cost.per_round.slots <= 12
    assert half.cost.per_round.channel_uses == pytest.approx(
        full.cost.per_round.channel_uses / 2, rel=1e-3)
    assert any("dllr_oa not in the fitted runs" in n for n in full.cost.estimate.notes)
    # the per-round mixing of independent draws is their expected contraction, not p / period
    assert full.stats.spectra.mixing_p > 0.5
    auto = db.plan(w, topologies=["resample_er"], sparsity=[1.0], fallback="complete")
    assert "dllr_oa" not in {c.plan.algorithm for c in auto.candidates}


def test_dllr_oa_beside_another_algorithm_adds_its_topology(db):
    w = aq.Workload(dataset="digits", clients=12, alpha=0.5, snr_db=10)
    r = db.plan(w, algorithms=["dsgd", "dllr_oa"], sparsity=[1.0], transports=["ota"],
                fallback="complete")
    got = {(c.plan.topology.family, c.plan.effective_algorithm) for c in r.candidates}
    assert ("resample_er", "dllr_oa") in got and ("resample_er", "dsgd") in got
    assert ("ring", "dsgd") in got and ("ring", "dllr_oa") not in got


@pytest.mark.parametrize("sql, message", [
    ("USING TRANSPORT digital USING ALGORITHM dllr_oa", "has no packet form"),
    ("USING TOPOLOGY ring USING ALGORITHM dllr_oa", "its own schedule"),
])
def test_dllr_oa_exclusions_from_sql(db, sql, message):
    before = db.catalog.query("SELECT count(*) AS n FROM airplan.plans")[0]["n"]
    with pytest.raises(aq.AirPlanError, match=message):
        db.sql(f"EXPLAIN TRAIN digits ON 12 CLIENTS {sql}")
    assert db.catalog.query("SELECT count(*) AS n FROM airplan.plans")[0]["n"] == before


def test_dllr_oa_explains_from_sql(db):
    out = db.sql("EXPLAIN TRAIN digits ON 12 CLIENTS WITH (alpha = 0.5) USING ALGORITHM dllr_oa "
                 "SLA accuracy >= 0.5")[0].text
    assert "resample_er" in out and "algorithm=dllr_oa" in out
