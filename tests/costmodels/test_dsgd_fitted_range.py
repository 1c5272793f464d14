"""The dsgd model says when its constants are the priors, and when a plan lies outside what the
executions behind its calibration spanned (k, N, family, dataset); EXPLAIN shows it."""

import json
import math

import numpy as np
import pytest

import airplan_qo as aq
from airplan_qo.costmodels import ESTIMATORS, EstimationContext, recorded_range
from airplan_qo.costmodels.observation_loader import load_observations
from airplan_qo.costmodels.observations import Observation, observed_range
from airplan_qo.plans.channel_config import ChannelConfig
from airplan_qo.plans.plan import PhysicalPlan
from airplan_qo.plans.spectra import SpectralStats
from airplan_qo.plans.topology import TopologySpec, TopologyStats

DSGD = ESTIMATORS.get("dsgd")
PRIORS_NOTE = "dsgd constants are the priors, not fitted to any run: airplan calibrate"
# constants of the synthetic runs: every term a few times its prior
TRUE = dict(DSGD.priors, f0=0.08, f1=2e-3, f2=3e-4, f3=0.3, tau0=15.0, tau1=0.4)
E0 = 0.9


def _stats(family="ring", n=20, p=0.3):
    spec = TopologySpec.create(family, n)
    gap = 1 - math.sqrt(1 - p)
    s = SpectralStats(n_nodes=n, n_edges=2 * n, max_degree=4, mean_degree=4.0,
                      lambda2_laplacian=0.5, lambda2_normalized=0.1, mixing_rho=1 - gap,
                      mixing_gap=gap, mixing_p=p, method="test")
    return TopologyStats(spec, s, 5, 6, 0.0)


def _ctx(**over):
    base = dict(n_classes=10, d=1000, alpha=0.5, alpha_source="test", round_budget=100,
                constants=dict(DSGD.priors), dataset="digits")
    base.update(over)
    return EstimationContext(**base)


def _notes(ctx, family="ring", n=20, k=1.0):
    st = _stats(family, n)
    plan = PhysicalPlan(st.spec, k, ChannelConfig(kind="ota", snr_db=10.0, g_th=0.1))
    return DSGD.estimate(ctx, plan, st, 0.8).notes


RANGE = {"k": [0.25, 1.0], "clients": [10, 30], "families": ["ring", "torus"],
         "datasets": ["digits"], "unrecorded": []}


def test_priors_are_noted_and_a_plan_inside_the_fitted_range_has_no_note():
    [note] = _notes(_ctx())
    assert note.startswith(PRIORS_NOTE)
    assert _notes(_ctx(calibration_ids=(1, 2), fitted_range=RANGE)) == ()
    # the ends of the range are inside it
    assert _notes(_ctx(calibration_ids=(1,), fitted_range=RANGE), n=30, k=0.25) == ()


def test_k_n_family_and_dataset_outside_the_fitted_range_are_noted():
    ctx = _ctx(calibration_ids=(1, 2), fitted_range=RANGE)
    assert _notes(ctx, k=0.1) == ("k = 0.1 outside the fitted 0.25..1",)
    assert _notes(ctx, n=50) == ("N = 50 outside the fitted 10..30",)
    assert _notes(ctx, family="complete") == (
        "family complete not among the fitted ring, torus",)
    other = _ctx(calibration_ids=(1,), fitted_range=RANGE, dataset="mnist")
    assert _notes(other, family="complete", n=5, k=0.1) == (
        "k = 0.1 outside the fitted 0.25..1", "N = 5 outside the fitted 10..30",
        "family complete not among the fitted ring, torus",
        "dataset mnist not among the fitted digits")


def test_rows_without_a_recorded_range_are_named():
    ctx = _ctx(calibration_ids=(4, 7), fitted_range=dict(RANGE, unrecorded=[7]))
    assert _notes(ctx) == ("calibration row 7 records no fitted range (written by hand or "
                           "before ranges were recorded): airplan calibrate records it",)
    # ids in use but no range known at all
    assert _notes(_ctx(calibration_ids=(4, 7)))[0].startswith(
        "calibration rows 4, 7 record no fitted range")


