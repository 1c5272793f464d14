"""Statements through the executor and `airplan sql`: wiring, read-only catalog SQL, errors."""

import hashlib
import json

import pytest

import airplan_qo as aq
from airplan_qo.cli import main
from airplan_qo.errors import AirPlanError, CatalogError, ExecutionError, ParseError


def _snapshot(path):
    with aq.connect(path, read_only=True) as s:
        names, rows = s.catalog.execute_user_sql(
            "SELECT table_name FROM information_schema.tables WHERE table_catalog = 'airplan' "
            "ORDER BY 1")
        digest = hashlib.sha256()
        for (table,) in rows:
            _, data = s.catalog.execute_user_sql(f"SELECT * FROM airplan.{table} ORDER BY ALL")
            digest.update(f"{table}:{data!r}".encode())
        return digest.hexdigest()


@pytest.fixture()
def catalog(tmp_path):
    path = tmp_path / "cat.duckdb"
    with aq.connect(path) as s:
        s.sql("ANALYZE WORKLOAD digits ON 10 CLIENTS WITH (alpha = 0.5); "
              "EXPLAIN TRAIN digits ON 10 CLIENTS USING TOPOLOGY ring USING SPARSITY 1")
    return path


def test_explain_train_plans_and_records(catalog):
    with aq.connect(catalog) as s:
        [res] = s.sql("EXPLAIN (FORMAT JSON, ALTERNATIVES 2) TRAIN digits ON 10 CLIENTS "
                      "WITH (alpha = 0.5, mix_rounds = 'off') USING TOPOLOGY ring, complete "
                      "USING SPARSITY IN (0.1, 1)")
        doc = res.document[0]
        # ring x 2 weights rules and complete x 1 rule (every rule gives 11^T/N), at 2 k: at
        # k = 0.1 CHOCO over the air (3); at k = 1 D-SGD (over the air, digital at 8 and 32
        # bits), push-sum (over the air, digital at 32) and MATCHA (the three) (3 x 8); no
        # gradient tracking (5 local steps) nor a server (no access point)
        assert doc["candidates"]["considered"] == 3 + 3 * 8
        assert {(x["transport"], x["bits_per_coord"], x["count"])
                for x in doc["candidates"]["by_transport"]} == {("ota", 32, 12),
                                                                 ("digital", 8, 6),
                                                                 ("digital", 32, 9)}
        assert len(doc["alternatives"]) == 2
        assert "estimated from sketches" in doc["workload"]["alpha_source"]
        [table] = s.sql("SELECT count(*) AS n FROM airplan.plans WHERE planning_run_id = "
                        f"{doc['planning_run_id']}")
        assert table.rows == ((27,),)


def test_analyze_workload_statement(catalog):
    with aq.connect(catalog) as s:
        [res] = s.sql("ANALYZE WORKLOAD digits ON 10 CLIENTS WITH (alpha = 0.5)")
        row = dict(zip(res.columns, res.rows[0]))
        assert row["reused"] is True
        # 10 classes: the exact histogram (10 cells) is cheaper than a 5 x 55 sketch
        assert row["release_kind"] == "histogram" and (row["depth"], row["width"]) == (1, 10)


def test_train_needs_runtime_or_runs(catalog):
    with aq.connect(catalog) as s:
        try:
            s.sql("TRAIN digits ON 4 CLIENTS WITH (rounds = 1)")
        except ExecutionError as exc:
            assert "not available" in str(exc)


ENERGY_STATEMENT = ("TRAIN digits ON 20 CLIENTS WITH (snr_db = 20) USING TOPOLOGY complete "
                    "USING TRANSPORT ota, digital(bits = 8)")


def _candidates(s, run_id):
    [t] = s.sql("SELECT chosen, pruned_reason, total_cost, energy_j, channel_uses "
                f"FROM airplan.plans WHERE planning_run_id = {run_id}")
    return [dict(zip(t.columns, row)) for row in t.rows]


