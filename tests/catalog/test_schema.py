"""The catalog schema: objects created, migrations, version checks, constraints, and the views and
macros read by a plain DuckDB client in another process (which proves they need no Python)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap

import duckdb
import numpy as np
import pytest

from airplan_qo.catalog import schema as schema_mod
from airplan_qo.catalog import store as store_mod
from airplan_qo.catalog.schema import MACROS, MIGRATIONS, SCHEMA_VERSION, TABLES, VIEWS, Migration
from airplan_qo.catalog.store import Catalog
from airplan_qo.errors import CatalogError, SchemaVersionError


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _objects(con) -> tuple[set[str], set[str], set[str]]:
    where = "WHERE database_name = current_database() AND schema_name = 'main'"
    tables = {r[0] for r in con.execute(
        f"SELECT table_name FROM duckdb_tables() {where}").fetchall()}
    views = {r[0] for r in con.execute(
        f"SELECT view_name FROM duckdb_views() {where} AND NOT internal").fetchall()}
    macros = {r[0] for r in con.execute(
        f"SELECT DISTINCT function_name FROM duckdb_functions() {where} "
        "AND function_type IN ('macro', 'table_macro') AND NOT internal").fetchall()}
    return tables, views, macros


def test_migrations_are_consecutive_and_pending_is_forward_only():
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    assert SCHEMA_VERSION == MIGRATIONS[-1].version
    assert schema_mod.pending(0) == MIGRATIONS
    assert schema_mod.pending(SCHEMA_VERSION) == ()


def test_fresh_file_gets_version_and_every_object(tmp_path):
    path = tmp_path / "fresh.duckdb"
    with Catalog.open(path) as cat:
        assert cat.schema_version == SCHEMA_VERSION == 8
        rows = cat.query("SELECT version, description, applied_at FROM airplan.schema_version "
                         "ORDER BY version")
        assert [r["version"] for r in rows] == [1, 2, 3, 4, 5, 6, 7, 8]
        assert all(r["description"] and r["applied_at"] is not None for r in rows)
    con = duckdb.connect(str(path), read_only=True)
    try:
        tables, views, macros = _objects(con)
    finally:
        con.close()
    assert tables == set(TABLES)
    assert views == set(VIEWS)
    assert macros == set(MACROS)


def test_reopen_is_idempotent(tmp_path):
    path = tmp_path / "again.duckdb"
    with Catalog.open(path) as cat:
        cat.insert_row("calibration", {"estimator": "dsgd", "scope": "global",
                                       "constant_name": "f0", "value": 0.5, "n_obs": 3,
                                       "source": "default"})
    for _ in range(2):
        with Catalog.open(path) as cat:
            assert cat.schema_version == SCHEMA_VERSION
            assert cat.query("SELECT count(*) AS n FROM airplan.schema_version")[0]["n"] == \
                len(MIGRATIONS)
            assert cat.query("SELECT count(*) AS n FROM airplan.calibration")[0]["n"] == 1


def test_newer_schema_version_is_refused_and_file_unchanged(tmp_path):
    path = tmp_path / "future.duckdb"
    Catalog.open(path).close()
    con = duckdb.connect(str(path))
    con.execute("INSERT INTO schema_version (version, description) VALUES (?, 'later')",
                [SCHEMA_VERSION + 41])
    con.close()
    before = _digest(path)
    for read_only in (False, True):
        with pytest.raises(SchemaVersionError) as info:
            Catalog.open(path, read_only=read_only)
        message = str(info.value)
        assert str(path) in message
        assert f"schema version {SCHEMA_VERSION + 41}" in message
        assert f"up to {SCHEMA_VERSION}" in message
        assert _digest(path) == before


def _with_extra_migration(monkeypatch, statements):
    extra = Migration(SCHEMA_VERSION + 1, "add a test table", tuple(statements))
    monkeypatch.setattr(schema_mod, "MIGRATIONS", MIGRATIONS + (extra,))
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", SCHEMA_VERSION + 1)


def test_pending_migration_is_applied_on_open(tmp_path, monkeypatch):
    path = tmp_path / "upgrade.duckdb"
    Catalog.open(path).close()
    _with_extra_migration(monkeypatch, ["CREATE TABLE extra (a INTEGER)"])
    with Catalog.open(path) as cat:
        assert cat.schema_version == SCHEMA_VERSION + 1
        assert cat.query("SELECT * FROM airplan.extra") == []
        rows = cat.query("SELECT description FROM airplan.schema_version ORDER BY version")
        assert rows[-1]["description"] == "add a test table"


def test_failed_migration_rolls_back_entirely(tmp_path, monkeypatch):
    path = tmp_path / "broken.duckdb"
    Catalog.open(path).close()
    _with_extra_migration(monkeypatch, ["CREATE TABLE extra (a INTEGER)",
                                        "CREATE TABLE extra (b INTEGER)"])
    with pytest.raises(CatalogError, match="migrate"):
        Catalog.open(path)
    monkeypatch.undo()
    with Catalog.open(path, read_only=True) as cat:
        assert cat.schema_version == SCHEMA_VERSION
        assert cat.query("SELECT count(*) AS n FROM duckdb_tables() "
                         "WHERE table_name = 'extra'")[0]["n"] == 0


def test_read_only_open_of_older_catalog_asks_for_a_migration(tmp_path, monkeypatch):
    path = tmp_path / "older.duckdb"
    Catalog.open(path).close()
    _with_extra_migration(monkeypatch, ["CREATE TABLE extra (a INTEGER)"])
    with pytest.raises(CatalogError, match="older"):
        Catalog.open(path, read_only=True)


def test_migration_2_gives_releases_a_kind_and_drops_exact_counts_of_noised_ones(
        tmp_path, monkeypatch):
    path = tmp_path / "v1.duckdb"
    monkeypatch.setattr(schema_mod, "MIGRATIONS", MIGRATIONS[:1])
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", 1)
    Catalog.open(path).close()
    monkeypatch.undo()
    con = duckdb.connect(str(path))
    stats = ("INSERT INTO workload_stats (workload_id, stats_version, n_clients, n_classes, "
             "n_records, sketch_eps, sketch_delta, depth, width, sketch_bytes, model_bytes, "
             "dp_epsilon, dp_delta) VALUES (1, ?, 2, 10, 30, 0.05, 0.5, 1, 3, 12, 100, ?, ?)")
    con.execute(stats, [1, None, None])
    con.execute(stats, [2, 1.0, 1e-5])
    sketch = ("INSERT INTO client_sketches VALUES (1, ?, ?, ?, 1, 3, 9, ?, ?)")
    con.execute(sketch, [1, 0, 10, [4, 3, 3], 0.0])  # exact: counts stay
    con.execute(sketch, [1, 1, 20, [20, 0, 0], 0.0])
    con.execute(sketch, [2, 0, 10, [7, -1, 8], 3.5])  # noised: 14, not the exact 10
    con.execute(sketch, [2, 1, 20, [-9, 2, 1], 3.5])  # noised: -6 clipped to 0
    con.execute("INSERT INTO privacy_ledger (workload_id, stats_version, mechanism, sensitivity, "
                "sigma, epsilon, delta, cumulative_epsilon, cumulative_delta, note) VALUES "
                "(1, 2, 'gaussian', 1.0, 3.5, 1.0, 1e-5, 1.0, 1e-5, 'sketch cells')")
    con.close()
    with Catalog.open(path) as cat:
        assert cat.schema_version == SCHEMA_VERSION
        rows = cat.query("SELECT stats_version, client, release_kind, n_records, counts "
                         "FROM airplan.client_sketches ORDER BY stats_version, client")
        assert [r["release_kind"] for r in rows] == ["count_min"] * 4
        assert [r["n_records"] for r in rows] == [10, 20, 14, 0]
        assert rows[2]["counts"] == [7, -1, 8]
        totals = cat.query("SELECT stats_version, n_records, release_kind FROM "
                           "airplan.workload_stats ORDER BY stats_version")
        assert [(t["n_records"], t["release_kind"]) for t in totals] == \
            [(30, "count_min"), (14, "count_min")]
        note = cat.query("SELECT note FROM airplan.privacy_ledger")[0]["note"]
        assert note.startswith("sketch cells; released before schema 2") and \
            "reproducible" in note
        assert cat.read_sketches(1, 2).kind == "count_min"
        sketch_row = {"workload_id": 9, "stats_version": 1, "client": 0, "n_records": 3,
                      "depth": 2, "width": 3, "hash_seed": 0, "counts": [1, 2, 3, 4, 5, 6]}
        stats_row = {"workload_id": 9, "stats_version": 1, "n_clients": 1, "n_classes": 3,
                     "n_records": 3, "sketch_eps": 0.1, "sketch_delta": 0.1, "depth": 2,
                     "width": 3, "sketch_bytes": 24, "model_bytes": 1}
        for table, row in [("client_sketches", {**sketch_row, "release_kind": "bloom"}),
                           ("client_sketches", {**sketch_row, "release_kind": "histogram"}),
                           ("workload_stats", {**stats_row, "release_kind": "histogram"})]:
            with pytest.raises(CatalogError, match="CHECK"):
                cat.insert_row(table, row)


@pytest.mark.parametrize("table, row, fragment", [
    ("executions", {"plan_id": 1, "status": "done", "data_seed": 1, "train_seed": 1,
                    "channel_seed": 1}, "CHECK"),
    ("calibration", {"estimator": "e", "scope": "planet", "constant_name": "c", "value": 1.0,
                     "n_obs": 1, "source": "s"}, "CHECK"),
    ("calibration", {"estimator": "e", "scope": "global", "scope_key": "digits",
                     "constant_name": "c", "value": 1.0, "n_obs": 1, "source": "s"}, "CHECK"),
    ("client_sketches", {"workload_id": 1, "stats_version": 1, "client": 0, "n_records": 3,
                         "depth": 2, "width": 3, "hash_seed": 0, "counts": [1, 2, 3]}, "CHECK"),
    ("plans", {"planning_run_id": 1, "chosen": True, "family": "ring", "weights_rule": "m",
               "k_ratio": 0.5, "algorithm": "dsgd", "reaches_target": True,
               "pruned_reason": "too slow"}, "CHECK"),
    ("plans", {"planning_run_id": 1, "family": "ring", "weights_rule": "m", "k_ratio": 1.5,
               "algorithm": "dsgd", "reaches_target": True}, "CHECK"),
    ("workloads", {"dataset": "digits", "n_clients": 4, "partition_scheme": "iid",
                   "partition_seed": 0, "data_seed": 0}, "NOT NULL"),
])
def test_constraints_document_the_contract(table, row, fragment):
    with Catalog.open(":memory:") as cat:
        with pytest.raises(CatalogError, match=fragment) as info:
            cat.insert_row(table, row)
        assert f"airplan.{table}" in str(info.value)
        assert cat.query(f"SELECT count(*) AS n FROM airplan.{table}")[0]["n"] == 0


def _populate(cat: Catalog) -> dict[str, int]:
    """A small but complete history: workload, planning run, plans, execution, feedback."""
    wid = cat.insert_row("workloads", {
        "dataset": "digits", "n_clients": 4, "partition_scheme": "dirichlet", "alpha": 0.3,
        "partition_seed": 1, "data_seed": 2, "fingerprint": "fp-digits-4"})
    with cat.transaction():
        run = cat.insert_row("planning_runs", {
            "workload_id": wid, "statement": "EXPLAIN TRAIN digits ON 4 CLIENTS",
            "estimator": "dsgd", "objective": "airtime", "sla": "accuracy >= 0.9",
            "sla_threshold": 0.9, "n_candidates": 3})
        plan_ids = cat.insert_rows("plans", {
            "planning_run_id": [run] * 3, "chosen": [True, False, False], "rank": [1, 2, 3],
            "family": ["ring", "erdos_renyi", "complete"], "topology_params": [{}, {"p": 0.2}, {}],
            "weights_rule": ["metropolis"] * 3, "k_ratio": [0.1, 0.2, 1.0],
            "algorithm": ["dsgd"] * 3, "est_rounds": [120.0, 80.0, None],
            "reaches_target": [True, True, False], "total_cost": [1.0, 2.0, None],
            "pruned_reason": [None, None, "misses SLA"],
            "calibration_ids": [[1], [1], []], "terms": [{"f0": 0.1}, {"f0": 0.1}, {}]})
        cat.update_row("planning_runs", run, {"chosen_plan_id": int(plan_ids[0])})
    chosen = int(plan_ids[0])
    exec_id = cat.insert_row("executions", {"plan_id": chosen, "data_seed": 2, "train_seed": 3,
                                            "channel_seed": 4})
    rounds = np.arange(1, 6)
    cat.insert_rows("round_stats", {"exec_id": np.full(5, exec_id), "round": rounds,
                                    "test_accuracy": 0.5 + 0.08 * rounds,
                                    "train_loss": 1.0 / rounds})
    cat.update_row("executions", exec_id, {"status": "succeeded", "actual_rounds": 5,
                                           "final_accuracy": 0.9})
    cat.insert_rows("feedback", {"exec_id": [exec_id] * 2, "plan_id": [chosen] * 2,
                                 "estimator": ["dsgd"] * 2, "metric": ["rounds", "accuracy"],
                                 "estimated": [120.0, 0.95], "actual": [100.0, 0.9],
                                 "model_term": [110.0, 0.93], "censored": [False, False]})
    cat.supersede_calibration("dsgd", "global", "", {"f0": 0.1, "f1": 2.0}, n_obs=0,
                              source="default")
    cat.supersede_calibration("dsgd", "global", "", {"f0": 0.12}, n_obs=1, source="fit",
                              fit_error=0.05)
    return {"run": run, "exec": exec_id, "chosen": chosen}


_READER = textwrap.dedent("""
    import json, sys
    import duckdb
    con = duckdb.connect(sys.argv[1], read_only=True)
    ids = json.loads(sys.argv[2])
    def q(sql, *params):
        return [list(r) for r in con.execute(sql, list(params)).fetchall()]
    out = {
        "eva": q("SELECT family, k_ratio, metric, estimated, actual, round(ape, 6), censored "
                 "FROM airplan.v_estimate_vs_actual ORDER BY metric"),
        "cal": q("SELECT constant_name, value FROM airplan.v_current_calibration "
                 "ORDER BY constant_name"),
        "ape": q("SELECT airplan.ape(110, 100), airplan.ape(1, 0), airplan.rel_err(90, 100), "
                 "airplan.within(0.5, 0, 1), airplan.within(2, 0, 1)"),
        "curve": q("SELECT round, round(test_accuracy, 6) FROM airplan.curve(?)", ids["exec"]),
        "cands": q("SELECT plan_id, rank, chosen FROM airplan.candidates(?)", ids["run"]),
        "last": q("SELECT plan_id FROM airplan.last_candidates()"),
        "json": q("SELECT topology_params->>'$.p' FROM airplan.plans WHERE family = 'erdos_renyi'"),
        "unqualified": q("SELECT count(*) FROM plans JOIN v_estimate_vs_actual USING (plan_id)"),
        "unqualified_macros": q("SELECT ape(3, 4), count(*) FROM curve(?)", ids["exec"]),
        "airplan_imported": any(m.startswith("airplan") for m in sys.modules),
    }
    print(json.dumps(out))
