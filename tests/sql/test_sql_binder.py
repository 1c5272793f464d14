"""Binder: names and values resolved against the registries, with defaults."""

from __future__ import annotations

import sys

import pytest

from airplan_qo.errors import BindError
from airplan_qo.plans.sla import DEFAULT_SLA, Constraint
from airplan_qo.plans.workload import Workload
from airplan_qo.sql import BoundAnalyze, BoundTrain, ExplainOptions, bind, parse, parse_one


def bound(text: str):
    return bind(parse_one(text))


def test_full_statement():
    b = bound("EXPLAIN ANALYZE (VERBOSE, COSTS OFF, FORMAT JSON, ALTERNATIVES 3, CALIBRATE FALSE) "
              "TRAIN Digits ON 20 CLIENTS WITH (alpha = 0.1, model = MLP, rounds = 50.0, "
              "channel = 'ideal') USING TOPOLOGY ring, small_world(k = 4), "
              "erdos_renyi(p = 0.3) USING WEIGHTS max_degree, metropolis_hastings "
              "USING SPARSITY IN (0.05, 0.1, 0.05) SLA accuracy >= 0.9 * fc AND rounds <= 300 "
              "WITHIN 400 ROUNDS WITHIN 2.5 SECONDS WITHIN 10 JOULES COST MODEL DSGD")
    assert isinstance(b, BoundTrain)
    assert b.explain and b.analyze and b.runs_training
    assert b.options == ExplainOptions(verbose=True, costs=False, format="json",
                                       alternatives=3, calibrate=False)
    assert b.workload == Workload(dataset="digits", clients=20, alpha=0.1, model="mlp",
                                  rounds=50, channel="ideal")
    assert b.topologies == (("ring", {}), ("small_world", {"k": 4}),
                            ("erdos_renyi", {"p": 0.3}))
    assert isinstance(b.topologies[1][1]["k"], int)
    assert b.weights == ("max_degree", "metropolis_hastings")
    assert b.sparsity == (0.05, 0.1)
    assert b.sla.constraints == (Constraint("accuracy", ">=", 0.9, True),
                                 Constraint("rounds", "<=", 300))
    assert b.budgets == {"rounds": 400, "seconds": 2.5, "joules": 10.0}
    assert isinstance(b.budgets["rounds"], int)
    assert b.estimator == "dsgd"


def test_defaults():
    b = bound("TRAIN digits ON 20 CLIENTS")
    assert b == BoundTrain(workload=Workload(dataset="digits", clients=20),
                           text="TRAIN digits ON 20 CLIENTS")
    assert not b.explain and not b.analyze and b.runs_training
    assert b.options == ExplainOptions()
    assert (b.topologies, b.weights, b.sparsity, b.estimator) == (None, None, None, None)
    assert b.sla == DEFAULT_SLA and b.budgets == {}


def test_plain_explain_only_plans():
    b = bound("EXPLAIN TRAIN digits ON 20 CLIENTS")
    assert b.explain and not b.analyze and not b.runs_training
    assert bound("EXPLAIN (ANALYZE) TRAIN digits ON 20 CLIENTS").analyze


def test_auto_means_the_planner_chooses():
    b = bound("TRAIN digits ON 20 CLIENTS USING TOPOLOGY AUTO USING WEIGHTS AUTO "
              "USING SPARSITY AUTO")
    assert (b.topologies, b.weights, b.sparsity) == (None, None, None)


def test_single_sparsity_and_one_budget():
    b = bound("TRAIN digits ON 20 CLIENTS USING SPARSITY 1 WITHIN 60 SECONDS")
    assert b.sparsity == (1.0,)
    assert b.budgets == {"seconds": 60.0}


def test_analyze_workload():
    b = bound("ANALYZE WORKLOAD synthetic ON 12 CLIENTS WITH (alpha = 2, dp_epsilon = 1)")
    assert b == BoundAnalyze(workload=Workload(dataset="synthetic", clients=12, alpha=2.0,
                                               dp_epsilon=1.0),
                             text="ANALYZE WORKLOAD synthetic ON 12 CLIENTS WITH "
                                  "(alpha = 2, dp_epsilon = 1)")