def test_minimize_energy_plans_with_the_energy_objective(tmp_path):
    with aq.connect(tmp_path / "cat.duckdb") as s:
        [res] = s.sql(f"EXPLAIN (FORMAT JSON) {ENERGY_STATEMENT} MINIMIZE energy_j")
        doc = res.document[0]
        assert doc["objective"] == "energy_j"
        assert doc["why_chosen"].startswith("cheapest plan by energy_j")
        [row] = s.sql("SELECT objective, statement FROM airplan.planning_runs "
                      f"WHERE planning_run_id = {doc['planning_run_id']}")[0].rows
        assert row[0] == "energy_j" and row[1].endswith("MINIMIZE energy_j")
        energy = _candidates(s, doc["planning_run_id"])
        feasible = [c for c in energy if c["pruned_reason"] is None]
        [chosen] = [c for c in energy if c["chosen"]]
        assert len(feasible) > 1 and len({c["channel_uses"] for c in feasible}) > 1
        # the objective total of every candidate is its energy, and the chosen plan is the
        # cheapest feasible one in energy
        assert all(c["total_cost"] == pytest.approx(c["energy_j"]) for c in energy
                   if c["energy_j"] is not None)
        assert chosen["energy_j"] == pytest.approx(min(c["energy_j"] for c in feasible))
        assert doc["cost_breakdown"]["energy_j"] == pytest.approx(chosen["energy_j"])

        # the same statement without MINIMIZE minimises channel uses, as before
        [res] = s.sql(f"EXPLAIN (FORMAT JSON) {ENERGY_STATEMENT}")
        assert res.document[0]["objective"] == "channel_uses"
        uses = _candidates(s, res.document[0]["planning_run_id"])
        [default] = [c for c in uses if c["chosen"]]
        assert default["channel_uses"] == pytest.approx(
            min(c["channel_uses"] for c in uses if c["pruned_reason"] is None))
        assert chosen["energy_j"] <= default["energy_j"] * (1 + 1e-9)
        assert default["channel_uses"] <= chosen["channel_uses"] * (1 + 1e-9)

        # text EXPLAIN names the objective of its figures
        [res] = s.sql(f"EXPLAIN {ENERGY_STATEMENT} MINIMIZE energy_j")
        assert "cost=startup..total energy_j" in res.text


def test_training_statements_plan_with_their_objective():
    # TRAIN and EXPLAIN ANALYZE TRAIN hand MINIMIZE to the planner (stopped before training)
    from airplan_qo.sql import bind, parse_one
    from airplan_qo.sql.executor import run_training

    class Planned(Exception):
        pass

    class Session:
        device = "cpu"

        def plan(self, workload, **options):
            raise Planned(options)

    for text in ("TRAIN digits ON 10 CLIENTS MINIMIZE airtime_s",
                 "EXPLAIN ANALYZE TRAIN digits ON 10 CLIENTS MINIMIZE airtime_s"):
        with pytest.raises(Planned) as info:
            run_training(Session(), bind(parse_one(text)))
        assert info.value.args[0]["objective"] == "airtime_s"


def test_catalog_queries_pass_through(catalog):
    with aq.connect(catalog) as s:
        [r] = s.sql("SELECT chosen, count(*) AS n FROM airplan.plans GROUP BY ALL ORDER BY 1")
        assert r.columns == ("chosen", "n")
        [r] = s.sql("FROM airplan.v_current_calibration")
        assert r.rows == ()


