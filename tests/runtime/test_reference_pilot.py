"""A pilot of the fully connected reference: what it measures, how the estimator uses it, what
it costs, where the catalog and EXPLAIN show it."""

from __future__ import annotations

import json
import math

import attrs
import pytest

import airplan_qo as aq
from airplan_qo.costmodels.time_to_target import combine_reference, reference_from_pilot
from airplan_qo.errors import ValidationError
from airplan_qo.planner.optimizer import Optimizer
from airplan_qo.plans.pilot import ReferencePilot, check_pilot, pilot_rounds
from airplan_qo.plans.request import PlanRequest


def curve(rounds: int, top: float = 0.8, rate: float = 0.15, chance: float = 0.1):
    """A measured-looking curve: a fast rise from chance towards ``top``."""
    return tuple(chance + (top - chance) * (1 - math.exp(-rate * r)) for r in range(1, rounds + 1))


def pilot(rounds: int, budget: int = 40, **kwargs) -> ReferencePilot:
    values = dict(exec_id=3, rounds=rounds, budget=budget, accuracy=curve(rounds),
                  metric=curve(rounds), n_classes=10, channel_uses=1.5e5, energy_j=0.25,
                  airtime_s=0.15, bits=4.0e7, slots=200.0)
    values.update(kwargs)
    return ReferencePilot(**values)


def test_pilot_requests_are_checked():
    assert check_pilot("FC") == ("fc", None)
    assert check_pilot("fc", 12) == ("fc", 12) and check_pilot("fc", 5) == ("fc", 5)
    with pytest.raises(ValidationError, match="use pilot = 'fc'"):
        check_pilot("ring")
    for bad in (0, -3, 4, 2.5, True, "10"):
        with pytest.raises(ValidationError, match="pilot_rounds must be an integer of at least 5"):
            check_pilot("fc", bad)
    assert pilot_rounds(None, 40) == 20 and pilot_rounds(None, 6) == 5
    assert pilot_rounds(None, 3) == 3 and pilot_rounds(100, 40) == 40


def test_the_reference_read_from_a_pilot():
    full = reference_from_pilot(pilot(40))
    truth = curve(40)
    assert full.fc_accuracy == truth[-1] and not full.extrapolated and full.crossed
    # the measured crossing of 0.95 fc on the (smoothed) curve
    assert math.exp(full.log_t) == pytest.approx(next(r for r in range(2, 41)
                                        if sum(truth[r - 2:r + 1]) / 3 >= 0.95 * truth[-1]))
    # half the budget: fc read from the fitted approach at the budget, close to the truth
    half = reference_from_pilot(pilot(20))
    assert half.extrapolated and half.fc_accuracy == pytest.approx(truth[-1], abs=0.01)
    # too short to reach the target: the rounds come from the approach and exceed the pilot's
    short = reference_from_pilot(pilot(8))
    assert not short.crossed and short.extrapolated and math.exp(short.log_t) > 8
    assert math.exp(short.log_t) == pytest.approx(math.exp(full.log_t), rel=0.35)
    with pytest.raises(ValidationError, match="measured no accuracy"):
        reference_from_pilot(pilot(3, accuracy=(None, None, None)))


def test_combining_a_measurement_shrinks_the_spread():
    mean, sd = combine_reference(3.0, 0.4, 2.0, 0.35)
    assert 2.0 < mean < 3.0 and sd < 0.35
    mean, sd = combine_reference(3.0, 0.05, 2.0, 0.35)   # a confident prior barely moves
    assert mean > 2.95


def _plan(db, workload, measured=None, **kwargs):
    return Optimizer(db.catalog).plan(PlanRequest(workload=workload, pilot=measured, **kwargs))


@pytest.fixture
def unseen():
    """A user's own data the shipped fit has never seen: mnist1d's arrays, renamed."""
    from airplan_qo.data import DATASETS, load

    aq.register_dataset("my_signals", load("mnist1d"))
    yield "my_signals"
    DATASETS._items.pop("my_signals", None)


