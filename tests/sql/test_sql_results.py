"""What Session.sql() returns: catalog query results as Arrow / tuples, typed TRAIN results."""

import datetime
import sys

import attrs
import pyarrow as pa
import pytest

import airplan_qo as aq
from airplan_qo.errors import ValidationError
from airplan_qo.runtime.monitor import MonitorConfig
from airplan_qo.sql.executor import Result, train_result
from airplan_qo.sql.results import TrainResult


# ---- catalog queries -------------------------------------------------------------------------

def test_select_result_as_arrow_fetchall_columns_and_rows(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        [r] = db.sql("SELECT * FROM (VALUES (1, 'a', 0.5::DOUBLE, DATE '2024-01-02', [1, 2]), "
                     "(2, NULL, NULL, NULL, NULL)) t(i, s, x, d, l) ORDER BY i")
    # materialised: usable after the session (and the rolled-back transaction) are gone
    assert isinstance(r, Result) and r.kind == "table"
    assert r.columns == ("i", "s", "x", "d", "l")
    assert r.fetchall() == [(1, "a", 0.5, datetime.date(2024, 1, 2), [1, 2]),
                            (2, None, None, None, None)]
    assert list(r) == r.fetchall() and len(r) == 2
    table = r.arrow()
    assert table.column_names == list(r.columns)
    # DuckDB types VALUES' integers INTEGER (int32)
    assert table.schema.types == [pa.int32(), pa.string(), pa.float64(), pa.date32(),
                                  pa.list_(pa.int32())]
    assert table.to_pylist()[0] == {"i": 1, "s": "a", "x": 0.5, "d": datetime.date(2024, 1, 2),
                                    "l": [1, 2]}
    assert table.column("s").null_count == 1


def test_catalog_table_and_values_arrow_cannot_type_become_text(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        [plans, odd] = db.sql(
            "SELECT plan_id, family FROM airplan.plans WHERE false; "
            "SELECT 1 AS i, 170141183460469231731687303715884105727::HUGEINT AS h")
    empty = plans.arrow()
    assert empty.num_rows == 0 and empty.column_names == ["plan_id", "family"]
    assert plans.fetchall() == [] and list(plans) == []
    assert odd.fetchall() == [(1, 170141183460469231731687303715884105727)]
    assert odd.arrow().schema.types == [pa.int32(), pa.string()]       # beyond 64 bits: text
    assert odd.arrow().to_pylist() == [{"i": 1, "h": "170141183460469231731687303715884105727"}]


def test_arrow_keeps_the_duckdb_column_types(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        [empty, nulls, typed, nested, other] = db.sql(
            "SELECT plan_id, family, est_rounds, chosen FROM airplan.plans WHERE false; "
            "SELECT NULL::INTEGER AS i, NULL::BIGINT AS b, NULL::VARCHAR AS s "
            "FROM range(2); "
            "SELECT 12.5::DECIMAL(10,2) AS d, TIMESTAMP '2024-01-02 03:04:05' AS ts, "
            "TIMESTAMPTZ '2024-01-02 03:04:05+00' AS tz, 200::UTINYINT AS u, "
            "1.5::FLOAT AS f, INTERVAL 3 DAY AS iv, "
            "'00000000-0000-0000-0000-000000000001'::UUID AS id, '{\"a\": 1}'::JSON AS j, "
            "'x'::BLOB AS bl, TIME '10:11:12' AS t, TIMESTAMP_MS '2024-01-02' AS ms; "
            "SELECT [NULL, 1::SMALLINT] AS l, {'k': 1::TINYINT, 'v': 'a'} AS st, "
            "MAP([1, 2], ['00000000-0000-0000-0000-000000000002'::UUID, NULL]) AS m, "
            "[1, 2]::INTEGER[2] AS arr; "
            "SELECT 1::UNION(a INTEGER, b VARCHAR) AS un")
    assert empty.rows == ()
    assert empty.arrow().schema == pa.schema([("plan_id", pa.int64()), ("family", pa.string()),
                                              ("est_rounds", pa.float64()),
                                              ("chosen", pa.bool_())])
    table = nulls.arrow()
    assert table.schema.types == [pa.int32(), pa.int64(), pa.string()]
    assert table.column("i").null_count == 2
    table = typed.arrow()
    assert table.schema.types == [
        pa.decimal128(10, 2), pa.timestamp("us"), pa.timestamp("us", tz=table.schema.types[2].tz),
        pa.uint8(), pa.float32(), pa.month_day_nano_interval(), pa.string(), pa.string(),
        pa.binary(), pa.time64("us"), pa.timestamp("ms")]
    row = table.to_pylist()[0]
    assert row["d"] == typed.rows[0][0] and str(row["d"]) == "12.50"
    assert row["ts"] == datetime.datetime(2024, 1, 2, 3, 4, 5)
    assert row["tz"] == datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    assert (row["id"], row["j"], row["bl"]) == ("00000000-0000-0000-0000-000000000001",
                                                '{"a": 1}', b"x")
    assert row["iv"].days == 3
    table = nested.arrow()
    assert table.schema.types == [
        pa.list_(pa.int16()), pa.struct([("k", pa.int8()), ("v", pa.string())]),
        pa.map_(pa.int32(), pa.string()), pa.list_(pa.int32(), 2)]
    assert table.column("m").to_pylist() == [[(1, "00000000-0000-0000-0000-000000000002"),
                                              (2, None)]]
    assert other.arrow().schema.types == [pa.int64()]       # no Arrow counterpart: inferred
    # the rows are those fetched, untouched
    assert nested.fetchall()[0][3] == (1, 2) and isinstance(nested.rows[0][2], dict)


def test_df_dtypes_follow_the_duckdb_types(tmp_path):
    pytest.importorskip("pandas")
    with aq.connect(tmp_path / "c.duckdb") as db:
        [empty, full] = db.sql(
            "SELECT 1::INTEGER AS i, TIMESTAMP '2024-01-02' AS ts, 'a' AS s, true AS b LIMIT 0; "
            "SELECT 1::INTEGER AS i, NULL::INTEGER AS n, TIMESTAMP '2024-01-02' AS ts, "
            "1.5::FLOAT AS f")
    frame = empty.df()
    assert len(frame) == 0 and list(frame.columns) == ["i", "ts", "s", "b"]
    assert str(frame.dtypes["i"]) == "int32" and str(frame.dtypes["ts"]).startswith("datetime64")
    assert str(frame.dtypes["b"]) == "bool"
    frame = full.df()
    assert [str(t) for t in frame.dtypes] == ["int32", "float64", "datetime64[us]", "float32"]


def test_df_needs_pandas_with_a_clear_error(tmp_path, monkeypatch):
    with aq.connect(tmp_path / "c.duckdb") as db:
        [r] = db.sql("SELECT 1 AS a, 'x' AS b")
    monkeypatch.setitem(sys.modules, "pandas", None)      # as if pandas were not installed
    with pytest.raises(ValidationError, match=r"^Result.df\(\) needs pandas: pip install pandas"):
        r.df()


def test_df_with_pandas(tmp_path):
    pytest.importorskip("pandas")
    with aq.connect(tmp_path / "c.duckdb") as db:
        [r] = db.sql("SELECT 1 AS a, 'x' AS b UNION ALL SELECT 2, 'y' ORDER BY a")
    frame = r.df()
    assert list(frame.columns) == ["a", "b"] and frame["a"].tolist() == [1, 2]


def test_a_document_is_not_a_table(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        [r] = db.sql("EXPLAIN TRAIN digits ON 4 CLIENTS USING TOPOLOGY ring USING SPARSITY 1")
    assert r.kind == "explain" and r.text.startswith("Decentralized Train")
    for method in (r.arrow, r.fetchall, r.df):
        with pytest.raises(ValidationError, match="document: read .text"):
            method()
    assert list(r) == [] and len(r) == 0


# ---- TRAIN and EXPLAIN ANALYZE TRAIN ---------------------------------------------------------

def _check_against_catalog(db, r):
    [ex] = db.catalog.query("SELECT * FROM airplan.executions WHERE exec_id = ?", [r.exec_id])
    assert (ex["plan_id"], ex["status"], ex["reason"]) == (r.plan_id, r.status, r.reason)
    assert ex["actual_rounds"] == r.rounds
    assert ex["client_acc_mean"] == pytest.approx(r.accuracy)
    assert ex["final_accuracy"] == pytest.approx(r.avg_model_accuracy)
    [plan] = db.catalog.query("SELECT * FROM airplan.plans WHERE plan_id = ?", [r.plan_id])
    assert plan["chosen"] and plan["est_rounds"] == pytest.approx(r.predicted_rounds)
    recorded = db.catalog.query("SELECT metric, estimated, actual FROM airplan.feedback "
                                "WHERE exec_id = ? ORDER BY metric", [r.exec_id])
    assert recorded == sorted(({k: f[k] for k in ("metric", "estimated", "actual")}
                               for f in r.feedback), key=lambda f: f["metric"])
    assert recorded and r.feedback_note is None


def test_train_result_fields(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        [r] = db.sql("TRAIN digits ON 4 CLIENTS WITH (rounds = 3) COST MODEL ttt")
        assert isinstance(r, TrainResult) and r.kind == "table"
        row = dict(zip(r.columns, r.rows[0]))         # the row the CLI prints, unchanged
        assert list(row) == ["exec_id", "plan_id", "plan", "status", "rounds",
                             "rounds_to_target", "final_accuracy", "channel_uses", "reason"]
        assert (row["exec_id"], row["plan_id"], row["plan"]) == (r.exec_id, r.plan_id, r.plan)
        assert row["final_accuracy"] == r.avg_model_accuracy
        assert r.arrow().num_rows == 1 and r.fetchall() == list(r.rows)
        assert r.status == "succeeded" and r.rounds == 3 and r.estimator == "ttt"
        assert 0 < r.accuracy <= 1 and 0 < r.avg_model_accuracy <= 1
        assert r.accuracy != r.avg_model_accuracy
        assert r.channel_uses == row["channel_uses"] > 0
        lo, hi = r.predicted_rounds_interval
        assert lo <= r.predicted_rounds <= hi and 0 <= r.p_meets_sla <= 1
        assert r.explain.startswith("Decentralized Train") and f"plan=\"{r.plan}\"" in r.explain
        assert f"Execution: exec_id={r.exec_id} status=succeeded" in r.explain
        assert r.events == ()
        _check_against_catalog(db, r)


def test_explain_analyze_result_fields(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        [t, j] = db.sql("EXPLAIN ANALYZE TRAIN digits ON 4 CLIENTS WITH (rounds = 3) "
                        "COST MODEL dsgd; EXPLAIN ANALYZE (FORMAT JSON) TRAIN digits ON 4 "
                        "CLIENTS WITH (rounds = 3, seed = 1) COST MODEL dsgd")
        assert isinstance(t, TrainResult) and t.kind == "explain" and t.explain == t.text
        assert t.estimator == "dsgd" and t.p_meets_sla is None    # dsgd gives no distribution
        assert t.predicted_rounds is not None and t.rows == ()
        _check_against_catalog(db, t)
        assert j.document[0]["execution"]["exec_id"] == j.exec_id != t.exec_id
        assert j.explain.startswith("Decentralized Train") and j.text.startswith("[")
        _check_against_catalog(db, j)


@pytest.fixture()
def _dsgd_default(monkeypatch):
    from airplan_qo.planner import optimizer

    monkeypatch.setattr(optimizer, "DEFAULT_ESTIMATOR", "dsgd")


def test_rewired_run_says_why_it_has_no_feedback(tmp_path, _dsgd_default):
    # as tests/runtime/test_monitor.py: a forced ring on skewed data, a low consensus trigger
    low = MonitorConfig(factor=1.0, reference_round=2, max_replans=1,
                        triggers=("consensus_distance",))
    w = aq.Workload(clients=8, alpha=0.05, rounds=12, seed=1)
    with aq.connect(tmp_path / "c.duckdb") as db:
        res = db.plan(w, topologies=["ring", "small_world", "complete"], sparsity=[1.0],
                      weights=["metropolis_hastings"])
        res = attrs.evolve(res, chosen=next(c for c in res.candidates
                                            if c.plan.topology.family == "ring"))
        rep = db.execute(res, monitor=low)
        r = train_result(db, res, rep, "table")
        [ev] = db.catalog.query("SELECT * FROM airplan.reoptimizations")
    assert ev["new_plan_id"] is not None
    assert r.feedback == () and r.plan_id == ev["old_plan_id"]
    assert r.feedback_note == (
        f"no feedback recorded: the run was re-optimised and rewired at round {ev['round']} "
        f"(plan {ev['old_plan_id']} -> {ev['new_plan_id']}); its curve mixes plans, so "
        "calibration would attribute it to the first")
    assert len(r.events) == 1 and "rewired ring [metropolis_hastings] -> " in r.events[0]