""")


def test_views_and_macros_work_from_plain_duckdb_in_another_process(tmp_path):
    # the default file name: a plain client then calls the database "airplan", as a Catalog does
    path = tmp_path / "airplan.duckdb"
    with Catalog.open(path) as cat:
        ids = _populate(cat)
    proc = subprocess.run([sys.executable, "-c", _READER, str(path), json.dumps(ids)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["airplan_imported"] is False
    assert out["eva"] == [["ring", 0.1, "accuracy", 0.95, 0.9, round(100 * 0.05 / 0.9, 6), False],
                          ["ring", 0.1, "rounds", 120.0, 100.0, 20.0, False]]
    assert out["cal"] == [["f0", 0.12], ["f1", 2.0]]
    assert out["ape"] == [[10.0, None, -0.1, True, False]]
    assert out["curve"] == [[r, round(0.5 + 0.08 * r, 6)] for r in range(1, 6)]
    assert [row[1] for row in out["cands"]] == [1, 2, 3]
    assert out["cands"][0][2] is True and out["cands"][0][0] == ids["chosen"]
    assert [row[0] for row in out["last"]] == [row[0] for row in out["cands"]]
    assert out["json"] == [["0.2"]]
    assert out["unqualified"] == [[2]]
    assert out["unqualified_macros"] == [[25.0, 5]]


def test_views_work_from_plain_duckdb_under_any_file_name(tmp_path):
    path = tmp_path / "experiments.duckdb"
    with Catalog.open(path) as cat:
        _populate(cat)
    con = duckdb.connect(str(path), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM v_estimate_vs_actual").fetchall() == [(2,)]
        assert con.execute("SELECT count(*) FROM experiments.v_current_calibration "
                           "WHERE constant_name = 'f0'").fetchall() == [(1,)]
        assert con.execute("SELECT count(*) FROM last_candidates()").fetchall() == [(3,)]
        assert con.execute("SELECT experiments.ape(90, 100)").fetchall() == [(10.0,)]
    finally:
        con.close()
