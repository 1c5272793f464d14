"""Mid-run monitoring and re-optimisation: triggers, rewiring, recorded events, dropout-aware p."""

import json
import math
import os
import signal

import attrs
import numpy as np
import pytest
import torch

import airplan_qo as aq
from airplan_qo.errors import ValidationError
from airplan_qo.costmodels.features import (
    expected_second_moment,
    random_mixing_p,
    survival_probabilities,
)
from airplan_qo.planner.optimizer import Optimizer
from airplan_qo.plans.request import PlanRequest
from airplan_qo.plans.topology import TopologySpec, build
from airplan_qo.runtime import execution
from airplan_qo.runtime.channel import Channel
from airplan_qo.runtime.engine import RunConfig, Trainer
from airplan_qo.runtime.feedback import feedback_basis
from airplan_qo.runtime.gossip import LinkSet, dsgd_mix
from airplan_qo.runtime.monitor import (
    Monitor,
    MonitorConfig,
    PredictedCurve,
    observed_workload,
)



@pytest.fixture(autouse=True)
def _dsgd_default(monkeypatch):
    """These tests exercise the monitor against the dsgd estimator's accuracy band (the curve
    its prediction trigger compares with), so they plan with dsgd as the default."""
    from airplan_qo.planner import optimizer

    monkeypatch.setattr(optimizer, "DEFAULT_ESTIMATOR", "dsgd")

def _row(r, cd=0.25, acc=None, dropout=0.0, drop=0.1):
    return {"round": r, "consensus_distance": cd, "client_acc_mean": acc, "dropout_rate": dropout,
            "link_drop_rate": drop}


def _flat_prediction(acc=0.9, lo=0.8, n=200):
    return PredictedCurve((acc,) * n, (lo,) * n)


# ---- the monitor on synthetic row streams ------------------------------------------------------

def test_consensus_trigger_arithmetic():
    m = Monitor(None, MonitorConfig(triggers=("consensus_distance",)))
    for r in range(1, 10):
        assert m.observe(_row(r, cd=10.0)) is None        # before the reference round: ignored
    assert m.observe(_row(10, cd=0.25)) is None            # the reference value
    assert m.reference == 0.25
    assert m.observe(_row(11, cd=0.75)) is None            # 0.75 is not > 3 x 0.25
    trig = m.observe(_row(12, cd=0.76))
    assert trig.kind == "consensus_distance" and trig.round == 12
    assert trig.detail == "consensus_distance 0.76 > 3 x 0.25 at round 10"
    assert m.observe(_row(13, cd=5.0)) is None             # at most once per plan


def test_consensus_trigger_configurable_and_zero_reference():
    m = Monitor(None, MonitorConfig(factor=1.5, reference_round=2,
                                    triggers=("consensus_distance",)))
    m.observe(_row(1, cd=9.0))
    m.observe(_row(2, cd=1.0))
    assert m.observe(_row(3, cd=1.4)) is None
    assert m.observe(_row(4, cd=1.6)).detail.startswith("consensus_distance 1.6 > 1.5 x 1")
    exact = Monitor(None, MonitorConfig(triggers=("consensus_distance",)))
    for r in range(1, 30):                                  # exact averaging: distance 0
        assert exact.observe(_row(r, cd=0.0 if r <= 10 else 1e-9)) is None


def test_prediction_trigger_needs_patience_on_evaluated_rounds():
    m = Monitor(_flat_prediction(acc=0.9, lo=0.8), MonitorConfig(triggers=("prediction",)))
    for r in range(1, 10):
        assert m.observe(_row(r, acc=0.1)) is None          # warm-up: not checked
    assert m.observe(_row(10, acc=0.7)) is None             # error 0.3 > band 0.2: 1
    assert m.observe(_row(11, acc=0.7)) is None             # 2
    assert m.observe(_row(12, acc=0.85)) is None            # back inside the band: reset
    assert m.observe(_row(13, acc=0.7)) is None
    assert m.observe(_row(14, acc=None)) is None            # not evaluated: streak kept
    assert m.observe(_row(15, acc=0.7)) is None
    trig = m.observe(_row(16, acc=0.7))
    assert trig.kind == "prediction" and trig.round == 16
    assert "error 0.300 above the predicted band 0.200 (predicted 0.100) for 3" in trig.detail