@pytest.mark.parametrize("text,line,col", [
    ("DROP TABLE airplan.plans", 1, 1),
    ("SELECT 1;\n  DELETE FROM airplan.plans", 2, 3),
    ("INSERT INTO airplan.calibration VALUES (1)", 1, 1),
    ("UPDATE airplan.executions SET status = 'failed'", 1, 1),
    ("ATTACH 'other.db' AS o", 1, 1),
    ("COPY airplan.plans TO 'x.csv'", 1, 1),
    ("CREATE TABLE t AS SELECT 1", 1, 1),
    ("EXPLAIN TRAIN digits ON 10 CLEINTS", 1, 28),
    ("EXPLAIN TRAIN digits ON 10 CLIENTS WITH (alpah = 1)", 1, 42),
])
def test_hostile_and_malformed_statements_change_nothing(catalog, text, line, col, capsys):
    before = _snapshot(catalog)
    with aq.connect(catalog) as s:
        with pytest.raises(ParseError) as err:
            s.sql(text)
    assert (err.value.line, err.value.col) == (line, col)
    assert main(["sql", "--catalog", str(catalog), text]) == 2
    out = capsys.readouterr().err
    assert f"line {line}, column {col}" in out and "Traceback" not in out
    assert _snapshot(catalog) == before


def test_a_bad_statement_later_in_the_script_stops_everything(catalog):
    before = _snapshot(catalog)
    with aq.connect(catalog) as s:
        with pytest.raises(ParseError):
            s.sql("EXPLAIN TRAIN digits ON 10 CLIENTS; EXPLAIN TRAIN digits ON 10")
    assert _snapshot(catalog) == before


def test_duckdb_errors_are_positioned_within_the_script(catalog, capsys):
    before = _snapshot(catalog)
    assert main(["sql", "--catalog", str(catalog), "SELECT 1;\nSELECT * FROM airplan.plns"]) == 2
    err = capsys.readouterr().err
    assert "LINE 2:" in err and "plns" in err
    with aq.connect(catalog) as s:
        with pytest.raises(CatalogError):
            s.sql("WITH x AS (SELECT 1) SELECT * FROM nope")
    assert _snapshot(catalog) == before


def test_cli_formats_and_file(catalog, tmp_path, capsys):
    script = tmp_path / "q.sql"
    script.write_text("-- a comment\nSELECT 42 AS answer, 'a;b' AS s;\n")
    assert main(["sql", "--catalog", str(catalog), "-f", str(script), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"answer": 42, "s": "a;b"}]
    assert main(["sql", "--catalog", str(catalog), "--format", "csv", "SELECT 1 AS x"]) == 0
    assert capsys.readouterr().out.strip() == "x\n1"
    assert main(["sql", "--catalog", str(catalog), "-f", str(tmp_path / "missing.sql")]) == 2


def test_read_only_cli(catalog, capsys):
    before = _snapshot(catalog)
    assert main(["sql", "--catalog", str(catalog), "--read-only",
                 "EXPLAIN TRAIN digits ON 10 CLIENTS USING TOPOLOGY ring; "
                 "SELECT count(*) FROM airplan.plans"]) == 0
    assert _snapshot(catalog) == before


def test_explain_shorthand(catalog, capsys):
    assert main(["explain", "--catalog", str(catalog),
                 "TRAIN digits ON 10 CLIENTS USING TOPOLOGY ring"]) == 0
    assert capsys.readouterr().out.startswith("Decentralized Train")


def test_shell_runs_multiline_statements(catalog, capsys, monkeypatch):
    import io

    from airplan_qo.shell import Shell

    out = io.StringIO()
    script = io.StringIO("SELECT 1\n  AS one;\n.tables\nSELEC 2;\n.format json\n"
                         "SELECT 3 AS three;\n.quit\n")
    assert Shell(str(catalog), stdin=script, stdout=out).run() == 0
    text = out.getvalue()
    assert "one" in text and "plans" in text and "error:" in text and '"three": 3' in text


def test_every_error_is_an_airplan_error(catalog):
    with aq.connect(catalog) as s:
        for text in ["", ";", "TRAIN", "EXPLAIN (FORMAT XML) TRAIN digits ON 3 CLIENTS",
                     "SELECT 'unterminated"]:
            with pytest.raises(AirPlanError):
                s.sql(text)