def test_the_pilot_replaces_the_unseen_reference_and_its_cost_is_counted(tmp_path, unseen):
    w = aq.Workload(dataset=unseen, clients=20, alpha=0.3, rounds=40)
    measured = pilot(20, accuracy=curve(20, top=0.7), metric=curve(20, top=0.7))
    with aq.connect(tmp_path / "c.duckdb") as db:
        before = _plan(db, w, topologies=(("complete", ()),))
        after = _plan(db, w, measured, topologies=(("complete", ()),))
    e0, e1 = before.chosen.cost.estimate, after.chosen.cost.estimate
    # the unseen dataset's widening is what the pilot measured
    assert e0.terms["p_ceiling_above_target"] < 0.9
    assert e1.terms["p_ceiling_above_target"] == 1.0
    assert e1.terms["sd"] < e0.terms["sd"] and e1.p_meets > e0.p_meets
    assert not any("unseen" in warn for warn in after.warnings)
    assert any("my_signals unseen" in warn for warn in before.warnings)
    ref = reference_from_pilot(measured)
    assert after.fc_accuracy == ref.fc_accuracy
    assert after.target_accuracy == pytest.approx(0.95 * ref.fc_accuracy)
    assert e1.terms["log_t_fc_measured"] == ref.log_t
    # every candidate's totals include the pilot's traffic in every resource
    for c in after.candidates:
        cost = c.cost
        if cost.rounds is None:
            continue
        assert cost.total("channel_uses") == pytest.approx(
            cost.per_round.channel_uses * cost.rounds + cost.startup + measured.channel_uses)
        for what in ("energy_j", "airtime_s", "bits"):
            assert cost.total(what) == pytest.approx(
                getattr(cost.per_round, what) * cost.rounds + getattr(measured, what))
        bd = cost.breakdown()
        assert bd["pilot_channel_uses"] == measured.channel_uses
        assert bd["slots"] == pytest.approx(cost.per_round.slots * cost.rounds + measured.slots)
    text = after.explain()
    assert "->  Reference Pilot  (cost=0.00..150000.00 rounds=20)" in text
    assert 'exec_id=3 pilot_rounds="20 of 40"' in text
    assert "extrapolated from the reference pilot's 20 rounds, execution 3" in text
    assert "Reference Pilot" not in before.explain()
    doc = json.loads(after.explain(format="json"))[0]
    node = [p for p in doc["plan"]["plans"] if p["node_type"] == "Reference Pilot"][0]
    assert node["exec_id"] == 3 and node["total_cost"] == measured.channel_uses
    assert doc["cost_breakdown"]["pilot_energy_j"] == measured.energy_j


def test_a_measured_reference_makes_plans_choosable(tmp_path, unseen):
    """Without the pilot the unseen dataset leaves every plan below the confidence; a pilot
    that measured a quickly reached reference lets the planner choose among plans again."""
    w = aq.Workload(dataset=unseen, clients=20, alpha=0.3, rounds=100)
    fast = pilot(50, budget=100, accuracy=curve(50, rate=0.3), metric=curve(50, rate=0.3))
    with aq.connect(tmp_path / "c.duckdb") as db:
        without = _plan(db, w)
        with_pilot = _plan(db, w, fast)
    assert without.fallback      # every plan pruned; the fully connected one is the fallback
    assert not any(c.feasible for c in without.candidates if c is not without.chosen)
    assert not with_pilot.fallback
    feasible = [c for c in with_pilot.candidates if c.feasible]
    assert len(feasible) >= 2 and with_pilot.chosen is feasible[0]
    assert with_pilot.chosen.cost.estimate.p_meets >= 0.95