def test_fires_once_per_plan_rearms_and_caps_replans():
    m = Monitor(_flat_prediction(), MonitorConfig(patience=1, warmup=1, max_replans=2,
                                                  triggers=("prediction",)))
    assert m.observe(_row(1, acc=0.5)).round == 1
    assert m.observe(_row(2, acc=0.5)) is None
    m.rearm(_flat_prediction(), start=2)
    assert m.observe(_row(3, acc=0.5)).round == 3
    m.rearm(_flat_prediction(), start=3)
    assert m.observe(_row(4, acc=0.5)) is None              # cap of two re-plans reached


def test_running_means_and_observed_workload():
    m = Monitor(None)
    for r, (d, drop) in enumerate([(0.1, 0.2), (0.3, 0.0), (0.2, 0.1)], 1):
        m.observe(_row(r, dropout=d, drop=drop))
    obs = m.observed()
    assert obs["dropout_rate"] == pytest.approx(0.2) and obs["link_drop_rate"] == pytest.approx(0.1)
    w = observed_workload(aq.Workload(clients=10, snr_db=7.0), obs)
    assert w.dropout == pytest.approx(0.2) and w.snr_db == 7.0
    assert 1 - math.exp(-w.g_th) == pytest.approx(0.1)      # drop = 1 - exp(-g_th)
    ideal = observed_workload(aq.Workload(clients=10, channel="ideal"), obs)
    assert ideal.g_th == aq.Workload().g_th


def test_prediction_is_shifted_to_the_accuracy_reached():
    basis = {"accuracy_curve": [0.1 * t for t in range(1, 10)],
             "accuracy_curve_lo": [0.05 * t for t in range(1, 10)]}
    p = PredictedCurve.from_basis(basis, start=20, observed_accuracy=0.42)
    assert p.offset == 5                                     # the new curve reaches 0.42 at 5
    assert p.at(22) == pytest.approx((0.7, 0.35))
    assert PredictedCurve.from_basis(basis).at(3) == pytest.approx((0.3, 0.15))


def test_monitor_config_validates():
    with pytest.raises(ValidationError, match="unknown trigger"):
        MonitorConfig(triggers=("lambda2",))
    with pytest.raises(ValidationError, match="factor"):
        MonitorConfig(factor=0)


# ---- real runs: a diverging workload triggers, a benign one does not ------------------------

def _history_triggers(db, workload, topology):
    res = db.plan(workload, topologies=[topology], sparsity=[1.0],
                  weights=["metropolis_hastings"])
    rep = db.execute(res, stop_at_target=False, reoptimize=False)
    m = Monitor(PredictedCurve.from_basis(feedback_basis(res)))
    return [t for t in map(m.observe, rep.result.history) if t is not None]