def test_string_and_bare_values_are_the_same():
    assert bound("TRAIN digits ON 5 CLIENTS WITH (model = 'CNN4')").workload == \
        bound("TRAIN digits ON 5 CLIENTS WITH (model = cnn4)").workload


def test_estimator_names_without_registry(monkeypatch):
    monkeypatch.setitem(sys.modules, "airplan_qo.costmodels", None)
    assert bound("TRAIN digits ON 5 CLIENTS COST MODEL Paper").estimator == "paper"
    assert bound("TRAIN digits ON 5 CLIENTS COST MODEL dsgd").estimator == "dsgd"
    with pytest.raises(BindError, match="did you mean 'dsgd'"):
        bound("TRAIN digits ON 5 CLIENTS COST MODEL dsgdd")


def test_rounds_budget_must_be_integral():
    with pytest.raises(BindError, match="positive integer") as info:
        bound("TRAIN digits ON 5 CLIENTS WITHIN 2.5 ROUNDS")
    assert info.value.col == 34


def test_topology_defaults_checked_for_the_client_count():
    with pytest.raises(BindError) as info:
        bound("TRAIN digits ON 6 CLIENTS USING TOPOLOGY small_world(k = 8)")
    assert info.value.col == 58


def test_bind_nested_train_uses_the_whole_statement():
    stmt = parse_one("EXPLAIN TRAIN digits ON 5 CLIENTS WITH (alphaa = 1)")
    with pytest.raises(BindError) as info:
        bind(stmt.this)
    assert info.value.col == 41


def test_bind_rejects_pass_through():
    (stmt,) = parse("SELECT 1")
    with pytest.raises(TypeError):
        bind(stmt)  # type: ignore[arg-type]


def test_error_feedback_is_refused_with_the_reason():
    with pytest.raises(BindError, match="CHOCO, whose public replicas already carry"):
        bound("TRAIN digits ON 20 CLIENTS WITH (error_feedback = off)")


def test_sla_confidence_binds_and_renders():
    from airplan_qo.sql import render

    b = bound("EXPLAIN TRAIN digits ON 10 CLIENTS SLA accuracy >= 0.9 * fc CONFIDENCE .8")
    assert b.confidence == pytest.approx(0.8)
    assert bound("TRAIN digits ON 10 CLIENTS SLA accuracy >= 0.9").confidence is None
    assert render(parse_one("train digits on 10 clients sla accuracy>=0.9 confidence 0.95")) == \
        "TRAIN digits ON 10 CLIENTS SLA accuracy >= 0.9 CONFIDENCE 0.95"
    with pytest.raises(BindError, match=r"CONFIDENCE must be a probability in \(0, 1\)"):
        bound("TRAIN digits ON 10 CLIENTS SLA accuracy >= 0.9 CONFIDENCE 1")


def test_minimize_binds_the_objective():
    assert bound("TRAIN digits ON 20 CLIENTS").objective is None   # the planner's default
    for metric in ("channel_uses", "energy_j", "airtime_s"):
        b = bound(f"EXPLAIN TRAIN digits ON 20 CLIENTS MINIMIZE {metric.upper()}")
        assert b.objective == metric
    b = bound("TRAIN digits ON 20 CLIENTS MINIMIZE c_ours COST MODEL paper")
    assert (b.objective, b.estimator) == ("c_ours", "paper")


def test_minimize_errors_name_the_metric_and_its_position():
    with pytest.raises(BindError) as info:
        bound("TRAIN digits ON 20 CLIENTS MINIMIZE airtime")
    assert "unknown objective 'airtime' (did you mean 'airtime_s'?)" in str(info.value)
    assert (info.value.line, info.value.col) == (1, 37)
    # c_ours is the paper estimator's composite: the default estimator (ttt) has none
    with pytest.raises(BindError, match="the default COST MODEL ttt does not define") as info:
        bound("TRAIN digits ON 20 CLIENTS\nMINIMIZE c_ours")
    assert (info.value.line, info.value.col) == (2, 10)