def test_pilot_from_python_and_sql_trains_records_and_explains(tmp_path):
    w = aq.Workload(dataset="digits", clients=10, alpha=0.5, rounds=10)
    with aq.connect(tmp_path / "c.duckdb") as db:
        result = db.plan(w, pilot="fc", pilot_rounds=5)
        p = result.request.pilot
        run = db.catalog.query(
            "SELECT planning_run_id, pilot_exec_id, pilot::VARCHAR AS pilot "
            "FROM airplan.planning_runs WHERE planning_run_id = ?",
            [result.planning_run_id])[0]
        assert run["pilot_exec_id"] == p.exec_id
        stored = json.loads(run["pilot"])
        assert stored["rounds"] == 5 and stored["budget"] == 10
        assert stored["channel_uses"] == p.channel_uses > 0
        assert stored["fc_accuracy"] == pytest.approx(result.fc_accuracy)
        ex = db.catalog.query(
            "SELECT e.actual_rounds, sum(s.channel_uses) AS uses, r.statement "
            "FROM airplan.executions e JOIN airplan.round_stats s USING (exec_id) "
            "JOIN airplan.plans pl ON pl.plan_id = e.plan_id "
            "JOIN airplan.planning_runs r ON r.planning_run_id = pl.planning_run_id "
            "WHERE e.exec_id = ? GROUP BY ALL", [p.exec_id])[0]
        assert ex["actual_rounds"] == 5 and ex["uses"] == pytest.approx(p.channel_uses)
        assert ex["statement"].startswith("pilot fc (5 of 10 rounds)")
        chosen = result.chosen.cost
        assert chosen.total("channel_uses") == pytest.approx(
            chosen.per_round.channel_uses * chosen.paid_rounds() + chosen.startup
            + p.channel_uses)
        assert chosen.paid_rounds() == (max(chosen.rounds - 5, 0) if chosen.continues_pilot
                                        else chosen.rounds)
        assert "Reference Pilot" in result.explain()

        (res,) = db.sql("EXPLAIN ANALYZE TRAIN digits ON 10 CLIENTS WITH (alpha = 0.5, "
                        "rounds = 10, pilot = 'fc', pilot_rounds = 10)")
        assert "->  Reference Pilot" in res.text and 'pilot_rounds="10 of 10"' in res.text
        assert "measured by the reference pilot, execution" in res.text
        assert "Execution: exec_id=" in res.text
        n = db.catalog.query("SELECT count(*) AS n FROM airplan.planning_runs "
                             "WHERE pilot_exec_id IS NOT NULL")[0]["n"]
        assert n == 2
        # a ttt refit of the dataset's level leaves out the run planned with the pilot
        report = db.calibrate("ttt", scope="dataset", scope_key="digits", min_obs=1)
        assert any("planned with a pilot" in why for why in report.skipped)
        assert report.n_obs == 2                       # the two pilots' own executions


def test_refused_pilots_train_nothing(tmp_path):
    w = aq.Workload(dataset="digits", clients=10, rounds=10)
    path = tmp_path / "c.duckdb"
    with aq.connect(path) as db:
        for kwargs, message in (({"pilot": "ring"}, "use pilot = 'fc'"),
                                ({"pilot_rounds": 3}, "pilot_rounds needs a pilot"),
                                ({"pilot": "fc", "pilot_rounds": 4}, "at least 5"),
                                ({"pilot": "fc", "estimator": "dsgd"}, "COST MODEL ttt")):
            with pytest.raises(ValidationError, match=message):
                db.plan(w, **kwargs)
        assert db.catalog.query("SELECT count(*) AS n FROM airplan.executions")[0]["n"] == 0
        assert db.catalog.query("SELECT count(*) AS n FROM airplan.planning_runs")[0]["n"] == 0
    with aq.connect(path, read_only=True) as db:
        with pytest.raises(ValidationError, match="read-only"):
            db.plan(w, pilot="fc")


def test_a_pilot_survives_a_replan_of_the_request(tmp_path):
    """The request carries the pilot: re-planning it (as a monitored run does) keeps the
    measured reference and the pilot's cost."""
    w = aq.Workload(dataset="mnist1d", clients=20, alpha=0.3, rounds=40)
    measured = pilot(20)
    with aq.connect(tmp_path / "c.duckdb") as db:
        first = _plan(db, w, measured)
        again = Optimizer(db.catalog).plan(attrs.evolve(first.request, min_mixing_p=0.0))
    assert again.fc_accuracy == first.fc_accuracy
    assert again.chosen.cost.pilot is measured