def test_trigger_fires_on_diverging_workload_not_on_benign(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        # a ring with nearly one class per client: far slower than the prior-based prediction
        bad = _history_triggers(db, aq.Workload(clients=16, alpha=0.05, rounds=40, seed=1,
                                                lr=0.5), "ring")
        good = _history_triggers(db, aq.Workload(clients=10, alpha=1.0, rounds=40, seed=1),
                                 "complete")
    assert [t.kind for t in bad] == ["prediction"]
    assert good == []


# ---- rewiring keeps the models --------------------------------------------------------------

@pytest.mark.parametrize("k_ratio", [1.0, 0.1])
def test_rewire_keeps_average_model(digits, digits_skewed, ring10, k_ratio):
    cfg = RunConfig.from_dict(dict(rounds=10, k_ratio=k_ratio, channel="ota", snr_db=10.0,
                                   dropout=0.2, train_seed=1, data_seed=2, channel_seed=3))
    trainer = Trainer(cfg, digits, digits_skewed, ring10)
    for _ in range(3):
        trainer.step()
    before = trainer.x.clone()
    mean = trainer.average_model().clone()
    target = build(TopologySpec.create("exponential", 10, weights="best_constant"))
    trainer.rewire(target)
    assert torch.equal(trainer.x, before)
    assert torch.equal(trainer.average_model(), mean)
    assert trainer.links.u.size == target.graph.number_of_edges()
    row = trainer.step()                                     # and it keeps training
    assert math.isfinite(row["consensus_distance"])


# ---- end to end: EXPLAIN ANALYZE shows the event, the catalog links it ---------------------

def _forced_ring(db, workload, **plan_args):
    res = db.plan(workload, fallback="complete", **plan_args)
    ring = next(c for c in res.candidates if c.plan.topology.family == "ring")
    return attrs.evolve(res, chosen=ring)


LOW = MonitorConfig(factor=1.0, reference_round=2, max_replans=1,
                    triggers=("consensus_distance",))


def test_reoptimisation_rewires_and_is_recorded(tmp_path):
    w = aq.Workload(clients=8, alpha=0.05, rounds=12, seed=1)
    with aq.connect(tmp_path / "c.duckdb") as db:
        res = _forced_ring(db, w, topologies=["ring", "small_world", "complete"],
                           sparsity=[1.0], weights=["metropolis_hastings"])
        rep = db.execute(res, monitor=LOW)
        [ev] = db.catalog.query("SELECT * FROM airplan.reoptimizations")
        assert ev["exec_id"] == rep.exec_id and ev["trigger"] == "consensus_distance"
        assert ev["old_plan_id"] == res.chosen.plan_id and ev["new_plan_id"] is not None
        observed = json.loads(ev["observed"])
        assert {"dropout_rate", "link_drop_rate", "consensus_distance"} <= set(observed)
        new = db.catalog.query("SELECT * FROM airplan.plans WHERE plan_id = ?",
                               [ev["new_plan_id"]])[0]
        assert new["planning_run_id"] == ev["planning_run_id"] and new["k_ratio"] == 1.0
        replan = db.catalog.query(
            "SELECT p.family, t.mixing_p, p.pruned_reason FROM airplan.plans p "
            "JOIN airplan.topologies t USING (topology_id) WHERE p.planning_run_id = ?",
            [ev["planning_run_id"]])
        ring_p = next(r["mixing_p"] for r in replan if r["family"] == "ring")
        for r in replan:
            assert r["mixing_p"] >= ring_p
            if r["family"] == "ring":
                assert r["pruned_reason"].startswith("connectivity:")
        assert not db.catalog.query("SELECT * FROM airplan.feedback WHERE exec_id = ?",
                                    [rep.exec_id])     # a rewired run is not calibration data
        text = res.explain(analyze=rep.analyze_fields())
        [line] = [x for x in text.splitlines() if x.startswith("Event: ")]
        assert f"round {ev['round']}: consensus_distance" in line
        assert "rewired ring [metropolis_hastings] -> " in line
        doc = json.loads(res.explain(format="json", analyze=rep.analyze_fields()))
        assert doc[0]["events"] == [line[len("Event: "):]]


def test_no_reoptimisation_in_a_mixing_only_tail(tmp_path):
    # the same divergence fires after round 3 (above), the round before the plan's tail
    # (rounds 4-12 only mix): nothing re-plans
    w = aq.Workload(clients=8, alpha=0.05, rounds=12, seed=1)
    with aq.connect(tmp_path / "c.duckdb") as db:
        res = _forced_ring(db, w, topologies=["ring", "small_world", "complete"],
                           sparsity=[1.0], weights=["metropolis_hastings"], estimator="ttt",
                           mix_rounds=9)
        assert res.chosen.plan.mix_rounds == 9
        rep = db.execute(res, monitor=LOW, stop_at_target=False, reoptimize=True)
        assert rep.result.rounds == 12
        assert not db.catalog.query("SELECT * FROM airplan.reoptimizations")


def test_explain_analyze_sql_records_event(tmp_path, monkeypatch):
    monkeypatch.setattr(execution, "MonitorConfig", lambda: LOW)
    with aq.connect(tmp_path / "c.duckdb") as db:
        [res] = db.sql("EXPLAIN ANALYZE TRAIN digits ON 8 CLIENTS WITH (alpha = 0.05, "
                       "rounds = 12, seed = 1) USING TOPOLOGY ring "
                       "USING WEIGHTS metropolis_hastings USING SPARSITY 1")
        [ev] = db.catalog.query("SELECT * FROM airplan.reoptimizations")
        assert ev["new_plan_id"] is None                      # nothing better connected allowed
        assert f"Event: round {ev['round']}: consensus_distance" in res.text
        assert "no better-connected plan; kept ring [" in res.text


def test_no_reoptimisation_for_whole_budget_runs(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        res = db.plan(aq.Workload(clients=8, alpha=0.05, rounds=12, seed=1), topologies=["ring"],
                      sparsity=[1.0])
        rep = db.execute(res, stop_at_target=False, monitor=LOW)
        assert rep.events == () and "reoptimization" not in json.loads(db.catalog.query(
            "SELECT options FROM airplan.executions")[0]["options"])


def test_resume_after_rewiring_equals_uninterrupted(tmp_path, monkeypatch):
    monkeypatch.setattr(execution, "CHECKPOINT_EVERY", 4)
    w = aq.Workload(clients=8, alpha=0.05, rounds=14, seed=1, target_accuracy=0.99)
    args = dict(topologies=["ring", "small_world", "complete"], sparsity=[1.0],
                weights=["metropolis_hastings"])
    with aq.connect(tmp_path / "a.duckdb") as db:
        full = db.execute(_forced_ring(db, w, **args), monitor=LOW)
    original = Trainer.step

    def step(self):
        row = original(self)
        if self.round == 6:
            os.kill(os.getpid(), signal.SIGINT)
        return row

    with aq.connect(tmp_path / "b.duckdb") as db:
        monkeypatch.setattr(Trainer, "step", step)
        first = db.execute(_forced_ring(db, w, **args), monitor=LOW)
        monkeypatch.setattr(Trainer, "step", original)
        assert first.result.status == "aborted" and len(first.events) == 1
        resumed = db.resume(first.exec_id)
        events = db.catalog.query("SELECT round, new_plan_id FROM airplan.reoptimizations")
    assert resumed.result.status == "succeeded"
    assert resumed.events == full.events and len(events) == 1
    assert resumed.result.final_accuracy == full.result.final_accuracy


# ---- the connectivity restriction of the optimizer ----------------------------------------

def test_min_mixing_p_prunes_with_a_reason(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        w = aq.Workload(clients=20, alpha=0.5)
        base = db.plan(w)
        sw = next(c for c in base.candidates if c.plan.topology.family == "small_world")
        floor = sw.stats.spectra.mixing_p
        res = Optimizer(db.catalog).plan(PlanRequest(workload=w, min_mixing_p=floor,
                                                     exclude_topologies=(sw.plan.topology,)))
        assert res.chosen.stats.spectra.mixing_p >= floor
        for c in res.candidates:
            if c.plan.topology == sw.plan.topology:
                assert c.pruned_reason == "connectivity: the topology being replaced"
            elif c.stats.spectra.mixing_p < floor:
                assert c.pruned_reason.startswith("connectivity: mixing p ")
        with pytest.raises(ValidationError, match="min_mixing_p"):
            Optimizer(db.catalog).plan(PlanRequest(workload=w, min_mixing_p=1.5))


# ---- dropout in the estimator: a decision, not a rule ---------------------------------------

def test_expected_second_moment_matches_runtime_reweighting():
    """The closed form against Monte Carlo of the runtime's own re-weighting (dsgd_mix)."""
    topo = build(TopologySpec.create("small_world", 12, k=4))
    links = LinkSet(topo)
    q, g_th = 0.25, 0.3
    channel = Channel("ota", snr_db=10.0, g_th=g_th, dropout=q, seed=5)
    eye = torch.eye(12, dtype=torch.float32)
    acc = np.zeros((12, 12))
    draws = 4000
    for _ in range(draws):
        rl = channel.draw(12, links.u, links.v)
        w_t = dsgd_mix(eye, links, links.up(rl)).double().numpy()
        acc += w_t.T @ w_t
    exact = expected_second_moment(topo.graph, topo.weights, q, math.exp(-g_th))
    assert np.abs(acc / draws - exact).max() < 0.01
    pi1, pi2 = survival_probabilities(q, math.exp(-g_th))
    assert pi1 == pytest.approx(0.75 ** 2 * math.exp(-g_th))
    assert pi2 == pytest.approx(0.75 ** 3 * math.exp(-2 * g_th))
    static = random_mixing_p(topo.graph, topo.weights, 0.0, 1.0)
    rho = np.abs(np.linalg.eigvalsh(topo.weights.toarray() - 1 / 12)).max()
    assert static == pytest.approx(1 - rho ** 2, abs=1e-10)


def _paper_plans(db, dropout):
    w = aq.Workload(dataset="digits", clients=50, alpha=0.5, snr_db=10, dropout=dropout)
    return db.plan(w, topologies=["small_world", "clustered"], sparsity=[1.0])


def test_dropout_decision_small_world_vs_clustered(tmp_path):
    """The paper reports a switch from small-world to clustered at >= 20% dropout. Under the
    expected contraction of the random mixing matrix, both families lose about the same share
    of p (~(1 - q)^2 e^{-g_th}), clustered starts lower, so the estimator keeps small-world."""
    with aq.connect(tmp_path / "c.duckdb") as db:
        results = {q: _paper_plans(db, q) for q in (0.0, 0.1, 0.2, 0.3)}
    for q, res in results.items():
        assert res.chosen.plan.topology.family == "small_world", q
        best = {}
        for c in res.candidates:
            fam = c.plan.topology.family
            if c.feasible and (fam not in best or c.cost.total() < best[fam].cost.total()):
                best[fam] = c
        sw, cl = best["small_world"], best["clustered"]
        assert sw.cost.total() < cl.cost.total()
        assert sw.cost.estimate.terms["p_random"] > cl.cost.estimate.terms["p_random"]
    # the p it uses depends on dropout per topology (not one common factor) ...
    factors = {}
    for q, res in results.items():
        for c in res.candidates:
            t = c.cost.estimate.terms
            factors.setdefault(c.plan.topology.label() + c.plan.topology.weights, {})[q] = \
                t["p_random"] / t["p"]
    at_02 = {k: v[0.2] for k, v in factors.items()}
    assert max(at_02.values()) - min(at_02.values()) > 0.005
    # ... and falls monotonically with dropout for every topology
    for v in factors.values():
        assert v[0.0] > v[0.1] > v[0.2] > v[0.3]


def test_reoptimisation_may_raise_k_and_resume_replays_it(tmp_path):
    """A ring at k = 0.1 with only the ring in the plan space: the better plan is the ring at a
    larger k, the trainer switches compression (CHOCO -> D-SGD at k = 1), and a resume after
    the switch gives the uninterrupted run."""
    w = aq.Workload(clients=8, alpha=0.05, rounds=12, seed=1)
    with aq.connect(tmp_path / "c.duckdb") as db:
        res = db.plan(w, topologies=["ring"], sparsity=[0.1, 1.0],
                      weights=["metropolis_hastings"])
        ring = next(c for c in res.candidates if c.plan.k_ratio == 0.1)
        res = attrs.evolve(res, chosen=ring)
        rep = db.execute(res, monitor=LOW)
        [ev] = db.catalog.query("SELECT * FROM airplan.reoptimizations")
        new = db.catalog.query("SELECT * FROM airplan.plans WHERE plan_id = ?",
                               [ev["new_plan_id"]])[0]
        assert new["family"] == "ring" and new["k_ratio"] == 1.0
        assert "k 0.1 -> 1" in ev["detail"]
        assert rep.result.algorithm == "dsgd"            # what ran after the switch
        full = [h["channel_uses"] for h in rep.result.history]
        # channel uses jump to the dense payload after the switch
        assert full[-1] > 5 * full[0]


def test_a_resumed_run_replans_with_the_requested_confidence():
    # a resumed run re-plans from the stored request: the chance constraint's confidence must
    # survive the round trip (stored requests from before it was kept get the default)
    from airplan_qo.plans.request import DEFAULT_CONFIDENCE
    from airplan_qo.plans.sla import parse_sla
    from airplan_qo.runtime.monitor import request_from_json, request_to_json

    w = aq.Workload(dataset="digits", clients=10)
    req = PlanRequest(workload=w, sla=parse_sla("accuracy >= 0.9 * fc"), confidence=0.99,
                      estimator="ttt")
    doc = request_to_json(req)
    back = request_from_json(doc, w)
    assert back.confidence == 0.99 and back.estimator == "ttt"
    assert back.sla.render() == req.sla.render()
    old = {k: v for k, v in doc.items() if k != "confidence"}
    assert request_from_json(old, w).confidence == DEFAULT_CONFIDENCE


def test_a_resumed_run_replans_with_the_requested_objective():
    # MINIMIZE energy_j must survive the stored request of a resumed run; a stored request
    # without an objective re-plans with the planner's default (None)
    from airplan_qo.runtime.monitor import request_from_json, request_to_json

    w = aq.Workload(dataset="digits", clients=10)
    doc = request_to_json(PlanRequest(workload=w, objective="energy_j"))
    assert request_from_json(doc, w).objective == "energy_j"
    old = {k: v for k, v in doc.items() if k != "objective"}
    assert request_from_json(old, w).objective is None