def test_recorded_range_is_the_union_of_the_rows_in_use():
    mark = "; fitted range "
    rows = [
        {"calibration_id": 1, "source": "fit: x on 3 executions" + mark + json.dumps(
            {"k": [0.5, 1.0], "clients": [10, 20], "families": ["ring"],
             "datasets": ["digits"]})},
        {"calibration_id": 2, "source": "fit: x on 4 executions" + mark + json.dumps(
            {"k": [0.1, 0.5], "clients": [40, 50], "families": ["torus"]})},
        {"calibration_id": 3, "source": "manual"},
        {"calibration_id": 4, "source": "fit: y" + mark + json.dumps(
            {"k": [0.01, 0.01], "families": ["complete"]})},      # not in use
    ]
    assert recorded_range(rows, ()) is None
    assert recorded_range(rows, (1, 2, 3)) == {
        "k": [0.1, 1.0], "clients": [10.0, 50.0], "families": ["ring", "torus"],
        "datasets": ["digits"], "unrecorded": [3]}


# ---- through the catalog: calibrate records the range, the planner and EXPLAIN show it ------

def _synthetic(n, *, families=("ring", "small_world"), k=1.0, seed=0, eps=0.25, budget=300):
    """Runs whose error curves follow the dsgd model (multiplicative log-normal noise)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        p, z, s = (0.05, 0.1, 0.2, 0.4, 0.7, 1.0)[i % 6], (0.0, 0.05, 0.2)[i % 3], 0.01
        inv = 1 / p - 1
        floor = min(TRUE["f0"] + TRUE["f1"] * inv + TRUE["f2"] * z * (1 / p**2 - 1)
                    + TRUE["f3"] * s / p, E0)
        tau = TRUE["tau0"] + TRUE["tau1"] * inv
        t = np.arange(budget + 1.0)
        err = (floor + (E0 - floor) * np.exp(-t / tau)) * np.exp(0.03 * rng.standard_normal(
            t.size))
        hit = np.nonzero(err <= eps)[0]
        out.append(Observation("dsgd", families[i % len(families)], eps,
                               budget if hit.size == 0 else hit[0], hit.size == 0, t, err,
                               p=p, p_eff=p, k_ratio=k, zeta2=z, sigma_c2=s, e0=E0,
                               snr_db=10.0, g_th=0.0))
    return out


def _populate(cat, observations, *, dataset="digits", clients=20):
    """Workload, planning run, plan, execution, round_stats and feedback rows per run."""
    wid = cat.insert_row("workloads", {
        "dataset": dataset, "n_clients": clients, "partition_scheme": "dirichlet",
        "alpha": 0.5, "partition_seed": 0, "data_seed": 0,
        "fingerprint": f"{dataset}-{clients}-range-test"})
    for o in observations:
        run = cat.insert_row("planning_runs", {
            "workload_id": wid, "statement": "TRAIN ...", "estimator": "dsgd",
            "objective": "channel_uses", "sla_threshold": 1.0 - o.target_error,
            "n_candidates": 1})
        plan = cat.insert_row("plans", {
            "planning_run_id": run, "chosen": True, "rank": 1, "family": o.family,
            "weights_rule": "metropolis_hastings", "k_ratio": o.k_ratio, "algorithm": "dsgd",
            "snr_db": o.snr_db, "g_th": o.g_th, "est_rounds": 10.0, "reaches_target": True,
            "terms": json.dumps({"p": o.p, "p_eff": o.p_eff, "zeta2": o.zeta2,
                                 "sigma_c2": o.sigma_c2, "e0": o.e0})})
        ex = cat.insert_row("executions", {
            "plan_id": plan, "status": "succeeded", "actual_rounds": int(o.rounds_actual),
            "data_seed": 0, "train_seed": 0, "channel_seed": 0, "options": {}})
        cat.insert_rows("round_stats", {
            "exec_id": np.full(o.rounds.size, ex, dtype=np.int64),
            "round": o.rounds.astype(np.int32), "client_acc_mean": 1.0 - o.errors})
        cat.insert_rows("feedback", {
            "exec_id": [ex] * 2, "plan_id": [plan] * 2, "estimator": ["dsgd"] * 2,
            "metric": ["rounds", "accuracy"], "estimated": [10.0, 0.8],
            "actual": [o.rounds_actual, 0.8], "model_term": [1.0] * 2,
            "censored": [o.censored, False]})


def test_calibrate_records_the_range_of_its_executions(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        _populate(db.catalog, _synthetic(6, k=0.5), clients=20)
        _populate(db.catalog, _synthetic(4, k=1.0, families=("torus",), seed=1), clients=40)
        assert {o.clients for o in load_observations(db.catalog, "dsgd")} == {20, 40}
        report = db.calibrate("dsgd")
        rows = db.catalog.current_calibration("dsgd")
        assert {r["calibration_id"] for r in rows} == set(report.calibration_ids.values())
        expected = {"k": [0.5, 1.0], "clients": [20, 40],
                    "families": ["ring", "small_world", "torus"], "datasets": ["digits"]}
        for row in rows:
            assert row["source"].startswith("fit: log-curve least squares on 10 executions")
            assert json.loads(row["source"].split("; fitted range ", 1)[1]) == expected
        assert observed_range(load_observations(db.catalog, "dsgd")) == expected


def _dsgd_warnings(result):
    return [w for w in result.warnings if w.startswith("the dsgd estimate")]


def test_explain_shows_priors_then_a_plan_outside_the_calibrated_range(tmp_path):
    statement = ("EXPLAIN TRAIN digits ON {n} CLIENTS USING TOPOLOGY {family} "
                 "USING SPARSITY {k} SLA accuracy >= 0.5 COST MODEL dsgd")
    prefix = ("WARNING: the dsgd estimate of the chosen plan extrapolates beyond what it was "
              "fitted on: ")
    with aq.connect(tmp_path / "c.duckdb") as db:
        w = aq.Workload(dataset="digits", clients=20, rounds=50)
        [note] = _dsgd_warnings(db.plan(w, estimator="dsgd", topologies=["ring"],
                                        sla="accuracy >= 0.5"))
        assert PRIORS_NOTE in note
        [r] = db.sql(statement.format(n=20, family="ring", k=1))
        assert prefix + PRIORS_NOTE in r.text
        [r] = db.sql(statement.format(n=20, family="ring", k=1).replace(
            "EXPLAIN", "EXPLAIN (FORMAT JSON)"))
        assert any(PRIORS_NOTE in x for x in r.document[0]["warnings"])

        _populate(db.catalog, _synthetic(8, k=1.0), clients=20)
        db.calibrate("dsgd")
        # inside what the calibration saw: no note
        inside = db.plan(w, estimator="dsgd", topologies=["ring"], sparsity=[1.0],
                         sla="accuracy >= 0.5")
        assert not inside.fallback and _dsgd_warnings(inside) == []
        [r] = db.sql(statement.format(n=20, family="small_world", k=1))
        assert "WARNING: the dsgd estimate" not in r.text
        # outside it in k, N and family
        [r] = db.sql(statement.format(n=12, family="exponential", k=0.5))
        assert (prefix + "k = 0.5 outside the fitted 1..1; N = 12 outside the fitted 20..20; "
                "family exponential not among the fitted ring, small_world") in r.text
        assert PRIORS_NOTE not in r.text


def test_a_hand_written_calibration_row_is_flagged_as_having_no_range(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        ids = db.catalog.supersede_calibration("dsgd", "global", "", {"f0": 0.06}, n_obs=0,
                                               source="manual")
        [note] = _dsgd_warnings(db.plan(aq.Workload(dataset="digits", clients=20, rounds=50),
                                        estimator="dsgd", topologies=["ring"]))
        assert f"calibration row {ids['f0']} records no fitted range" in note
        assert PRIORS_NOTE not in note


@pytest.mark.parametrize("estimator", ["ttt", "paper"])
def test_other_estimators_get_no_dsgd_note(tmp_path, estimator):
    with aq.connect(tmp_path / "c.duckdb") as db:
        result = db.plan(aq.Workload(dataset="digits", clients=20, rounds=50),
                         estimator=estimator, topologies=["ring"], fallback="complete")
        assert not any("dsgd constants" in x for x in result.warnings)