def test_a_pilot_that_fails_plans_nothing(tmp_path):
    """A diverging pilot (a learning rate far too large) is an error naming its execution; no
    planning run is recorded with it."""
    from airplan_qo.errors import ExecutionError

    w = aq.Workload(dataset="digits", clients=10, rounds=10, lr=10.0, momentum=0.99)
    with aq.connect(tmp_path / "c.duckdb") as db:
        with pytest.raises(ExecutionError, match=r"pilot .*execution 1\) ended failed"):
            db.plan(w, pilot="fc", pilot_rounds=5)
        assert db.catalog.query("SELECT count(*) AS n FROM airplan.planning_runs "
                                "WHERE pilot_exec_id IS NOT NULL")[0]["n"] == 0


def _rounds(db, exec_id: int) -> list[dict]:
    return db.catalog.query(
        "SELECT round, train_loss, consensus_distance, channel_uses, energy_j, test_accuracy "
        "FROM airplan.round_stats WHERE exec_id = ? ORDER BY round", [exec_id])


def test_the_reference_plan_continues_from_the_pilot(tmp_path):
    """When the planner picks the plan the pilot trained, its run starts from the pilot's last
    round: the same rounds as a run from round 0, the pilot's rounds paid once."""
    from airplan_qo.runtime.execution import execute

    w = aq.Workload(dataset="digits", clients=10, alpha=0.5, rounds=12)
    with aq.connect(tmp_path / "c.duckdb") as db:
        result = db.plan(w, pilot="fc", pilot_rounds=6, topologies=["complete"], sparsity=[1.0],
                         fallback="complete")
        p = result.request.pilot
        assert p.checkpoint and p.plan_label == result.chosen.plan.label()
        cost = result.chosen.cost
        assert cost.continues_pilot and cost.rounds is not None
        assert cost.total("channel_uses") == pytest.approx(
            cost.per_round.channel_uses * max(cost.rounds - 6, 0) + cost.startup
            + p.channel_uses)
        went_on = execute(db.catalog, result, quiet=True, stop_at_target=False)
        fresh = execute(db.catalog, result, quiet=True, stop_at_target=False,
                        continue_pilot=False)
        opts = db.catalog.query("SELECT options->>'continues_pilot' AS c FROM airplan.executions "
                                "WHERE exec_id = ?", [went_on.exec_id])[0]["c"]
        assert int(opts) == p.exec_id
        a, b = _rounds(db, went_on.exec_id), _rounds(db, fresh.exec_id)
        assert [r["round"] for r in a] == list(range(1, 13)) == [r["round"] for r in b]
        for x, y in zip(a, b):      # the same training, bit for bit
            for k in ("train_loss", "consensus_distance", "channel_uses", "energy_j"):
                assert x[k] == y[k], (x["round"], k)
        assert a[-1]["test_accuracy"] == b[-1]["test_accuracy"]
        assert went_on.result.final_accuracy == fresh.result.final_accuracy
        # the pilot's six rounds are the execution's first six
        assert a[:6] == _rounds(db, p.exec_id)


def test_a_target_the_pilot_reached_ends_the_continued_run_at_once(tmp_path):
    w = aq.Workload(dataset="digits", clients=10, alpha=0.5, rounds=10)
    with aq.connect(tmp_path / "c.duckdb") as db:
        result = db.plan(w, pilot="fc", pilot_rounds=10, topologies=["complete"],
                         sparsity=[1.0], fallback="complete")
        p = result.request.pilot
        report = db.execute(result)            # a TRAIN: stops at the target
        r = report.result
        assert r.rounds_to_target is not None and r.rounds_to_target <= 10
        assert r.rounds == 10 and "reached at round" in r.reason
        # nothing trained beyond the pilot: the execution's rounds are the pilot's
        assert _rounds(db, report.exec_id) == _rounds(db, p.exec_id)


def test_a_pilot_called_without_a_device_trains_on_the_sessions(tmp_path):
    from airplan_qo.runtime.pilot import run_reference_pilot

    w = aq.Workload(dataset="digits", clients=6, alpha=0.5, rounds=6)
    with aq.connect(tmp_path / "c.duckdb") as db:
        p = run_reference_pilot(db, w, rounds=5)
        dev = db.catalog.query("SELECT options->>'device' AS d FROM airplan.executions "
                               "WHERE exec_id = ?", [p.exec_id])[0]["d"]
    assert p.rounds == 5 and p.checkpoint and dev == "cpu"
