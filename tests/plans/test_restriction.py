"""Explicit choices are respected: a restricted plan space that cannot meet the SLA is an error
unless the user opts into a fallback; the data split is checked before any topology is built."""

import pytest

import airplan_qo as aq
from airplan_qo.cli import main
from airplan_qo.errors import PlanningError, ValidationError
from airplan_qo.planner.feasibility import check_data_split, samples_per_client
from airplan_qo.plans.request import PlanRequest, check_fallback
from airplan_qo.plans.sla import parse_sla
from airplan_qo.sql import parse, render

RING_99 = "TRAIN digits ON 20 CLIENTS USING TOPOLOGY ring " \
          "SLA accuracy >= 0.99 * fc"
TABLES = ("workloads", "planning_runs", "plans", "topologies", "executions", "feedback")


def _counts(db):
    return {t: db.catalog.query(f"SELECT count(*) AS n FROM airplan.{t}")[0]["n"] for t in TABLES}


def test_a_restriction_that_cannot_meet_the_sla_is_an_error_naming_what_would(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        before = _counts(db)
        with pytest.raises(PlanningError) as err:
            db.sql(RING_99)
        text = str(err.value)
        assert text.startswith("no plan in USING TOPOLOGY ring meets the SLA (accuracy >= "
                               "0.99 * fc, confidence 0.95): the best is ring [")
        assert "(P(meets SLA) 0." in text and "rejected by unlikely: P(meets SLA)" in text
        assert "the cheapest plan outside it that does is " in text
        outside = text.split("the cheapest plan outside it that does is ", 1)[1]
        assert not outside.startswith("ring") and "FALLBACK AUTO" in text
        assert "\n" not in text
        assert _counts(db) == before            # a refused statement leaves nothing behind
        with pytest.raises(PlanningError, match="no plan in USING TOPOLOGY ring"):
            db.plan(aq.Workload(dataset="digits", clients=20), topologies=["ring"],
                    sla="accuracy >= 0.99 * fc")
        assert _counts(db) == before


def test_fallback_auto_trains_the_whole_space_s_best_and_says_so(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        [res] = db.sql(RING_99 + " FALLBACK AUTO")
        assert res.status == "succeeded" and not res.plan.startswith("ring")
        assert ("WARNING: no plan in USING TOPOLOGY ring meets the SLA (closest: ring ["
                in res.explain)
        assert f"FALLBACK AUTO planned the whole plan space instead and chose {res.plan}" in \
            res.explain
        # the statement's own planning run (a monitored run may re-plan later)
        run = db.catalog.query("SELECT warnings, n_candidates FROM airplan.planning_runs "
                               "ORDER BY planning_run_id LIMIT 1")[0]
        assert run["warnings"][0].startswith("no plan in USING TOPOLOGY ring")
        assert run["n_candidates"] > 10           # the whole space was planned and recorded
        wide = db.plan(aq.Workload(dataset="digits", clients=20), topologies=["ring"],
                       sla="accuracy >= 0.99 * fc", fallback="auto")
        assert wide.chosen.plan.topology.family != "ring"
        # COMPLETE: the fully connected plan, without planning the rest
        fc = db.plan(aq.Workload(dataset="digits", clients=20), topologies=["ring"],
                     sla="accuracy >= 0.99 * fc", fallback="complete")
        assert fc.fallback and fc.chosen.plan.topology.family == "complete"
        assert {c.plan.topology.family for c in fc.candidates} == {"ring", "complete"}


def test_an_unrestricted_request_keeps_the_planner_s_fallback(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        r = db.plan(aq.Workload(dataset="digits", clients=10), sla="accuracy >= 0.999")
        assert r.fallback and r.chosen.plan.topology.family == "complete"
        assert r.request.fallback == "complete"
        restricted = db.plan(aq.Workload(dataset="digits", clients=10), topologies=["complete"],
                             sparsity=[1.0], sla="accuracy >= 0.5")
        assert restricted.request.fallback == "error" and not restricted.fallback


def test_the_cli_exits_2_with_the_reason_and_the_fallback_flag_trains(tmp_path, capsys):
    cat = str(tmp_path / "c.duckdb")
    assert main(["sql", "--catalog", cat, "--quiet", RING_99]) == 2
    err = capsys.readouterr().err
    assert err.startswith("airplan: error: no plan in USING TOPOLOGY ring meets the SLA")
    assert len(err.strip().splitlines()) == 1
    assert main(["sql", "--catalog", cat, "--quiet", RING_99 + " FALLBACK AUTO"]) == 0
    out, err = capsys.readouterr()
    assert "succeeded" in out
    # a plain TRAIN prints the planner's warnings, the fallback first
    assert "airplan: note: planner warning: no plan in USING TOPOLOGY ring meets the SLA" in err
    assert main(["explain", "--catalog", cat, "-n", "20", "-t", "ring", "--sla",
                 "accuracy >= 0.99 * fc"]) == 2
    assert "no plan in USING TOPOLOGY ring" in capsys.readouterr().err
    assert main(["explain", "--catalog", cat, "-n", "20", "-t", "ring", "--sla",
                 "accuracy >= 0.99 * fc", "--fallback", "auto"]) == 0
    assert "FALLBACK AUTO planned the whole plan space" in capsys.readouterr().out


def test_fallback_clause_parses_renders_and_binds():
    from airplan_qo.sql.binder import bind

    for word in ("AUTO", "COMPLETE", "ERROR"):
        [stmt] = parse(f"EXPLAIN TRAIN digits ON 10 CLIENTS USING TOPOLOGY ring FALLBACK {word}")
        assert render(stmt).endswith(f"FALLBACK {word}")
        assert bind(stmt).fallback == word.lower()
    [stmt] = parse("TRAIN digits ON 10 CLIENTS")
    assert bind(stmt).fallback is None
    with pytest.raises(aq.ParseError, match="expected AUTO, COMPLETE or ERROR after FALLBACK"):
        parse("TRAIN digits ON 10 CLIENTS FALLBACK maybe")
    with pytest.raises(aq.ParseError, match="duplicate FALLBACK clause"):
        parse("TRAIN digits ON 10 CLIENTS FALLBACK AUTO FALLBACK ERROR")
    with pytest.raises(ValidationError, match="unknown fallback 'later'"):
        check_fallback("later")
    with pytest.raises(ValidationError, match="unknown fallback"):
        PlanRequest(workload=aq.Workload(), sla=parse_sla("accuracy >= 0.9"), fallback="x")


@pytest.mark.parametrize("clients,partition,needle", [
    (2000, "dirichlet", "digits has 1438 training records, too few for 2000 clients: each "
                        "client needs at least 10 training records under the dirichlet "
                        "partition; use at most 143 clients (ON 143 CLIENTS) or a larger "
                        "dataset"),
    (200, "dirichlet", "use at most 143 clients (ON 143 CLIENTS), WITH (partition = 'iid') "
                       "(one record per client, up to 1438 clients) or a larger dataset"),
    (100000, "iid", "too few for 100000 clients: each client needs one training record; use at "
                    "most 1438 clients (ON 1438 CLIENTS) or a larger dataset"),
    (800, "shards", "at least 2 training records under the shards partition; use at most 719"),
])
def test_data_that_cannot_be_split_fails_before_any_topology_is_built(clients, partition,
                                                                      needle, tmp_path,
                                                                      monkeypatch):
    from airplan_qo.planner import optimizer

    monkeypatch.setattr(optimizer, "describe_many", lambda *a, **k: pytest.fail("built"))
    with pytest.raises(PlanningError) as err:
        check_data_split(aq.Workload(dataset="digits", clients=clients, partition=partition))
    assert needle in str(err.value) and "min_per_client" not in str(err.value)
    with aq.connect(tmp_path / "c.duckdb") as db:
        with pytest.raises(PlanningError, match="training records, too few"):
            db.sql(f"EXPLAIN TRAIN digits ON {clients} CLIENTS WITH (partition = '{partition}')")
        assert _counts(db) == dict.fromkeys(TABLES, 0)
    assert main(["sql", "--catalog", str(tmp_path / "c.duckdb"),
                 f"EXPLAIN TRAIN digits ON {clients} CLIENTS WITH (partition = '{partition}')"]) \
        == 2


def test_what_fits_is_planned_and_the_partitioners_set_the_need():
    assert (samples_per_client("iid"), samples_per_client("dirichlet"),
            samples_per_client("shards")) == (1, 10, 2)
    check_data_split(aq.Workload(dataset="digits", clients=143))
    check_data_split(aq.Workload(dataset="digits", clients=1438, partition="iid"))
    with pytest.raises(PlanningError):
        check_data_split(aq.Workload(dataset="digits", clients=144))
