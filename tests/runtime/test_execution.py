"""Executions end to end: SQL -> plan -> training -> catalog rows, resume, pilots."""

import json
import os
import signal

import pytest

import airplan_qo as aq
from airplan_qo.runtime import execution
from airplan_qo.runtime.engine import Trainer

TRAIN = ("TRAIN digits ON 6 CLIENTS WITH (alpha = 1.0, rounds = 12, seed = 3) "
         "USING TOPOLOGY small_world(k = 2) USING SPARSITY 1 COST MODEL dsgd")


def _rows(db, sql, *params):
    return db.catalog.query(sql, list(params))


def test_train_statement_writes_consistent_rows(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        [res] = db.sql(TRAIN)
        row = dict(zip(res.columns, res.rows[0]))
        ex = _rows(db, "SELECT * FROM airplan.executions WHERE exec_id = ?", row["exec_id"])[0]
        assert ex["status"] == "succeeded" and ex["finished_at"] is not None
        stats = _rows(db, "SELECT * FROM airplan.round_stats WHERE exec_id = ? ORDER BY round",
                      row["exec_id"])
        assert [s["round"] for s in stats] == list(range(1, ex["actual_rounds"] + 1))
        total = sum(s["channel_uses"] for s in stats)
        fb = {f["metric"]: f for f in _rows(db, "SELECT * FROM airplan.feedback WHERE exec_id = ?",
                                            row["exec_id"])}
        assert set(fb) == {"rounds", "accuracy", "channel_uses", "energy_j"}
        assert fb["channel_uses"]["actual"] == pytest.approx(total)
        assert fb["accuracy"]["actual"] == pytest.approx(ex["client_acc_mean"])
        plan = _rows(db, "SELECT * FROM airplan.plans WHERE plan_id = ?", ex["plan_id"])[0]
        assert plan["chosen"] and fb["rounds"]["estimated"] == plan["est_rounds"]
        assert ex["data_seed"] != ex["train_seed"] != ex["channel_seed"]
        assert 0 < ex["jain_fairness"] <= 1
        view = _rows(db, "SELECT * FROM airplan.v_estimate_vs_actual WHERE exec_id = ?",
                     row["exec_id"])
        assert len(view) == 4


def test_digits_learns(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        w = aq.Workload(dataset="digits", clients=8, alpha=1.0, rounds=25)
        plan = db.plan(w, topologies=["complete"], sparsity=[1.0], weights=["metropolis_hastings"],
                       fallback="complete")
        rep = db.execute(plan, stop_at_target=False)
        assert rep.result.status == "succeeded"
        assert rep.result.final_accuracy > 0.7  # chance is 0.1


def test_explain_analyze_shows_actuals(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        [res] = db.sql("EXPLAIN ANALYZE " + TRAIN)
        first = res.text.splitlines()[0]
        assert "(actual status=succeeded rounds=" in first
        assert "Feedback: rounds estimated=" in res.text and "Execution Time:" in res.text
        [doc] = db.sql("EXPLAIN ANALYZE (FORMAT JSON) " + TRAIN)
        top = doc.document[0]
        assert top["plan"]["actual_rounds"] >= 1 and "actual_accuracy" in top["plan"]
        assert top["execution_time_ms"] > 0 and len(top["feedback"]) == 4


def _interrupt_at(monkeypatch, at_round):
    original = Trainer.step

    def step(self):
        row = original(self)
        if self.round == at_round:
            os.kill(os.getpid(), signal.SIGINT)
        return row

    monkeypatch.setattr(Trainer, "step", step)


def test_interrupt_then_resume_equals_uninterrupted(tmp_path, monkeypatch):
    monkeypatch.setattr(execution, "CHECKPOINT_EVERY", 4)
    with aq.connect(tmp_path / "a.duckdb") as db:
        [full] = db.sql(TRAIN)
        full_row = dict(zip(full.columns, full.rows[0]))
        full_curve = _rows(db, "SELECT round, test_accuracy, consensus_distance FROM "
                               "airplan.round_stats WHERE exec_id = ? ORDER BY round",
                           full_row["exec_id"])
    with aq.connect(tmp_path / "b.duckdb") as db:
        with monkeypatch.context() as m:
            _interrupt_at(m, 5)
            [cut] = db.sql(TRAIN)
        cut_row = dict(zip(cut.columns, cut.rows[0]))
        assert cut_row["status"] == "aborted"
        ex = _rows(db, "SELECT * FROM airplan.executions WHERE exec_id = ?", cut_row["exec_id"])[0]
        assert ex["status"] == "aborted" and ex["checkpoint_path"]
        assert not _rows(db, "SELECT * FROM airplan.feedback WHERE exec_id = ?", ex["exec_id"])
        rep = db.resume(ex["exec_id"])
        assert rep.result.status == "succeeded"
        curve = _rows(db, "SELECT round, test_accuracy, consensus_distance FROM "
                          "airplan.round_stats WHERE exec_id = ? ORDER BY round", ex["exec_id"])
        assert curve == full_curve
        assert rep.result.final_accuracy == full_row["final_accuracy"]
        assert len(_rows(db, "SELECT * FROM airplan.feedback WHERE exec_id = ?",
                         ex["exec_id"])) == 4


def test_resume_errors(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        with pytest.raises(aq.ExecutionError, match="no execution 99"):
            db.resume(99)
        [res] = db.sql(TRAIN)
        exec_id = res.rows[0][0]
        with pytest.raises(aq.ExecutionError, match="already succeeded"):
            db.resume(exec_id)


def test_pilot_and_calibrate(tmp_path):
    from airplan_qo.runtime.pilot import run_pilot

    with aq.connect(tmp_path / "c.duckdb") as db:
        report = run_pilot(db, "digits", 6, rounds=6)
        assert len(report.runs) == 36
        assert report.calibration.n_obs == 36
        # every design point trained as itself: no repeated plan, the planner's k range covered
        points = {(r["plan"], r["alpha"], r["snr_db"]) for r in report.runs}
        assert len(points) == 36
        assert {r["k"] for r in report.runs} == {1.0, 0.1, 0.01}
        assert "calibration covers:" in report.render() and "k in {0.01, 0.1, 1}" in report.render()
        assert "beta_k" in report.calibration.fitted
        current = _rows(db, "SELECT * FROM airplan.v_current_calibration")
        assert {r["constant_name"] for r in current} >= {"f0", "tau0"}
        assert all(r["scope"] == "dataset" and r["scope_key"] == "digits" for r in current)
        text = report.render()
        assert "rounds MAPE" in text
        # plans now use the calibrated constants and record their ids
        plan = db.plan(aq.Workload(dataset="digits", clients=6), estimator="dsgd")
        assert set(plan.context.calibration_ids) <= {r["calibration_id"] for r in current}
        assert plan.context.calibration_ids


def test_explain_analyze_calibrate(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        [res] = db.sql("EXPLAIN (ANALYZE, CALIBRATE) " + TRAIN)
        assert "Calibration: calibration skipped: " in res.text  # one run is too few
        for seed in (4, 5):
            db.sql(TRAIN.replace("seed = 3", f"seed = {seed}"))
        [res] = db.sql("EXPLAIN (ANALYZE, CALIBRATE) " + TRAIN.replace("seed = 3", "seed = 6"))
        assert "Calibration: calibration of the dsgd estimator" in res.text
        assert _rows(db, "SELECT count(*) AS n FROM airplan.v_current_calibration")[0]["n"] > 0


def test_read_only_catalog_cannot_train(tmp_path):
    path = tmp_path / "c.duckdb"
    aq.connect(path).close()
    with aq.connect(path, read_only=True) as db:
        with pytest.raises(aq.ExecutionError, match="writable"):
            db.sql(TRAIN)


def test_data_that_cannot_be_split_fails_before_anything_is_recorded(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        with pytest.raises(aq.PlanningError, match="too few for 400 clients.*at most 143 "
                                                   "clients"):
            db.sql("TRAIN digits ON 400 CLIENTS WITH (rounds = 1) USING TOPOLOGY ring "
                   "USING SPARSITY 1")
        for table in ("workloads", "planning_runs", "topologies", "executions"):
            assert _rows(db, f"SELECT count(*) AS n FROM airplan.{table}")[0]["n"] == 0


def test_setup_failure_is_recorded_as_failed(tmp_path, monkeypatch):
    from airplan_qo.runtime import inputs

    def broken(*args, **kwargs):
        raise aq.DataError("the partition broke")

    monkeypatch.setattr(inputs, "partition_dataset", broken)
    with aq.connect(tmp_path / "c.duckdb") as db:
        with pytest.raises(aq.DataError, match="the partition broke"):
            db.sql("TRAIN digits ON 6 CLIENTS WITH (rounds = 1) USING TOPOLOGY ring "
                   "USING SPARSITY 1 FALLBACK COMPLETE")
        rows = _rows(db, "SELECT status, reason FROM airplan.executions")
        assert [r["status"] for r in rows] == ["failed"]
        assert "the partition broke" in rows[0]["reason"]


def test_run_config_carries_the_plans_transport_bits_and_algorithm():
    import types

    from airplan_qo.plans.plan import PhysicalPlan
    from airplan_qo.plans.topology import TopologySpec
    from airplan_qo.runtime.execution import derive_seeds, run_config

    w = aq.Workload(dataset="digits", clients=10, rounds=3, local_steps=1)
    plan = PhysicalPlan(TopologySpec.create("ring", 10))
    cfg = run_config(w, plan, 3, None, derive_seeds(0))
    assert (cfg.transport, cfg.bits, cfg.algorithm) == ("ota", 32, "auto")
    digital = types.SimpleNamespace(**{f: getattr(plan, f) for f in
                                       ("topology", "k_ratio", "channel", "mask")},
                                    algorithm="gradient_tracking", transport="digital", bits=8)
    cfg = run_config(w, digital, 3, None, derive_seeds(0))
    assert (cfg.transport, cfg.bits, cfg.resolved_algorithm) == ("digital", 8,
                                                                  "gradient_tracking")
